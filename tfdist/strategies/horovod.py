"""Horovod ring-allreduce: every rank holds the model; gradients are averaged every step."""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Literal, Mapping

import tensorflow as tf

from tfdist import keras_compat, upstream
from tfdist.callbacks import (BroadcastInitialState, ChiefOnly, LearningRateWarmup, MetricAverage,
                              WorkerMetrics)
from tfdist.callbacks.learning_rate import uses_schedule
from tfdist.callbacks.metric_average import average_over_ranks
from tfdist.environments import ClusterEnvironment, HorovodRunEnvironment, detect_environment
from tfdist.errors import ArgumentTypeError, ArgumentValueError, TfdistError, with_fix
from tfdist.callbacks.powersgd import SynchronizePowerSGD
from tfdist.runtime.allreduce import (AllreduceSettings, averages_over_ranks, averages_through_horovods_own,
                                      distributed_optimizer, positional_broadcast,
                                      refuse_tf_keras_loss_scale_accumulation, rehome_under_loss_scale,
                                      synchronize_powersgd, tf_variables)
from tfdist.runtime.lowrank import DEFAULT_MIN_COMPRESSION_RATE, DEFAULT_RANK, DEFAULT_START_ITER
from tfdist.strategies import inputs, loop, outputs
from tfdist.strategies.base import COMPILE_THROUGH_OPTIMIZER, DistributedStrategy
from tfdist.strategies.horovod_elastic import elastic_fit
from tfdist.strategies.options import OptionValueError, StrategyOptions, require_bool, require_number
from tfdist.strategies.powersgd_options import check_powersgd_options, powersgd_settings
from tfdist.strategies.registry import STRATEGIES

#: horovodrun exports HOROVOD_ELASTIC=1 to every rank of an elastic job (and only then).
HOROVOD_ELASTIC = "HOROVOD_ELASTIC"
#: Horovod's switch for hierarchical allreduce, read at hvd.init().
HOROVOD_HIERARCHICAL_ALLREDUCE = "HOROVOD_HIERARCHICAL_ALLREDUCE"
log = logging.getLogger("tfdist")
#: Set on an optimizer ``strategy.optimizer()`` scaled: the size its learning rate was scaled for.
SCALED_FOR = "_tfdist_lr_scaled_for"


class HorovodLaunchError(TfdistError, RuntimeError):
    """``make_strategy("horovod")`` in a process that horovodrun did not start (or, with
    ``elastic=True``, did not start in elastic mode)."""


