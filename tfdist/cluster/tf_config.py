"""TF_CONFIG: the one parsed, frozen :class:`TFConfig`, and a fresh plain dict per task of a cluster.

>>> from tfdist.cluster.spec import Address, ClusterSpec
>>> spec = ClusterSpec(worker=[Address("h1", 2222), Address("h2", 2222)])
>>> tf_config_for(spec, "worker", 1)
{'cluster': {'worker': ['h1:2222', 'h2:2222']}, 'task': {'type': 'worker', 'index': 1}}
>>> TFConfig.parse(tf_config_for(spec, "worker", 1)).rank
1
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tfdist.cluster.ascii_input import ascii_problem
from tfdist.cluster.errors import ClusterConfigError, Problem, shown
from tfdist.cluster.limits import MAX_DIGITS, MAX_EVERY_TASK, limit_text
from tfdist.cluster.spec import CHIEF, PS, TASK_TYPES, WORKER, Address, ClusterSpec
from tfdist.cluster.validate import read_tf_config

#: Environment variable read by tf.distribute.cluster_resolver.TFConfigClusterResolver.
TF_CONFIG_ENV = "TF_CONFIG"
#: gRPC setting every task of a fault-tolerant ParameterServerStrategy cluster needs ("use_caller").
GRPC_FAIL_FAST_ENV = "GRPC_FAIL_FAST"
#: TensorFlow reads extra gRPC channel arguments from this variable ("name=value,name=value").
GRPC_OPTIONS_ENV = "TF_GRPC_DEFAULT_OPTIONS"
#: Keepalive pings on every gRPC channel of a task across hosts: a peer whose link is cut answers
#: nothing (no reset, unlike a dead process on a live host), and without pings an RPC to it waits
#: for TCP to give up (about 15 minutes). With them, the RPC fails after 10-20 s, so the
#: coordinator goes on without a lost worker, and the chief fails naming a lost ps. Pings are
#: sent only while an RPC is in flight (gRPC's default), so an idle server is not disturbed.
GRPC_KEEPALIVE = "grpc.keepalive_time_ms=10000,grpc.keepalive_timeout_ms=10000"
_TASK_FIX = "write the task as TYPE:INDEX, e.g. 'worker:1', with TYPE one of " + ", ".join(TASK_TYPES)


def merge_grpc_options(current: str | None, defaults: str = GRPC_KEEPALIVE) -> str:
    """``current`` (a TF_GRPC_DEFAULT_OPTIONS value, ``name=value,name=value``) with every option of
    ``defaults`` added that it does not set itself: the user's own options and values win, and
    nothing of theirs is dropped.

    >>> merge_grpc_options("grpc.max_receive_message_length=-1,grpc.keepalive_time_ms=30000")
    'grpc.max_receive_message_length=-1,grpc.keepalive_time_ms=30000,grpc.keepalive_timeout_ms=10000'
    """
    entries = [entry for entry in (current or "").split(",") if entry.strip()]
    names = {entry.split("=", 1)[0].strip() for entry in entries}
    entries += [entry for entry in defaults.split(",") if entry.split("=", 1)[0].strip() not in names]
    return ",".join(entries)


def grpc_task_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The gRPC variables a task of a parameter-server cluster needs, given its environment
    ``environ``: ``GRPC_FAIL_FAST=use_caller`` unless set, and the keepalive options merged into
    TF_GRPC_DEFAULT_OPTIONS (``merge_grpc_options``). Set by the launcher for every task and by the
    tasks themselves (``tfdist.strategies.parameter_server``) before their first channel.

    >>> grpc_task_env({"GRPC_FAIL_FAST": "true"})["GRPC_FAIL_FAST"]
    'true'
    """
    return {GRPC_FAIL_FAST_ENV: environ.get(GRPC_FAIL_FAST_ENV, "use_caller"),
            GRPC_OPTIONS_ENV: merge_grpc_options(environ.get(GRPC_OPTIONS_ENV))}


def task_name(task_type: str, index: int) -> str:
    """The ``"type:index"`` key used by :func:`all_tf_configs` and the CLI's ``--task``."""
    return f"{task_type}:{index}"


