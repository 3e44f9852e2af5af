"""Hostile plan contents (issue 34), without TensorFlow: every bad value of every field is one PlanError
naming the field and the fix, never a traceback and never accepted; JSON nested 50,000-200,000 deep (a
RecursionError before) and the other hazards of Python's JSON reader are refused by the bounded reader
of TF_CONFIG (tfdist/cluster/parsing.py) that the plan now reads with."""
from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfdist.advise import Cluster, Workload, advise, parse_rate
from tfdist.advise.planner import plan_from_advice
from tfdist.plan import PLAN_ENV, PlanError, load_plan, parse_plan
from tfdist.strategies.options import StrategyOptions
from tfdist.strategies.planning import resolve_plan


@dataclasses.dataclass(frozen=True)
class _HorovodOptions(StrategyOptions):  # a stand-in: the real one imports TensorFlow
    compression: str = "none"


OPTIONS = {"horovod": _HorovodOptions, "parameter_server": StrategyOptions,
           "multi_worker_mirrored": StrategyOptions, "single": StrategyOptions}
_CLUSTER = Cluster(workers=2, ps=1, bandwidths=(parse_rate("50mbit"),))
_WORKLOAD = Workload(params=669_706, batch_size=64, step_ms=10.0)
BASE = plan_from_advice(advise(_CLUSTER, _WORKLOAD), _CLUSTER, _WORKLOAD).as_dict()
assert (BASE["variant"], BASE["workers"], BASE["ps"]) == ("horovod_fp16", 2, 0)


def horovodrun_env(size: int, **extra: str) -> dict[str, str]:
    return {"HOROVOD_RANK": "0", "HOROVOD_SIZE": str(size), "HOROVOD_LOCAL_RANK": "0", **extra}


def _refused(raw_or_text, field: str | None) -> str:
    """The one-line PlanError of applying this plan inline to a 2-rank horovodrun job, naming ``field``."""
    text = raw_or_text if isinstance(raw_or_text, str) else json.dumps(raw_or_text)
    with pytest.raises(PlanError) as info:
        resolve_plan("horovod", horovodrun_env(2, **{PLAN_ENV: text}), {}, OPTIONS)
    message = str(info.value)
    assert "\n" not in message and "; fix: " in message, message
    assert message.startswith(f"{PLAN_ENV} (inline JSON)"), message
    if field is not None:
        assert f": `{field}` " in message, message
    return message


# --- a fuzzer per field: wrong types, bools for numbers, floats for ints, nested junk ---------------------

_SHORT = st.text(max_size=6)
_SMALL_INT = st.integers(min_value=-(10**17), max_value=10**17)  # longer numbers: see the digits test
_FLOAT = st.floats(allow_nan=False, allow_infinity=False)
_JUNK = st.recursive(st.none() | st.booleans() | _SMALL_INT | _FLOAT | _SHORT,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_SHORT, inner, max_size=3),
                     max_leaves=6)
_CONTAINERS = st.lists(_JUNK, max_size=3) | st.dictionaries(_SHORT, _JUNK, max_size=3)
_NOT_NUMBER = st.none() | st.booleans() | _SHORT | _CONTAINERS


def _integral_floats(low: int) -> st.SearchStrategy[float]:
    return st.integers(min_value=low, max_value=10**6).map(float)  # 2.0 is not a count of workers


#: Values each field must refuse (a value of the right type but out of range counts as wrong).
WRONG = {
    "version": _NOT_NUMBER | _FLOAT | _SMALL_INT.filter(lambda v: v != 1),  # true and 1.0 included
    "backend": st.none() | st.booleans() | _SMALL_INT | _FLOAT | _CONTAINERS | st.just(""),
    "variant": st.none() | st.booleans() | _SMALL_INT | _FLOAT | _CONTAINERS | st.just("")
    | st.sampled_from(["parameter_server", "horovod_fp32", "horovodX", "single", "multi_worker_mirrored"]),
    "options": st.none() | st.booleans() | _SMALL_INT | _FLOAT | _SHORT | st.lists(_JUNK, max_size=3),
    "inputs": st.none() | st.booleans() | _SMALL_INT | _FLOAT | _SHORT | st.lists(_JUNK, max_size=3),
    "workers": _NOT_NUMBER | _FLOAT.filter(lambda v: v != 2) | _integral_floats(1)
    | _SMALL_INT.filter(lambda v: v < 1),
    "ps": _NOT_NUMBER | _FLOAT | _integral_floats(0) | _SMALL_INT.filter(lambda v: v != 0),
    "batch_size": _NOT_NUMBER | _FLOAT | _integral_floats(1) | _SMALL_INT.filter(lambda v: v < 1),
    "predicted_examples_per_second": _NOT_NUMBER | st.floats(max_value=1e-13, allow_nan=False,
                                                             allow_infinity=False)
    | _SMALL_INT.filter(lambda v: v < 1),
    "predicted_step_ms": _NOT_NUMBER | st.floats(max_value=-1e-300, allow_nan=False, allow_infinity=False)
    | _SMALL_INT.filter(lambda v: v < 0),
    "bottleneck": st.none() | st.booleans() | _SMALL_INT | _FLOAT | _CONTAINERS | st.just(""),
    "explanation": st.none() | st.booleans() | _SMALL_INT | _FLOAT | _CONTAINERS | st.just(""),
}


def test_the_fuzzer_covers_every_field_of_the_plan():
    assert set(WRONG) == set(BASE)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), field=st.sampled_from(sorted(WRONG)))
