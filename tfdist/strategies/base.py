"""The object ``make_strategy`` returns: one way to compile and fit on every backend."""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Callable, ClassVar, Iterator

import tensorflow as tf

from tfdist import keras_compat, upstream
from tfdist.callbacks import Throughput, WorkerMetrics, progress_lines
from tfdist.callbacks.backup import SafeBackup
from tfdist.callbacks.learning_rate import learning_rate_value, uses_schedule
from tfdist.callbacks.plan_check import PlanCheck
from tfdist.callbacks.system_metrics import SystemMetrics
from tfdist.environments import ClusterEnvironment, detect_environment
from tfdist.errors import ArgumentTypeError, ArgumentValueError, with_fix
from tfdist.strategies import inputs, loop, loop_callbacks, outputs
from tfdist.strategies.adaptive import adaptive_epochs, continue_clocks, end_if_switched
from tfdist.strategies.checkpoints import LoopCheckpoint
from tfdist.strategies.options import StrategyOptions

log = logging.getLogger("tfdist")
#: The fix for a model compiled with an optimizer that did not go through ``strategy.optimizer()``.
COMPILE_THROUGH_OPTIMIZER = ("compile with optimizer=strategy.optimizer(tf.keras.optimizers.Adam(...)) inside "
                             "strategy.scope()")
_SCALED_MARK = "_tfdist_lr_scaled"