def parse_task(text: str, field: str = "task") -> tuple[str, int]:
    """Parse ``"worker:1"`` into ``("worker", 1)``; raise ClusterConfigError naming `field`.

    >>> parse_task("ps:0")
    ('ps', 0)
    """
    if not isinstance(text, str) or text.count(":") != 1:
        raise ClusterConfigError([Problem(field, f"{shown(text)} is not TYPE:INDEX", _TASK_FIX)])
    task_type, index = text.split(":")
    problems = []
    if task_type not in TASK_TYPES:
        problems.append(Problem(field, f"{shown(text)} has unknown task type {shown(task_type)}", _TASK_FIX))
    in_index, in_text = ascii_problem(index), ascii_problem(text, field, "'worker:1'")
    if in_index is not None and in_text is not None:  # int() would read '١' as 1
        problems.append(Problem(field, f"{shown(text)} has index {shown(index)}, which is not a whole number: "
                                f"it {in_index.message}", in_text.fix))
    elif not re.fullmatch(r"[0-9]{1,%d}" % MAX_DIGITS, index):
        problems.append(Problem(field, f"{shown(text)} has index {shown(index)}, which is not a whole number "
                                f">= 0 of at most {MAX_DIGITS} digits", _TASK_FIX))
    if problems:
        raise ClusterConfigError(problems)
    return task_type, int(index)


def check_every_task(spec: ClusterSpec, field: str = "tasks") -> None:
    """Raise ClusterConfigError when `spec` has more than MAX_EVERY_TASK tasks to write at once."""
    count = len(spec.tasks())
    if count > MAX_EVERY_TASK:
        raise ClusterConfigError([Problem(
            field, f"writing the TF_CONFIG of all {limit_text(count)} tasks at once is refused above "
            f"{limit_text(MAX_EVERY_TASK)} tasks (each holds the whole cluster, so the output grows with the "
            "square of its size)",
            "write one task's TF_CONFIG at a time (--task TYPE:INDEX, or tf_config_for)")])


def _task_text(task_type: Any, index: Any) -> str:
    """``worker:1`` for a plain type and index, else both echoed safely."""
    if isinstance(task_type, str) and task_type.isprintable() and len(task_type) <= 40 \
            and isinstance(index, int) and abs(index) < 10 ** 18:
        return task_name(task_type, index)
    return f"{shown(task_type)}:{shown(index)}"


def tf_config_for(spec: ClusterSpec, task_type: str, index: int) -> dict[str, Any]:
    """The TF_CONFIG of one task; raises ClusterConfigError when the task is not in `spec`."""
    spec.address_of(task_type, index)  # raises for a task that is not in the cluster
    return {"cluster": spec.training_cluster(), "task": {"type": task_type, "index": index}}


def all_tf_configs(spec: ClusterSpec) -> dict[str, dict[str, Any]]:
    """TF_CONFIG of every task, keyed ``"type:index"`` in the order chief, worker, ps, evaluator.

    Refused (ClusterConfigError) above MAX_EVERY_TASK tasks: the result grows with the square of the
    cluster; ask for one task with :func:`tf_config_for` instead.
    """
    check_every_task(spec)
    return {task_name(t, i): tf_config_for(spec, t, i) for t, i in spec.tasks()}


