"""The plan (tfdist/plan.py) and its application (tfdist/strategies/planning.py), without TensorFlow:
advice -> plan -> file -> environment -> the options make_strategy("auto") builds, per backend; the
script's explicit options win with one notice; every bad plan gives one error naming the file and field."""
from __future__ import annotations

import dataclasses
import json
import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfdist.advise import Cluster, Workload, advise, parse_rate
from tfdist.advise.planner import plan_from_advice
from tfdist.environments import detect_environment
from tfdist.plan import (PLAN_ENV, SLOW_RATIO, Plan, PlanError, compare, load_plan, parse_plan,
                         plan_json, save_plan, slow_warning)
from tfdist.strategies.options import StrategyOptions
from tfdist.strategies.planning import resolve_plan, run_size

SMALL = Workload(params=669_706, batch_size=64, step_ms=10.0)


# Stand-ins for the backends' options dataclasses (the real ones import TensorFlow), with the names the
# plans here use; the real registry, and every real option under a plan fuzzer, are checked in
# tests/strategies/test_planning.py and tests/strategies/test_plan_options.py.
@dataclasses.dataclass(frozen=True)
class _HorovodOptions(StrategyOptions):
    compression: str = "none"
    warmup_epochs: float = 0
    hierarchical_allreduce: bool = False


@dataclasses.dataclass(frozen=True)
class _ParameterServerOptions(StrategyOptions):
    shards: int | None = None
    min_shard_bytes: int | None = None
    steps_per_execution: int | None = None


OPTIONS = {"horovod": _HorovodOptions, "parameter_server": _ParameterServerOptions,
           "multi_worker_mirrored": StrategyOptions, "single": StrategyOptions, "mirrored": StrategyOptions}


def _advice(rate: str, speeds=(1.0, 1.0), ps: int = 1, workers_per_host: int = 1, workers: int = 2,
            workload: Workload = SMALL):
    cluster = Cluster(workers=workers, speeds=speeds, ps=ps, bandwidths=(parse_rate(rate),),
                      workers_per_host=workers_per_host)
    return advise(cluster, workload), cluster


def _plan(rate: str, **kwargs) -> Plan:
    advice, cluster = _advice(rate, **kwargs)
    return plan_from_advice(advice, cluster, kwargs.get("workload", SMALL))


def horovodrun_env(size: int, **extra: str) -> dict[str, str]:
    return {"HOROVOD_RANK": "0", "HOROVOD_SIZE": str(size), "HOROVOD_LOCAL_RANK": "0", **extra}


def ps_env(workers: int, ps: int, **extra: str) -> dict[str, str]:
    cluster = {"chief": ["h0:1"], "worker": [f"w{i}:1" for i in range(workers)], "ps": [f"p{i}:1" for i in range(ps)]}
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}}), **extra}


# --- advice -> plan ---------------------------------------------------------------------------------------

def test_a_slow_link_plans_fp16_compression_with_the_prediction():
    plan = _plan("50mbit")
    assert (plan.backend, plan.variant, dict(plan.options)) == ("horovod", "horovod_fp16", {"compression": "fp16"})
    assert (plan.workers, plan.ps, plan.batch_size) == (2, 0, 64)
    fp16 = _advice("50mbit")[0].predictions["horovod_fp16"]
    assert plan.predicted_examples_per_second == fp16.examples_per_second
    assert plan.predicted_step_ms == pytest.approx(fp16.step_ms)  # synchronous: the step itself
    assert plan.bottleneck == "network"


def test_fp16_is_not_recommended_where_the_wire_is_not_the_bottleneck():
    """On an unlimited link the model still predicts fp16 faster (half the bytes), but the ring is
    compute-bound there and fp16's casts cost time: the lab measured no gain."""
    advice, _ = _advice("10gbit")
    assert advice.predictions["horovod"].bottleneck == "compute"
    assert advice.predictions["horovod_fp16"].examples_per_second > advice.predictions["horovod"].examples_per_second
    assert (advice.recommended, advice.variant) == ("horovod", "horovod")
    assert any(reason.startswith("no fp16 compression: plain horovod is limited by compute") for reason in
               advice.reasons)
    assert dict(_plan("10gbit").options) == {}


