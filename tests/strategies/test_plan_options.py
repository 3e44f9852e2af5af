"""Every option of every registered backend under a plan fuzzer (issue 34): a planned option value is
accepted exactly when the backend's own option checks accept it (the table below says what each takes),
and otherwise refused by resolve_plan with one PlanError naming the file, the option and the fix, before
anything is built. In-process: imports TensorFlow for the real options dataclasses; starts nothing."""
from __future__ import annotations

import json
import math
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

pytest.importorskip("tensorflow")

from tfdist.plan import PLAN_ENV, PlanError  # noqa: E402
from tfdist.strategies import STRATEGIES, build_options, load_backends  # noqa: E402
from tfdist.strategies.options import field_names  # noqa: E402
from tfdist.strategies.planning import resolve_plan  # noqa: E402

load_backends()
OPTION_TYPES = {name: STRATEGIES.get(name).Options for name in STRATEGIES.names()}


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _int(minimum: int, optional: bool = False) -> Callable[[Any], bool]:
    return lambda v: (optional and v is None) or (type(v) is int and v >= minimum)


def _number(minimum: float) -> Callable[[Any], bool]:
    return lambda v: type(v) in (int, float) and math.isfinite(v) and v >= minimum


def _never(v: Any) -> bool:  # says which task this is: the same plan reaches every task
    return False


#: What each option takes from a plan (JSON values), written from the options' documentation.
ACCEPTS: dict[str, dict[str, Callable[[Any], bool]]] = {
    "horovod": {
        "scale_lr": _bool, "shard_data": _bool,
        "compression": lambda v: v in ("none", "fp16", "powersgd") and type(v) is str,
        # alone (without compression="powersgd") only PowerSGD's defaults are taken
        "powersgd_rank": lambda v: type(v) is int and v == 4,
        "powersgd_start_iter": lambda v: type(v) is int and v == 10,
        "powersgd_min_compression_rate": lambda v: type(v) in (int, float) and v == 2,
        "backward_passes_per_step": _int(1), "average_gradients": _bool, "warmup_epochs": _number(0),
        "root_rank": _int(0), "pin_gpu": _bool, "elastic": _bool,
        "commit_every_batches": lambda v: type(v) is int and v == 0,  # more needs elastic as well
        "hierarchical_allreduce": _bool},
    "parameter_server": {
        "scale_lr": _bool, "shard_data": _bool, "shards": _int(1, optional=True),
        "min_shard_bytes": _int(1, optional=True), "steps_per_execution": _int(1, optional=True),
        "checkpoint_dir": lambda v: v is None or (type(v) is str and bool(v.strip())),
        "cluster": _never, "task_type": _never, "task_index": _never,
        "cluster_timeout": _number(0), "chief_grace_seconds": _number(0), "chief_startup_timeout": _number(0)},
    "multi_worker_mirrored": {
        "scale_lr": _bool, "shard_data": _bool,
        "communication": lambda v: type(v) is str and v in ("auto", "ring", "nccl"),
        # fp16 is a valid value (auto passes it to horovod); the strategy refuses it when built
        "compression": lambda v: v in ("none", "fp16", "powersgd") and type(v) is str,
        # alone (without compression="powersgd") only PowerSGD's defaults are taken, as on horovod
        "powersgd_rank": lambda v: type(v) is int and v == 4,
        "powersgd_start_iter": lambda v: type(v) is int and v == 10,
        "powersgd_min_compression_rate": lambda v: type(v) in (int, float) and v == 2},
    "mirrored": {"scale_lr": _bool,
                 "devices": lambda v: v is None or (type(v) is list and all(type(d) is str and d for d in v))},
    "single": {"scale_lr": _bool},
}

_TF_CONFIG_PS = {"cluster": {"chief": ["h0:1"], "worker": ["w0:1", "w1:1"], "ps": ["p0:1"]},
                 "task": {"type": "chief", "index": 0}}
_TF_CONFIG_WORKERS = {"cluster": {"worker": ["w0:1", "w1:1"]}, "task": {"type": "worker", "index": 0}}
#: backend -> (the run's environment, workers, ps)
RUNS = {
    "horovod": ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "0"}, 2, 0),
    "parameter_server": ({"TF_CONFIG": json.dumps(_TF_CONFIG_PS)}, 2, 1),
    "multi_worker_mirrored": ({"TF_CONFIG": json.dumps(_TF_CONFIG_WORKERS)}, 2, 0),
    "mirrored": ({}, 1, 0),
    "single": ({}, 1, 0),
}


