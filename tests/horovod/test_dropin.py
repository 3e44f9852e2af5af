"""tfdist.horovod as a drop-in for horovod.tensorflow.keras, with tf-keras and with Keras 3.

The horovodrun jobs (one per Keras: tests/scripts/hvd_dropin.py, then the MNIST-shaped example) pick
the Keras as Horovod users do, through TF_USE_LEGACY_KERAS and `tf.keras`. The checks without
horovodrun run in this process, Horovod not initialised.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from support import horovodrun

FLAVOURS = {"tf_keras": "1", "keras_3": "0"}  # the TF_USE_LEGACY_KERAS each flavour runs with
horovod_job = [pytest.mark.horovod, pytest.mark.no_gpu]  # CPU-exact tolerances


def _job(script: str, outdir: Path, keras: str, *args: str) -> None:
    result = horovodrun(script, str(outdir), *args, np=2, timeout=300, binary=True,  # as Horovod's docs run it
                        env={"TF_USE_LEGACY_KERAS": FLAVOURS[keras], "TFDIST_TEST_KERAS": keras})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(np.array_equal(np.array(x), np.array(y)) for x, y in zip(a, b))


def relative_error(weights: list, reference: list) -> float:
    """max |w - r| / max |r| over all weight arrays."""
    return max(float(np.max(np.abs(np.array(w) - np.array(r))) / np.max(np.abs(np.array(r))))
               for w, r in zip(weights, reference))


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> Callable[[str], tuple[Path, Path]]:
    """``jobs(keras)``: the output folders of hvd_dropin.py and of the MNIST example, which that
    job runs after its scenarios (``--then-mnist``); one job per Keras, run once."""
    done: dict[str, tuple[Path, Path]] = {}

    def run(keras: str) -> tuple[Path, Path]:
        if keras not in done:
            outdir, mnist = tmp_path_factory.mktemp(f"hvd-dropin-{keras}"), tmp_path_factory.mktemp(f"hvd-mnist-{keras}")
            _job("hvd_dropin.py", outdir, keras, "--then-mnist", str(mnist))
            done[keras] = outdir, mnist
        return done[keras]

    return run


@pytest.fixture(scope="module", params=list(FLAVOURS))
def mnist(request, jobs) -> tuple[str, Path]:
    return request.param, jobs(request.param)[1]


@pytest.fixture(scope="module", params=list(FLAVOURS))
def scenarios(request, jobs) -> tuple[str, list[dict]]:
    outdir = jobs(request.param)[0]
    return request.param, [json.loads((outdir / f"rank{r}.json").read_text()) for r in (0, 1)]


# (a) Horovod's MNIST example, shaped the same, on tfdist.horovod.

@pytest.mark.horovod
@pytest.mark.no_gpu
def test_mnist_example_ends_with_identical_weights_on_both_ranks(mnist):
    keras, outdir = mnist
    rank0, rank1 = (json.loads((outdir / f"weights-{r}.json").read_text()) for r in (0, 1))
    assert rank0["keras"] == rank1["keras"] == {"tf_keras": "tf_keras", "keras_3": "keras"}[keras]
    assert _same(rank0["weights"], rank1["weights"])


@pytest.mark.horovod
@pytest.mark.no_gpu
def test_mnist_example_checkpoints_on_rank0_only(mnist):
    _, outdir = mnist
    assert sorted(p.name for p in outdir.glob("checkpoint-*")) == [
        f"checkpoint-{epoch}.h5" for epoch in (1, 2, 3)]


# (b) different starting weights + DistributedOptimizer + broadcast == one process, doubled batch.

@pytest.mark.horovod
@pytest.mark.no_gpu
def test_each_job_used_the_keras_tf_keras_points_to(scenarios):
    keras, ranks = scenarios
    assert [r["flavour"] for r in ranks] == [keras, keras]
    assert [r["size"] for r in ranks] == [2, 2]
    assert ranks[0]["allreduce"] == ranks[1]["allreduce"] == [3.0]  # hvd.allreduce(value, op=Sum)


@pytest.mark.horovod
@pytest.mark.no_gpu
@pytest.mark.parametrize("scenario", ["equivalence", "sequential"])
def test_ranks_from_different_weights_end_identical_and_equal_one_process(scenarios, scenario):
    _, (rank0, rank1) = (scenarios[0], [r[scenario] for r in scenarios[1]])
    if scenario == "equivalence":  # the Sequential without Input has no weights before fit
        assert not np.allclose(rank0["initial"][0], rank1["initial"][0]), "ranks must start different"
    assert rank0["optimizer_class"] == "SGD"  # Keras 3: the class is kept
    assert _same(rank0["final"], rank1["final"])
    assert relative_error(rank0["final"], rank0["reference"]) <= 1e-5


# (c) MetricAverageCallback.

@pytest.mark.horovod
@pytest.mark.no_gpu
def test_logged_metrics_are_the_mean_of_the_ranks_raw_values(scenarios):
    _, ranks = scenarios
    raw = [r["equivalence"]["raw_logs"] for r in ranks]
    for epoch in range(3):
        for name in ("loss", "mae"):
            values = [raw[0][epoch][name], raw[1][epoch][name]]
            assert values[0] != values[1], "ranks saw different shards, so raw values must differ"
            for rank in ranks:
                assert rank["equivalence"]["averaged_logs"][epoch][name] == pytest.approx(np.mean(values), rel=1e-6)


# (d) LearningRateWarmupCallback: Horovod's formula, per batch.

@pytest.mark.horovod
@pytest.mark.no_gpu
def test_warmup_follows_horovods_formula_per_batch(scenarios):
    _, ranks = scenarios
    for rank in ranks:
        w = rank["warmup"]
        steps, lr, warm, size = w["steps"], w["initial_lr"], w["warmup_epochs"], 2
        expected = []
        for epoch in range(w["epochs"]):
            for batch in range(steps):
                if epoch < warm:
                    expected.append(lr / size * ((epoch + (batch + 1) / steps) * (size - 1) / warm + 1))
                else:
                    expected.append(expected[-1])  # after the warm-up the rate is left alone
        assert expected[0] == pytest.approx(0.05625)
        np.testing.assert_allclose(w["rates"], expected, rtol=1e-6)


# (e) the trap: Horovod's own DistributedOptimizer never allreduces a Keras 3 optimizer.

@pytest.mark.horovod
@pytest.mark.no_gpu
def test_horovods_optimizer_leaves_keras_3_ranks_apart_and_tfdists_does_not(scenarios):
    keras, (rank0, rank1) = scenarios
    assert _same(rank0["trap"]["tfdist"], rank1["trap"]["tfdist"])
    if keras == "keras_3":
        assert not _same(rank0["trap"]["horovod"], rank1["trap"]["horovod"]), "the trap is gone: Horovod fixed it?"
    else:
        assert _same(rank0["trap"]["horovod"], rank1["trap"]["horovod"])


# (f) a GradientTape loop that calls apply_gradients (issue 34): tf-keras ranks drifted apart, exit 0.

@pytest.mark.horovod
@pytest.mark.no_gpu
@pytest.mark.parametrize("mode", ["eager", "function", "loss_scale"])
def test_a_custom_loop_applying_gradients_keeps_ranks_identical_and_equal_one_process(scenarios, mode):
    _, (rank0, rank1) = scenarios
    assert _same(rank0["loop"][mode], rank1["loop"][mode])
    assert relative_error(rank0["loop"][mode], rank0["loop"]["reference"]) <= 1e-5


@pytest.mark.horovod
@pytest.mark.no_gpu
def test_horovods_own_optimizer_leaves_a_custom_loops_ranks_apart(scenarios):
    """The hole is Horovod's (horovod#2001, #3058: it allreduces in compute_gradients only); this pin says
    when Horovod closes it."""
    _, (rank0, rank1) = scenarios
    assert not _same(rank0["loop"]["horovod"], rank1["loop"]["horovod"]), "Horovod fixed its custom-loop hole?"


# (g) refusals and checks without horovodrun (Horovod not initialised).

def test_keras_3_refuses_groups_as_variable_lists_naming_the_fix():
    import keras

    import tfdist.horovod as hvd
    from tfdist.errors import ArgumentValueError

    variable = keras.Variable(1.0)
    with pytest.raises(ArgumentValueError, match=r"`groups` as lists of variables .*fix: pass an integer"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), groups=[[variable]])


def test_keras_3_backward_passes_map_onto_accumulation_and_any_optimizer_refuses_adasum():
    import keras
    import tf_keras

    import tfdist.horovod as hvd
    from tfdist.errors import ArgumentValueError

    # issue 22: Keras 3 accumulates with the optimizer's own gradient_accumulation_steps (one allreduce per
    # update: tests/strategies/test_mixed_precision.py counts them), instead of refusing
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=2)
    assert optimizer.gradient_accumulation_steps == 2
    for optimizer in (keras.optimizers.SGD(0.1), tf_keras.optimizers.SGD(0.1)):
        with pytest.raises(ArgumentValueError, match=r"`op`=.*fix: pass op=hvd.Average"):
            hvd.DistributedOptimizer(optimizer, op=hvd.Adasum)


def test_keras_3_optimizer_keeps_its_class_and_is_marked():
    import keras

    import tfdist.horovod as hvd
    from tfdist.runtime.allreduce import ALLREDUCE_MARK

    optimizer = keras.optimizers.Adam(0.01)
    assert hvd.DistributedOptimizer(optimizer, groups=2) is optimizer
    assert type(optimizer) is keras.optimizers.Adam
    assert getattr(optimizer, ALLREDUCE_MARK).num_groups == 2


def test_not_provided_parts_name_the_replacement():
    import tfdist.horovod as hvd
    from tfdist.errors import TfdistError

    with pytest.raises(TfdistError, match=r"elastic.*fix: use tfdist.make_strategy\('horovod', elastic=True\)"):
        hvd.elastic  # noqa: B018
    with pytest.raises(TfdistError, match=r"TF1 .*fix: pass callbacks.BroadcastGlobalVariablesCallback\(0\)"):
        hvd.broadcast_global_variables(0)
    with pytest.raises(TfdistError, match=r"BestModelCheckpoint.*fix: use your Keras's ModelCheckpoint"):
        hvd.callbacks.BestModelCheckpoint()


def test_names_match_horovod_tensorflow_keras():
    import horovod.tensorflow.keras as horovod_keras

    import tfdist.horovod as hvd

    public = {name for name in dir(horovod_keras) if not name.startswith("_")}
    missing = set()
    for name in public - {"elastic", "keras", "K", "inspect", "warnings", "version", "tf",
                          "is_version_greater_equal_than"}:
        if not hasattr(hvd, name):
            missing.add(name)
    assert missing == set()


def _tiny(keras_module, lr: float = 0.1, momentum: float = 0.0):
    model = keras_module.Sequential([keras_module.layers.Dense(1)])
    model.compile(optimizer=keras_module.optimizers.SGD(lr, momentum=momentum), loss="mse")
    return model


@pytest.mark.parametrize("package", ["tf_keras", "keras"])
def test_callbacks_work_in_plain_fit_without_horovod(package):
    import importlib

    import tfdist.horovod as hvd

    keras_module = importlib.import_module(package)
    model = _tiny(keras_module)
    rates = []
    record = keras_module.callbacks.LambdaCallback(
        on_train_batch_begin=lambda batch, logs: rates.append(float(np.asarray(model.optimizer.learning_rate))))
    x, y = np.ones((8, 3), "float32"), np.ones((8, 1), "float32")
    history = model.fit(x, y, batch_size=4, epochs=3, verbose=0, callbacks=[
        hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateScheduleCallback(0.1, multiplier=0.5, start_epoch=1, end_epoch=3), record])
    np.testing.assert_allclose(rates, [0.1, 0.1, 0.1, 0.1, 0.05, 0.05], rtol=1e-6)  # staircase, 0.5**(epoch-1)
    np.testing.assert_allclose(history.history["lr"], [0.1, 0.1, 0.05], rtol=1e-6)


@pytest.mark.parametrize("package", ["tf_keras", "keras"])
def test_momentum_correction_on_a_compiled_momentum_is_refused_with_the_fix(package):
    import importlib

    import tfdist.horovod as hvd
    from tfdist.errors import ArgumentValueError

    keras_module = importlib.import_module(package)
    model = _tiny(keras_module, momentum=0.9)
    x, y = np.ones((8, 3), "float32"), np.ones((8, 1), "float32")
    with pytest.raises(ArgumentValueError, match=r"momentum_correction=True .*fix: pass momentum_correction=False"):
        model.fit(x, y, batch_size=4, epochs=1, verbose=0,
                  callbacks=[hvd.callbacks.LearningRateWarmupCallback(0.1, warmup_epochs=1)])


def test_load_model_reads_the_keras_from_the_file_and_keeps_the_optimizer_state(tmp_path):
    import keras
    import tf_keras

    import tfdist.horovod as hvd
    from tfdist.runtime.allreduce import ALLREDUCE_MARK

    x, y = np.ones((8, 3), "float32"), np.ones((8, 1), "float32")
    model = _tiny(keras)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    model.save(tmp_path / "k3.keras")
    legacy = _tiny(tf_keras)
    legacy.fit(x, y, batch_size=4, epochs=1, verbose=0)
    legacy.save(tmp_path / "tfk.h5")
    assert hvd.saved_keras(tmp_path / "k3.keras") == "keras_3"
    assert hvd.saved_keras(tmp_path / "tfk.h5") == "tf_keras"
    loaded = hvd.load_model(tmp_path / "k3.keras")
    assert type(loaded.optimizer) is keras.optimizers.SGD
    assert getattr(loaded.optimizer, ALLREDUCE_MARK) is not None
    assert int(loaded.optimizer.iterations.numpy()) == 2
    np.testing.assert_array_equal(loaded.get_weights()[0], model.get_weights()[0])
    loaded_legacy = hvd.load_model(tmp_path / "tfk.h5")
    assert type(loaded_legacy.optimizer).__module__ == "horovod._keras"  # Horovod's tf-keras wrapper
    assert isinstance(loaded_legacy.optimizer, tf_keras.optimizers.SGD)
    assert int(loaded_legacy.optimizer.iterations.numpy()) == 2  # the saved state, carried over
