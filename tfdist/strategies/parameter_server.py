"""tf.distribute ParameterServerStrategy: a coordinator (chief), workers and parameter servers.

Every task runs the same script. ``make_strategy("parameter_server")``:

* on ``ps`` and ``worker`` tasks starts a ``tf.distribute.Server`` and blocks; the process exits
  0 once the chief has gone (it trained, or it was stopped), so no server is left behind;
* on the ``evaluator`` returns a strategy whose ``fit`` evaluates the chief's checkpoints;
* on the ``chief`` returns the strategy; ``strategy.fit`` runs ``Model.fit`` through the
  ClusterCoordinator.

Variables are placed on the ps tasks; with ``shards=N`` or ``min_shard_bytes=B`` large ones
(embedding tables, big kernels) are split across them: hybrid data + model parallelism.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import re
import socket
import sys
import threading
import time
from typing import Any, Mapping

import tensorflow as tf

from tfdist.cluster.tf_config import GRPC_FAIL_FAST_ENV as GRPC_FAIL_FAST
from tfdist.strategies.base import DEFAULT_BATCH_SIZE, DistributedStrategy, StrategyOptions, require_number
from tfdist.strategies.registry import STRATEGIES

log = logging.getLogger("tfdist")

# Chosen by measurement (README, "steps_per_execution"): 10 steps per dispatch makes updates
# staler, and asynchronous Adam on the embedding test model diverged in 3 of 5 runs with 10
# (Adagrad: 0 of 3), so batching dispatches is opt-in.
DEFAULT_STEPS_PER_EXECUTION = 1
_SERVER_TASKS = ("ps", "worker")


class ParameterServerError(RuntimeError):
    """A parameter-server job cannot go on; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class ParameterServerOptions(StrategyOptions):
    """Options of the parameter-server backend.

    shards: split every variable into exactly this many shards across the ps tasks.
    min_shard_bytes: split variables into shards of at least this size (at most one per ps).
    steps_per_execution: steps per coordinator dispatch when compile() left it at 1
        (default DEFAULT_STEPS_PER_EXECUTION = 1: no batching; see the README's figures).
    checkpoint_dir: the chief saves weights here every epoch; the evaluator task evaluates them.
    cluster: an explicit cluster dict ({"chief": [...], "worker": [...], "ps": [...]}) instead
        of TF_CONFIG; then task_type and task_index say which task this process is.
    chief_grace_seconds: how long servers wait after the chief has gone before they exit.
    chief_startup_timeout: how long servers wait for the chief to appear at all.
    """

    scale_lr: bool = False  # asynchronous: each worker applies its own gradients
    shards: int | None = None
    min_shard_bytes: int | None = None
    steps_per_execution: int | None = None
    checkpoint_dir: str | None = None
    cluster: Mapping[str, Any] | None = None
    task_type: str | None = None
    task_index: int = 0
    chief_grace_seconds: float = 5.0
    chief_startup_timeout: float = 600.0

    def __post_init__(self) -> None:
        if self.shards is not None and self.min_shard_bytes is not None:
            raise ValueError("pass either `shards` or `min_shard_bytes`, not both; fix: `shards=N` "
                             "splits every variable, `min_shard_bytes=B` only the large ones")
        for name in ("shards", "min_shard_bytes", "steps_per_execution"):
            if getattr(self, name) is not None:
                require_number(name, getattr(self, name), minimum=1, integer=True)
        require_number("chief_grace_seconds", self.chief_grace_seconds, minimum=0)
        require_number("chief_startup_timeout", self.chief_startup_timeout, minimum=0)
        if self.cluster is not None and self.task_type is None:
            raise ValueError("an explicit `cluster` needs `task_type` (and `task_index`) to say "
                             "which task this process is")


def _resolver(options: ParameterServerOptions) -> tf.distribute.cluster_resolver.ClusterResolver:
    from tfdist.strategies.cluster_config import checked_tf_config

    if options.cluster is not None:
        config = {"cluster": {k: list(v) for k, v in options.cluster.items()},
                  "task": {"type": options.task_type, "index": options.task_index}}
    else:
        raw = os.environ.get("TF_CONFIG", "")
        if not raw.strip():
            raise ParameterServerError(
                "make_strategy('parameter_server') needs a cluster, and TF_CONFIG is not set; fix: "
                "launch locally with `tfdist launch --workers 2 --ps 1 -- python script.py`, set "
                "TF_CONFIG on every task (`tfdist tf-config --help`), or pass cluster=..., task_type=...")
        config = raw
    config = checked_tf_config(config)
    cluster = config["cluster"]
    if not cluster.get("ps") or not cluster.get("worker") or not cluster.get("chief"):
        raise ParameterServerError(
            f"ParameterServerStrategy needs a chief, workers and ps tasks; the cluster has "
            f"{ {k: len(v) for k, v in cluster.items()} }; fix: add the missing tasks, e.g. "
            "`tfdist launch --workers 2 --ps 1`")
    task = config["task"]
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type=task["type"], task_id=int(task["index"]),
        rpc_layer="grpc")