def test_every_wrong_value_of_every_field_is_a_plan_error_naming_that_field(data, field):
    """Before the fix ``"version": true`` / ``1.0`` were taken as version 1 and ``"ps": 3`` of a horovod
    plan was applied; this fuzzer found both at once."""
    value = data.draw(WRONG[field], label=field)
    _refused({**BASE, field: value}, field)


@pytest.mark.parametrize("version, shown", [(True, "got true"), (1.0, "got 1.0"), ("1", "got '1'"),
                                            (None, "got null"), ([1], "got list of 1 items")])
def test_version_is_the_whole_number_1_and_the_error_echoes_the_json(version, shown):
    assert shown in _refused({**BASE, "version": version}, "version")


# --- the plan against the run: ps tasks on a backend that has none -----------------------------------------

@pytest.mark.parametrize("backend, kind, environ", [
    ("single", "single", {}),
    ("horovod", "horovod", horovodrun_env(2)),
    ("multi_worker_mirrored", "multi_worker_mirrored",
     {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}})}),
])
def test_ps_tasks_in_a_plan_of_a_backend_without_them_are_refused_not_printed(backend, kind, environ):
    """Issue 34: ``ps: 3`` on a single-process run was applied and the notice said "3 ps"."""
    workers = 1 if backend == "single" else 2
    variant = "horovod" if backend == "horovod" else backend
    raw = {**BASE, "backend": backend, "variant": variant, "options": {}, "workers": workers, "ps": 3}
    with pytest.raises(PlanError) as info:
        resolve_plan(kind, {**environ, PLAN_ENV: json.dumps(raw)}, {}, OPTIONS)
    message = str(info.value)
    assert f"`ps` is 3, but a {backend} plan has no ps tasks; fix: set \"ps\": 0" in message, message
    assert "3 ps" not in message
    raw["ps"] = 0  # the same plan without them applies, and its notice names no ps
    resolved = resolve_plan(kind, {**environ, PLAN_ENV: json.dumps(raw)}, {}, OPTIONS)
    assert resolved.plan is not None and " ps" not in resolved.notices[0], resolved.notices


# --- what Python's JSON reader does to hostile text --------------------------------------------------------

def _nested(depth: int, shape: str) -> str:
    """A plan-looking text nested ``depth`` levels deep in one of three shapes."""
    if shape == "arrays":
        return "{\"version\": " + "[" * depth + "]" * depth + "}"
    if shape == "objects":
        return '{"":' * depth + "1" + "}" * depth  # 200,000 deep stays under the 1 MiB limit
    inner = "[" * depth + "]" * depth  # inside a field the plan has
    return json.dumps({**BASE, "options": {"compression": "__X__"}}).replace('"__X__"', inner)


@pytest.mark.parametrize("depth", [21, 50_000, 100_000, 200_000])
@pytest.mark.parametrize("shape", ["arrays", "objects", "in options"])
def test_deep_nesting_is_a_plan_error_not_a_recursion_error(depth, shape, tmp_path):
    """Issue 34: TFDIST_PLAN nested 50,000-200,000 deep gave a RecursionError traceback (json recurses)."""
    text = _nested(depth, shape)
    message = _refused(text, None)
    assert "nests arrays/objects more than 20 levels deep" in message, message
    path = tmp_path / "plan.json"  # the same from a file
    path.write_text(text)
    with pytest.raises(PlanError, match="nests arrays/objects more than 20 levels deep"):
        load_plan(str(path))


def test_the_depth_limit_is_20_levels_and_a_plan_needs_4():
    """A plan nests 4 levels (plan, inputs, embeddings, a table); 20 are read, 21 are not."""
    def nested_in_inputs(levels: int) -> str:  # the plan object and `inputs` are 2 levels
        return json.dumps({**BASE, "inputs": {"x": "__X__"}}).replace('"__X__"', "[" * levels + "]" * levels)

    assert parse_plan(nested_in_inputs(18)).inputs["x"]
    with pytest.raises(PlanError, match="more than 20 levels deep"):
        parse_plan(nested_in_inputs(19))


@pytest.mark.parametrize("text, field, words", [
    (json.dumps(BASE).replace('"workers": 2', '"workers": 1e400'), "workers",
     "holds Infinity (or a number beyond 1.8e308), which is not JSON"),
    (json.dumps(BASE).replace('"workers": 2', '"workers": -Infinity'), "workers", "holds -Infinity"),
    (json.dumps({**BASE, "inputs": {"speeds": [1.0, 2.0]}}).replace("2.0", "NaN"), "inputs.speeds[1]",
     "holds NaN, which is not JSON"),
    (json.dumps(BASE).replace('"workers": 2', '"workers": ' + "9" * 5000), None,
     "has a number of 5000 digits; tfdist reads at most 18"),
    (json.dumps(BASE).replace('"ps": 0', '"ps": 0, "ps": 3'), None,
     "key 'ps' is given 2 times in one object; JSON readers keep only the last"),
    ("{\"version\": 1,\n \"backend\": \"hor", None, "is not valid JSON"),
])
def test_what_python_json_takes_or_chokes_on_is_a_plan_error(text, field, words):
    """Python reads 1e400 as inf, NaN and Infinity as floats, keeps the last of two keys, and raises a bare
    ValueError past 4,300 digits."""
    assert words in _refused(text, field)


def test_an_undecodable_inline_value_is_a_plan_error():
    """os.environ holds undecodable bytes as lone surrogates."""
    text = json.dumps(BASE)[:-1] + ', "bottleneck": "\udcff"}'
    assert "is not UTF-8 text" in _refused(text, None)


def test_a_long_junk_value_is_echoed_short():
    message = _refused({**BASE, "backend": ["x" * 10_000] * 100}, "backend")
    assert len(message) < 400 and "list of 100 items" in message
