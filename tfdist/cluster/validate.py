"""Validation of cluster specs and TF_CONFIG objects: every problem at once, each with its fix.

Rules (the same for :func:`validate_cluster` and :func:`validate_tf_config`):

* task types are chief, worker, ps, evaluator; at most one chief and one evaluator;
* the training cluster has a chief or at least one worker;
* a cluster with ps tasks (ParameterServerStrategy) needs a chief, which runs the coordinator,
  and at least one worker;
* every address is ``HOST:PORT`` with a DNS name or IP address and a port 1-65535, and no two
  tasks share an address;
* in TF_CONFIG the evaluator is never in ``cluster`` (tensorflow/tensorflow#46169), and ``task``
  names a task of the cluster (the evaluator's index is 0).

>>> validate_tf_config('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}')
[]
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tfdist.cluster.errors import ClusterConfigError, Problem
from tfdist.cluster.spec import (
    CHIEF,
    EVALUATOR,
    PS,
    TASK_TYPES,
    TRAINING_TASK_TYPES,
    WORKER,
    Address,
    ClusterSpec,
    _kind,
    address_problems,
    endpoint_keys,
    parse_task_lists,
    too_many_tasks,
)
from tfdist.cluster.errors import field_name, shown
from tfdist.cluster.limits import MAX_TASKS
from tfdist.cluster.parsing import decode, parse_json

__all__ = ["ClusterConfigError", "Problem", "check", "validate_cluster", "validate_tf_config", "warnings_for"]

#: Top-level keys of TF_CONFIG that TensorFlow reads.
TF_CONFIG_KEYS = ("cluster", "task", "environment", "rpc_layer")
TASK_KEYS = ("type", "index")
#: The only ``rpc_layer`` tfdist accepts: TensorFlow's servers speak gRPC unless built with others.
RPC_LAYER = "grpc"
_TASK_EXAMPLE = '"task": {"type": "worker", "index": 0}'
_OBJECT_EXAMPLE = '{"cluster": {...}, ' + _TASK_EXAMPLE + "}"
_ALL_INTERFACES = {"0.0.0.0", "::"}
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def validate_cluster(spec: ClusterSpec, prefix: str = "cluster") -> list[Problem]:
    """Every problem of a cluster spec (empty when it is valid); fields are named ``prefix.type[i]``."""
    return _task_list_problems({t: list(spec.addresses(t)) for t in TASK_TYPES}, prefix)


def check(spec: ClusterSpec) -> ClusterSpec:
    """Return `spec` unchanged, or raise ClusterConfigError with every problem of it."""
    problems = validate_cluster(spec)
    if problems:
        raise ClusterConfigError(problems)
    return spec


def validate_tf_config(obj: Any, source: str = "TF_CONFIG") -> list[Problem]:
    """Every problem of a TF_CONFIG, given as JSON text (str/bytes) or as the parsed object.

    The same checks as :meth:`tfdist.cluster.TFConfig.parse`, which raises instead of returning.
    """
    return read_tf_config(obj, source)[1]


def read_tf_config(obj: Any, source: str = "TF_CONFIG") -> tuple[Mapping[str, Any] | None, list[Problem]]:
    """The parsed TF_CONFIG object and every problem of it (the one implementation behind
    :func:`validate_tf_config` and ``TFConfig.parse``); the object is None when it cannot be read."""
    if isinstance(obj, (str, bytes, bytearray)):
        try:
            text = decode(obj, source)
            if not text.strip():
                return None, [Problem(source, "is empty", f"set it to a JSON object: {_OBJECT_EXAMPLE}")]
            obj = parse_json(text, source)
        except ClusterConfigError as exc:
            return None, exc.problems
    if not isinstance(obj, Mapping):
        return None, [Problem(source, f"must be a JSON object, got {_kind(obj)}",
                              f"write it as {_OBJECT_EXAMPLE}")]
    problems: list[Problem] = []
    stray = [key for key in obj if key in TASK_TYPES] if "cluster" not in obj else []
    for key in obj:
        if key not in TF_CONFIG_KEYS and key not in stray:
            problems.append(Problem(field_name("TF_CONFIG", key),
                                    f"unknown key {shown(key)}; TensorFlow reads {', '.join(TF_CONFIG_KEYS)}",
                                    f"remove {shown(key)} or fix its spelling"))
    for key in ("environment", "rpc_layer"):
        if key in obj and not isinstance(obj[key], str):
            fix = f'write it as "{key}": "grpc"' if key == "rpc_layer" else f"remove {key!r}"
            problems.append(Problem(key, f"must be a string, got {_kind(obj[key])}", fix))
    rpc_layer = obj.get("rpc_layer")
    if isinstance(rpc_layer, str) and rpc_layer != RPC_LAYER:
        problems.append(Problem("rpc_layer", f"is {shown(rpc_layer)}; tfdist supports only {RPC_LAYER!r} "
                                "(the "
                                "layer TensorFlow's servers speak by default)",
                                f'remove "rpc_layer" or write "rpc_layer": "{RPC_LAYER}"'))
    if "cluster" not in obj:
        if stray:
            problems.append(Problem("cluster", f"TF_CONFIG has no 'cluster', so TensorFlow reads an empty "
                                    f"cluster; the task lists {', '.join(map(repr, stray))} must go under "
                                    '"cluster"', 'write {"cluster": {"worker": [...], ...}, "task": {...}}'))
        else:
            problems.append(Problem("cluster", "TF_CONFIG has no 'cluster'",
                                    'add "cluster": {"worker": ["host:port", ...]}'))
        lists: dict[str, list[Address | None]] = {}
    else:
        lists, found = parse_task_lists(obj["cluster"], "cluster", allow_evaluator=False)
        problems += found
        problems += _task_list_problems(lists, "cluster", structure=isinstance(obj["cluster"], Mapping))
    problems += _task_problems(obj.get("task"), "task" in obj, lists)
    return obj, problems


def warnings_for(spec: ClusterSpec) -> list[str]:
    """Advice that does not make the spec invalid: all-interface hosts, loopback mixed with remote hosts."""
    warnings = []
    for task_type, index in spec.tasks():
        address = spec.address_of(task_type, index)
        if address.host in _ALL_INTERFACES:
            warnings.append(f"{task_type}:{index} uses {address}: listening on all interfaces exposes the "
                            "cluster to the network, and TensorFlow's gRPC runtime has no authentication; "
                            "fix: use the host's private address")
    hosts = {spec.address_of(t, i).host for t, i in spec.tasks()}
    loopback = sorted(hosts & _LOOPBACK)
    remote = sorted(hosts - _LOOPBACK - _ALL_INTERFACES)
    if loopback and remote:
        warnings.append(f"the cluster mixes loopback hosts ({', '.join(loopback)}) with other hosts "
                        f"({', '.join(remote)}); tasks on other machines cannot reach a loopback address; "
                        "fix: use every host's network name")
    return warnings


def _task_list_problems(lists: Mapping[str, Sequence[Address | None]], prefix: str,
                        structure: bool = True) -> list[Problem]:
    """Counts, role rules, address validity and duplicates; None entries were already reported."""
    problems: list[Problem] = []
    seen: dict[tuple[str, int], str] = {}
    for task_type in TASK_TYPES:
        for i, address in enumerate(lists.get(task_type, ())):
            field = f"{prefix}.{task_type}[{i}]"
            if address is None:
                continue
            found = address_problems(address, field)
            problems += found
            if found:
                continue
            keys = endpoint_keys(address)
            other = next((seen[key] for key in keys if key in seen), None)
            if other is not None:
                problems.append(Problem(field, f"{shown(str(address))} is also the address of {other}; "
                                        "every task needs its own HOST:PORT",
                                        "give each task a different port or host"))
            for key in keys:
                seen.setdefault(key, field)
    if not structure:
        return problems
    counts = {t: len(lists.get(t, ())) for t in TASK_TYPES}
    if sum(counts.values()) > MAX_TASKS and max(counts.values()) <= MAX_TASKS:  # else reported per list
        problems.append(too_many_tasks(prefix, sum(counts.values())))
    for task_type in (CHIEF, EVALUATOR):
        if counts[task_type] > 1:
            fix = "keep one chief and make the others workers" if task_type == CHIEF else "keep one evaluator"
            message = f"has {counts[task_type]} tasks; a cluster has at most one {task_type}"
            problems.append(Problem(f"{prefix}.{task_type}", message, fix))
    if counts[PS]:
        if not counts[CHIEF]:
            problems.append(Problem(f"{prefix}.{CHIEF}", "a cluster with ps tasks needs a chief: "
                                    "ParameterServerStrategy runs its coordinator as the chief",
                                    "add one chief task"))
        if not counts[WORKER]:
            problems.append(Problem(f"{prefix}.{WORKER}", "a cluster with ps tasks needs at least one worker",
                                    "add a worker task"))
    elif not counts[CHIEF] and not counts[WORKER]:
        problems.append(Problem(prefix, "the cluster has no chief and no worker",
                                "add at least one worker (or a chief)"))
    return problems


def _task_problems(task: Any, present: bool, lists: Mapping[str, Sequence[Address | None]]) -> list[Problem]:
    """Problems of TF_CONFIG's ``task``: present, a known type, an integer index of an existing task."""
    if not present:
        return [Problem("task", "TF_CONFIG has no 'task'", f"add {_TASK_EXAMPLE}")]
    if not isinstance(task, Mapping):
        return [Problem("task", f"must be an object, got {_kind(task)}", f"write it as {_TASK_EXAMPLE}")]
    problems = [Problem(field_name("task", key), f"unknown key {shown(key)}; the task has only 'type' and "
                        "'index'", f"remove {shown(key)}") for key in task if key not in TASK_KEYS]
    task_type, index = task.get("type"), task.get("index")
    if "type" not in task:
        problems.append(Problem("task.type", "the task has no 'type'",
                                f"add \"type\": one of {', '.join(TASK_TYPES)}"))
    elif task_type not in TASK_TYPES:
        fix = "use 'chief'" if task_type == "master" else f"use one of {', '.join(TASK_TYPES)}"
        problems.append(Problem("task.type", f"unknown task type {shown(task_type)}", fix))
        task_type = None
    if "index" not in task:
        problems.append(Problem("task.index", "the task has no 'index'", 'add "index": 0'))
        return problems
    if isinstance(index, bool) or not isinstance(index, int):
        fix = f'write the index as a number: "index": {index}' \
            if isinstance(index, str) and index.isascii() and index.isdigit() and len(index) <= 18 \
            else 'use a whole number such as "index": 0'
        problems.append(Problem("task.index", f"must be an integer, got {_kind(index)}", fix))
        return problems
    shown_index = shown(index)
    if task_type == EVALUATOR:
        if index != 0:
            problems.append(Problem("task.index", f"is {shown_index}; the evaluator's index is always 0",
                                    'use "index": 0'))
    elif task_type in TRAINING_TASK_TYPES:
        count = len(lists.get(task_type, ()))
        if count == 0:
            problems.append(Problem("task.type", f"is {task_type!r} but cluster has no {task_type!r} tasks",
                                    f"add the task to cluster.{task_type} or fix the type"))
        elif not 0 <= index < count:
            problems.append(Problem("task.index", f"is {shown_index}, but cluster.{task_type} has {count} "
                                    "task(s), "
                                    f"indices 0-{count - 1}", f"use an index between 0 and {count - 1}"))
    return problems
