"""tf.distribute ParameterServerStrategy: a coordinator (chief), workers and parameter servers.

Every task runs the same script. ``make_strategy("parameter_server")``:

* on ``ps`` and ``worker`` tasks starts a ``tf.distribute.Server`` and ends the process once the
  chief has come and gone (``tfdist.lifecycle``), so no server is left behind;
* on the ``evaluator`` returns a strategy whose ``fit`` evaluates the chief's checkpoints;
* on the ``chief`` checks that every task answers, then returns the strategy; ``strategy.fit``
  runs ``Model.fit`` through the ClusterCoordinator.

The cluster comes from ``TF_CONFIG`` (the environment ``make_strategy`` detected), or from ``cluster=``:
a dict, a ``tf.train.ClusterSpec`` or a ``tf.distribute.cluster_resolver.ClusterResolver`` (as in
TensorFlow's parameter-server tutorial, whose in-process cluster has no chief: this process is then
the coordinator), which builds that environment instead.

Variables are placed on the ps tasks; with ``shards=N`` or ``min_shard_bytes=B`` large ones
(embedding tables, big kernels) are split across them: hybrid data + model parallelism.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
from typing import Any, Callable, Mapping

import tensorflow as tf
import tf_keras

from tfdist import keras_compat, lifecycle, tf_noise, upstream
from tfdist.callbacks import ParameterServerMetrics
from tfdist.cluster import TFConfig
from tfdist.cluster.tf_config import grpc_task_env
from tfdist.environments import ClusterEnvironment, TFConfigEnvironment
from tfdist.errors import ArgumentValueError, TfdistError, with_fix
from tfdist.strategies import inputs, keras3_parameter_server, loop
from tfdist.strategies.base import DistributedStrategy
from tfdist.strategies.cluster_config import checked_cluster, checked_tf_config
from tfdist.strategies.options import (OptionValueError, StrategyOptions, require_bool,
                                       require_number, require_path)
from tfdist.strategies.registry import STRATEGIES

log = logging.getLogger("tfdist")

# Chosen by measurement (docs/parameter-servers.md, "`steps_per_execution`"): 10 steps per dispatch makes updates
# staler, and asynchronous Adam on the embedding test model diverged in 3 of 5 runs with 10
# (Adagrad: 0 of 3), so batching dispatches is opt-in.
DEFAULT_STEPS_PER_EXECUTION = 1
SERVER_TASKS = ("ps", "worker")
COORDINATOR = "chief"


class ParameterServerError(TfdistError, RuntimeError):
    """A parameter-server job cannot go on; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class ParameterServerOptions(StrategyOptions):
    """Options of the parameter-server backend.

    shard_data: each worker reads its own shard of numpy inputs (a ``tf.data.Dataset`` is read by
        every worker from its own copy, as tf-keras does; a ``dataset_fn`` splits as it likes).
    shards: split every variable into exactly this many shards across the ps tasks.
    min_shard_bytes: split variables into shards of at least this size (at most one per ps).
    steps_per_execution: steps per coordinator dispatch when compile() left it at 1
        (default DEFAULT_STEPS_PER_EXECUTION = 1: no batching; see docs/parameter-servers.md).
    checkpoint_dir: the chief saves weights here every epoch; the evaluator task evaluates them.
    cluster: the cluster instead of TF_CONFIG: a dict ({"chief": [...], "worker": [...],
        "ps": [...]}), a tf.train.ClusterSpec or a tf.distribute cluster resolver; then
        task_type and task_index (or the resolver's) say which task this process is.
    cluster_timeout: how long the chief waits at start-up for every worker and ps to answer
        before it fails naming the missing ones.
    chief_grace_seconds: how long servers wait after the chief has gone, for a restarted chief to
        come back and resume (with BackupAndRestore), before they exit 0.
    chief_startup_timeout: how long servers wait for the chief to appear at all.
    """

    scale_lr: bool = False  # asynchronous: each worker applies its own gradients
    shard_data: bool = True
    shards: int | None = None
    min_shard_bytes: int | None = None
    steps_per_execution: int | None = None
    checkpoint_dir: str | None = None
    cluster: Any = None
    task_type: str | None = None
    task_index: int | None = None
    cluster_timeout: float = 60.0
    chief_grace_seconds: float = 60.0
    chief_startup_timeout: float = 600.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require_bool("shard_data", self.shard_data)
        require_path("checkpoint_dir", self.checkpoint_dir)
        if self.task_type is not None and not isinstance(self.task_type, str):
            raise OptionValueError(with_fix(f"`task_type` must be a string, got {self.task_type!r}",
                                            "pass e.g. task_type='worker'"))
        if self.shards is not None and self.min_shard_bytes is not None:
            raise OptionValueError(with_fix("pass either `shards` or `min_shard_bytes`, not both",
                                            "`shards=N` splits every variable, `min_shard_bytes=B` only "
                                            "the large ones"))
        for name in ("shards", "min_shard_bytes", "steps_per_execution"):
            if getattr(self, name) is not None:
                require_number(name, getattr(self, name), minimum=1, integer=True)
        if self.task_index is not None:
            require_number("task_index", self.task_index, minimum=0, integer=True)
        for name in ("cluster_timeout", "chief_grace_seconds", "chief_startup_timeout"):
            require_number(name, getattr(self, name), minimum=0)
        if self.cluster is None and (self.task_type is not None or self.task_index is not None):
            raise OptionValueError(with_fix(
                "`task_type`/`task_index` were given without `cluster`; TF_CONFIG names the task itself",
                "pass cluster=... as well, or drop task_type/task_index"))
        if self.cluster is not None and not _is_cluster_like(self.cluster):
            raise OptionValueError(with_fix(
                f"`cluster` must be a dict of task lists, a tf.train.ClusterSpec or a cluster resolver, "
                f"got {type(self.cluster).__name__}",
                "pass e.g. cluster={'chief': ['h0:2222'], 'worker': ['h1:2222'], 'ps': ['h2:2222']}"))


