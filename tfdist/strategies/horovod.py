"""Horovod ring-allreduce: every rank holds the model; gradients are averaged every step."""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Literal

import tensorflow as tf

from tfdist.environments import HorovodRunEnvironment
from tfdist.strategies.base import DistributedStrategy, StrategyOptions, require_number
from tfdist.strategies.registry import STRATEGIES


class HorovodLaunchError(RuntimeError):
    """``make_strategy("horovod")`` in a process that horovodrun did not start."""


@dataclasses.dataclass(frozen=True)
class HorovodOptions(StrategyOptions):
    """Options of the Horovod backend.

    compression: "none" or "fp16" (gradients cast to float16 for the allreduce).
    backward_passes_per_step: accumulate this many local gradients before each allreduce.
    average_gradients: average (True) or sum (False) the gradients over ranks.
    warmup_epochs: ramp the learning rate linearly from 1/size of the optimizer's (scaled) rate
        to all of it over this many epochs (0: none).
    root_rank: the rank whose initial weights are broadcast to the others.
    pin_gpu: give each local rank its own GPU (with memory growth) when GPUs exist.
    """

    compression: Literal["none", "fp16"] = "none"
    backward_passes_per_step: int = 1
    average_gradients: bool = True
    warmup_epochs: float = 0
    root_rank: int = 0
    pin_gpu: bool = True

    def __post_init__(self) -> None:
        if self.compression not in ("none", "fp16"):
            raise ValueError(f"`compression` must be 'none' or 'fp16', got {self.compression!r}; "
                             "fix: compression='fp16' to halve allreduce traffic, else leave it out")
        require_number("backward_passes_per_step", self.backward_passes_per_step, minimum=1, integer=True)
        require_number("warmup_epochs", self.warmup_epochs, minimum=0)
        require_number("root_rank", self.root_rank, minimum=0, integer=True)


