"""Per-worker figures under a real `horovodrun -np 2` job (tests/scripts/hvd_metrics.py) in which
rank 1 sleeps after every batch: the gathered figures must name it, for tf-keras and Keras 3.

The same job then runs SystemMetrics on every rank (tests/scripts/hvd_system_metrics.py, its own
folder), and then both again with Keras 3 (tests/scripts/hvd_figures.py: one job for all four
parts). The system part's test lives here, beside its job, so the job runs once, on one xdist
worker. Each test checks its own part: the metrics part's tests that part's files, the system
part's test its files and the job's exit (a failed part ends the job)."""
from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from support import horovodrun

pytestmark = [pytest.mark.horovod]

SLEEP_S = 0.1  # well above what a busy 2-core host adds to any rank's own work per step


FLAVOURS = ["tf_keras", "keras_3"]


@pytest.fixture(scope="module")
def figures_job(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The one job (tests/scripts/hvd_figures.py): per Keras the metrics part, then the system part."""
    root = tmp_path_factory.mktemp("horovod-figures")
    result = horovodrun("hvd_figures.py", str(SLEEP_S), str(root), *FLAVOURS, np=2, timeout=600)
    return result, root


@pytest.fixture(scope="module", params=FLAVOURS)
def shared_job(request, figures_job) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """One Keras's parts of the job: the job's result, the metrics part's and the system part's folders."""
    result, root = figures_job
    return result, root / request.param / "metrics", root / request.param / "system"


@pytest.fixture
def job(shared_job) -> tuple[Path, list[dict]]:
    """The metrics part: its folder and both ranks' reports (written as the part ends)."""
    result, outdir, _ = shared_job
    unfinished = [rank for rank in (0, 1) if not (outdir / f"rank{rank}.json").exists()]
    assert not unfinished, (f"the metrics part did not finish on rank(s) {unfinished} (exit {result.returncode}): "
                            + result.stdout[-3000:] + result.stderr[-3000:])
    return outdir, [json.loads((outdir / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def _scalars(path: Path) -> dict[str, list[float]]:
    import tensorflow as tf
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(str(path), size_guidance={"tensors": 0})
    accumulator.Reload()
    return {tag: [float(tf.make_ndarray(e.tensor_proto)) for e in accumulator.Tensors(tag)]
            for tag in accumulator.Tags()["tensors"]
            if accumulator.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"}


def test_every_rank_logs_the_same_gathered_rows_in_rank_order(job):
    _, (rank0, rank1) = job
    assert rank0["gathered"] == rank1["gathered"] and len(rank0["gathered"]) == 2
    for rank, own in enumerate((rank0, rank1)):
        for epoch, rows in enumerate(own["gathered"]):
            step_ms, comm_ms, rate, link_bytes, memory = rows[rank]
            assert step_ms == pytest.approx(own["history"][f"worker/{rank}/step_time_ms"][epoch])
            assert comm_ms == pytest.approx(own["history"]["comm_time_ms"][epoch])  # its own view
            assert rate == pytest.approx(16 * 1000 / step_ms)
            # both ranks on one host talk over loopback, which no link carries; a TensorFlow process's peak
            assert link_bytes >= 0 and 100e6 < memory == pytest.approx(
                own["history"][f"worker/{rank}/peak_memory_mb"][epoch] * 1e6)


def test_the_sleeping_rank_is_the_straggler(job):
    """Rank 0 waits for rank 1 in every allreduce: more comm time, less own work."""
    _, (rank0, _) = job
    history, last = rank0["history"], -1  # epoch 2: no tracing
    assert history["worker/0/comm_time_ms"][last] > history["worker/1/comm_time_ms"][last]
    assert history["worker/1/compute_time_ms"][last] > history["worker/0/compute_time_ms"][last]
    assert history["worker/1/compute_time_ms"][last] >= 1000 * SLEEP_S * 0.8
    assert history["worker_step_time_spread"][last] > 1.5
    assert history["worker_step_time_spread"][last] == pytest.approx(
        history["worker/1/compute_time_ms"][last] / history["worker/0/compute_time_ms"][last])


def test_comm_time_is_measured_and_a_share_of_the_step(job):
    _, ranks = job
    for own in ranks:
        for comm_ms, share, step_ms in zip(own["history"]["comm_time_ms"], own["history"]["comm_share"],
                                           own["history"]["step_time_ms"]):
            assert comm_ms > 0 and 0 < share <= 1
            assert share == pytest.approx(comm_ms / step_ms, rel=1e-3)  # Throughput's clock vs ours


def test_the_chief_writes_the_worker_tags_and_rank_1_writes_nothing(job):
    outdir, (rank0, _) = job
    assert [p.name for p in (outdir / "tb").iterdir()] == ["run"]  # one run: rank 1 wrote no folder
    train = _scalars(outdir / "tb" / "run" / "train")
    for tag in ("worker/0/step_time_ms", "worker/1/step_time_ms", "worker/1/compute_time_ms",
                "worker/0/examples_per_second", "worker_step_time_spread", "comm_time_ms", "comm_share",
                "wall_time_s"):
        np.testing.assert_allclose(train[f"epoch_{tag}"], rank0["history"][tag], rtol=1e-6, err_msg=tag)
    top = _scalars(outdir / "tb" / "run")
    assert top["time_to_target/loss<=1e+06"] == [pytest.approx(rank0["history"]["wall_time_s"][0])]
    assert top["evaluate/loss"] == [pytest.approx(rank0["evaluate"]["loss"])]
    assert not math.isnan(top["mean_examples_per_second"][0])


# The system part (moved here from tests/callbacks/test_system_metrics_callback.py to share the job).

SYSTEM_TAGS = {"system/cpu_percent", "system/host_cpu_percent", "system/rss_mb", "system/net_sent_mbit_s",
               "system/net_recv_mbit_s"}  # as TAGS in tests/callbacks/test_system_metrics_callback.py


def _system_scalars(path: Path) -> dict[str, list[tuple[int, float, float]]]:
    """``{tag: [(step, wall_time, value), ...]}`` of the scalars in the event files directly in ``path``."""
    import tensorflow as tf
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(str(path), size_guidance={"tensors": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.wall_time, float(tf.make_ndarray(e.tensor_proto)))
                  for e in accumulator.Tensors(tag)]
            for tag in accumulator.Tags()["tensors"]}


def test_under_horovod_every_rank_writes_its_own_folder_of_the_run(shared_job):
    done, _, tmp_path = shared_job
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = tmp_path / "tb" / "run"
    assert sorted(p.name for p in (run / "system").iterdir()) == ["rank0", "rank1"]
    assert not (tmp_path / "tb" / "run-elsewhere").exists()  # rank 1 got rank 0's run directory
    for rank in (0, 1):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert report["log_dir"] == str(run / "system" / f"rank{rank}")
        assert not report["running"] and "tfdist-system-metrics" not in report["threads"]
        scalars = _system_scalars(run / "system" / f"rank{rank}")
        assert set(scalars) == SYSTEM_TAGS
        steps = [step for step, _, _ in scalars["system/rss_mb"]]
        assert steps == sorted(steps) and steps[0] == 0 and steps[-1] >= 2
        assert all(value > 50 for _, _, value in scalars["system/rss_mb"])
        assert all(value >= 0 for _, _, value in scalars["system/cpu_percent"])
    # gloo between the ranks goes over this host's interfaces (loopback): the host counters saw it
    assert max(value for _, _, value in _system_scalars(run / "system" / "rank0")["system/net_recv_mbit_s"]) > 0