class DistributedStrategy:
    """Base of every backend. Subclasses set ``Options`` and override the ``_`` hooks.

        strategy = tfdist.make_strategy("auto")
        with strategy.scope():
            model = build_model()
            model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adam(1e-3)), loss="mse")
        strategy.fit(model, x, y, batch_size=64, epochs=3)   # batch_size is per replica

    ``batch_size`` (and a dataset batched by tfdist) is always per replica; the global batch is
    ``batch_size * num_replicas_in_sync``.
    """

    kind: ClassVar[str] = "base"
    #: The advisor's plan this strategy was built from (``TFDIST_PLAN`` under ``auto``), else None.
    plan: Any = None
    #: Where ``export`` writes, declared before ``fit`` with ``export_to`` (``fit`` checks it), else None.
    _export_destination: Any = None
    #: The custom loop's model and optimizer, once ``setup`` has checked them (``tfdist.strategies.loop``).
    _loop_state: loop.LoopState | None = None
    Options: ClassVar[type[StrategyOptions]] = StrategyOptions

    def __init__(self, options: StrategyOptions, environment: ClusterEnvironment | None = None) -> None:
        self.options = options
        #: Where this process runs (``tfdist.environments``), detected once and handed down by
        #: ``make_strategy``; the backends that have a launcher's identity read it from here.
        self.environment = self.environment_for(environment if environment is not None else detect_environment())

    @classmethod
    def environment_for(cls, detected: ClusterEnvironment) -> ClusterEnvironment:
        """The environment this backend reads its identity from, given the ``detected`` one: that one
        itself, unless the backend reads a particular launcher's (the tf.distribute cluster backends:
        TF_CONFIG, read from the same variables)."""
        return detected

    # --- identity -------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        """This process's index among the training processes (0 is the chief)."""
        return 0

    @property
    def size(self) -> int:
        """Replicas kept in sync (Horovod: processes; tf.distribute: replicas)."""
        return self.num_replicas_in_sync

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def num_workers(self) -> int:
        """Processes that run training steps."""
        return 1

    @property
    def num_replicas_in_sync(self) -> int:
        strategy = self.tf_strategy
        return strategy.num_replicas_in_sync if strategy is not None else 1

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def tf_strategy(self) -> tf.distribute.Strategy | None:
        """The underlying ``tf.distribute.Strategy``; ``None`` for Horovod."""
        return None

    @property
    def lr_scale(self) -> float:
        """Factor ``optimizer()`` applies to the learning rate when ``scale_lr`` is on."""
        return float(self.num_replicas_in_sync)

    def __repr__(self) -> str:
        return (f"<tfdist {self.kind} strategy rank={self.rank} size={self.size} "
                f"workers={self.num_workers} chief={self.is_chief}>")

    def take_role(self, exit: Callable[[int], object] = os._exit) -> None:
        """Take up this process's part in the job; ``make_strategy`` calls it once.

        A no-op for processes that train. A parameter-server job's ps and worker tasks serve here
        and end the process with ``exit`` once the chief has finished.
        """

    # --- model building -----------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Create the model and optimizer inside this scope."""
        strategy = self.tf_strategy
        with (strategy.scope() if strategy is not None else contextlib.nullcontext()):
            yield

    def optimizer(self, optimizer: Any, scale_lr: bool | None = None) -> Any:
        """Prepare a tf-keras or Keras 3 optimizer: scale its learning rate, then wrap it for the backend."""
        _require_optimizer(optimizer)
        self._check_flavour(optimizer, "optimizer")
        scale = self.options.scale_lr if scale_lr is None else scale_lr
        if scale and self.lr_scale != 1.0 and getattr(optimizer, _SCALED_MARK, False):
            raise ArgumentValueError("this optimizer's learning rate was already scaled by "
                                     "strategy.optimizer(); fix: pass a new optimizer, or scale_lr=False")
        if scale and self.lr_scale != 1.0:
            if uses_schedule(optimizer):
                raise ArgumentTypeError(
                    "cannot scale a LearningRateSchedule by the number of replicas; fix: pass "
                    "scale_lr=False and scale the schedule yourself, or use a float learning rate")
            optimizer.learning_rate = learning_rate_value(optimizer) * self.lr_scale
            setattr(optimizer, _SCALED_MARK, True)
        wrapped = self._wrap_optimizer(optimizer)
        setattr(wrapped, loop.PREPARED_FOR, self.kind)
        return wrapped

    @property
    def _processes_sharding_their_own_copy(self) -> int:
        """How many processes each build the input pipeline and take their shard of it (Horovod's
        ranks, multi-worker mirrored's workers, with ``shard_data``); 1 where none do."""
        return 1

    def _check_flavour(self, obj: Any, argument: str) -> None:
        """Refuse a Keras this backend cannot train; all but parameter servers (and elastic Horovod) take both."""

    def _wrap_optimizer(self, optimizer: Any) -> Any:
        return optimizer

    # --- training -----------------------------------------------------------------------------
    def fit(self, model: Any, x: Any = None, y: Any = None, **fit_kwargs: Any) -> Any:
        """``model.fit`` with the backend's data handling and callbacks; returns the History."""
        kwargs = dict(fit_kwargs)
        callbacks = list(kwargs.pop("callbacks", None) or [])
        self._check_model(model, callbacks)
        adaptive = adaptive_epochs(self, model, kwargs)
        if self.plan is not None:
            callbacks = self._with_plan_check(callbacks, kwargs.get("batch_size"), per_worker=adaptive is not None)
            callbacks += [adaptive] if adaptive is not None else []
            continue_clocks(callbacks, adaptive)
        if self.is_chief:  # the chief writes; fail before the first epoch, not after it
            self._check_export_destination()
            outputs.check_writable([*outputs.output_paths(callbacks), *self._output_dirs()])
            inputs.warn_unseeded_shuffle(x, self._processes_sharding_their_own_copy, "fit")  # once a job
        x, y, kwargs = self._prepare_fit_inputs(x, y, kwargs)
        x, y, kwargs = self._input_pipeline(model, x, y, kwargs)
        self._before_fit(model, x)
        kwargs["callbacks"] = [self._safe_backup(cb) for cb in self._fit_callbacks(callbacks, kwargs)]
        if not self.is_chief:
            kwargs["verbose"] = 0
        try:
            history = self._run_fit(model, x, y, kwargs)
        finally:
            close_callbacks(kwargs["callbacks"])
        end_if_switched(adaptive)
        return history

    def _with_plan_check(self, callbacks: list, batch_size: int | None, per_worker: bool = False) -> list:
        """``callbacks`` measured against the plan: a ``Throughput`` first when none is there (at the
        fit's batch size, else the plan's), with ``per_worker`` the backend's per-worker figures after it
        when none are there (an adaptive run re-fits on them), and ``PlanCheck`` last."""
        plan = self.plan
        if batch_size is not None and batch_size != plan.batch_size:
            log.warning("tfdist plan: the plan was made for batch %d per worker and fit trains with %d: its "
                        "prediction is for another run", plan.batch_size, batch_size)
        if not any(isinstance(getattr(cb, "callback", cb), Throughput) for cb in callbacks):
            callbacks.insert(0, self.throughput(batch_size or plan.batch_size))
        if per_worker:
            index, throughput = next((i, cb) for i, cb in enumerate(callbacks)
                                     if isinstance(getattr(cb, "callback", cb), Throughput))
            figures = self._worker_figures(batch_size or plan.batch_size, getattr(throughput, "callback",
                                                                                    throughput).clock,
                                           optional=True)
            kinds = tuple(type(figure) for figure in figures)
            if kinds and not any(isinstance(getattr(cb, "callback", cb), kinds) for cb in callbacks):
                callbacks[index + 1:index + 1] = figures
        return [*callbacks, PlanCheck(plan, self.is_chief)]

    def _safe_backup(self, callback: Any) -> Any:
        """A ``BackupAndRestore`` (or the ChiefOnly around it) wrapped in ``SafeBackup``: a verified
        previous copy, a clean error when a save fails, and a fallback when the newest is unreadable."""
        if isinstance(getattr(callback, "callback", callback), _tf_keras_backup()):
            return SafeBackup(callback, is_chief=self.is_chief)
        return callback

    def evaluate(self, model: Any, x: Any = None, y: Any = None, **evaluate_kwargs: Any) -> Any:
        """``model.evaluate`` with the same data handling; every rank gets the global result."""
        kwargs = dict(evaluate_kwargs)
        self._check_model(model, list(kwargs.get("callbacks") or []))
        x, y, kwargs = self._prepare_evaluate_inputs(x, y, kwargs)
        kwargs["callbacks"] = self._evaluate_callbacks(list(kwargs.pop("callbacks", None) or []))
        if not self.is_chief:
            kwargs["verbose"] = 0
        return self._reduce_evaluation(model.evaluate(x, y, **kwargs))

    def throughput(self, batch_size: int, **kwargs: Any) -> Any:
        """A ``Throughput`` callback that knows how many replicas consume ``batch_size`` each."""
        return Throughput(batch_size, replicas=self.num_replicas_in_sync, workers=self.num_workers, **kwargs)

    def metrics(self, batch_size: int, show_workers: bool = False) -> list:
        """The run's figures for this backend, to put before a ``TensorBoardRun``: ``Throughput``,
        plus what the backend can measure per worker (Horovod: ``WorkerMetrics``; parameter servers:
        ``ParameterServerMetrics``), all timing epochs on ``Throughput``'s clock. ``batch_size`` is
        per replica.

            strategy.fit(model, x, y, callbacks=[*strategy.metrics(64), TensorBoardRun("runs")])

        The per-worker figures go into the epoch logs (History, TensorBoard, ``tfdist report``) but
        not onto Keras' progress line, which keeps to loss, the model's metrics and Throughput's
        figures: a progress line (``tfdist.callbacks.progress``) ends the list and stands in for
        Keras' own. ``show_workers=True`` leaves it out, and Keras' progress bar prints them all."""
        if not isinstance(show_workers, bool):
            raise ArgumentTypeError(f"`show_workers` must be True or False, got {show_workers!r}; fix: "
                                    "leave it out (per-worker figures off the progress line) or pass True")
        throughput = self.throughput(batch_size)
        figures = self._worker_figures(batch_size, throughput.clock)
        return [throughput, *figures, *([] if show_workers or not figures else progress_lines(figures))]

    def _worker_figures(self, batch_size: int, clock: Any, optional: bool = False) -> list:
        """The callbacks that measure this backend per worker, on ``clock`` (``metrics``; ``optional``:
        added by ``fit`` itself, they measure nothing rather than fail where they cannot measure)."""
        return []

    # --- custom training loops (tfdist.strategies.loop) -------------------------------------------
    def setup(self, model: Any, optimizer: Any) -> None:
        """Check the loop's ``model`` (built, from ``scope()``) and ``optimizer`` (from ``optimizer()``),
        create the optimizer's variables in ``scope()``, and arm the backend's first-step broadcast.

            with strategy.scope():
                model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
                optimizer = strategy.optimizer(keras.optimizers.SGD(0.1))
            strategy.setup(model, optimizer)
        """
        keras_compat.keras_of(model, "model")
        self._check_flavour(model, "model")
        _require_optimizer(optimizer)
        self._check_flavour(optimizer, "optimizer")
        keras_compat.check_same_flavour(model, optimizer=optimizer)
        if getattr(optimizer, loop.PREPARED_FOR, None) != self.kind:
            raise ArgumentValueError(with_fix(
                f"`optimizer` ({type(optimizer).__name__}) did not come from this {self.kind} strategy's "
                "optimizer(), which sets it up to reduce its gradients across replicas",
                "pass optimizer = strategy.optimizer(keras.optimizers.SGD(...)) built inside strategy.scope()"))
        if not model.built or not model.trainable_variables:
            raise ArgumentValueError(with_fix(
                f"`model` ({model.name}) has no weights yet, and the loop creates none before its first step",
                "give the model an input shape (keras.Input(shape=...)) or call model.build(...) in strategy.scope()"))
        self._check_loop_variables(model, optimizer)
        flavour = keras_compat.flavour_of(model)
        keras = keras_compat.keras_of(model, "model")
        scaled = loop.is_loss_scaled(optimizer)
        if keras.mixed_precision.global_policy().name == "mixed_float16" and not scaled:
            raise ArgumentValueError(with_fix(
                f"the mixed_float16 policy needs loss scaling and `optimizer` is a plain {type(optimizer).__name__}",
                "wrap it before strategy.optimizer: keras.optimizers.LossScaleOptimizer(opt) on Keras 3, "
                "tf_keras.mixed_precision.LossScaleOptimizer(opt) on tf-keras; or use mixed_bfloat16"))
        inner = upstream.loss_scale_inner(optimizer) or optimizer
        clipping = [name for name in ("clipnorm", "clipvalue", "global_clipnorm")
                    if getattr(inner, name, None) is not None]
        refusal = loop.loop_refusal(self.kind, flavour, self.num_replicas_in_sync, scaled, clipping)
        if refusal is not None:
            raise loop.LoopError(refusal)
        with self.scope():
            if not upstream.optimizer_is_built(optimizer):
                optimizer.build(model.trainable_variables)
        self._loop_state = loop.LoopState(model, optimizer)

    def _check_loop_variables(self, model: Any, optimizer: Any) -> None:
        """Refuse a model (or Keras 3 optimizer) whose variables were not created in ``scope()``."""
        strategy = self.tf_strategy
        if strategy is None or not self._loop_variables_placed():
            return
        first = model.trainable_variables[0]  # a tf-keras variable is a tf.Variable, a Keras 3 one holds one
        first = getattr(first, "variables", [first])[0]  # a ShardedVariable (parameter servers): its first shard
        if not strategy.extended.variable_created_in_scope(first if isinstance(first, tf.Variable) else first.value):
            raise ArgumentValueError(with_fix(
                f"`model` ({model.name}) was built outside strategy.scope(): its variables are not the "
                "strategy's (mirrored, or placed on the parameter servers)",
                "build the model (and create the optimizer) inside `with strategy.scope():`"))
        inner = upstream.loss_scale_inner(optimizer) or optimizer
        if keras_compat.flavour_of(inner) == keras_compat.KERAS_3 and \
                not strategy.extended.variable_created_in_scope(inner.iterations.value):
            raise ArgumentValueError(with_fix(
                f"`optimizer` ({type(inner).__name__}) was created outside strategy.scope(), and a Keras 3 "
                "optimizer binds the strategy it was created under",
                "create the optimizer inside `with strategy.scope():`"))

    def distribute(self, data: Any, batch_size: int, steps_per_epoch: int | None = None) -> loop.DistributedData:
        """``data`` (an unbatched ``tf.data.Dataset``, shuffled with a seed if at all, and under parameter
        servers with ``reshuffle_each_iteration=False``: each worker rebuilds it) as this backend
        feeds the loop: batches of ``batch_size`` per replica, repeated, sharded over the processes.

            data = strategy.distribute(examples.shuffle(2048, seed=0), batch_size=32)
            iterator = iter(data)   # for train_step(iterator), data.steps_per_epoch times an epoch
        """
        dataset = loop.require_dataset(data)
        if self.is_chief:
            inputs.warn_unseeded_shuffle(dataset, self._processes_sharding_their_own_copy, "loop")
        steps = loop.steps_per_epoch(None if steps_per_epoch is not None else loop.known_examples(dataset),
                                     batch_size, self.num_replicas_in_sync, steps_per_epoch)
        return loop.DistributedData(self._loop_iterator_factory(dataset, batch_size), steps, batch_size,
                                    self.num_replicas_in_sync)

    def function(self, step_fn: Callable[[Any], Any]) -> loop.Step:
        """``step_fn(batch)`` as one traced step (a decorator): ``step(iterator)`` runs it on every
        replica's next batch and returns its outputs summed over the replicas, on every process."""
        loop.require_callable(step_fn)
        state = loop.require_setup(self._loop_state, "function")
        return loop.Step(self._loop_function(step_fn), self._loop_before_call(state))

    def average_loss(self, per_example_loss: Any, sample_weight: Any = None, regularization_losses: Any = None) -> Any:
        """This replica's part of the global batch's mean loss (inside the step): the sum of
        ``per_example_loss`` (times ``sample_weight``) over the global batch size, plus the
        ``regularization_losses`` over the replicas; the replicas' parts add up to the mean."""
        return loop.average_loss(per_example_loss, self.num_replicas_in_sync, sample_weight, regularization_losses)

    def minimize(self, tape: Any, loss: Any, variables: Any = None) -> None:
        """Inside the step: the gradients of ``loss`` (an ``average_loss``) recorded on ``tape``, with
        respect to ``variables`` (default: the model's trainable ones), scaled for a loss-scale optimizer,
        reduced across replicas exactly once and applied by the loop's optimizer."""
        state = loop.require_setup(self._loop_state, "minimize")
        variables = list(state.model.trainable_variables if variables is None else variables)
        loop.minimize(tape, loss, variables, state.optimizer, self._loop_loss_factor(),
                      keras_compat.flavour_of(state.optimizer))

    def reduce(self, op: str, value: Any) -> Any:
        """Step outputs (one step's, or a list) as numbers, the same on every process: each leaf's mean
        over the steps; ``op="sum"`` for values that add up over replicas (``average_loss``), ``"mean"``
        for values every replica holds whole (divided by the replicas)."""
        op = loop.check_reduce_op(op)
        return loop.reduce_outputs(self._loop_fetch(value), op, self.num_replicas_in_sync)

    def checkpoint(self, directory: Any, max_to_keep: int = 3) -> LoopCheckpoint:
        """The loop's checkpoint in ``directory`` (see ``tfdist.strategies.checkpoints``): ``restore()``
        returns the epoch to start at, ``save(epoch)`` writes on the chief."""
        state = loop.require_setup(self._loop_state, "checkpoint")
        return LoopCheckpoint(self, state.model, state.optimizer, directory, max_to_keep)

    def callbacks(self, callbacks: Any, data: Any, epochs: int) -> Any:
        """The Keras ``CallbackList`` of ``callbacks`` a loop drives itself over ``epochs`` epochs of ``data``
        (what ``distribute`` returned), with what ``fit`` would add: the plan's check, figures per epoch
        (see ``tfdist.strategies.loop_callbacks``)."""
        state = loop.require_setup(self._loop_state, "callbacks")
        if not isinstance(data, loop.DistributedData):
            raise ArgumentTypeError(with_fix(
                f"`data` must be what strategy.distribute returned, got {type(data).__name__}",
                "pass data = strategy.distribute(dataset, batch_size=...), the one the loop iterates"))
        return loop_callbacks.callback_list(self, callbacks, state.model, state.optimizer, data.steps_per_epoch,
                                            epochs, data.batch_size)

    # --- the loop's backend hooks ---------------------------------------------------------------------
    def _loop_iterator_factory(self, dataset: Any, batch_size: int) -> Callable[[], Any]:
        """tf.distribute: each input pipeline (worker) takes its shard of the repeated stream, batched per
        replica; the replicas of a worker take consecutive batches of it."""
        strategy = self.tf_strategy
        shard = getattr(self.options, "shard_data", True)

        def per_pipeline(context: tf.distribute.InputContext) -> tf.data.Dataset:
            return loop.stream(dataset, batch_size, context.num_input_pipelines, context.input_pipeline_id, shard)

        distributed = strategy.distribute_datasets_from_function(per_pipeline)
        return lambda: iter(distributed)

    def _loop_function(self, step_fn: Callable[[Any], Any]) -> Any:
        """tf.distribute: ``strategy.run`` of ``step_fn`` on the next batch, its outputs summed over replicas."""
        strategy = self.tf_strategy

        @tf.function
        def step(iterator: Any) -> Any:
            per_replica = strategy.run(step_fn, args=(next(iterator),))
            return tf.nest.map_structure(
                lambda value: strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None), per_replica)

        return step

    def _loop_variables_placed(self) -> bool:
        """Whether the strategy places the loop's variables (``setup`` then refuses those made outside
        ``scope()``): with several replicas; parameter servers always (their variables live on the ps)."""
        return self.num_replicas_in_sync > 1

    def _loop_fetch(self, outputs: Any) -> Any:
        """Step outputs as values ``reduce`` can read (parameter servers: the scheduled steps' results)."""
        return outputs

    def _loop_loss_factor(self) -> float:
        """What ``minimize`` multiplies the loss by so that the backend's reduction sums the replicas' parts."""
        return 1.0

    def _loop_before_call(self, state: loop.LoopState) -> Callable[[], None] | None:
        """What runs eagerly before each step call (Horovod: the broadcast setup or a restore armed), or None."""
        return None

    def _loop_restored(self) -> None:
        """Called after ``LoopCheckpoint.restore`` (Horovod arms its broadcast again)."""

    def _loop_before_save(self, optimizer: Any) -> None:
        """Called on every process before ``LoopCheckpoint.save`` writes (Horovod: PowerSGD's state)."""

    def _chief_value(self, value: int, name: str) -> int:
        """The chief's ``value`` on every process of this job (each calls it at the same point; ``name``
        tells the collectives apart): its own where one process trains."""
        return value

    def _loop_agree_epoch(self, epoch: int) -> int:
        """The epoch every process resumes at, given the one this process restored: the chief's."""
        return self._chief_value(epoch, "tfdist.loop.epoch")

    # --- after training -----------------------------------------------------------------------
    def export_to(self, path: Any, *, format: str = "saved_model", overwrite: bool = False) -> str:
        """Declare where ``export`` will write, before ``fit``: ``fit`` then refuses, on the chief and
        before its first step, a path the export could not use (an existing one without
        ``overwrite=True``), and ``export(model)`` writes there. Returns the absolute path.

            strategy.export_to("exports/classifier/1", overwrite=True)   # a rerun replaces it
            strategy.fit(model, x, y, epochs=3)
            path = strategy.export(model)
        """
        from tfdist.export.destination import declare

        self._export_destination = declare(path, format, overwrite)
        return self._export_destination.path

    def _check_export_destination(self) -> None:
        """What ``fit`` checks of the destination ``export_to`` declared (see ``tfdist.export.destination``)."""
        from tfdist.export.destination import check

        check(self._export_destination)

    def export(self, model: Any, path: Any = None, *, format: str | None = None, overwrite: bool | None = None,
               verify: bool = True, input_signature: Any = None, sample: Any = None) -> str:
        """Export ``model`` once, for serving; returns the absolute path on every task.

            path = strategy.export(model, "exports/classifier/1")   # SavedModel, serving_default

        The chief writes it, atomically (a temporary sibling renamed into place); with ``verify`` it
        is first reloaded in a fresh interpreter (no tfdist, no Horovod) and its ``serving_default``
        compared with the model on ``sample`` (default: a generated batch). ``format="keras"`` writes
        a ``.keras`` file of the model without its optimizer. An existing ``path`` needs
        ``overwrite=True``; ``input_signature=`` (``tf.TensorSpec``s) is for subclassed models whose
        inputs are not known. ``path``, ``format`` and ``overwrite`` left out are those ``export_to``
        declared (else ``format="saved_model"``, ``overwrite=False``). Call it on every task, as
        ``fit``; see ``tfdist.export``."""
        from tfdist.export import export_model
        from tfdist.export.destination import resolve

        path, format, overwrite = resolve(self._export_destination, path, format, overwrite)
        return export_model(model, path, self._export_role(), format=format, overwrite=overwrite,
                            verify=verify, input_signature=input_signature, sample=sample)

    def _export_role(self) -> Any:
        """What this task does in ``export`` (``tfdist.export.Role``): by default the chief writes
        and the others, which hold the same model, write nothing."""
        from tfdist.export import Role

        return Role(writes=self.is_chief)

    # --- hooks ----------------------------------------------------------------------------------
    def _check_model(self, model: Any, callbacks: list | None = None) -> None:
        keras_compat.keras_of(model, "model")
        self._check_flavour(model, "model")
        if getattr(model, "optimizer", None) is not None:
            keras_compat.check_same_flavour(model, optimizer=model.optimizer)
        keras_compat.check_callbacks_flavour(model, callbacks)
        if getattr(model, "optimizer", None) is None:
            raise ArgumentValueError("the model is not compiled; fix: call model.compile(optimizer="
                                     "strategy.optimizer(...), loss=...) inside strategy.scope() first")

    def _input_pipeline(self, model: Any, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        """The prepared ``fit`` inputs as the backend hands them to Keras (as they are, by default)."""
        return x, y, kwargs

    def _prepare_fit_inputs(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        return self._global_batching(x, y, kwargs)

    def _prepare_evaluate_inputs(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        return self._global_batching(x, y, kwargs)

    def _output_dirs(self) -> list[tuple[str, str]]:
        """``(what, directory)`` the backend itself writes to during ``fit``, checked on the chief."""
        return []

    def _run_fit(self, model: Any, x: Any, y: Any, kwargs: dict) -> Any:
        """Train: the model's own ``fit`` (its History)."""
        return model.fit(x, y, **kwargs)

    def _before_fit(self, model: Any, x: Any) -> None:
        """Called with the prepared training data just before ``model.fit``."""

    def _fit_callbacks(self, callbacks: list, kwargs: dict) -> list:
        return callbacks

    def _evaluate_callbacks(self, callbacks: list) -> list:
        return callbacks

    def _reduce_evaluation(self, result: Any) -> Any:
        return result

    def _global_batching(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        """tf.distribute splits a global batch over replicas: scale per-replica sizes up."""
        return inputs.global_batch_inputs(x, y, kwargs, self.num_replicas_in_sync)


def close_callbacks(callbacks: list) -> None:
    """Stop the background threads of ``SystemMetrics`` callbacks and undo ``WorkerMetrics``' timing of
    the optimizer: neither Keras calls ``on_train_end`` when ``fit`` raises, and a failed run must leave
    no thread behind (nor an optimizer that still times into a finished callback)."""
    for callback in callbacks:
        inner = getattr(callback, "callback", callback)
        if isinstance(inner, (SystemMetrics, WorkerMetrics)):
            inner.close()


def _tf_keras_backup() -> tuple[type, ...]:
    """tf-keras' BackupAndRestore, which ``SafeBackup`` knows how to verify (Keras 3's writes another
    format and is used as it is)."""
    import sys

    module = sys.modules.get("tf_keras")
    return (module.callbacks.BackupAndRestore,) if module is not None else ()


def _require_optimizer(optimizer: Any) -> None:
    """A current tf-keras or Keras 3 optimizer instance, else an error naming the fix."""
    if keras_compat.is_keras(optimizer, "optimizers.legacy.Optimizer"):
        name = type(optimizer).__name__
        raise ArgumentTypeError(f"`optimizer` is a legacy optimizer ({name}); fix: use "
                                f"tf_keras.optimizers.{name} instead of tf_keras.optimizers.legacy")
    if not keras_compat.is_keras(optimizer, "optimizers.Optimizer"):
        raise ArgumentTypeError(f"`optimizer` must be a tf-keras or Keras 3 optimizer instance, got {optimizer!r}; "
                                "fix: pass e.g. keras.optimizers.Adam(1e-3), not a string")
