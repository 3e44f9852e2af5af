"""Synchronous replicas across machines (tf.distribute.MultiWorkerMirroredStrategy, TF_CONFIG)."""
from __future__ import annotations

import dataclasses
import logging
import random
from typing import Any, Literal

import tensorflow as tf

from tfdist import keras_compat, upstream
from tfdist.callbacks import WorkerMetrics
from tfdist.callbacks.powersgd import SynchronizePowerSGD
from tfdist.environments import ClusterEnvironment, TFConfigEnvironment
from tfdist.errors import with_fix
from tfdist.runtime import collective_powersgd
from tfdist.runtime.lowrank import DEFAULT_MIN_COMPRESSION_RATE, DEFAULT_RANK, DEFAULT_START_ITER
from tfdist.strategies import inputs, keras3_multi_worker
from tfdist.strategies.base import COMPILE_THROUGH_OPTIMIZER, DistributedStrategy
from tfdist.strategies.checkpoints import CheckpointError
from tfdist.strategies.options import OptionValueError, StrategyOptions, require_bool
from tfdist.strategies.powersgd_options import check_powersgd_options, powersgd_settings
from tfdist.strategies.registry import STRATEGIES

log = logging.getLogger("tfdist")

_IMPLEMENTATIONS = {"auto": "AUTO", "ring": "RING", "nccl": "NCCL"}
_FP16_REFUSAL = with_fix(
    "`compression`='fp16' under multi_worker_mirrored: tf.distribute's CommunicationOptions have no "
    "compression, and tf-keras' aggregation all-reduces the gradients in their own dtype",
    "train with make_strategy('horovod', compression='fp16'), or use compression='powersgd' here")


@dataclasses.dataclass(frozen=True)
class MultiWorkerMirroredOptions(StrategyOptions):
    """shard_data: each worker reads its own part of the data (tf.data auto-sharding); off, every
        worker reads all of it, for pipelines that already split by worker.
    communication: collective implementation, "auto", "ring" (gRPC) or "nccl".
    compression: "none" or "powersgd" (each weight matrix sent as two low-rank factors with error
        feedback, inside tf-keras' gradient aggregation: ``tfdist.runtime.collective_powersgd``; tf-keras
        only, one replica per worker, not under mixed_float16). "fp16" is refused when the strategy is
        built (tf.distribute has no fp16 allreduce here: use Horovod); ``auto`` passes it to Horovod.
    powersgd_rank / powersgd_start_iter / powersgd_min_compression_rate: as Horovod's (4, 10, 2);
        only with ``compression="powersgd"``."""

    shard_data: bool = True
    communication: Literal["auto", "ring", "nccl"] = "auto"
    compression: Literal["none", "fp16", "powersgd"] = "none"
    powersgd_rank: int = DEFAULT_RANK
    powersgd_start_iter: int = DEFAULT_START_ITER
    powersgd_min_compression_rate: float = DEFAULT_MIN_COMPRESSION_RATE

    def __post_init__(self) -> None:
        super().__post_init__()
        require_bool("shard_data", self.shard_data)
        if not isinstance(self.communication, str) or self.communication not in _IMPLEMENTATIONS:
            raise OptionValueError(with_fix(
                f"`communication` must be one of {sorted(_IMPLEMENTATIONS)}, got {self.communication!r}",
                "leave it at 'auto' unless you know the collective you need"))
        check_powersgd_options(self)  # "fp16" is a valid value (auto passes it to horovod): refused when built


@STRATEGIES.register("multi_worker_mirrored",
                     "tf.distribute.MultiWorkerMirroredStrategy across the workers of TF_CONFIG")