@dataclass(frozen=True)
class TFConfig:
    """One TF_CONFIG, validated once and read everywhere (who is chief, rank, addresses).

    `cluster` is read-only and holds the addresses exactly as TensorFlow's TFConfigClusterResolver
    reads them. Build one with :meth:`parse` (text or a mapping) or :meth:`from_environ`:

    >>> config = TFConfig.parse('{"cluster": {"chief": ["h0:1"], "worker": ["h1:1", "h2:1"]},'
    ...                         ' "task": {"type": "worker", "index": 1}}')
    >>> (config.is_chief, config.rank, config.num_training_tasks, config.chief_address)
    (False, 2, 3, 'h0:1')
    """

    cluster: Mapping[str, tuple[str, ...]]
    task_type: str | None
    task_index: int
    rpc_layer: str | None = None
    environment: str | None = None

    def __post_init__(self) -> None:
        frozen = {str(t): tuple(addresses) for t, addresses in self.cluster.items()}
        object.__setattr__(self, "cluster", MappingProxyType(frozen))

    def __hash__(self) -> int:
        return hash((tuple(self.cluster.items()), self.task_type, self.task_index, self.rpc_layer,
                     self.environment))

    @classmethod
    def parse(cls, raw: str | bytes | Mapping[str, Any], source: str = TF_CONFIG_ENV) -> TFConfig:
        """Validate a TF_CONFIG (JSON text or a parsed mapping); raise ClusterConfigError listing every
        problem (the same checks as :func:`tfdist.cluster.validate_tf_config`)."""
        obj, problems = read_tf_config(raw, source)
        if problems:
            raise ClusterConfigError(problems)
        assert obj is not None  # read_tf_config returns problems whenever it returns no object
        task = obj["task"]
        return cls(cluster={t: tuple(obj["cluster"][t]) for t in obj["cluster"]}, task_type=task["type"],
                   task_index=task["index"], rpc_layer=obj.get("rpc_layer"),
                   environment=obj.get("environment"))

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> TFConfig | None:
        """The TF_CONFIG of `environ` (pass ``os.environ``); None when unset or blank. Never writes."""
        raw = environ.get(TF_CONFIG_ENV)
        if raw is None or not raw.strip():
            return None
        return cls.parse(raw, TF_CONFIG_ENV)

    @property
    def has_ps(self) -> bool:
        """The cluster has ps tasks (ParameterServerStrategy)."""
        return bool(self.cluster.get(PS))

    @property
    def has_chief(self) -> bool:
        return bool(self.cluster.get(CHIEF))

    @property
    def is_chief(self) -> bool:
        """The chief task, or worker 0 when the cluster has no chief (a TFConfig built without a task
        type counts as worker 0, the rule of TFConfigEnvironment)."""
        if self.has_chief:
            return self.task_type == CHIEF
        return self.task_type in (None, WORKER) and self.task_index == 0

    @property
    def rank(self) -> int:
        """Chief 0; worker i is i + 1 when a chief exists, else i; other task types their index."""
        if self.task_type == WORKER and self.has_chief:
            return self.task_index + 1
        return self.task_index

    @property
    def num_workers(self) -> int:
        return len(self.cluster.get(WORKER, ()))

    @property
    def num_ps(self) -> int:
        return len(self.cluster.get(PS, ()))

    @property
    def num_training_tasks(self) -> int:
        """Chief plus workers: the tasks that run the training loop."""
        return len(self.cluster.get(CHIEF, ())) + self.num_workers

    @property
    def chief_address(self) -> str | None:
        """``chief:0``'s address, else ``worker:0``'s; None for a cluster with neither."""
        for task_type in (CHIEF, WORKER):
            if self.cluster.get(task_type):
                return self.cluster[task_type][0]
        return None

    @property
    def workers_beside_chief(self) -> frozenset[int]:
        """The workers (by index) on ``chief:0``'s host, by the host part of their addresses; none when
        the cluster has no chief, or every worker is there (what the chief's work costs them, it
        then costs each alike). A parameter-server coordinator's dispatch takes CPU from these."""
        chiefs = self.cluster.get(CHIEF, ())
        if not chiefs:
            return frozenset()
        host = _host_of(chiefs[0])
        beside = frozenset(i for i, address in enumerate(self.cluster.get(WORKER, ())) if _host_of(address) == host)
        return frozenset() if len(beside) == self.num_workers else beside

    def address(self, task_type: str, index: int) -> str:
        """The address of one task of the cluster; ClusterConfigError naming the tasks when absent."""
        addresses = self.cluster.get(task_type, ())
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(addresses):
            names = ", ".join(f"{t}:{i}" for t, items in self.cluster.items() for i in range(len(items)))
            raise ClusterConfigError([Problem("task", f"{_task_text(task_type, index)} is not a task of "
                                              f"this cluster (its tasks: {names or 'none'})",
                                              "pick one of the listed tasks")])
        return addresses[index]

    def to_dict(self) -> dict[str, Any]:
        """A fresh plain dict, JSON-ready; optional keys only when set."""
        obj: dict[str, Any] = {"cluster": {t: list(items) for t, items in self.cluster.items()}}
        if self.task_type is not None:
            obj["task"] = {"type": self.task_type, "index": self.task_index}
        if self.rpc_layer is not None:
            obj["rpc_layer"] = self.rpc_layer
        if self.environment is not None:
            obj["environment"] = self.environment
        return obj


def _host_of(address: str) -> str:
    """The host of a task address, as names compare (host names are case-insensitive)."""
    return Address.parse(address).host.lower()