@dataclasses.dataclass(frozen=True)
class HorovodOptions(StrategyOptions):
    """Options of the Horovod backend.

    shard_data: give each rank its own strided share of numpy inputs and datasets; off when your
        input pipeline already splits by ``hvd.rank()``.
    compression: "none", "fp16" (gradients cast to float16 for the allreduce) or "powersgd" (each
        weight matrix sent as two low-rank factors with error feedback: ``tfdist.runtime.powersgd``;
        the rest of the gradients whole).
    powersgd_rank / powersgd_start_iter / powersgd_min_compression_rate: PowerSGD's rank (4), its
        plain allreduce steps before compression starts (10), and the share of a matrix its factors
        may hold at most (1/2); only with ``compression="powersgd"``.
    backward_passes_per_step: accumulate this many local gradients before each allreduce (Keras 3:
        the optimizer's own ``gradient_accumulation_steps``, one allreduce per update).
    average_gradients: average (True) or sum (False) the gradients over ranks.
    warmup_epochs: ramp the learning rate linearly from 1/size of the optimizer's (scaled) rate
        to all of it over this many epochs (0: none).
    root_rank: the rank whose initial weights are broadcast to the others.
    pin_gpu: give each local rank its own GPU (with memory growth) when GPUs exist.
    elastic: run ``fit`` under Horovod's elastic loop (``tfdist.strategies.horovod_elastic``): hosts may
        leave and join; training goes on from the last committed state with the learning rate and
        the data shards rescaled to the new size. Needs an elastic launch (``horovodrun --min-np``
        / ``--host-discovery-script``, or ``tfdist launch --backend horovod --elastic``).
    commit_every_batches: with ``elastic``, also commit every this many batches (0: at epoch ends
        only). A lost rank costs at most this many batches instead of the epoch under way.
    hierarchical_allreduce: Horovod's hierarchical allreduce (``HOROVOD_HIERARCHICAL_ALLREDUCE=1``:
        reduce inside each host, then a ring among hosts), for several GPUs per host; set before
        Horovod starts, so it is refused once ``hvd.init()`` has run.
    """

    shard_data: bool = True
    compression: Literal["none", "fp16", "powersgd"] = "none"
    powersgd_rank: int = DEFAULT_RANK
    powersgd_start_iter: int = DEFAULT_START_ITER
    powersgd_min_compression_rate: float = DEFAULT_MIN_COMPRESSION_RATE
    backward_passes_per_step: int = 1
    average_gradients: bool = True
    warmup_epochs: float = 0
    root_rank: int = 0
    pin_gpu: bool = True
    elastic: bool = False
    commit_every_batches: int = 0
    hierarchical_allreduce: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        require_bool("shard_data", self.shard_data)
        require_bool("hierarchical_allreduce", self.hierarchical_allreduce)
        require_bool("average_gradients", self.average_gradients)
        require_bool("pin_gpu", self.pin_gpu)
        require_bool("elastic", self.elastic)
        check_powersgd_options(self)
        if self.compression == "powersgd" and self.elastic:
            raise OptionValueError(with_fix(
                "`compression`='powersgd' with `elastic`: Horovod's elastic state does not carry PowerSGD's "
                "error feedback and factors", "drop one of the two (compression='fp16' works with elastic)"))
        require_number("backward_passes_per_step", self.backward_passes_per_step, minimum=1, integer=True)
        require_number("warmup_epochs", self.warmup_epochs, minimum=0)
        require_number("root_rank", self.root_rank, minimum=0, integer=True)
        require_number("commit_every_batches", self.commit_every_batches, minimum=0, integer=True)
        if self.commit_every_batches and not self.elastic:
            raise OptionValueError(with_fix(
                f"`commit_every_batches`={self.commit_every_batches} commits elastic state, but `elastic` is off",
                "pass elastic=True as well, or drop commit_every_batches"))
        if self.elastic and self.root_rank != 0:
            raise OptionValueError(with_fix(
                f"`root_rank`={self.root_rank} with `elastic`: Horovod's elastic mode always restores from "
                "rank 0 (ranks are renumbered when hosts leave or join)",
                "drop root_rank (or pass root_rank=0) with elastic=True"))


def _request_hierarchical_allreduce(hvd: Any) -> None:
    """Ask Horovod for hierarchical allreduce, which it reads from its environment at ``init``."""
    if hvd.is_initialized() and os.environ.get(HOROVOD_HIERARCHICAL_ALLREDUCE) != "1":
        raise OptionValueError(with_fix(
            "`hierarchical_allreduce`=True, but Horovod was initialised before make_strategy and reads "
            f"{HOROVOD_HIERARCHICAL_ALLREDUCE} only at hvd.init()",
            f"drop the earlier hvd.init() (make_strategy calls it), or export {HOROVOD_HIERARCHICAL_ALLREDUCE}=1 "
            "before the script starts"))
    os.environ[HOROVOD_HIERARCHICAL_ALLREDUCE] = "1"  # Horovod's own switch; hvd.init() reads it