class MultiWorkerMirroredStrategy(DistributedStrategy):
    """Every TF_CONFIG worker runs the same script; collectives keep replicas in sync.

    Keras' ModelCheckpoint, BackupAndRestore and TensorBoard already write on the chief only
    under this strategy (others write to temporary directories), so tfdist adds nothing there.
    Without TF_CONFIG it is one worker. Which task this is comes from the TF_CONFIG environment
    ``make_strategy`` detected (``self.environment``).
    """

    Options = MultiWorkerMirroredOptions
    options: MultiWorkerMirroredOptions
    environment: TFConfigEnvironment

    #: Whether fit said once that the compiled optimizer averages whole gradients under compression="powersgd".
    _said_whole_gradients = False
    _said_legacy = False

    @property
    def _processes_sharding_their_own_copy(self) -> int:
        return self.num_workers if self.options.shard_data else 1

    def __init__(self, options: MultiWorkerMirroredOptions, environment: ClusterEnvironment | None = None) -> None:
        if options.compression == "fp16":
            raise OptionValueError(_FP16_REFUSAL)
        super().__init__(options, environment)
        self.environment.config  # a malformed TF_CONFIG fails here, naming every problem, before TensorFlow reads it
        implementation = getattr(tf.distribute.experimental.CommunicationImplementation,
                                 _IMPLEMENTATIONS[options.communication])
        self._strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=implementation))

    @property
    def tf_strategy(self) -> tf.distribute.Strategy:
        return self._strategy

    @classmethod
    def environment_for(cls, detected: ClusterEnvironment) -> TFConfigEnvironment:
        return TFConfigEnvironment.of(detected)

    @property
    def rank(self) -> int:
        return self.environment.rank

    @property
    def num_workers(self) -> int:
        return max(1, self.environment.size)

    @property
    def is_chief(self) -> bool:
        return self.environment.is_chief

    def _wrap_optimizer(self, optimizer: Any) -> Any:
        """With ``compression="powersgd"``: tf-keras' gradient aggregation goes through PowerSGD."""
        settings = powersgd_settings(self.options)
        if settings is None:
            return optimizer
        return collective_powersgd.powersgd_optimizer(optimizer, settings, self._strategy)

    def _powersgd_aggregation(self, model: Any) -> None:
        """With ``compression="powersgd"``, the compiled optimizer should aggregate through PowerSGD: Keras'
        own aggregation averages whole gradients. A plan's PowerSGD (``make_strategy("auto")``: the script
        did not ask for it, and an adaptive run switches to it) is applied to the optimizer here, said in
        one line (a legacy tf-keras optimizer, which it cannot go into, is said once and averaged whole); the
        script's own is said once, with the fix, and left as the script compiled it."""
        optimizer = getattr(model, "optimizer", None)
        if (self.options.compression != "powersgd" or optimizer is None
                or collective_powersgd.aggregates_through_powersgd(optimizer)):
            return
        what = f"the model's optimizer ({type(optimizer).__name__}) did not go through strategy.optimizer()"
        planned = self.plan is not None and self.plan.options.get("compression") == "powersgd"
        if planned and keras_compat.is_keras(optimizer, "optimizers.legacy.Optimizer"):
            if not self._said_legacy:  # tf-keras' legacy optimizers aggregate where PowerSGD cannot go
                self._said_legacy = True
                inner = type(upstream.loss_scale_inner(optimizer) or optimizer).__name__
                log.warning("tfdist plan: %s", with_fix(
                    f"{what}, and it is a legacy tf-keras optimizer, which the plan's PowerSGD cannot go into, "
                    "so its gradients are averaged whole",
                    f"use tf_keras.optimizers.{inner} instead of tf_keras.optimizers.legacy"))
        elif planned:
            collective_powersgd.powersgd_optimizer(optimizer, powersgd_settings(self.options), self._strategy)
            model.make_train_function(force=True)  # a step traced before (an earlier fit) is traced again
            log.warning("tfdist plan: %s; the plan's PowerSGD now aggregates its gradients", what)
        elif not self._said_whole_gradients:
            self._said_whole_gradients = True
            log.warning("tfdist: %s", with_fix(f"`compression` is 'powersgd', but {what}, so its gradients are "
                                               "averaged whole, without PowerSGD", COMPILE_THROUGH_OPTIMIZER))

    def _fit_callbacks(self, callbacks: list, kwargs: dict) -> list:
        """Keras 3's BackupAndRestore writes on the chief alone (``keras3_multi_worker.worker_backups``);
        with PowerSGD its errors are averaged at each epoch's end, before any callback checkpoints."""
        ours = [SynchronizePowerSGD(self._strategy)] if self.options.compression == "powersgd" else []
        return ours + keras3_multi_worker.worker_backups(callbacks, self.is_chief)

    def _loop_before_save(self, optimizer: Any) -> None:
        """PowerSGD's errors made the workers' mean, so every worker's checkpoint is the whole state."""
        collective_powersgd.synchronize_powersgd(optimizer, self._strategy)

    def _global_batching(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        return inputs.global_batch_inputs(x, y, kwargs, self.num_replicas_in_sync,
                                          shard=self.options.shard_data)

    def _input_pipeline(self, model: Any, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        """Arrays as tfdist's own pipeline (``inputs.array_fit_pipeline``, autotuning off), shuffled in
        the same order on every worker from the chief's seed: tf.data's DATA sharding hands each worker
        its share of each global batch, so the workers' orders must agree. Keras' own pipeline shuffles
        each worker's copy unseeded: in an epoch the workers trained on overlapping examples and missed
        others. ``shard_data=False`` leaves each worker's pipeline its own."""
        if not self.options.shard_data:
            return x, y, kwargs
        takes = inputs.takes_array_pipeline(x, y, kwargs)
        examples = inputs.num_examples((x,) if y is None else (x, y)) if takes else -1
        chiefs = self._chief_value(examples, "tfdist.fit.examples")  # every worker, whatever it was given
        differing = self._workers_where(chiefs != examples)
        if differing:
            here = (f"worker {self.rank} has {_described(examples)}" if chiefs != examples
                    else f"{differing} worker(s) have other inputs")
            raise inputs.InputError(with_fix(
                f"the workers' fit inputs differ: the chief has {_described(chiefs)}, {here}; each worker takes "
                "its share of every global batch of the same inputs",
                "give every worker the same arrays and fit arguments, or make_strategy('multi_worker_mirrored', "
                "shard_data=False) for inputs each worker has split itself"))
        if not takes:
            return x, y, kwargs
        seed = self._chief_value(random.SystemRandom().randrange(1, 2**31), "tfdist.fit.shuffle_seed")
        floatx = keras_compat.keras_of(model, "model").backend.floatx()
        given = kwargs.get("validation_data")
        x, y, kwargs = inputs.array_fit_pipeline(x, y, kwargs, floatx=floatx, seed=seed)
        if kwargs.get("validation_data") is not given:  # validation arrays made ours: shared out as fit's
            kwargs["validation_data"] = inputs.by_batch_shares(kwargs["validation_data"])
        return inputs.by_batch_shares(x), y, kwargs

    def _before_fit(self, model: Any, x: Any) -> None:
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None:  # compile may have wrapped ours in a LossScaleOptimizer (mixed_float16)
            collective_powersgd.refuse_compiled_keras3_loss_scale(optimizer)
        self._powersgd_aggregation(model)
        one_replicas_step_logs(model)
        keras3_multi_worker.prepare(model)  # what Keras 3's fit lacks here (keras-team/keras#20585)

    def evaluate(self, model: Any, x: Any = None, y: Any = None, **evaluate_kwargs: Any) -> Any:
        """As ``DistributedStrategy.evaluate``; its batch logs (and progress bar) show the job's
        values, as ``fit``'s do (see ``one_replicas_step_logs``)."""
        one_replicas_step_logs(model)
        keras3_multi_worker.prepare(model)
        return super().evaluate(model, x, y, **evaluate_kwargs)

    def _chief_value(self, value: int, name: str) -> int:
        """The chief's ``value``: an all-reduced sum over the replicas in which only the chief's count."""
        return self._sum_over_workers(value if self.is_chief else 0)

    def _workers_where(self, condition: bool) -> int:
        """How many workers found ``condition`` true (an all-reduced count, one per worker)."""
        return self._sum_over_workers(1 if condition else 0)

    def _worker_figures(self, batch_size: int, clock: Any, optional: bool = False) -> list:
        """Every worker's step, all-reduce and compute time (``WorkerMetrics``, gathered through this
        strategy's own collectives), for ``metrics`` and an adaptive run's re-fit. ``batch_size`` is per
        replica; a worker trains that on each of its replicas."""
        return [WorkerMetrics(batch_size * self._replicas_per_worker, clock=clock, gather=self._gather_worker_rows)]

    @property
    def _replicas_per_worker(self) -> int:
        return max(1, self.num_replicas_in_sync // max(1, self.num_workers))

    def _gather_worker_rows(self, row: list[float]) -> list[list[float]]:
        """Every worker's ``row``, worker 0 first: one all-gather over the replicas, a worker's local
        replicas (which all hold its row) taken once."""
        mine = self._strategy.run(lambda: tf.constant([row], tf.float64))
        return self._strategy.gather(mine, axis=0).numpy().tolist()[::self._replicas_per_worker]

    def _sum_over_workers(self, value: int) -> int:
        """The sum of each worker's ``value`` (an all-reduce over the replicas: each worker's counted once)."""
        strategy = self._strategy
        mine = strategy.run(lambda: tf.constant(value, tf.int64))
        return int(strategy.reduce(tf.distribute.ReduceOp.SUM, mine, axis=None).numpy()) // self._replicas_per_worker

    def _loop_agree_epoch(self, epoch: int) -> int:
        """The chief's epoch; a worker that restored another one fails on every worker (each restores
        its own copy: the checkpoint directory, or an adaptive run's folder, must be shared)."""
        chiefs = self._chief_value(epoch, "tfdist.loop.epoch")
        problem = None if chiefs == epoch else (
            f"worker {self.rank} restored epoch {epoch} and the chief epoch {chiefs}")
        problem = self._export_role().agree(problem)
        if problem is not None:
            raise CheckpointError(with_fix(f"the workers restored different checkpoints ({problem})",
                                           "give every worker the same checkpoint directory (in an adaptive "
                                           "run: the --save-plan folder), on a shared file system"))
        return chiefs

    def _export_role(self) -> Any:
        """Every worker saves (a save under this strategy may run collectives, so a worker that does
        not would hang the others): the chief the kept export, the others a throwaway copy that is
        removed. Problems are agreed on with an all-reduce of one flag per worker."""
        from tfdist.export import Role

        def agree(problem: str | None) -> str | None:  # every failed worker says 1
            failed = self._workers_where(problem is not None)
            return problem if problem is not None else (
                f"{failed} worker(s) failed (their logs say why)" if failed else None)

        return Role(writes=self.is_chief, throwaway=not self.is_chief, agree=agree)


def _described(examples: int) -> str:
    return f"{examples} examples in arrays" if examples >= 0 else "inputs Keras' own pipeline reads (not plain arrays)"


def one_replicas_step_logs(model: Any) -> None:
    """Make a tf-keras model's per-step logs under this strategy the job's values, not their sum.

    tf-keras' train and test functions reduce each step's per-replica results with the model's
    ``distribute_reduction_method``; its default, "auto", is SUM except on TPUs. The results of
    tf-keras' own ``train_step``/``test_step`` are the model's metrics, and a Keras metric read on a
    replica all-reduces its state first: every replica already holds the job's value, and the sum
    is that value times the replicas (2 workers printed accuracy 1.9 mid-epoch). So were the batch
    logs every callback reads; the logs at the end of an epoch or an evaluation are read from the
    metrics themselves and were right. "first", which tf-keras picks on TPUs for this reason, takes
    one replica's value: the job's. Left as they are: a reduction other than "auto", and models with
    their own ``train_step`` or ``test_step``, whose results may be per-replica parts that do add up.
    Train and test functions an earlier ``fit`` traced with the sum are dropped, to be rebuilt.
    """
    import tf_keras

    if keras_compat.flavour_of(model) != keras_compat.TF_KERAS or model.distribute_reduction_method != "auto":
        return
    own_steps = (type(model).train_step is tf_keras.Model.train_step
                 and type(model).test_step is tf_keras.Model.test_step)
    if own_steps:
        model.distribute_reduction_method = "first"
        model.train_function = model.test_function = None
