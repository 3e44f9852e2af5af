"""make_strategy("auto") applying a plan (TFDIST_PLAN), with TensorFlow: the options land in the strategy
object, the run records itself against the prediction (advice/ scalars, the HParams, plan.json, one
warning when slow, the result file), and under a real horovodrun the planned fp16 is what each rank runs."""
from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import tfdist  # noqa: E402
from tfdist.plan import VARIANTS, PLAN_ENV, PLAN_RESULT_ENV, Plan, PlanError, save_plan  # noqa: E402
from tfdist.advise.recommend import backend_of  # noqa: E402
from tfdist.strategies import option_names  # noqa: E402

from support import horovodrun  # noqa: E402


def _plan(backend: str = "single", options=None, workers: int = 1, rate: float = 1e9) -> Plan:
    return Plan(backend=backend, variant=backend if backend != "horovod" else "horovod_fp16",
                options=dict(options or {}), workers=workers, ps=0, batch_size=16,
                predicted_examples_per_second=rate, predicted_step_ms=1000 * 16 * workers / rate,
                bottleneck="network", explanation="the network: a test's link", inputs={})


def test_every_planned_option_is_an_option_of_its_backend():
    for variant, (backend, options) in VARIANTS.items():
        assert backend == backend_of(variant) and set(options) <= set(option_names(backend)), variant
    assert set(option_names("parameter_server")) >= {"shards"}


def _fit(strategy, logdir):
    import tf_keras as K

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    with strategy.scope():
        model = K.Sequential([K.Input((4,)), K.layers.Dense(1)])
        model.compile(optimizer=strategy.optimizer(K.optimizers.SGD(0.01)), loss="mse")
    board = tfdist.callbacks.TensorBoardRun(str(logdir), "run", batch_size=16)
    return strategy.fit(model, x, y, batch_size=16, epochs=3, verbose=0, callbacks=[board])


def test_auto_applies_the_plan_and_the_run_records_itself_against_it(tmp_path, caplog):
    from tfdist.report.events import load_runs

    path = save_plan(_plan(options={"scale_lr": False}), str(tmp_path / "plan.json"))
    result = tmp_path / "measured.json"
    with mock.patch.dict(os.environ, {PLAN_ENV: path, PLAN_RESULT_ENV: str(result)}), \
            caplog.at_level(logging.WARNING, logger="tfdist"):
        strategy = tfdist.make_strategy("auto")
        assert strategy.kind == "single" and strategy.options.scale_lr is False
        assert strategy.plan is not None and strategy.plan.predicted_examples_per_second == 1e9
        history = _fit(strategy, tmp_path / "runs")  # no Throughput given: fit adds one for the plan
    assert "examples_per_second" in history.history
    lines = [r.getMessage() for r in caplog.records]
    assert [line for line in lines if line.startswith("tfdist plan: applying plan file")]
    slow = [line for line in lines if "x the predicted 1,000,000,000" in line]
    assert len(slow) == 1 and "limited by the network: a test's link" in slow[0]  # once, after epoch 2
    assert [line for line in lines if line.startswith("tfdist plan: measured ")]
    measured = json.loads(result.read_text())
    assert measured["epochs"] == 3 and 0 < measured["measured_over_predicted"] < 0.75
    assert measured["predicted_examples_per_second"] == 1e9
    run = load_runs(str(tmp_path / "runs"))[0]
    assert run.series(".", "advice/predicted_examples_per_second").values == (1e9,)
    ratios = run.series(".", "advice/measured_over_predicted")
    assert ratios.steps == (1, 2, 3) and all(0 < v < 1 for v in ratios.values)
    rates = run.series(".", "advice/measured_examples_per_second").values
    assert rates == pytest.approx(tuple(history.history["examples_per_second"]), rel=1e-6)
    assert run.hparams["plan/backend"] == "single" and run.hparams["plan/scale_lr"] is False
    assert json.loads((tmp_path / "runs" / "run" / "plan.json").read_text())["backend"] == "single"
    # tfdist report on that very run: predicted against measured, the median of epochs 2 and 3
    from support import invoke

    out = tmp_path / "report.html"
    assert invoke("report", str(tmp_path / "runs"), "--out", str(out)).exit_code == 0
    page = out.read_text()
    table = page[page.index("<h2>Predicted vs measured</h2>"):page.index("<h2>HParams</h2>")]
    median = sorted(rates[1:])[0] + (sorted(rates[1:])[1] - sorted(rates[1:])[0]) / 2
    assert "<td>run</td>" in table and "1,000,000,000.0" in table and f"{median:,.1f}" in table, table
    cells = re.findall(r"<td[^>]*>(.*?)</td>", table)
    assert cells[:5] == ["run", "single", "single", "all", "scale_lr=False"], cells  # the options, not the fields


def test_a_plans_bad_option_value_names_the_file(tmp_path):
    path = save_plan(_plan(options={"scale_lr": "yes"}), str(tmp_path / "plan.json"))
    with mock.patch.dict(os.environ, {PLAN_ENV: path}), pytest.raises(PlanError) as info:
        tfdist.make_strategy("auto")
    assert str(info.value).startswith(f"plan file {path!r} ({PLAN_ENV}): `options`: `scale_lr` must be True or")


