"""The Horovod backend with real `horovodrun -np 2 --gloo` jobs (tests/scripts/hvd_train.py), for
models, optimizers and callbacks of tf-keras and of Keras 3 alike."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.horovod, pytest.mark.no_gpu]  # CPU-exact equivalence tolerances


FLAVOURS = ["tf_keras", "keras_3"]
LAZY_KINDS = ["sequential", "subclassed", "functional"]  # the jobs: tests/strategies/conftest.py


@pytest.fixture(scope="module", params=FLAVOURS)
def trained(request, horovod_jobs) -> tuple[Path, list[dict]]:
    return horovod_jobs.outdir(request.param, "tf_keras", "train"), horovod_jobs(request.param, "tf_keras", "train")


def test_the_job_used_the_keras_it_was_given(trained, request):
    _, ranks = trained
    expected = request.node.callspec.params["trained"]
    assert [r["flavour"] for r in ranks] == [expected, expected]


def test_auto_resolves_to_horovod_under_horovodrun(trained):
    _, ranks = trained
    assert [(r["kind"], r["size"], r["is_chief"]) for r in ranks] == [("horovod", 2, True), ("horovod", 2, False)]


def test_weights_identical_on_all_ranks_after_fit(trained):
    _, (rank0, rank1) = trained
    kernel0, kernel1 = np.array(rank0["initial_weights"][0]), np.array(rank1["initial_weights"][0])
    assert not np.allclose(kernel0, kernel1), "ranks must start different for this test to mean anything"
    for w0, w1 in zip(rank0["final_weights"], rank1["final_weights"]):
        np.testing.assert_array_equal(np.array(w0), np.array(w1))


def test_logged_metrics_are_the_mean_over_ranks(trained):
    _, (rank0, rank1) = trained
    for epoch in range(3):
        for name in ("loss", "mae", "val_loss", "val_mae"):
            raw = [rank0["raw_logs"][epoch][name], rank1["raw_logs"][epoch][name]]
            assert raw[0] != raw[1], f"{name}: ranks saw different shards, so raw values must differ"
            for rank in (rank0, rank1):
                assert rank["history"][name][epoch] == pytest.approx(np.mean(raw), rel=1e-6)


def test_evaluate_returns_the_global_mean_on_every_rank(trained):
    _, (rank0, rank1) = trained
    assert rank0["evaluate"] == rank1["evaluate"]
    assert set(rank0["evaluate"]) == {"loss", "mae"}


def test_equal_steps_on_every_rank(trained):
    _, (rank0, rank1) = trained
    assert rank0["steps"] == rank1["steps"] == 256 // 2 // 16


def test_learning_rate_warmup_follows_its_schedule(trained):
    _, (rank0, rank1) = trained
    steps, target, start = 8, 0.05 * 2, 0.05  # scaled by size 2; warm-up from the single-worker rate
    expected = [target * (0.5 + 0.5 * min(1.0, (epoch + batch / steps) / 2))
                for epoch in range(3) for batch in range(steps)]
    assert expected[0] == pytest.approx(start)
    np.testing.assert_allclose(rank0["lrs"], expected, rtol=1e-6)
    np.testing.assert_allclose(rank1["lrs"], expected, rtol=1e-6)
    assert rank0["history"]["lr"][-1] == pytest.approx(target)


def test_only_rank0_writes_checkpoints_and_event_files(trained):
    outdir, _ = trained
    assert sorted(p.name for p in (outdir / "ckpt-rank0").iterdir()) == [
        "model-1.weights.h5", "model-2.weights.h5", "model-3.weights.h5"]
    assert not (outdir / "ckpt-rank1").exists()
    assert sorted(p.name for p in (outdir / "tb").iterdir()) == ["run-rank0"]


def test_event_files_hold_the_averaged_metrics_and_throughput(trained):
    from tensorboard.backend.event_processing import event_accumulator

    outdir, (rank0, _) = trained
    train = event_accumulator.EventAccumulator(str(outdir / "tb" / "run-rank0" / "train"),
                                               size_guidance={"tensors": 0})
    train.Reload()
    losses = [float(np.asarray(__import__("tensorflow").make_ndarray(e.tensor_proto)))
              for e in train.Tensors("epoch_loss")]
    np.testing.assert_allclose(losses, rank0["history"]["loss"], rtol=1e-6)
    throughput = train.Tensors("epoch_examples_per_second")
    assert len(throughput) == 3
    hparams_run = event_accumulator.EventAccumulator(str(outdir / "tb" / "run-rank0"))
    hparams_run.Reload()
    assert "_hparams_/session_start_info" in hparams_run.Tags()["tensors"]


def test_validation_figures_in_tensorboard_are_the_mean_over_ranks(trained):
    """Keras' TensorBoard wrote rank 0's own validation value as evaluation_*_vs_iterations."""
    from tensorboard.backend.event_processing import event_accumulator
    import tensorflow as tf

    outdir, (rank0, rank1) = trained
    validation = event_accumulator.EventAccumulator(str(outdir / "tb" / "run-rank0" / "validation"),
                                                    size_guidance={"tensors": 0})
    validation.Reload()
    for name in ("loss", "mae"):
        raw = np.array([[r["raw_logs"][epoch][f"val_{name}"] for r in (rank0, rank1)] for epoch in range(3)])
        assert (raw[:, 0] != raw[:, 1]).all(), "ranks validate on different shards"
        for tag in (f"evaluation_{name}_vs_iterations", f"epoch_{name}"):
            written = [float(tf.make_ndarray(e.tensor_proto)) for e in validation.Tensors(tag)]
            np.testing.assert_allclose(written, raw.mean(axis=1), rtol=1e-6, err_msg=tag)


@pytest.mark.parametrize("keras", FLAVOURS)
@pytest.mark.parametrize("kind", LAZY_KINDS)
def test_lazily_built_models_start_identical_and_match_one_process(horovod_jobs, kind, keras):
    """Horovod's official example builds a Sequential without Input: the broadcast used to crash.
    Keras 3 builds such models (and its optimizer) inside the first traced step unless tfdist builds them.
    Rank 1 built another model first, so its layers are numbered otherwise: a broadcast that paired the
    weights by name waited forever here."""
    rank0, rank1 = horovod_jobs(keras, "tf_keras", f"lazy/{kind}")
    assert rank0["built_before_fit"] is (kind == "functional")
    for start0, start1 in zip(rank0["initial"], rank1["initial"]):
        np.testing.assert_array_equal(np.array(start0), np.array(start1))  # the first step is exact
    for distributed, other, reference in zip(rank0["distributed"], rank1["distributed"], rank0["reference"]):
        distributed, reference = np.array(distributed), np.array(reference)
        np.testing.assert_array_equal(distributed, np.array(other))
        error = np.linalg.norm(distributed - reference) / max(np.linalg.norm(reference), 1e-12)
        assert error <= 1e-5, f"{kind}: relative error {error:.2e}"


def test_horovods_own_wrapper_counts_as_averaging_on_tf_keras_only():
    """Around a Keras 3 optimizer, Horovod's own DistributedOptimizer allreduces in methods Keras 3 never
    calls (horovod/horovod#4290): its ``_allreduce_grads`` says nothing there."""
    import keras
    import tf_keras

    from tfdist.runtime.allreduce import ALLREDUCE_MARK, averages_over_ranks, averages_through_horovods_own

    def marked(optimizer, **attributes):
        for name, value in attributes.items():
            setattr(optimizer, name, value)
        return optimizer

    assert averages_over_ranks(marked(tf_keras.optimizers.SGD(0.1), _allreduce_grads=lambda *a: a))
    assert not averages_over_ranks(marked(keras.optimizers.SGD(0.1), _allreduce_grads=lambda *a: a))
    assert averages_over_ranks(marked(keras.optimizers.SGD(0.1), **{ALLREDUCE_MARK: object()}))
    assert averages_over_ranks(keras.optimizers.LossScaleOptimizer(
        marked(keras.optimizers.SGD(0.1), **{ALLREDUCE_MARK: object()})))  # the mark on the inner one
    assert not averages_over_ranks(tf_keras.optimizers.SGD(0.1))
    # whose allreduce the strategy's options cannot reach: Horovod's own, unless tfdist's mark says it is tfdist's
    assert averages_through_horovods_own(marked(tf_keras.optimizers.SGD(0.1), _allreduce_grads=lambda *a: a))
    assert not averages_through_horovods_own(marked(tf_keras.optimizers.SGD(0.1), _allreduce_grads=lambda *a: a,
                                                    **{ALLREDUCE_MARK: object()}))
    assert not averages_through_horovods_own(marked(keras.optimizers.SGD(0.1), _allreduce_grads=lambda *a: a))


@pytest.mark.parametrize("keras", FLAVOURS)
def test_an_elastic_job_started_alone_is_checked_and_a_models_own_train_step_is_left_to_it(keras):
    """The refusal's two edges, on the strategy's own check with its size and options given: one rank
    of an elastic job is refused (the ranks that join later would train apart), one rank of a plain
    job is not (there is nothing to average), and a model with its own ``train_step`` is left to it
    (it may average with DistributedGradientTape). The shared job checks two ranks, refused."""
    import importlib
    from types import SimpleNamespace

    from tfdist.errors import ArgumentValueError
    from tfdist.strategies.horovod import HorovodStrategy

    package = importlib.import_module("tf_keras" if keras == "tf_keras" else "keras")

    class OwnStep(package.Sequential):
        def train_step(self, data):
            return super().train_step(data)

    def compiled(model_class: type) -> object:
        model = model_class([package.Input((3,)), package.layers.Dense(1)])
        model.compile(optimizer=package.optimizers.SGD(0.1), loss="mse")
        return model

    def check(model: object, size: int, elastic: bool) -> None:
        job = SimpleNamespace(size=size, options=SimpleNamespace(elastic=elastic))
        HorovodStrategy._refuse_rank_local_optimizer(job, model)

    plain, own_step = compiled(package.Sequential), compiled(OwnStep)
    with pytest.raises(ArgumentValueError, match=r"does not average its gradients over the ranks of this "
                                                 r"elastic job .*; fix: compile with optimizer=strategy\.optimizer"):
        check(plain, size=1, elastic=True)
    check(plain, size=1, elastic=False)
    check(own_step, size=2, elastic=False)
    check(own_step, size=1, elastic=True)
    with pytest.raises(ArgumentValueError, match="over the 2 Horovod ranks"):
        check(plain, size=2, elastic=False)


@pytest.mark.parametrize("keras", FLAVOURS)
def test_an_optimizer_that_averages_nothing_is_refused_before_the_ranks_train_apart(horovod_jobs, keras):
    """Compiled without strategy.optimizer(), the ranks trained each on its own shard, ended with
    different weights, and the job exited 0. Horovod's own tf-keras wrapper (a port that kept
    hvd.DistributedOptimizer) averages, and is taken; the strategy's compression, which cannot reach it,
    is said to be left out, once."""
    rank0, rank1 = horovod_jobs(keras, "tf_keras", "raw")
    for rank in (rank0, rank1):
        assert rank["refused"] == (
            "the model's optimizer (SGD) does not average its gradients over the 2 Horovod ranks (it did not go "
            "through strategy.optimizer()), so each rank would train its own copy on its own shard; fix: compile "
            "with optimizer=strategy.optimizer(tf.keras.optimizers.Adam(...)) inside strategy.scope()"), rank
    if keras == "tf_keras":
        for w0, w1 in zip(rank0["horovods_own"], rank1["horovods_own"]):
            np.testing.assert_allclose(np.array(w0), np.array(w1), rtol=1e-6, atol=1e-7)
        for rank in (rank0, rank1):  # the strategy's compression cannot reach Horovod's own wrapper: said once
            assert [line for line in rank["said"] if "Horovod's own DistributedOptimizer" in line] == [
                "tfdist: the model's optimizer is Horovod's own DistributedOptimizer, which combines the gradients "
                "as it was built, so `compression`='fp16' is not applied; fix: compile with "
                "optimizer=strategy.optimizer(tf.keras.optimizers.Adam(...)) inside strategy.scope()"], rank["said"]


@pytest.mark.parametrize("keras, tf_keras_is", [("tf_keras", "tf_keras"), ("keras_3", "keras_3"),
                                               ("tf_keras", "keras_3")])
def test_two_ranks_equal_one_process_with_twice_the_batch(horovod_jobs, keras, tf_keras_is):
    """Last case: tf-keras objects in a process where ``tf.keras`` (and so Horovod's Keras) is Keras 3."""
    rank0, rank1 = horovod_jobs(keras, tf_keras_is, "equivalence")
    assert rank0["tf_keras_is"] == tf_keras_is
    for distributed, other, reference in zip(rank0["distributed"], rank1["distributed"], rank0["reference"]):
        distributed, reference = np.array(distributed), np.array(reference)
        np.testing.assert_array_equal(distributed, np.array(other))
        error = np.linalg.norm(distributed - reference) / max(np.linalg.norm(reference), 1e-12)
        assert error <= 1e-5, f"relative error {error:.2e}"


@pytest.mark.parametrize("keras", FLAVOURS)
def test_a_failing_rank_ends_the_job_quickly_and_the_rerun_resumes_every_rank_at_the_last_finished_epoch(
        horovod_jobs, keras):
    """Rank 1 fails as epoch 2 begins while rank 0 waits in an allreduce: the job ends, non-zero, well
    before a hang would; rerun, BackupAndRestore resumes both ranks at epoch 2. The first run is a job
    of its own; the rerun is this Keras's last part of the shared job (tests/strategies/conftest.py),
    which exits 0 only if the rerun did."""
    first, ended = horovod_jobs.first_run(keras, "tf_keras")
    assert first.returncode != 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "rank 1 stops the first run at epoch 2 on purpose" in first.stdout + first.stderr
    outdir = horovod_jobs.outdir(keras, "tf_keras", "resume")  # asserts the shared job (with the rerun) exited 0
    reaction = ended - float((outdir / "fault-time").read_text())
    assert reaction < 60, f"the job took {reaction:.0f}s after the fault to end"  # only a hang breaks it
    for rank in (0, 1):
        epochs = (outdir / f"epochs-rank{rank}.txt").read_text().split()
        assert epochs == ["0", "1", "2", "3"], f"rank {rank}: {epochs}"  # none lost, none repeated
