"""Per-worker figures under a real `horovodrun -np 2` job (tests/scripts/hvd_metrics.py) in which
rank 1 sleeps after every batch: the gathered figures must name it, for tf-keras and Keras 3."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from support import horovodrun

pytestmark = [pytest.mark.horovod]

SLEEP_S = 0.1  # well above what a busy 2-core host adds to any rank's own work per step


@pytest.fixture(scope="module", params=["tf_keras", "keras_3"])
def job(request, tmp_path_factory) -> tuple[Path, list[dict]]:
    outdir = tmp_path_factory.mktemp(f"horovod-metrics-{request.param}")
    result = horovodrun("hvd_metrics.py", str(outdir), str(SLEEP_S), np=2, timeout=300,
                        env={"TFDIST_TEST_KERAS": request.param})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
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
            step_ms, comm_ms, rate = rows[rank]
            assert step_ms == pytest.approx(own["history"][f"worker/{rank}/step_time_ms"][epoch])
            assert comm_ms == pytest.approx(own["history"]["comm_time_ms"][epoch])  # its own view
            assert rate == pytest.approx(16 * 1000 / step_ms)


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