def refuse_loss_scaling() -> None:
    """Refuse tf-keras' ``mixed_float16`` global policy: it needs loss scaling, which tf-keras does not
    run under ParameterServerStrategy (each worker applies its own updates to one shared scale), and
    tf-keras would fail later, inside the first layer, without a fix."""
    policy = tf_keras.mixed_precision.global_policy().name
    if policy == "mixed_float16":
        raise ArgumentValueError(with_fix(
            f"the mixed precision policy {policy!r} needs loss scaling, which tf-keras cannot do under "
            "parameter servers (asynchronous updates to one shared loss scale)",
            "use tf_keras.mixed_precision.set_global_policy('mixed_bfloat16') (same range as float32, no "
            "loss scaling), or a synchronous backend for float16: horovod, multi_worker_mirrored or mirrored"))


def _is_cluster_like(value: Any) -> bool:
    return isinstance(value, (Mapping, tf.train.ClusterSpec, tf.distribute.cluster_resolver.ClusterResolver))


def _explicit_role(options: ParameterServerOptions) -> tuple[dict[str, list[str]], str | None, int | None]:
    """Cluster, task type and index from ``cluster=`` (dict, ClusterSpec or resolver) and the options."""
    cluster, task_type, task_index = options.cluster, options.task_type, options.task_index
    if isinstance(cluster, tf.distribute.cluster_resolver.ClusterResolver):
        resolver = cluster
        for name, given, theirs in (("task_type", task_type, resolver.task_type),
                                    ("task_index", task_index, resolver.task_id)):
            if given is not None and theirs is not None and given != theirs:
                raise OptionValueError(with_fix(
                    f"`{name}`={given!r} contradicts the cluster resolver's {theirs!r}",
                    f"drop `{name}` (the resolver says it) or make them agree"))
        task_type = task_type if task_type is not None else resolver.task_type
        task_index = task_index if task_index is not None else resolver.task_id
        cluster = resolver.cluster_spec()
    if isinstance(cluster, tf.train.ClusterSpec):
        cluster = cluster.as_dict()
    plain: dict[str, list[str]] = {}
    for job, tasks in dict(cluster).items():
        if isinstance(tasks, Mapping):  # ClusterSpec allows {index: address}
            tasks = [tasks[i] for i in sorted(tasks)]
        plain[str(job)] = [str(address) for address in tasks]
    return plain, task_type, task_index