def _partitioner(options: ParameterServerOptions, num_ps: int) -> Any:
    partitioners = tf.distribute.experimental.partitioners
    if options.shards is not None:
        return partitioners.FixedShardsPartitioner(num_shards=options.shards)
    if options.min_shard_bytes is not None:
        return partitioners.MinSizePartitioner(min_shard_bytes=options.min_shard_bytes, max_shards=num_ps)
    return None


def _reachable(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_chief_to_finish(chief_address: str, grace: float, startup_timeout: float,
                             poll: float = 1.0) -> bool:
    """Block until the chief has come and gone; ``False`` if it never came within the timeout."""
    deadline = time.monotonic() + startup_timeout
    while not _reachable(chief_address):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    gone_since: float | None = None
    while True:
        time.sleep(poll)
        if _reachable(chief_address):
            gone_since = None
        elif gone_since is None:
            gone_since = time.monotonic()
        elif time.monotonic() - gone_since >= grace:
            return True


@STRATEGIES.register("parameter_server",
                     "tf.distribute ParameterServerStrategy: coordinator, workers and ps tasks")
class ParameterServerStrategy(DistributedStrategy):
    """Asynchronous training: workers pull variables from ps tasks and push their updates.

    The same script runs on every task; see the module docstring for what each task does.
    """

    Options = ParameterServerOptions
    options: ParameterServerOptions

    def __init__(self, options: ParameterServerOptions) -> None:
        super().__init__(options)
        os.environ.setdefault(GRPC_FAIL_FAST, "use_caller")  # TF's requirement for PS fault tolerance
        self._resolver = _resolver(options)
        self.task_type = self._resolver.task_type
        self.task_index = self._resolver.task_id
        cluster = self._resolver.cluster_spec().as_dict()
        self._chief_address = cluster["chief"][0]
        self._num_workers = len(cluster["worker"])
        self._num_ps = len(cluster["ps"])
        if self.task_type in _SERVER_TASKS:
            self._serve()  # never returns
        self._strategy: tf.distribute.ParameterServerStrategy | None = None
        if self.task_type == "chief":
            self._strategy = tf.distribute.ParameterServerStrategy(
                self._resolver, variable_partitioner=_partitioner(options, self._num_ps))
        elif self.task_type != "evaluator":
            raise ParameterServerError(f"task type {self.task_type!r} has no role in a parameter-server "
                                       "job; fix: use chief, worker, ps or evaluator")

    # --- servers ------------------------------------------------------------------------------
    def _serve(self) -> None:
        """Run this task's gRPC server until the chief has finished, then exit the process."""
        tf.distribute.Server(self._resolver.cluster_spec(), job_name=self.task_type,
                             task_index=self.task_index, protocol="grpc", start=True)
        print(f"[tfdist] {self.task_type}:{self.task_index} serving; waiting for the chief at "
              f"{self._chief_address}", file=sys.stderr, flush=True)
        finished = wait_for_chief_to_finish(self._chief_address, self.options.chief_grace_seconds,
                                            self.options.chief_startup_timeout)
        if not finished:
            log.error("%s:%d: the chief at %s did not start within %.0fs; exiting", self.task_type,
                      self.task_index, self._chief_address, self.options.chief_startup_timeout)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0 if finished else 1)  # the gRPC server has no clean shutdown in TF 2

    # --- identity -----------------------------------------------------------------------------
    @property
    def tf_strategy(self) -> tf.distribute.Strategy | None:
        return self._strategy

    @property
    def is_chief(self) -> bool:
        return self.task_type == "chief"

    @property
    def is_evaluator(self) -> bool:
        return self.task_type == "evaluator"

    @property
    def rank(self) -> int:
        return 0 if self.is_chief else 1 + self.task_index

    @property
    def num_workers(self) -> int:
        return self._num_workers

    @property
    def num_ps(self) -> int:
        return self._num_ps

    @property
    def num_replicas_in_sync(self) -> int:
        return self._strategy.num_replicas_in_sync if self._strategy is not None else 1

    @property
    def lr_scale(self) -> float:
        return 1.0

    # --- training -----------------------------------------------------------------------------
    def fit(self, model: Any, x: Any = None, y: Any = None, **fit_kwargs: Any) -> Any:
        if self.is_evaluator:
            return self._evaluate_checkpoints(model, x, y, fit_kwargs)
        self._check_model(model)
        steps = self._default_steps_per_execution()
        if steps > 1 and getattr(model, "_steps_per_execution", None) is not None \
                and int(model._steps_per_execution.numpy()) == 1:
            model._configure_steps_per_execution(steps)
        try:
            return super().fit(model, x, y, **fit_kwargs)
        except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError) as exc:
            found = re.search(r"/job:(ps|worker|chief)/replica:\d+/task:(\d+)", str(exc))
            lost = f"{found.group(1)}:{found.group(2)}" if found else "a task"
            raise ParameterServerError(
                f"the parameter-server job lost {lost} ({type(exc).__name__}); a ps task holds "
                "variables that training cannot do without, so training stops. "
                "Fix: restart the whole cluster; with tf.keras.callbacks.BackupAndRestore in the "
                "callbacks it resumes from the last finished epoch") from exc

    def _default_steps_per_execution(self) -> int:
        if self.options.steps_per_execution is not None:
            return self.options.steps_per_execution
        return DEFAULT_STEPS_PER_EXECUTION

    def _prepare_fit_inputs(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        from tfdist.strategies.data import is_dataset, num_examples

        if isinstance(x, tf.keras.utils.experimental.DatasetCreator) or (callable(x) and not is_dataset(x)):
            creator = x if isinstance(x, tf.keras.utils.experimental.DatasetCreator) else \
                tf.keras.utils.experimental.DatasetCreator(x)
            self._require_steps(kwargs, "a dataset_fn")
            return creator, y, kwargs
        batch_size = kwargs.pop("batch_size", None)
        unbatched_datasets = is_dataset(x) and batch_size is not None  # tfdist's batch_size rule
        if is_dataset(x):
            dataset = x.batch(int(batch_size)) if batch_size is not None else x
            if kwargs.get("steps_per_epoch") is None:
                cardinality = int(dataset.cardinality().numpy())
                if cardinality < 1:
                    self._require_steps(kwargs, "a dataset whose length is unknown or infinite")
                kwargs["steps_per_epoch"] = cardinality
            x = dataset if dataset.cardinality() == tf.data.INFINITE_CARDINALITY else dataset.repeat()
        elif x is not None:
            batch_size = int(batch_size or DEFAULT_BATCH_SIZE)
            arrays = (x,) if y is None else (x, y)
            if kwargs.get("sample_weight") is not None:
                arrays = arrays + (kwargs.pop("sample_weight"),)
            examples = num_examples(arrays)
            if kwargs.get("steps_per_epoch") is None:
                kwargs["steps_per_epoch"] = -(-examples // batch_size)
            shuffle = kwargs.pop("shuffle", True)
            x, y = self._array_dataset_creator(arrays, batch_size, shuffle), None
        validation = kwargs.get("validation_data")
        if validation is not None:
            kwargs["validation_data"], steps = _finite_eval_dataset(
                validation, batch_size, kwargs.get("validation_steps"), batch_datasets=unbatched_datasets)
            kwargs["validation_steps"] = steps
        return x, y, kwargs

    def _prepare_evaluate_inputs(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        data = x if y is None else (x, y)
        batch_size = kwargs.pop("batch_size", None)
        dataset, kwargs["steps"] = _finite_eval_dataset(data, batch_size, kwargs.get("steps"),
                                                        batch_datasets=batch_size is not None)
        return dataset, None, kwargs

    @staticmethod
    def _require_steps(kwargs: dict, what: str) -> None:
        if kwargs.get("steps_per_epoch") is None:
            raise ValueError(
                f"ParameterServerStrategy trains on {what} without knowing where an epoch ends; "
                "fix: pass `steps_per_epoch=N` to strategy.fit (N = examples per epoch / batch size)")

    @staticmethod
    def _array_dataset_creator(arrays: tuple, batch_size: int, shuffle: bool) -> Any:
        """Each worker reads its own shard of the arrays, shuffled, repeated, batched."""
        def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
            dataset = tf.data.Dataset.from_tensor_slices(arrays).shard(
                input_context.num_input_pipelines, input_context.input_pipeline_id)
            if shuffle:
                dataset = dataset.shuffle(4096)
            return dataset.repeat().batch(batch_size).prefetch(2)

        return tf.keras.utils.experimental.DatasetCreator(dataset_fn)

    def _fit_callbacks(self, callbacks: list, kwargs: dict) -> list:
        refused = [type(cb).__name__ for cb in callbacks if _has_batch_hooks(cb)]
        if refused:
            raise ValueError(
                f"ParameterServerStrategy cannot run batch-level callbacks, and these have batch "
                f"hooks: {', '.join(refused)}; fix: use epoch-level callbacks (for example "
                "TensorBoard(update_freq='epoch'), tfdist.callbacks.Throughput) or another strategy")
        if self.options.checkpoint_dir:
            callbacks = callbacks + [tf.keras.callbacks.ModelCheckpoint(
                os.path.join(self.options.checkpoint_dir, "ckpt-{epoch}"), save_weights_only=True)]
        return callbacks

    def _evaluate_checkpoints(self, model: Any, x: Any, y: Any, fit_kwargs: dict) -> None:
        """The evaluator's ``fit``: evaluate each new checkpoint until the chief has finished."""
        if not self.options.checkpoint_dir:
            raise ValueError("the evaluator task needs `checkpoint_dir=` (the same on every task) to "
                             "find the chief's checkpoints; fix: make_strategy('parameter_server', "
                             "checkpoint_dir='...')")
        validation = fit_kwargs.get("validation_data")
        data = validation if validation is not None else ((x, y) if y is not None else x)
        if isinstance(data, tuple):
            data = tf.data.Dataset.from_tensor_slices(data).batch(
                int(fit_kwargs.get("batch_size") or DEFAULT_BATCH_SIZE))

        def stop_when_chief_leaves() -> None:
            finished = wait_for_chief_to_finish(self._chief_address, self.options.chief_grace_seconds,
                                                self.options.chief_startup_timeout)
            if finished:
                log.warning("evaluator: the chief has finished; exiting")
            else:
                log.error("evaluator: the chief at %s did not start within %.0fs; exiting",
                          self._chief_address, self.options.chief_startup_timeout)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0 if finished else 1)

        threading.Thread(target=stop_when_chief_leaves, daemon=True).start()
        report = tf.keras.callbacks.LambdaCallback(on_test_end=lambda logs: print(
            "[tfdist] evaluator: step %d %s" % (int(model.optimizer.iterations.numpy()),
                                                 " ".join(f"{k}={v:.4f}" for k, v in (logs or {}).items())),
            flush=True))
        evaluator = tf.keras.utils.SidecarEvaluator(
            model, data, self.options.checkpoint_dir, max_evaluations=fit_kwargs.get("epochs"),
            callbacks=[report, *(fit_kwargs.get("callbacks") or [])])
        evaluator.start()


def _finite_eval_dataset(data: Any, batch_size: int | None, steps: int | None,
                         batch_datasets: bool) -> tuple[tf.data.Dataset, int]:
    """An evaluation dataset the coordinator can read from any worker: repeated, with a step count.

    Arrays are batched by ``batch_size`` (default 32); a dataset only when ``batch_datasets``
    says it holds single examples.

    Each worker reads its own copy, so the evaluated batches are the first ``steps`` batches
    handed out across workers: an estimate, exact when one worker evaluates.
    """
    from tfdist.strategies.data import is_dataset

    if is_dataset(data):
        dataset = data.batch(int(batch_size)) if batch_datasets and batch_size is not None else data
    else:
        dataset = tf.data.Dataset.from_tensor_slices(tuple(data) if isinstance(data, list) else data)
        dataset = dataset.batch(int(batch_size or DEFAULT_BATCH_SIZE))
    if steps is None:
        steps = int(dataset.cardinality().numpy())
        if steps < 1:
            raise ValueError("the evaluation data has an unknown or infinite length; fix: pass "
                             "`validation_steps=` (in fit) or `steps=` (in evaluate)")
    return dataset.repeat(), steps


def _has_batch_hooks(callback: Any) -> bool:
    if getattr(callback, "_supports_tf_logs", False):
        return False
    return bool(callback._implements_train_batch_hooks() or callback._implements_test_batch_hooks()
                or callback._implements_predict_batch_hooks())