def test_parameter_servers_with_several_ps_plan_one_shard_per_ps():
    plan = _plan("10gbit", speeds=(1.0, 0.25), ps=2)
    assert (plan.backend, dict(plan.options), plan.ps) == ("parameter_server", {"shards": 2}, 2)
    single_ps = _plan("10gbit", speeds=(1.0, 0.25), ps=1)
    assert dict(single_ps.options) == {} and single_ps.ps == 1
    assert "steps_per_execution" not in plan.options  # staler updates: never planned
    # parameter servers step at their own pace: the step time is b * N / examples/s
    assert plan.predicted_step_ms == pytest.approx(1000 * 64 * 2 / plan.predicted_examples_per_second)


def test_several_workers_per_host_can_plan_hierarchical_allreduce():
    workload = Workload(params=1_000_000, batch_size=32, step_ms=10.0)
    cluster = Cluster(workers=16, ps=0, bandwidths=(parse_rate("100gbit"),), workers_per_host=4, latency_s=1e-3)
    advice = advise(cluster, workload)  # latency-bound: 2(N-1) ring steps flat, 2(H-1) across hosts
    assert advice.variant == "horovod_hierarchical", advice.variant
    plan = plan_from_advice(advice, cluster, workload)
    assert dict(plan.options) == {"hierarchical_allreduce": True}