@STRATEGIES.register("horovod", "Horovod ring-allreduce over Gloo/MPI/NCCL (launch with horovodrun)")
class HorovodStrategy(DistributedStrategy):
    """Synchronous data parallelism with Horovod, one process per GPU (or CPU slot).

    Launch: ``horovodrun -np 4 -H host1:2,host2:2 python train.py``.

    The detected environment (``environment``, or one detected from ``environ``) says whether
    horovodrun or mpirun started this process; rank and size are Horovod's own once it is
    initialised (an elastic job renumbers its ranks).
    """

    Options = HorovodOptions
    options: HorovodOptions
    #: Set by ``setup`` and a loop checkpoint's ``restore``: broadcast before the next step.
    _loop_broadcast_pending: bool = False
    #: The options that reach the gradients only through ``optimizer()`` (tfdist's allreduce).
    IGNORED_BY_HOROVODS_OWN = ("compression", "powersgd_rank", "powersgd_start_iter",
                               "powersgd_min_compression_rate", "backward_passes_per_step", "average_gradients")
    _said_horovods_own: bool = False

    def __init__(self, options: HorovodOptions, environment: ClusterEnvironment | None = None, *,
                 environ: Mapping[str, str] | None = None) -> None:
        if environment is None and environ is not None:
            environment = detect_environment(environ)
        super().__init__(options, environment)
        environ = self.environment.environ
        if options.elastic and environ.get(HOROVOD_ELASTIC) != "1":
            raise HorovodLaunchError(with_fix(
                f"make_strategy('horovod', elastic=True) needs an elastic Horovod launch, and "
                f"{HOROVOD_ELASTIC} is {environ.get(HOROVOD_ELASTIC)!r} (horovodrun sets it to '1' in elastic "
                "mode only)",
                "launch with `tfdist launch --backend horovod --elastic --min-np 1 --max-np N --hosts "
                "h1:1,h2:1 -- python script.py`, or with `horovodrun --min-np 1 --max-np N "
                "--host-discovery-script discover.sh python script.py`; or drop elastic=True"))
        if not isinstance(self.environment, HorovodRunEnvironment):
            raise HorovodLaunchError(
                "make_strategy('horovod') must run under horovodrun or mpirun, and no HOROVOD_RANK/"
                "OMPI_COMM_WORLD_RANK variable is set; fix: launch with `horovodrun -np N python "
                "script.py` (or `tfdist launch --backend horovod -np N -- python script.py`), or use "
                "make_strategy('auto') to run the same script as a single process")
        import horovod.tensorflow as hvd

        if options.hierarchical_allreduce:
            _request_hierarchical_allreduce(hvd)
        hvd.init()
        self._hvd = hvd
        if options.pin_gpu:
            self._pin_gpu()
        if not 0 <= options.root_rank < hvd.size():
            raise OptionValueError(with_fix(
                f"`root_rank`={options.root_rank} is not a rank of this {hvd.size()}-rank job",
                f"pass a rank from 0 to {hvd.size() - 1}"))

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
    def _processes_sharding_their_own_copy(self) -> int:
        return self.size if self.options.shard_data else 1

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
        hvd = self._hvd
        options = self.options
        powersgd = powersgd_settings(options)
        return distributed_optimizer(optimizer, AllreduceSettings(
            op=hvd.Average if options.average_gradients else hvd.Sum,
            compression=hvd.Compression.fp16 if options.compression == "fp16" else hvd.Compression.none,
            backward_passes_per_step=options.backward_passes_per_step, powersgd=powersgd))

    def _check_flavour(self, obj: Any, argument: str) -> None:
        if self.options.elastic:
            keras_compat.refuse_keras_3(obj, argument, "elastic horovod",
                                        "tfdist's elastic loop restores tf-keras state only")

    def optimizer(self, optimizer: Any, scale_lr: bool | None = None) -> Any:
        """As ``DistributedStrategy.optimizer``; with ``elastic`` it also records the size the rate
        was scaled for (``SCALED_FOR``), even at one rank where the factor is 1: the elastic fit
        rescales the rate from that record when hosts join or leave, so a job that starts alone
        must have it too."""
        scale = self.options.scale_lr if scale_lr is None else scale_lr
        if self.options.elastic and scale and self.lr_scale == 1.0:
            if keras_compat.is_keras(optimizer, "optimizers.Optimizer") and uses_schedule(optimizer):
                raise ArgumentTypeError(with_fix(
                    "cannot rescale a LearningRateSchedule by the number of replicas, which elastic=True does "
                    "whenever hosts join or leave (this job starts with one rank)",
                    "pass scale_lr=False and scale the schedule yourself, or use a float learning rate"))
        scaled = scale and (self.lr_scale != 1.0 or self.options.elastic)
        wrapped = super().optimizer(optimizer, scale_lr)
        if scaled:
            setattr(wrapped, SCALED_FOR, self.size)
        return wrapped

    def _worker_figures(self, batch_size: int, clock: Any, optional: bool = False) -> list:
        """Every rank's step, allreduce and compute time (``WorkerMetrics``), for ``metrics``."""
        return [WorkerMetrics(batch_size, clock=clock)]

    # --- training -----------------------------------------------------------------------------
    def fit(self, model: Any, x: Any = None, y: Any = None, **fit_kwargs: Any) -> Any:
        """``model.fit`` on every rank; with ``elastic=True`` under Horovod's elastic loop, which
        survives ranks leaving and joining (see ``tfdist.strategies.horovod_elastic``). A model whose
        optimizer does not average over the ranks is refused: each rank would train on its own shard."""
        self._refuse_rank_local_optimizer(model)
        self._say_options_horovods_own_wrapper_ignores(model)
        if not self.options.elastic:
            return super().fit(model, x, y, **fit_kwargs)
        return elastic_fit(self, model, x, y, fit_kwargs)

    def _refuse_rank_local_optimizer(self, model: Any) -> None:
        """Refuse, with several ranks, a compiled optimizer that averages nothing: the ranks started
        equal (the broadcast) and ended apart, and the job exited 0."""
        optimizer = getattr(model, "optimizer", None)
        if optimizer is None or averages_over_ranks(optimizer) or (self.size < 2 and not self.options.elastic):
            return  # an elastic job started alone is checked too: the ranks that join would train apart
        if type(model).train_step is not keras_compat.keras_of(model, "model").Model.train_step:
            return  # the model's own train step, which may average itself (DistributedGradientTape)
        raise ArgumentValueError(with_fix(
            f"the model's optimizer ({type(optimizer).__name__}) does not average its gradients over the "
            f"{'ranks of this elastic job' if self.options.elastic else f'{self.size} Horovod ranks'} (it did not "
            "go through strategy.optimizer()), so each rank would train its own copy on its own shard",
            COMPILE_THROUGH_OPTIMIZER))

    def _say_options_horovods_own_wrapper_ignores(self, model: Any) -> None:
        """Horovod's own tf-keras ``DistributedOptimizer`` combines the gradients as it was built: the
        strategy's (or the plan's) compression, accumulation and averaging do not reach it. Said once."""
        optimizer = getattr(model, "optimizer", None)
        if optimizer is None or self._said_horovods_own or not averages_through_horovods_own(optimizer):
            return
        defaults = HorovodOptions()
        ignored = [f"`{name}`={getattr(self.options, name)!r}" for name in self.IGNORED_BY_HOROVODS_OWN
                   if getattr(self.options, name) != getattr(defaults, name)]
        if ignored:
            self._said_horovods_own = True
            log.warning("tfdist: %s", with_fix(
                f"the model's optimizer is Horovod's own DistributedOptimizer, which combines the gradients as "
                f"it was built, so {', '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} not applied",
                COMPILE_THROUGH_OPTIMIZER))

    # --- the hooks elastic fit drives (tfdist.strategies.horovod_elastic) ------------------------------
    def check_fit(self, model: Any, callbacks: list) -> None:
        """What ``fit`` checks before training: the model, and (on the chief) every output path."""
        self._check_model(model)
        if self.is_chief:
            self._check_export_destination()
            outputs.check_writable([*outputs.output_paths(callbacks), *self._output_dirs()])

    def fit_inputs(self, x: Any, y: Any, kwargs: dict, model: Any = None) -> tuple[Any, Any, dict]:
        """This rank's share of the training data, as ``fit`` prepares it for the current size; with
        ``model``, as ``fit`` hands it to Keras (arrays as tfdist's own pipeline)."""
        x, y, kwargs = self._prepare_fit_inputs(x, y, kwargs)
        return (x, y, kwargs) if model is None else self._input_pipeline(model, x, y, kwargs)

    def fit_callbacks(self, callbacks: list, kwargs: dict) -> list:
        """``callbacks`` with the backend's own (broadcast, metric averaging, warm-up, ...)."""
        return self._fit_callbacks(callbacks, kwargs)

    def build_from_first_batch(self, model: Any, x: Any) -> None:
        """Create a lazily built model's (and optimizer's) variables before the first broadcast."""
        build_from_first_batch(model, x)

    @staticmethod
    def scaled_for(optimizer: Any) -> int | None:
        """The rank count ``optimizer()`` scaled this optimizer's learning rate for, else None."""
        return getattr(optimizer, SCALED_FOR, None)

    # --- data ---------------------------------------------------------------------------------
    def _prepare_fit_inputs(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        return inputs.horovod_fit_inputs(x, y, kwargs, self.rank, self.size, shard=self.options.shard_data)

    def _input_pipeline(self, model: Any, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        """A rank's arrays as tfdist's own pipeline, autotuning off (``inputs.array_fit_pipeline``):
        freeing Keras' own autotuned iterator stalled ``fit`` up to a minute as it returned."""
        floatx = keras_compat.keras_of(model, "model").backend.floatx()
        return inputs.array_fit_pipeline(x, y, kwargs, floatx=floatx)

    def _prepare_evaluate_inputs(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        return inputs.horovod_inputs(x, y, kwargs, self.rank, self.size, shard=self.options.shard_data,
                                     steps_key="steps")

    def _before_fit(self, model: Any, x: Any) -> None:
        """Create every variable before the broadcast, so the first step is already exact; move a
        Keras 3 allreduce out to the ``LossScaleOptimizer`` compile put around it; keep a Keras 3
        model's train step out of XLA, which has no kernel for Horovod's ops."""
        build_from_first_batch(model, x)
        if keras_compat.flavour_of(model) == keras_compat.KERAS_3:
            rehome_under_loss_scale(model.optimizer)  # compile added loss scaling after optimizer()
        refuse_tf_keras_loss_scale_accumulation(model.optimizer, self.options.backward_passes_per_step)
        if keras_compat.flavour_of(model) == keras_compat.KERAS_3 and model.jit_compile:
            log.info("tfdist: compiling %s's train step without XLA (jit_compile=False): Horovod's "
                     "allreduce has no XLA kernel", model.name)
            model.jit_compile = False

    def _reduce_evaluation(self, result: Any) -> Any:
        """Average ``evaluate``'s per-rank results so every rank returns the global figures."""
        if isinstance(result, dict):
            return average_over_ranks(self._hvd, result, "tfdist.evaluate")
        values = [float(v) for v in (result if isinstance(result, (list, tuple)) else [result])]
        averaged = average_over_ranks(self._hvd, dict(enumerate(values)), "tfdist.evaluate")
        averaged = [averaged[i] for i in range(len(values))]
        return averaged if isinstance(result, (list, tuple)) else averaged[0]

    # --- callbacks ----------------------------------------------------------------------------
    def _fit_callbacks(self, callbacks: list, kwargs: dict) -> list:
        _refuse_batch_summaries(callbacks)
        ours: list = []
        # Elastic: Horovod's state sync broadcasts from rank 0 at every (re)start instead.
        if not self.options.elastic and not any(isinstance(cb, BroadcastInitialState) for cb in callbacks):
            ours.append(BroadcastInitialState(root_rank=self.options.root_rank))
        batch_level = any(_writes_batch_logs(cb) for cb in callbacks)
        for callback in callbacks:
            if isinstance(callback, MetricAverage) and batch_level:
                callback.batch_level = True
        if not any(isinstance(cb, MetricAverage) for cb in callbacks):
            ours.append(MetricAverage(batch_level=batch_level))
        if self.options.warmup_epochs and not any(isinstance(cb, LearningRateWarmup) for cb in callbacks):
            ours.append(LearningRateWarmup(self.options.warmup_epochs, start_factor=1.0 / self.size))
        if self.options.compression == "powersgd":  # before any callback that checkpoints
            ours.append(SynchronizePowerSGD())
        return ours + [self._chief_only_if_writer(cb) for cb in callbacks]

    def _evaluate_callbacks(self, callbacks: list) -> list:
        """``evaluate`` figures a writer records are the mean over ranks too (no writer, no
        averaging here: ``_reduce_evaluation`` averages the returned figures)."""
        writers = [cb for cb in callbacks if isinstance(_unwrapped(cb), _writers())]
        averaged = not writers or any(isinstance(cb, MetricAverage) for cb in callbacks)
        ours = [] if averaged else [MetricAverage()]
        return ours + [self._chief_only_if_writer(cb) for cb in callbacks]

    def _chief_only_if_writer(self, callback: Any) -> Any:
        """File writers (checkpoints, TensorBoard, CSV) and progress bars run on the chief only;
        BackupAndRestore restores on every rank (so all resume at the same epoch) and saves on
        the chief only."""
        if keras_compat.is_keras(callback, "callbacks.BackupAndRestore") and not self.is_chief:
            return ChiefOnly(callback, is_chief=False, everywhere=("on_train_begin",))
        if (isinstance(callback, _writers()) or keras_compat.is_keras(callback, "callbacks.ProgbarLogger")) \
                and not self.is_chief:
            return ChiefOnly(callback, is_chief=False)
        return callback


    # --- custom loops (tfdist.strategies.loop) --------------------------------------------------------
    def setup(self, model: Any, optimizer: Any) -> None:
        """As ``DistributedStrategy.setup``, and arms the broadcast of the model's and the optimizer's
        variables from ``root_rank`` before the first step (refused with ``elastic``)."""
        if self.options.elastic:
            raise loop.LoopError(with_fix(
                "the custom-loop API does not run Horovod's elastic mode (`elastic=True`): it has no commit "
                "and reset points for a loop", "drop elastic=True for a loop, or train with strategy.fit"))
        super().setup(model, optimizer)
        self._loop_broadcast_pending = True

    def _loop_iterator_factory(self, dataset: Any, batch_size: int) -> Any:
        """This rank's shard of the repeated stream, batched per rank."""
        batches = loop.stream(dataset, batch_size, self.size, self.rank, self.options.shard_data)
        return lambda: iter(batches)

    def _loop_function(self, step_fn: Any) -> Any:
        """``step_fn`` on this rank's next batch, its outputs summed over the ranks (outside XLA, which has
        no kernel for Horovod's ops)."""
        hvd = self._hvd

        @tf.function(jit_compile=False)
        def step(iterator: Any) -> Any:
            outputs_ = step_fn(next(iterator))
            leaves = tf.nest.flatten(outputs_)
            summed = [hvd.allreduce(tf.convert_to_tensor(leaf), op=hvd.Sum, name=f"tfdist.loop.output.{i}")
                      for i, leaf in enumerate(leaves)]
            return tf.nest.pack_sequence_as(outputs_, summed)

        return step

    def _loop_loss_factor(self) -> float:
        """Horovod averages the gradients (unless ``average_gradients=False``): the average of ``size``
        times the replicas' parts is their sum."""
        return float(self.size) if self.options.average_gradients else 1.0

    def _loop_before_call(self, state: loop.LoopState) -> Any:
        """The broadcast of the model's and the optimizer's variables from ``root_rank``, when ``setup`` or
        a restore armed it, each variable's broadcast named by its place in that list
        (``positional_broadcast``)."""
        root = self.options.root_rank
        broadcast: list = []

        def broadcast_if_pending() -> None:
            if not self._loop_broadcast_pending:
                return
            if not broadcast:
                variables = tf_variables([*state.model.variables, *list(state.optimizer.variables)])
                broadcast.append(positional_broadcast(variables, root, prefix="tfdist.loop.broadcast"))
            broadcast[0]()
            self._loop_broadcast_pending = False

        return broadcast_if_pending

    def _loop_restored(self) -> None:
        self._loop_broadcast_pending = True

    def _loop_before_save(self, optimizer: Any) -> None:
        """PowerSGD's errors made the ranks' mean, so the chief's checkpoint is the whole state."""
        synchronize_powersgd(optimizer)

    def _chief_value(self, value: int, name: str) -> int:
        """The chief's (rank 0's) ``value``."""
        return int(self._hvd.broadcast_object(value, root_rank=0, name=name))

    def _loop_agree_epoch(self, epoch: int) -> int:
        """The root rank's epoch (its weights follow in the broadcast before the next step)."""
        return int(self._hvd.broadcast_object(epoch, root_rank=self.options.root_rank, name="tfdist.loop.epoch"))

    # --- export (tfdist.export) ---------------------------------------------------------------------
    def _export_role(self) -> Any:
        """Rank 0 writes; every rank waits for it and hears every rank's problem (allgather_object)."""
        from tfdist.export import Role

        def agree(problem: str | None) -> str | None:
            problems = self._hvd.allgather_object(problem, name="tfdist.export")
            return next((p for p in problems if p is not None), None)

        return Role(writes=self.is_chief, agree=agree)


def _writers() -> tuple[type, ...]:
    """The callbacks that write files, of both Kerases."""
    return tuple(cls for name in ("ModelCheckpoint", "TensorBoard", "CSVLogger")
                 for cls in keras_compat.loaded_classes(f"callbacks.{name}"))


def _unwrapped(callback: Any) -> Any:
    return callback.callback if isinstance(callback, ChiefOnly) else callback


def _writes_batch_logs(callback: Any) -> bool:
    """Whether ``callback`` (or the writer a ChiefOnly wraps) reads batch-level logs (a
    ModelCheckpoint with an integer ``save_freq``), decided the same way on every rank so the
    batch-level averaging allreduces pair up."""
    inner = _unwrapped(callback)
    if not isinstance(inner, _writers()):
        return False
    if keras_compat.flavour_of(inner) == keras_compat.KERAS_3:  # Keras 3 calls every hook; these save per batch
        return getattr(inner, "save_freq", "epoch") != "epoch" or getattr(inner, "update_freq", "epoch") != "epoch"
    return upstream.has_batch_hooks(inner)


def _refuse_batch_summaries(callbacks: list) -> None:
    """Keras' TensorBoard writes batch summaries inside the training step, from this rank's own
    loss: under Horovod that would be rank 0's value, not the job's, so it is refused."""
    for callback in callbacks:
        inner = _unwrapped(callback)
        if keras_compat.is_keras(inner, "callbacks.TensorBoard") and inner.update_freq != "epoch":
            raise ArgumentValueError(with_fix(
                f"TensorBoard(update_freq={inner.update_freq!r}) writes each batch's loss from inside the "
                "training step, where Horovod has only this rank's own value, so the chief would record "
                "rank 0's figures as the job's",
                "use update_freq='epoch' (tfdist averages epoch and validation figures over all ranks)"))


def build_from_first_batch(model: Any, x: Any) -> None:
    """Create a model's variables (and its optimizer's slots) from the structure of ``x``'s first
    batch, for models that build lazily: a ``Sequential`` without ``Input`` and subclassed models
    (and, in Keras 3, the optimizer, which otherwise builds inside the first traced step).

    The model is called once on that batch in inference mode; nothing is trained. The optimizer's
    slots follow, so a broadcast right after covers every variable the first step will use.
    """
    keras = keras_compat.keras_of(model, "model")
    if not model.built or not model.variables:
        if x is None:
            raise inputs.InputError(with_fix(
                "the model has no weights yet and no training data was given to build it from",
                "give the model an input shape (keras.Input) or call model.build() first"))
        model(_first_batch_inputs(keras, x), training=False)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and hasattr(optimizer, "build") and not upstream.optimizer_is_built(optimizer):
        optimizer.build(model.trainable_variables)


def _first_batch_inputs(keras: Any, x: Any) -> Any:
    """The model inputs of ``x``'s first batch: arrays sliced, a dataset's first element unpacked."""
    if inputs.is_dataset(x):
        element = next(iter(x.take(1)))
        features, _, _ = keras.utils.unpack_x_y_sample_weight(element)
        return features
    if isinstance(x, keras.utils.Sequence):
        features, _, _ = keras.utils.unpack_x_y_sample_weight(x[0])
        return features
    if inputs.is_array_input(x):
        return tf.nest.map_structure(lambda leaf: leaf[:1], x)
    raise inputs.InputError(with_fix(
        f"the model has no weights yet, and tfdist cannot look at the first batch of a "
        f"{type(x).__name__} without consuming it",
        "give the model an input shape (keras.Input(shape=...)) or call model.build() before fit"))
