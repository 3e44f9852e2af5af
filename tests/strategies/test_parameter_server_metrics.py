"""ParameterServerMetrics on a real gRPC cluster (chief + 2 workers + 1 ps) started by `tfdist launch`."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from support import SCRIPTS, subprocess_env

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("ps-metrics")
    command = [sys.executable, "-m", "tfdist", "launch", "--workers", "2", "--ps", "1", "--",
               sys.executable, str(SCRIPTS / "ps_metrics.py"), str(outdir)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return outdir, json.loads((outdir / "chief.json").read_text())


def test_every_step_is_counted_once_on_the_worker_that_ran_it(trained):
    _, chief = trained
    history = chief["history"]
    for epoch in range(3):
        steps = [history[f"worker/{index}/steps"][epoch] for index in (0, 1)]
        assert sum(steps) == chief["steps"], f"epoch {epoch}: {steps} steps for {chief['steps']} scheduled"
        assert all(count > 0 for count in steps), f"epoch {epoch}: a worker ran no step: {steps}"


def test_per_worker_times_and_the_spread_follow_from_the_counts(trained):
    _, chief = trained
    history = chief["history"]
    for epoch in range(3):
        times = [history[f"worker/{index}/step_time_ms"][epoch] for index in (0, 1)]
        assert all(t > 0 and math.isfinite(t) for t in times)
        assert history["worker_step_time_spread"][epoch] == pytest.approx(max(times) / min(times))
        rates = [history[f"worker/{index}/examples_per_second"][epoch] for index in (0, 1)]
        steps = [history[f"worker/{index}/steps"][epoch] for index in (0, 1)]
        assert rates[0] / rates[1] == pytest.approx(steps[0] / steps[1])  # the same epoch clock


def test_coordinator_and_local_compute_figures(trained):
    _, chief = trained
    history = chief["history"]
    for epoch in range(3):
        step, compute = history["coordinator_step_ms"][epoch], history["local_compute_ms"][epoch]
        assert step > 0 and compute > 0
        assert history["non_compute_share"][epoch] == pytest.approx(1 - compute / (step * 2))
    # every task on this one host: the coordinator's load falls on each worker alike, none is timed at rest
    assert not [key for key in history if key.endswith("rest_compute_ms")], sorted(history)


def test_the_chiefs_tensorboard_run_holds_the_worker_tags(trained):
    from tensorboard.backend.event_processing import event_accumulator

    outdir, _ = trained
    train = event_accumulator.EventAccumulator(str(outdir / "runs" / "ps" / "train"), size_guidance={"tensors": 0})
    train.Reload()
    tags = set(train.Tags()["tensors"])
    assert {"epoch_worker/0/steps", "epoch_worker/1/step_time_ms", "epoch_worker_step_time_spread",
            "epoch_coordinator_step_ms", "epoch_non_compute_share"} <= tags