@STRATEGIES.register("horovod", "Horovod ring-allreduce over Gloo/MPI/NCCL (launch with horovodrun)")
class HorovodStrategy(DistributedStrategy):
    """Synchronous data parallelism with Horovod, one process per GPU (or CPU slot).

    Launch: ``horovodrun -np 4 -H host1:2,host2:2 python train.py``.
    """

    Options = HorovodOptions
    options: HorovodOptions

    def __init__(self, options: HorovodOptions, environ: dict[str, str] | None = None) -> None:
        super().__init__(options)
        environ = dict(os.environ if environ is None else environ)
        if not HorovodRunEnvironment.detect(environ):
            raise HorovodLaunchError(
                "make_strategy('horovod') must run under horovodrun or mpirun, and no HOROVOD_RANK/"
                "OMPI_COMM_WORLD_RANK variable is set; fix: launch with `horovodrun -np N python "
                "script.py` (or `tfdist launch --backend horovod -np N -- python script.py`), or use "
                "make_strategy('auto') to run the same script as a single process")
        import horovod.tensorflow as hvd

        hvd.init()
        self._hvd = hvd
        if options.pin_gpu:
            self._pin_gpu()
        if not 0 <= options.root_rank < hvd.size():
            raise ValueError(f"`root_rank`={options.root_rank} is not a rank of this {hvd.size()}-rank job")

    def _pin_gpu(self) -> None:
        gpus = tf.config.list_physical_devices("GPU")
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        if gpus:
            tf.config.set_visible_devices(gpus[self.local_rank % len(gpus)], "GPU")

    @property
    def rank(self) -> int:
        return self._hvd.rank()

    @property
    def size(self) -> int:
        return self._hvd.size()

    @property
    def local_rank(self) -> int:
        return self._hvd.local_rank()

    @property
    def num_workers(self) -> int:
        return self._hvd.size()

    @property
    def num_replicas_in_sync(self) -> int:
        return self._hvd.size()

    def _wrap_optimizer(self, optimizer: Any) -> Any:
        from horovod.tensorflow.keras import DistributedOptimizer

        hvd = self._hvd
        compression = hvd.Compression.fp16 if self.options.compression == "fp16" else hvd.Compression.none
        return DistributedOptimizer(
            optimizer,
            compression=compression,
            backward_passes_per_step=self.options.backward_passes_per_step,
            average_aggregated_gradients=True,
            op=hvd.Average if self.options.average_gradients else hvd.Sum,
        )

    # --- data ---------------------------------------------------------------------------------
    def _shard(self, x: Any, y: Any, kwargs: dict, *, steps_key: str) -> tuple[Any, Any, dict]:
        from tfdist.strategies.data import is_dataset, shard_arrays, shard_dataset

        if not self.options.shard_data:
            return x, y, kwargs
        rank, size = self.rank, self.size
        if is_dataset(x):
            x, steps = shard_dataset(x, rank, size, steps=kwargs.get(steps_key),
                                     batch_size=kwargs.pop("batch_size", None), argument="x")
            if steps is not None:
                kwargs[steps_key] = steps
            return x, y, kwargs
        if x is None:
            return x, y, kwargs
        arrays = {"x": x, "y": y, "sample_weight": kwargs.get("sample_weight")}
        arrays = {k: v for k, v in arrays.items() if v is not None}
        sharded = shard_arrays(arrays, rank, size)
        if "sample_weight" in sharded:
            kwargs["sample_weight"] = sharded["sample_weight"]
        return sharded["x"], sharded.get("y"), kwargs

    def _prepare_fit_inputs(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        from tfdist.strategies.data import is_dataset, shard_dataset

        batch_size = kwargs.get("batch_size")
        x, y, kwargs = self._shard(x, y, kwargs, steps_key="steps_per_epoch")
        validation = kwargs.get("validation_data")
        if validation is not None and self.options.shard_data:
            if is_dataset(validation):
                validation, steps = shard_dataset(
                    validation, self.rank, self.size, steps=kwargs.get("validation_steps"),
                    batch_size=batch_size if is_dataset(x) else None, argument="validation_data")
                if steps is not None:
                    kwargs["validation_steps"] = steps
                kwargs["validation_data"] = validation
            else:
                weights = {"sample_weight": validation[2]} if len(validation) > 2 else {}
                vx, vy, weights = self._shard(validation[0], validation[1] if len(validation) > 1 else None,
                                              weights, steps_key="validation_steps")
                kwargs["validation_data"] = (vx, vy, *([weights["sample_weight"]] if weights else []))
        return x, y, kwargs

    def _prepare_evaluate_inputs(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        return self._shard(x, y, kwargs, steps_key="steps")

    def _reduce_evaluation(self, result: Any) -> Any:
        """Average ``evaluate``'s per-rank results so every rank returns the global figures."""
        import numpy as np

        if self.size == 1:
            return result
        if isinstance(result, dict):
            names = sorted(result)
            averaged = self._hvd.allreduce(tf.constant([float(result[n]) for n in names], tf.float64),
                                           op=self._hvd.Average, name="tfdist.evaluate")
            return dict(zip(names, averaged.numpy().tolist()))
        values = np.atleast_1d(np.asarray(result, dtype=np.float64))
        averaged = self._hvd.allreduce(tf.constant(values), op=self._hvd.Average,
                                       name="tfdist.evaluate").numpy().tolist()
        return averaged if isinstance(result, (list, tuple)) else averaged[0]

    # --- callbacks ----------------------------------------------------------------------------
    def _fit_callbacks(self, callbacks: list, kwargs: dict) -> list:
        from tfdist.callbacks import BroadcastInitialState, LearningRateWarmup, MetricAverage

        ours: list = []
        if not any(isinstance(cb, BroadcastInitialState) for cb in callbacks):
            ours.append(BroadcastInitialState(root_rank=self.options.root_rank))
        if not any(isinstance(cb, MetricAverage) for cb in callbacks):
            ours.append(MetricAverage())
        if self.options.warmup_epochs and not any(isinstance(cb, LearningRateWarmup) for cb in callbacks):
            ours.append(LearningRateWarmup(self.options.warmup_epochs, start_factor=1.0 / self.size))
        return ours + [self._chief_only_if_writer(cb) for cb in callbacks]

    def _chief_only_if_writer(self, callback: Any) -> Any:
        """File writers (checkpoints, TensorBoard, CSV) and progress bars run on the chief only;
        BackupAndRestore restores on every rank (so all resume at the same epoch) and saves on
        the chief only."""
        from tfdist.callbacks import ChiefOnly

        if isinstance(callback, tf.keras.callbacks.BackupAndRestore) and not self.is_chief:
            return ChiefOnly(callback, is_chief=False, everywhere=("on_train_begin",))
        writers = (tf.keras.callbacks.ModelCheckpoint, tf.keras.callbacks.TensorBoard,
                   tf.keras.callbacks.CSVLogger, tf.keras.callbacks.ProgbarLogger)
        if isinstance(callback, writers) and not self.is_chief:
            return ChiefOnly(callback, is_chief=False)
        return callback