def _plan(backend: str, options: dict, workers: int, ps: int) -> str:
    return json.dumps({"version": 1, "backend": backend, "variant": backend, "options": options,
                       "workers": workers, "ps": ps, "batch_size": 16, "predicted_examples_per_second": 100.0,
                       "predicted_step_ms": 320.0, "bottleneck": "compute", "explanation": "a test's"})


def _apply(backend: str, name: str, value: Any):
    environ, workers, ps = RUNS[backend]
    return resolve_plan(backend, {**environ, PLAN_ENV: _plan(backend, {name: value}, workers, ps)}, {},
                        OPTION_TYPES)


def test_the_table_is_every_option_of_every_registered_backend():
    assert {backend: sorted(options) for backend, options in ACCEPTS.items()} == {
        backend: sorted(field_names(options)) for backend, options in OPTION_TYPES.items()}
    assert set(RUNS) == set(OPTION_TYPES)


_TEXT = st.sampled_from(["", " ", "none", "fp16", "fp32", "auto", "ring", "nccl", "ckpt", "/gpu:0", "2", "true"]) \
    | st.text(max_size=5)
_SCALAR = (st.none() | st.booleans() | st.integers(min_value=-(10**17), max_value=10**17)
           | st.sampled_from([0, 1, 2, -1, 0.0, 1.0, 2.5, -0.5, 1e300]) | st.floats(allow_nan=False, allow_infinity=False)
           | _TEXT)
_JSON = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=2),
                     max_leaves=5)
#: Values some option takes, drawn half the time so that acceptance is exercised as much as refusal.
_LIKELY = st.sampled_from([True, False, None, 0, 1, 2, 7, 0.5, 30.0, "none", "fp16", "auto", "ring", "nccl",
                           "ckpt", "/tmp/ckpt", ["/cpu:0"], ["/gpu:0", "/gpu:1"], []])
_OPTIONS = [(backend, name) for backend, names in sorted(ACCEPTS.items()) for name in sorted(names)]


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(option=st.sampled_from(_OPTIONS), value=_LIKELY | _JSON)
def test_a_planned_value_is_accepted_exactly_when_the_backend_takes_it(option, value):
    backend, name = option
    event("accepted" if ACCEPTS[backend][name](value) else "refused")  # --hypothesis-show-statistics
    if ACCEPTS[backend][name](value):
        resolved = _apply(backend, name, value)
        assert resolved.options == {name: value}
        built = build_options(backend, resolved.options, auto=True)  # what make_strategy builds
        assert getattr(built, name) == value
        return
    with pytest.raises(PlanError) as info:
        _apply(backend, name, value)
    message = str(info.value)
    assert "\n" not in message and "; fix: " in message, message
    assert message.startswith(f"{PLAN_ENV} (inline JSON): `options"), message
    assert f"`{name}`" in message or f"`options.{name}`" in message, message


@pytest.mark.parametrize("backend, name, value, words", [
    ("parameter_server", "checkpoint_dir", 5, "`checkpoint_dir` must be a folder path (a non-empty string), got 5"),
    ("parameter_server", "checkpoint_dir", ["ckpt"], "`checkpoint_dir` must be a folder path"),
    ("parameter_server", "shards", 2.0, "`shards` must be an integer >= 1, got 2.0"),
    ("parameter_server", "shards", True, "`shards` must be an integer >= 1, got True"),
    ("horovod", "warmup_epochs", True, "`warmup_epochs` must be a number >= 0, got True"),
    ("multi_worker_mirrored", "communication", ["ring"], "`communication` must be one of"),
    ("multi_worker_mirrored", "communication", {"ring": 1}, "`communication` must be one of"),
    ("mirrored", "devices", "/gpu:0", "`devices` must be a list of device names"),
    ("parameter_server", "cluster", {"chief": ["h0:1"]}, "`options.cluster` describes one task of the cluster"),
    ("parameter_server", "task_type", "worker", "`options.task_type` describes one task of the cluster"),
])
def test_the_issues_wrong_types_stop_the_task_with_the_option_named(backend, name, value, words):
    """Issue 34: `checkpoint_dir: 5` passed the plan check. `communication: ["ring"]` was a TypeError
    traceback (unhashable list) and a planned `cluster` made every task of the job the coordinator."""
    with pytest.raises(PlanError) as info:
        _apply(backend, name, value)
    assert words in str(info.value), str(info.value)