def test_a_plan_for_horovod_on_a_single_process_is_refused(tmp_path):
    path = save_plan(_plan("horovod", {"compression": "fp16"}, workers=2), str(tmp_path / "plan.json"))
    with mock.patch.dict(os.environ, {PLAN_ENV: path}), pytest.raises(PlanError) as info:
        tfdist.make_strategy("auto")
    assert "`backend` is 'horovod', but this task was launched as a single job; fix: launch the job as the " \
           "plan says (horovodrun -np 2 ...)" in str(info.value)


# One horovodrun job shared by the cases: the planned tf-keras case, the overridden one, then the Keras 3
# one, in the same processes (tests/scripts/plan_job.py: a new make_strategy, model and fit per case).
# A failed job fails every case (it runs once).
_HOROVOD_CASES = {"planned": ({}, "tf_keras"), "overridden": ({"compression": "none"}, "tf_keras"),
                  "keras-3": ({}, "keras_3")}


@pytest.fixture(scope="module")
def planned_horovod_jobs(tmp_path_factory):
    """``job(case)``: the output of the job that ran every case and that case's folder (run<i>)."""
    jobs: list[tuple[str, int, Path]] = []  # the job's output, exit status, folder

    def job(case: str):
        cases = list(_HOROVOD_CASES)
        if not jobs:
            root = tmp_path_factory.mktemp("planned-horovod")
            path = save_plan(_plan("horovod", {"compression": "fp16"}, workers=2), str(root / "plan.json"))
            run = horovodrun("plan_job.py", str(root), json.dumps([_HOROVOD_CASES[name][0] for name in cases]),
                             json.dumps([_HOROVOD_CASES[name][1] for name in cases]),
                             timeout=300, env={PLAN_ENV: path, PLAN_RESULT_ENV: str(root / "measured.json")})
            jobs.append((run.stdout + run.stderr, run.returncode, root))
        output, returncode, root = jobs[0]
        assert returncode == 0, output[-6000:]
        return output, root / f"run{cases.index(case)}"

    return job


@pytest.mark.horovod
@pytest.mark.parametrize("case", list(_HOROVOD_CASES))
def test_under_horovodrun_each_rank_runs_the_planned_compression(planned_horovod_jobs, case):
    explicit, keras = _HOROVOD_CASES[case]
    output, run_dir = planned_horovod_jobs(case)
    ranks = [json.loads((run_dir / f"rank{r}.json").read_text()) for r in (0, 1)]
    want = explicit.get("compression", "fp16")
    package = "keras" if keras == "keras_3" else "tf_keras"
    assert [(r["keras"], r["kind"], r["options"]["compression"], r["plan"]) for r in ranks] == [
        (package, "horovod", want, "horovod_fp16")] * 2
    overrides = [[line for line in r["warnings"] if "win over the plan" in line] for r in ranks]
    assert [len(lines) for lines in overrides] == ([1, 1] if explicit else [0, 0]), overrides  # one per task
    # and in the job's output, as logged: the cases that share the job together print one per task each
    printed = [line for line in output.splitlines() if "win over the plan" in line]
    overridden = sum(1 for options, _ in _HOROVOD_CASES.values() if options)
    assert len(printed) == 2 * overridden, printed
    assert json.loads((run_dir / "measured.json").read_text())["epochs"] == 3  # the chief's measured figures


@pytest.mark.parametrize("explicit", [{"min_shard_bytes": 1 << 20}, {"shards": 4}, {}])
def test_the_planned_shards_and_the_scripts_own_sharding_build_the_backends_options(explicit):
    """A plan's shards=2 under make_strategy('auto') with the script's own min_shard_bytes= used to
    give both to ParameterServerOptions, which refuses the pair: the script's now wins."""
    from tfdist.plan import plan_json
    from tfdist.strategies import build_options
    from tfdist.strategies.planning import resolve_plan

    plan = Plan(backend="parameter_server", variant="parameter_server", options={"shards": 2}, workers=2, ps=2,
                batch_size=16, predicted_examples_per_second=1e3, predicted_step_ms=32.0, bottleneck="ps link",
                explanation="a test's ps links", inputs={})
    cluster = {"chief": ["h0:1"], "worker": ["w0:1", "w1:1"], "ps": ["p0:1", "p1:1"]}
    environ = {PLAN_ENV: plan_json(plan), "TF_CONFIG": json.dumps({"cluster": cluster,
                                                                   "task": {"type": "chief", "index": 0}})}
    types = {name: tfdist.strategies.STRATEGIES.get(name).Options
             for name in ("parameter_server", "horovod", "multi_worker_mirrored")}
    resolved = resolve_plan("parameter_server", environ, explicit, types)
    options = build_options("parameter_server", resolved.options)
    want = {"shards": 2, "min_shard_bytes": None} if not explicit else {"shards": None, **explicit}
    assert {"shards": options.shards, "min_shard_bytes": options.min_shard_bytes} == {
        "shards": None, "min_shard_bytes": None, **want}