def _role(options: ParameterServerOptions, detected: TFConfigEnvironment) -> TFConfigEnvironment:
    """Which task this process is, in which cluster: the TF_CONFIG environment ``detected``, or the one
    ``cluster=`` (and ``task_type=``, ``task_index=``) builds instead; read once, asked everywhere."""
    if options.cluster is not None:
        cluster, task_type, task_index = _explicit_role(options)
        if task_type is None and COORDINATOR not in cluster:
            # TensorFlow's in-process pattern: the coordinator is this process, outside the cluster.
            checked_cluster(cluster, coordinator_outside=True)
            config = TFConfig(cluster=cluster, task_type=COORDINATOR, task_index=0)
            _require_ps_job(config, coordinator_outside=True)
            return TFConfigEnvironment(detected.environ, config)
        if task_type is None:  # every task runs the same script: each would take itself for the chief
            raise OptionValueError(with_fix(
                "`cluster` lists a chief but nothing says which task this process is",
                "pass task_type= and task_index= (different on every task), or a cluster resolver that "
                "knows its task"))
        task = {"type": task_type, "index": int(task_index or 0)}
        config = checked_tf_config({"cluster": cluster, "task": task})
        _require_ps_job(config)
        return TFConfigEnvironment(detected.environ, config)
    if detected.tf_config is None:
        raise ParameterServerError(with_fix(
            "make_strategy('parameter_server') needs a cluster, and TF_CONFIG is not set",
            "launch locally with `tfdist launch --workers 2 --ps 1 -- python script.py`, set "
            "TF_CONFIG on every task (`tfdist tf-config --help`), or pass cluster=..., task_type=..."))
    _require_ps_job(detected.config)
    return detected


def _require_ps_job(role: TFConfig, coordinator_outside: bool = False) -> TFConfig:
    needed = ("worker", "ps") if coordinator_outside else (COORDINATOR, "worker", "ps")
    if not all(role.cluster.get(job) for job in needed):
        jobs = "workers and ps tasks" if coordinator_outside else "a chief, workers and ps tasks"
        raise ParameterServerError(with_fix(
            f"ParameterServerStrategy needs {jobs}; the cluster has "
            f"{ {k: len(v) for k, v in role.cluster.items()} }",
            "add the missing tasks, e.g. `tfdist launch --workers 2 --ps 1`"))
    if role.task_type not in (COORDINATOR, "evaluator", *SERVER_TASKS):
        raise ParameterServerError(with_fix(f"task type {role.task_type!r} has no role in a "
                                            "parameter-server job", "use chief, worker, ps or evaluator"))
    return role


def _fail_fast_grpc() -> None:
    """TensorFlow's requirement for parameter-server fault tolerance, and keepalive pings so that a
    task behind a cut link is noticed in seconds, not TCP's minutes; set in the processes that join
    the cluster (the launcher sets them too) before their first gRPC channel. Options the user set
    in TF_GRPC_DEFAULT_OPTIONS are kept; the keepalive ones are added unless set there."""
    os.environ.update(grpc_task_env(os.environ))


def _partitioner(options: ParameterServerOptions, num_ps: int) -> Any:
    partitioners = tf.distribute.experimental.partitioners
    if options.shards is not None:
        return partitioners.FixedShardsPartitioner(num_shards=options.shards)
    if options.min_shard_bytes is not None:
        return partitioners.MinSizePartitioner(min_shard_bytes=options.min_shard_bytes, max_shards=num_ps)
    return None


#: Seconds the chief waits at exit for the ClusterCoordinator to stop (then exits all the same): it waits
#: the whole time only when a task was lost, whose failure handler holds its lock waiting for it.
COORDINATOR_STOP_SECONDS = 5.0