def test_the_file_round_trips_and_is_strict_json(tmp_path):
    plan = _plan("50mbit")
    path = save_plan(plan, str(tmp_path / "plan.json"))
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary left
    assert (tmp_path / "plan.json").stat().st_mode & 0o777 == 0o644  # readable by the job's other users
    json.loads((tmp_path / "plan.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    loaded, source = load_plan(path)
    assert loaded == plan and "plan.json" in source
    inline, source = load_plan(plan_json(plan))  # the JSON itself in TFDIST_PLAN
    assert inline == plan and source == f"{PLAN_ENV} (inline JSON)"



def test_a_plan_made_under_a_memory_cap_round_trips_with_its_shards_to_the_options(tmp_path):
    """128M parameters with Adagrad, 3 ps capped at 1.5 GiB each: parameter servers fit only sharded; the
    plan's shards=3 and what the memory check was told survive the file and reach the backend's options."""
    from tfdist.advise.user_inputs import memory_check

    cluster = Cluster(workers=2, speeds=(1.0, 0.25), ps=3, bandwidths=(parse_rate("10gbit"),))
    workload = Workload(params=128_000_000, batch_size=64, step_ms=50.0)
    memory = memory_check(cluster, workload, ("adagrad", 1), ps_memory=3 * 2**29, worker_memory=3 * 2**29)
    advice = advise(cluster, workload, memory)
    plan = plan_from_advice(advice, cluster, workload)
    assert (plan.backend, dict(plan.options)) == ("parameter_server", {"shards": 3})
    assert {k: plan.inputs[k] for k in ("optimizer", "slots_per_variable", "ps_memory", "min_ps")} == {
        "optimizer": "adagrad", "slots_per_variable": 1, "ps_memory": 3 * 2**29, "min_ps": 3}
    assert plan.inputs["ps_bytes"] == memory.planned.total <= 3 * 2**29
    loaded, _ = load_plan(save_plan(plan, str(tmp_path / "plan.json")))
    assert loaded == plan
    resolved = resolve_plan("parameter_server", ps_env(2, 3, **{PLAN_ENV: str(tmp_path / "plan.json")}), {}, OPTIONS)
    assert resolved.options == {"shards": 3}

# --- plan -> environment -> options ------------------------------------------------------------------------

def test_under_horovodrun_auto_gets_the_planned_options(tmp_path):
    path = save_plan(_plan("50mbit"), str(tmp_path / "plan.json"))
    resolved = resolve_plan("horovod", horovodrun_env(2, **{PLAN_ENV: path}), {"warmup_epochs": 1}, OPTIONS)
    assert resolved.options == {"compression": "fp16", "warmup_epochs": 1}
    assert resolved.plan is not None and resolved.plan.variant == "horovod_fp16"
    assert len(resolved.notices) == 1 and "applying plan file" in resolved.notices[0]
    assert "compression='fp16'" in resolved.notices[0]


def test_an_explicit_option_wins_and_says_so_in_one_line(tmp_path):
    path = save_plan(_plan("50mbit"), str(tmp_path / "plan.json"))
    resolved = resolve_plan("horovod", horovodrun_env(2, **{PLAN_ENV: path}), {"compression": "none"}, OPTIONS)
    assert resolved.options == {"compression": "none"}
    overrides = [n for n in resolved.notices if "win over the plan" in n]
    assert overrides == ["tfdist plan: the script's options win over the plan: compression='none' (the "
                         "script's) over the plan's 'fp16'"]


def test_an_explicit_option_equal_to_the_plans_is_no_override(tmp_path):
    path = save_plan(_plan("50mbit"), str(tmp_path / "plan.json"))
    resolved = resolve_plan("horovod", horovodrun_env(2, **{PLAN_ENV: path}), {"compression": "fp16"}, OPTIONS)
    assert not [n for n in resolved.notices if "win over" in n]


def test_a_parameter_server_plan_under_tf_config(tmp_path):
    path = save_plan(_plan("10gbit", speeds=(1.0, 0.25), ps=2), str(tmp_path / "plan.json"))
    resolved = resolve_plan("parameter_server", ps_env(2, 2, **{PLAN_ENV: path}), {}, OPTIONS)
    assert resolved.options == {"shards": 2}
    assert run_size("parameter_server", detect_environment(ps_env(3, 1))) == (3, 1)


@pytest.mark.parametrize("explicit, notice", [
    ({"min_shard_bytes": 1 << 20}, "min_shard_bytes=1048576 (the script's) over the plan's shards=2"),
    ({"shards": 4}, "shards=4 (the script's) over the plan's 2"),
])
def test_the_scripts_own_sharding_wins_over_the_planned_shards(tmp_path, explicit, notice):
    """shards= and min_shard_bytes= exclude each other: the script's min_shard_bytes replaces the
    plan's shards (both would be refused by the backend), with one line saying so."""
    path = save_plan(_plan("10gbit", speeds=(1.0, 0.25), ps=2), str(tmp_path / "plan.json"))
    resolved = resolve_plan("parameter_server", ps_env(2, 2, **{PLAN_ENV: path}), explicit, OPTIONS)
    assert resolved.options == explicit
    overrides = [n for n in resolved.notices if "win over the plan" in n]
    assert overrides == [f"tfdist plan: the script's options win over the plan: {notice}"]


def test_without_the_variable_nothing_changes():
    resolved = resolve_plan("horovod", horovodrun_env(2), {"compression": "fp16"}, OPTIONS)
    assert (resolved.plan, resolved.options, resolved.notices) == (None, {"compression": "fp16"}, ())


def test_a_named_backend_does_not_apply_the_plan_and_says_so(tmp_path):
    path = save_plan(_plan("50mbit"), str(tmp_path / "plan.json"))
    resolved = resolve_plan("horovod", horovodrun_env(2, **{PLAN_ENV: path}), {}, OPTIONS, auto=False)
    assert resolved.plan is None and resolved.options == {}
    assert "not applied: make_strategy('horovod') names its backend" in resolved.notices[0]


# --- bad plans: one line naming the file and the field -----------------------------------------------------

def _write(tmp_path, content) -> str:
    path = tmp_path / "plan.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def _plan_dict(**changes) -> dict:
    raw = _plan("50mbit").as_dict()
    raw.update(changes)
    return raw


@pytest.mark.parametrize("content, field, words", [
    (None, None, "does not exist"),
    ("{\"version\": 1, \"backend\": \"hor", None, "is not valid JSON"),
    ("", None, "is not valid JSON"),
    ("[1, 2]", None, "holds a JSON list"),
    (_plan_dict(options={"compresion": "fp16"}), "options.compresion", "is not an option of any backend"),
    (_plan_dict(options={"shards": 2}), "options.shards", "is an option of parameter_server, not of horovod"),
    (_plan_dict(workers=4), "workers", "is 4, but this run has 2 worker(s)"),
    (_plan_dict(version=2), "version", "written by a newer tfdist"),
    (_plan_dict(version=0), "version", "must be 1"),
    (_plan_dict(backend="horovd", variant="horovd"), "backend", "is 'horovd', not a backend"),
    (_plan_dict(backend="parameter_server", variant="parameter_server", options={}), "backend",
     "but this task was launched as a horovod job"),
    (_plan_dict(variant="parameter_server"), "variant", "is not a variant of backend 'horovod'"),
    (_plan_dict(speed=1), "speed", "is not a plan field"),
    ({k: v for k, v in _plan_dict().items() if k != "workers"}, "workers", "is missing"),
    (_plan_dict(workers="2"), "workers", "must be a whole number"),
    (_plan_dict(predicted_examples_per_second=0), "predicted_examples_per_second", "must be a finite number"),
    (json.dumps(_plan_dict()).replace('"predicted_step_ms": ', '"predicted_step_ms": NaN, "x": '), None,
     "holds NaN, which is not JSON"),
    (_plan_dict(options=[1]), "options", "must be a JSON object"),
    # issue 34: true == 1 and 1.0 == 1 in Python; a horovod plan printed "3 ps"; a bad option type passed
    (_plan_dict(version=True), "version", "must be 1 (a whole number), got true"),
    (_plan_dict(version=1.0), "version", "must be 1 (a whole number), got 1.0"),
    (_plan_dict(ps=3), "ps", "is 3, but a horovod plan has no ps tasks"),
    ("[" * 100_000 + "]" * 100_000, None, "nests arrays/objects more than 20 levels deep"),
])
def test_a_bad_plan_stops_the_task_naming_the_file_and_the_field(tmp_path, content, field, words):
    path = str(tmp_path / "plan.json") if content is None else _write(tmp_path, content)
    with pytest.raises(PlanError) as info:
        resolve_plan("horovod", horovodrun_env(2, **{PLAN_ENV: path}), {}, OPTIONS)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"plan file {path!r} ({PLAN_ENV})")
    if field is not None:
        assert f": `{field}` " in message, message
    assert words in message and "; fix: " in message, message


def test_a_plan_for_other_ps_counts_and_odd_files_are_refused(tmp_path):
    path = save_plan(_plan("10gbit", speeds=(1.0, 0.25), ps=2), str(tmp_path / "plan.json"))
    with pytest.raises(PlanError, match=r"`ps` is 2, but this run has 1 ps task\(s\); fix: launch 2 ps"):
        resolve_plan("parameter_server", ps_env(2, 1, **{PLAN_ENV: path}), {}, OPTIONS)
    with pytest.raises(PlanError, match="is not a regular file"):
        resolve_plan("horovod", horovodrun_env(2, **{PLAN_ENV: str(tmp_path)}), {}, OPTIONS)
    with pytest.raises(PlanError, match=f"{PLAN_ENV} is set but empty"):
        resolve_plan("horovod", horovodrun_env(2, **{PLAN_ENV: " "}), {}, OPTIONS)
    big = tmp_path / "big.json"
    big.write_text(" " * (2 << 20))
    with pytest.raises(PlanError, match="is over 1,048,576 bytes"):
        resolve_plan("horovod", horovodrun_env(2, **{PLAN_ENV: str(big)}), {}, OPTIONS)
    with pytest.raises(PlanError, match=r"inline JSON\) is not valid JSON"):
        parse_plan("{", f"{PLAN_ENV} (inline JSON)")
    if os.geteuid() != 0:  # root reads any file
        unreadable = tmp_path / "unreadable.json"
        unreadable.write_text("{}")
        unreadable.chmod(0)
        with pytest.raises(PlanError, match="cannot be read"):
            resolve_plan("horovod", horovodrun_env(2, **{PLAN_ENV: str(unreadable)}), {}, OPTIONS)


# --- measured against predicted --------------------------------------------------------------------------

def test_the_comparison_and_the_slow_warning():
    plan = _plan("50mbit")
    record = compare(plan, plan.predicted_examples_per_second / 2)
    assert record["advice/measured_over_predicted"] == pytest.approx(0.5)
    assert record["advice/measured_step_ms"] == pytest.approx(2 * plan.predicted_step_ms)
    assert slow_warning(plan, SLOW_RATIO * plan.predicted_examples_per_second) is None
    warning = slow_warning(plan, 0.5 * plan.predicted_examples_per_second)
    assert "0.50x the predicted" in warning and "check the links between the worker hosts" in warning
    assert plan.explanation in warning
    assert all(math.isfinite(v) for v in record.values())


def test_the_launcher_passes_the_plan_inline_and_reads_the_result_back(tmp_path):
    from tfdist.plan import PLAN_RESULT_ENV, plan_environment, result_summary

    plan = _plan("50mbit")
    env = plan_environment(plan, str(tmp_path / "measured.json"))
    assert load_plan(env[PLAN_ENV])[0] == plan and env[PLAN_RESULT_ENV] == str(tmp_path / "measured.json")
    assert "no measured figures came back" in result_summary(plan, env[PLAN_RESULT_ENV])
    (tmp_path / "measured.json").write_text(json.dumps(
        {"measured_examples_per_second": plan.predicted_examples_per_second * 0.99,
         "measured_step_ms": plan.predicted_step_ms / 0.99}))
    line = result_summary(plan, env[PLAN_RESULT_ENV])
    assert line.startswith("tfdist launch: measured ") and "(0.99x)" in line


@pytest.mark.slow  # imports TensorFlow
@pytest.mark.parametrize("options, field", [
    ({"checkpoint_dir": 5}, "checkpoint_dir"), ({"checkpoint_dir": ""}, "checkpoint_dir"),
    ({"shards": True}, "shards"), ({"shards": 1.5}, "shards"), ({"steps_per_execution": "2"}, "steps_per_execution"),
])
def test_a_plan_option_of_the_wrong_type_stops_the_task_before_training(tmp_path, monkeypatch, options, field):
    """Issue 34: `checkpoint_dir: 5` passed the plan check; make_strategy('auto') now stops at it."""
    pytest.importorskip("tensorflow")
    import tfdist
    from tfdist.strategies.options import OptionValueError

    raw = _plan_dict(backend="parameter_server", variant="parameter_server", options=options, ps=1)
    for name, value in ps_env(2, 1, **{PLAN_ENV: _write(tmp_path, raw)}).items():
        monkeypatch.setenv(name, value)
    with pytest.raises(PlanError, match=rf"`options`: `{field}` must be .*; fix: ") as info:
        tfdist.make_strategy("auto")
    assert isinstance(info.value.__context__, OptionValueError)


@pytest.mark.parametrize("version", [True, 1.0, "1", None, [1]])
def test_any_version_but_the_integer_1_is_refused(version):
    raw = _plan_dict(version=version)
    with pytest.raises(PlanError, match=r"`version` must be 1 \(a whole number\)"):
        parse_plan(json.dumps(raw), "plan")



_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(["version", "backend", "variant", "options", "workers", "ps", "batch_size",
                              "predicted_examples_per_second", "predicted_step_ms", "bottleneck", "inputs"]),
       value=_JSON)
def test_any_json_in_any_field_is_a_plan_error_or_a_sound_plan(field, value):
    """Issue 34's plan fuzzer: no traceback, and what is accepted has the right types."""
    try:
        plan = parse_plan(json.dumps(_plan_dict(**{field: value})), "plan")
    except PlanError as exc:
        assert "; fix: " in str(exc)
        return
    assert type(plan.version) is int and plan.version == 1
    assert all(type(getattr(plan, name)) is int for name in ("workers", "ps", "batch_size"))
    assert plan.ps == 0 or plan.backend == "parameter_server"