def _stop_coordinator(strategy: tf.distribute.ParameterServerStrategy) -> None:
    """At the chief's exit, before the interpreter finalizes: stop the coordinator and let its threads
    leave TensorFlow's C++ (upstream.stop_coordinator says why)."""
    try:
        left = upstream.stop_coordinator(strategy, COORDINATOR_STOP_SECONDS)
    except upstream.UpstreamChangedError as exc:
        log.warning("tfdist: could not stop the ClusterCoordinator at exit: %s", exc)
        return
    if left:
        log.warning("tfdist: the ClusterCoordinator's threads %s still run %gs after it was stopped",
                    ", ".join(left), COORDINATOR_STOP_SECONDS)


@STRATEGIES.register("parameter_server",
                     "tf.distribute ParameterServerStrategy: coordinator, workers and ps tasks")
class ParameterServerStrategy(DistributedStrategy):
    """Asynchronous training: workers pull variables from ps tasks and push their updates.

    The same script runs on every task; see the module docstring for what each task does.
    Constructing it starts nothing on server tasks: ``make_strategy`` calls ``take_role()``, which
    serves there.
    """

    Options = ParameterServerOptions
    options: ParameterServerOptions
    environment: TFConfigEnvironment

    def __init__(self, options: ParameterServerOptions, environment: ClusterEnvironment | None = None) -> None:
        super().__init__(options, environment)
        self.environment = _role(options, self.environment)
        self._strategy: tf.distribute.ParameterServerStrategy | None = None
        #: Whether the running ``fit`` trains a Keras 3 model (on tfdist's loop: ``keras3_parameter_server``).
        self._fitting_keras_3 = False
        if self.is_chief:
            _fail_fast_grpc()
            self._check_cluster_answers()
            outside = self.chief_address is None  # TensorFlow's in-process pattern: no task of the cluster
            resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
                self._cluster_spec(), task_type=None if outside else COORDINATOR, task_id=0, rpc_layer="grpc")
            with tf_noise.cpp_info_quieted():  # each server's 22-line SessionOptions dump as it connects
                self._strategy = tf.distribute.ParameterServerStrategy(
                    resolver, variable_partitioner=_partitioner(options, self.num_ps))
            atexit.register(_stop_coordinator, self._strategy)
            # removing a function here RPCs every task, one blocking call at a time: it stalled the end of
            # fit, then the chief's exit, up to a minute on the lab (upstream.keep_functions_registered)
            upstream.keep_functions_registered()

    def _check_cluster_answers(self) -> None:
        """Fail within ``cluster_timeout`` naming the tasks that do not answer, instead of hanging."""
        servers = self._server_addresses()
        missing = lifecycle.wait_for_tasks(servers, self.options.cluster_timeout)
        if missing:
            listing = ", ".join(f"{name} ({servers[name]})" for name in missing)
            raise ParameterServerError(with_fix(
                f"the chief waited {self.options.cluster_timeout:g}s and these tasks never answered: "
                f"{listing}", "check that every task was started with the same cluster and did not "
                "exit (its log says why), or raise cluster_timeout for slow starts"))

    # --- this process's role ------------------------------------------------------------------------
    def take_role(self, exit: Callable[[int], object] = os._exit) -> None:
        """On a ps or worker task: serve until the chief has come and gone, then ``exit``."""
        if self.task_type not in SERVER_TASKS:
            return
        _fail_fast_grpc()
        lifecycle.serve_until_chief_leaves(
            f"{self.task_type}:{self.task_index}",
            lambda: tf.distribute.Server(self._cluster_spec(), job_name=self.task_type,
                                         task_index=self.task_index, protocol="grpc", start=True),
            self.chief_address, self.options.chief_grace_seconds, self.options.chief_startup_timeout,
            exit=exit)

    @classmethod
    def environment_for(cls, detected: ClusterEnvironment) -> TFConfigEnvironment:
        return TFConfigEnvironment.of(detected)

    def _cluster_spec(self) -> tf.train.ClusterSpec:
        return tf.train.ClusterSpec(self.environment.cluster)

    # --- identity -----------------------------------------------------------------------------
    @property
    def tf_strategy(self) -> tf.distribute.Strategy | None:
        return self._strategy

    @property
    def task_type(self) -> str:
        return self.environment.task_type

    @property
    def task_index(self) -> int:
        return self.environment.task_index

    @property
    def chief_address(self) -> str | None:
        """The chief's address; ``None`` when the coordinator is this process, outside the cluster."""
        chief = self.environment.cluster.get(COORDINATOR)
        return chief[0] if chief else None

    @property
    def is_chief(self) -> bool:
        return self.environment.is_chief

    @property
    def is_evaluator(self) -> bool:
        return self.task_type == "evaluator"

    @property
    def rank(self) -> int:
        return self.environment.rank

    @property
    def num_workers(self) -> int:
        return len(self.environment.cluster["worker"])

    @property
    def num_ps(self) -> int:
        return len(self.environment.cluster["ps"])

    @property
    def num_replicas_in_sync(self) -> int:
        return self._strategy.num_replicas_in_sync if self._strategy is not None else 1

    @property
    def lr_scale(self) -> float:
        return 1.0

    def _worker_figures(self, batch_size: int, clock: Any, optional: bool = False) -> list:
        """The coordinator's step time against one step's compute, and each worker's steps
        (``ParameterServerMetrics``), for ``metrics`` (``optional``: for ``fit``'s own use)."""
        return [ParameterServerMetrics(batch_size, clock=clock, optional=optional)]

    def _wrap_optimizer(self, optimizer: Any) -> Any:
        """A Keras 3 optimizer counts its steps with one atomic add (the workers' steps run at once)."""
        if keras_compat.flavour_of(optimizer) == keras_compat.KERAS_3 and upstream.loss_scale_inner(optimizer) is None:
            upstream.count_keras3_steps_atomically(optimizer)
        return optimizer

    def _check_loop_variables(self, model: Any, optimizer: Any) -> None:
        """As for every backend; and a Keras 3 model's variables must be whole (not sharded)."""
        super()._check_loop_variables(model, optimizer)
        if keras_compat.flavour_of(model) != keras_compat.KERAS_3:
            return
        sharded = [v.path for v in model.variables
                   if isinstance(v.value, tf.__internal__.distribute.ShardedVariable)]
        if sharded:
            raise ArgumentValueError(with_fix(
                f"`model` is a Keras 3 model and {len(sharded)} of its variables were split into shards "
                f"({', '.join(sharded[:3])}{', ...' if len(sharded) > 3 else ''}): "
                f"{loop.PS_KERAS_3_SHARDS_REASON}",
                "make the strategy without shards= or min_shard_bytes= (each variable is then placed whole on "
                "one ps task, round-robin), or build the model with tf-keras to shard it"))

    # --- the custom loop (tfdist.strategies.loop), through the ClusterCoordinator --------------------
    def _coordinator(self) -> Any:
        """The strategy's ClusterCoordinator (one per strategy: tf-keras' ``fit`` gets the same one)."""
        return tf.distribute.coordinator.ClusterCoordinator(self._strategy)

    def _loop_iterator_factory(self, dataset: Any, batch_size: int) -> Any:
        """Per-worker datasets: each worker rebuilds ``dataset`` and takes its shard of the repeated stream
        (``loop.per_worker_stream``); ``iter`` gives the per-worker iterator a scheduled step takes."""
        per_worker = self._coordinator().create_per_worker_dataset(
            loop.per_worker_stream(dataset, batch_size, self.num_workers, self.options.shard_data))
        return lambda: iter(per_worker)

    def _loop_function(self, step_fn: Any) -> Any:
        """The traced step, scheduled on a free worker by the coordinator at each call (a ``RemoteValue``)."""
        return loop.Scheduled(self._coordinator().schedule, super()._loop_function(step_fn))

    def _loop_variables_placed(self) -> bool:
        return True  # variables made outside scope() stay on the coordinator, where no worker can reach them

    def _loop_fetch(self, outputs: Any) -> Any:
        """Wait for every scheduled step, then their results (a lost ps named, as in ``fit``)."""
        coordinator = self._coordinator()
        with self._lost_tasks_named():
            coordinator.join()
            return coordinator.fetch(outputs)

    def _loop_before_save(self, optimizer: Any) -> None:
        """Every scheduled step has run (its update is on the ps) before the chief saves the variables."""
        with self._lost_tasks_named():
            self._coordinator().join()

    @contextlib.contextmanager
    def _lost_tasks_named(self) -> Any:
        try:
            yield
        except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError) as exc:
            raise self._lost_task_error(exc) from None

    def scope(self) -> Any:
        """As ``DistributedStrategy.scope``, refusing the ``mixed_float16`` policy first (see
        ``refuse_loss_scaling``); ``mixed_bfloat16`` needs no loss scaling and trains here."""
        refuse_loss_scaling()
        return super().scope()

    def _export_role(self) -> Any:
        """The coordinator writes a copy of the model in plain local variables (shards merged), which
        reloads anywhere; the evaluator writes nothing (ps and worker tasks never get here)."""
        from tfdist.export import Role

        return Role(writes=self.is_chief, copies=True)

    # --- training -----------------------------------------------------------------------------
    def fit(self, model: Any, x: Any = None, y: Any = None, **fit_kwargs: Any) -> Any:
        """tf-keras' ``fit`` through the coordinator; a Keras 3 model's runs on tfdist's loop
        (``keras3_parameter_server``: Keras 3's fit has no parameter-server training)."""
        self._check_model(model, list(fit_kwargs.get("callbacks") or []))
        keras_3 = keras_compat.flavour_of(model) == keras_compat.KERAS_3
        if self.is_evaluator:
            if keras_3:
                raise keras_compat.KerasFlavourError(with_fix(
                    "an evaluator task evaluates tf-keras checkpoints (tf-keras' SidecarEvaluator), and this "
                    "model is Keras 3", "launch without the evaluator, and pass validation_data= to fit (a "
                    "Keras 3 model is evaluated on the chief after each epoch)"))
            return self._evaluate_checkpoints(model, x, y, fit_kwargs)
        steps = self.options.steps_per_execution or DEFAULT_STEPS_PER_EXECUTION
        if not keras_3 and steps > 1 and upstream.steps_per_execution(model) == 1:
            upstream.set_steps_per_execution(model, steps)
        self._fitting_keras_3 = keras_3  # read by the fit's hooks below
        try:
            with self._lost_tasks_named():
                return super().fit(model, x, y, **fit_kwargs)
        finally:
            self._fitting_keras_3 = False

    def evaluate(self, model: Any, x: Any = None, y: Any = None, **evaluate_kwargs: Any) -> Any:
        """tf-keras' ``evaluate`` through the coordinator; a Keras 3 model's runs on the coordinator
        itself, reading the variables from the ps (``keras3_parameter_server.run_evaluate``)."""
        if keras_compat.flavour_of(model) != keras_compat.KERAS_3:
            return super().evaluate(model, x, y, **evaluate_kwargs)
        self._check_model(model, list(evaluate_kwargs.get("callbacks") or []))
        with self._lost_tasks_named():
            return keras3_parameter_server.run_evaluate(model, x, y, dict(evaluate_kwargs))

    def _run_fit(self, model: Any, x: Any, y: Any, kwargs: dict) -> Any:
        if self._fitting_keras_3:
            return keras3_parameter_server.run_fit(self, model, x, kwargs)
        return super()._run_fit(model, x, y, kwargs)

    def _server_addresses(self) -> dict[str, str]:
        return {f"{job}:{i}": address for job in SERVER_TASKS
                for i, address in enumerate(self.environment.cluster[job])}

    def _lost_task_error(self, exc: Exception) -> ParameterServerError:
        """One clear line naming the task(s) that no longer answer; TensorFlow's own text, shortened,
        after it (its chained gRPC tracebacks run to 100-200 lines)."""
        silent = lifecycle.silent_tasks(self._server_addresses())
        ps_lost = [name for name in silent if name.startswith("ps:")]
        if ps_lost:
            what = f"lost {', '.join(ps_lost)}, which holds variables that training cannot do without"
        elif silent and len(silent) == self.num_workers:
            what = f"lost every worker ({', '.join(silent)})"
        elif silent:
            what = f"lost {', '.join(silent)} and could not go on"
        else:
            what = "lost a task it cannot name (every ps and worker answers again)"
        error = ParameterServerError(with_fix(
            f"the parameter-server job {what} ({type(exc).__name__}); training stops",
            "restart the whole cluster; with tf.keras.callbacks.BackupAndRestore in the callbacks it "
            "resumes from the last finished epoch"))
        lines = str(exc).strip().splitlines()
        shown = "\n  ".join(line[:300] for line in lines[:8])
        error.add_note(f"TensorFlow's error ({len(lines)} lines, first {min(len(lines), 8)}):\n  {shown}")
        error.tensorflow_error = exc  # the whole chain, for debugging
        return error

    def _prepare_fit_inputs(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        if self._fitting_keras_3:
            dataset, kwargs = keras3_parameter_server.fit_inputs(x, y, kwargs)
            return dataset, None, kwargs
        return inputs.parameter_server_fit_inputs(x, y, kwargs, shard=self.options.shard_data, workers=self.num_workers)

    def _prepare_evaluate_inputs(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        return inputs.parameter_server_evaluate_inputs(x, y, kwargs)

    def _output_dirs(self) -> list[tuple[str, str]]:
        return [("`checkpoint_dir`", self.options.checkpoint_dir)] if self.options.checkpoint_dir else []

    def _fit_callbacks(self, callbacks: list, kwargs: dict) -> list:
        if self._fitting_keras_3:
            if self.options.checkpoint_dir:
                raise ArgumentValueError(with_fix(
                    "`checkpoint_dir` (tf-keras' ModelCheckpoint, read by the evaluator) does not take a Keras 3 "
                    "model", "make the strategy without checkpoint_dir, and add "
                    "keras.callbacks.ModelCheckpoint(..., save_weights_only=True) to the callbacks"))
            return callbacks  # keras3_parameter_server checks them: it calls them once an epoch
        refused = [type(cb).__name__ for cb in callbacks if upstream.refused_by_parameter_servers(cb)]
        if refused:
            raise ArgumentValueError(with_fix(
                f"ParameterServerStrategy cannot run batch-level callbacks, and these have batch "
                f"hooks: {', '.join(refused)}",
                "use epoch-level callbacks (for example TensorBoard(update_freq='epoch'), "
                "tfdist.callbacks.Throughput) or another strategy"))
        if self.options.checkpoint_dir:
            callbacks = callbacks + [tf_keras.callbacks.ModelCheckpoint(
                os.path.join(self.options.checkpoint_dir, "ckpt-{epoch}"), save_weights_only=True)]
        return callbacks

    def _evaluate_checkpoints(self, model: Any, x: Any, y: Any, fit_kwargs: dict) -> None:
        """The evaluator's ``fit``: evaluate each new checkpoint until the chief has finished."""
        if not self.options.checkpoint_dir:
            raise ParameterServerError(with_fix(
                "the evaluator task needs `checkpoint_dir=` (the same on every task) to find the "
                "chief's checkpoints", "make_strategy('parameter_server', checkpoint_dir='...')"))
        validation = fit_kwargs.get("validation_data")
        data = validation if validation is not None else ((x, y) if y is not None else x)
        if isinstance(data, tuple):
            data = tf.data.Dataset.from_tensor_slices(data).batch(
                int(fit_kwargs.get("batch_size") or inputs.DEFAULT_BATCH_SIZE))
        lifecycle.exit_when_chief_leaves(self.chief_address, self.options.chief_grace_seconds,
                                         self.options.chief_startup_timeout)
        tf_noise.summarise_unrestored_optimizer_state()  # one line, not one per checkpoint and slot
        report = tf_keras.callbacks.LambdaCallback(on_test_end=lambda logs: print(
            "[tfdist] evaluator: step %d %s" % (int(model.optimizer.iterations.numpy()),
                                                 " ".join(f"{k}={v:.4f}" for k, v in (logs or {}).items())),
            flush=True))
        evaluator = tf_keras.utils.SidecarEvaluator(
            model, data, self.options.checkpoint_dir, max_evaluations=fit_kwargs.get("epochs"),
            callbacks=[report, *(fit_kwargs.get("callbacks") or [])])
        evaluator.start()
