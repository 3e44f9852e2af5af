"""Mixed precision on every backend (issue 22, item 4), and keras.distribution refused (item 6).

mirrored (two logical CPUs, both Kerases) and multi_worker_mirrored (one worker) train both
policies within the same tolerances of one process (one subprocess, tests/scripts/
precision_tf_distribute.py); parameter_server trains ``mixed_bfloat16`` on an in-process cluster
and refuses ``mixed_float16`` with the fix (tf-keras has no loss scaling there).

Horovod: one horovodrun job, for both Kerases in turn (tests/scripts/hvd_precision.py, whose
gradient accumulation run the tests moved here from test_accumulation.py read), trains
``mixed_float16`` and ``mixed_bfloat16`` with and without ``compression="fp16"``. The loss is tiny (gradients ~1e-7, below float16's normal range) so fp16
on the wire would flush unscaled gradients to zero, and rank 1 alone overflows in one batch per
epoch, so every rank must take the same skip decision. Tolerances against one process with the
doubled batch, per dtype: float16 compute 1e-2, float16 on the wire too 2e-2, bfloat16 (8-bit
mantissa) 5e-2, all relative (float32 runs match to 1e-5 in test_horovod.py).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from support import horovodrun

keras = pytest.importorskip("keras")
tf_keras = pytest.importorskip("tf_keras")
pytest.importorskip("horovod.tensorflow")

from tfdist.errors import ArgumentValueError  # noqa: E402

FLAVOURS = ["tf_keras", "keras_3"]
INITIAL_SCALE = 2.0 ** 15  # both Kerases' LossScaleOptimizer default
TOLERANCE = {"float16": 1e-2, "float16_fp16": 2e-2, "bfloat16": 5e-2, "bfloat16_fp16": 5e-2}


@pytest.fixture(scope="module")
def precision_jobs(tmp_path_factory) -> tuple[Path, object]:
    """The one hvd_precision.py job (``--kerases``: every Keras in turn, its accumulation run too)."""
    root = tmp_path_factory.mktemp("hvd-precision")
    result = horovodrun("hvd_precision.py", str(root), "--kerases", *FLAVOURS, np=2, timeout=720)
    return root, result


@pytest.fixture(scope="module", params=FLAVOURS)
def precision_job(request, precision_jobs) -> tuple[Path, list[dict]]:
    """One Keras's part of the job: its folder and both ranks' reports (a failed job fails them all)."""
    root, result = precision_jobs
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    outdir = root / request.param
    return outdir, [json.loads((outdir / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def reference(ranks: list[dict], name: str) -> dict:
    """Scenario ``name`` with the one-process reference, from the rank that trained it."""
    held = [rank["scenarios"][name] for rank in ranks if "reference" in rank["scenarios"][name]]
    assert len(held) == 1, f"{name}: {len(held)} ranks hold the reference"
    return held[0]


def _relative_error(weights: list, reference: list) -> float:
    flat = np.concatenate([np.ravel(w) for w in weights])
    expected = np.concatenate([np.ravel(w) for w in reference])
    return float(np.linalg.norm(flat - expected) / np.linalg.norm(expected))


# --- horovod ------------------------------------------------------------------------------------------
@pytest.mark.horovod
@pytest.mark.no_gpu
def test_every_rank_ends_identical_under_every_policy(precision_job):
    _, (rank0, rank1) = precision_job
    assert sorted(rank0["scenarios"]) == sorted(rank1["scenarios"])
    for name, first in rank0["scenarios"].items():
        second = rank1["scenarios"][name]
        for mine, theirs in zip(first["weights"], second["weights"]):
            np.testing.assert_array_equal(np.array(mine), np.array(theirs), err_msg=name)
        assert first["loss_scale"] == second["loss_scale"], name
        assert first["iterations"] == second["iterations"], name


@pytest.mark.horovod
@pytest.mark.no_gpu
@pytest.mark.parametrize("name", sorted(TOLERANCE))
def test_two_ranks_match_one_process_with_twice_the_batch_within_the_dtypes_tolerance(precision_job, name):
    _, ranks = precision_job
    run = reference(ranks, name)
    # training moves the weights far more than the tolerance: a run whose gradients were flushed to
    # zero on the wire (fp16 without the loss scale) or never applied could not pass
    assert _relative_error(run["initial"], run["reference"]) > 5 * TOLERANCE[name]
    error = _relative_error(run["weights"], run["reference"])
    assert error <= TOLERANCE[name], f"{name}: relative error {error:.2e} > {TOLERANCE[name]}"


@pytest.mark.horovod
@pytest.mark.no_gpu
def test_loss_scaling_wraps_the_allreduce_and_skips_the_overflowing_steps_everywhere(precision_job):
    """Rank 1's outlier overflows float16 once per epoch: every rank skips those steps and halves its
    scale, as one process on the doubled batch does (the job would hang or drift otherwise)."""
    _, ranks = precision_job
    rank0 = ranks[0]
    for name in ("float16", "float16_fp16"):
        run = reference(ranks, name)
        assert run["optimizer"].startswith("LossScaleOptimizer"), run["optimizer"]
        assert run["loss_scale"] == run["reference_loss_scale"] < INITIAL_SCALE, name
    assert rank0["scenarios"]["bfloat16"]["loss_scale"] is None  # bfloat16 needs no loss scaling
    if rank0["keras"] == "keras_3":  # accumulation inside a LossScaleOptimizer: skipped micro-steps agree
        assert rank0["scenarios"]["float16_accumulation"]["loss_scale"] < INITIAL_SCALE


# --- mirrored, multi_worker_mirrored, parameter_server -----------------------------------------------
# --- gradient accumulation in the same job (moved from test_accumulation.py: one file, one job per Keras) ---
GRADIENT_TENSOR = {"keras_3": re.compile(r"tfdist\.gradients\."),
                   "tf_keras": re.compile(r"DistributedSGD_Allreduce")}


def _allreduces_per_tensor(timeline: str, keras_flavour: str) -> dict[str, int]:
    """How many times each gradient tensor was allreduced, from a Horovod timeline (Chrome trace
    events: a process per tensor, named in its metadata, one "NEGOTIATE_ALLREDUCE" span per allreduce)."""
    text = timeline.strip().rstrip(",")
    events = json.loads(text if text.endswith("]") else text + "]")
    names = {e["pid"]: e["args"].get("name", "") for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    counts: dict[str, int] = {}
    for event in events:
        if event.get("ph") == "B" and event.get("name") == "NEGOTIATE_ALLREDUCE":
            name = names.get(event["pid"], "")
            if GRADIENT_TENSOR[keras_flavour].search(name):
                counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.horovod
@pytest.mark.no_gpu
def test_gradients_move_once_per_update(precision_job):
    """4 micro-steps per epoch per rank, 2 per update, 2 epochs: 4 updates, so 4 allreduces per gradient
    tensor (8 if every micro-step allreduced)."""
    outdir, ranks = precision_job
    flavour = ranks[0]["keras"]
    counts = _allreduces_per_tensor((outdir / "accumulation-timeline.json").read_text(), flavour)
    assert counts, f"no gradient allreduce in the timeline: {sorted(counts)}"
    assert set(counts.values()) == {4}, counts
    for rank in ranks:
        assert rank["scenarios"]["accumulation"]["iterations"] in (4, 8)  # tf-keras counts updates, Keras 3 micro-steps


@pytest.mark.horovod
@pytest.mark.no_gpu
def test_two_ranks_accumulating_two_steps_equal_one_process_with_four_times_the_batch(precision_job):
    _, (rank0, rank1) = precision_job
    first, second = rank0["scenarios"]["accumulation"], rank1["scenarios"]["accumulation"]
    expected = next(run["reference"] for run in (first, second) if "reference" in run)
    for mine, theirs, reference in zip(first["weights"], second["weights"], expected):
        np.testing.assert_array_equal(np.array(mine), np.array(theirs))
        error = np.linalg.norm(np.subtract(mine, reference)) / np.linalg.norm(reference)
        assert error <= 1e-5, f"relative error {error:.2e}"  # float32: summation order only


def _tf_distribute_job(mode: str, tmp_path_factory) -> dict:
    import subprocess
    import sys

    from support import SCRIPTS, subprocess_env

    outfile = tmp_path_factory.mktemp(f"precision-{mode}") / "result.json"
    result = subprocess.run([sys.executable, str(SCRIPTS / "precision_tf_distribute.py"), mode, str(outfile)],
                            capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(outfile.read_text())


@pytest.fixture(scope="module")
def tf_distribute_runs(tmp_path_factory) -> dict:
    return _tf_distribute_job("local", tmp_path_factory)


@pytest.mark.slow
@pytest.mark.no_gpu  # two logical CPUs make the two mirrored replicas
@pytest.mark.parametrize("run", ["mirrored/tf_keras", "mirrored/keras_3", "multi_worker_mirrored/tf_keras"])
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_the_tf_distribute_backends_train_mixed_precision_like_one_process(tf_distribute_runs, run, policy):
    result = tf_distribute_runs[f"{run}/{policy}"]
    assert result["replicas"] == (2 if run.startswith("mirrored") else 1)
    assert (result["compute_dtype"], result["variable_dtype"]) == (policy.split("_")[1], "float32")
    assert result["optimizer"].startswith("LossScaleOptimizer") == (policy == "mixed_float16")
    assert result["loss"][-1] < 0.2 * result["loss"][0]
    tolerance = TOLERANCE["float16" if policy == "mixed_float16" else "bfloat16"]
    assert result["relative_error"] <= tolerance, f"relative error {result['relative_error']:.2e}"


@pytest.mark.cluster
def test_parameter_servers_train_bfloat16_and_refuse_float16_naming_the_fix(tmp_path_factory):
    """An in-process cluster (2 workers, 1 ps). tf-keras has no loss scaling under parameter servers:
    float16 is refused when the scope opens, before tf-keras' own error inside the first layer."""
    runs = _tf_distribute_job("ps", tmp_path_factory)
    bfloat16 = runs["parameter_server/tf_keras/mixed_bfloat16"]
    assert (bfloat16["compute_dtype"], bfloat16["variable_dtype"], bfloat16["optimizer"]) == ("bfloat16", "float32", "SGD")
    assert bfloat16["loss"][-1] < 0.2 * bfloat16["loss"][0]
    assert runs["parameter_server/tf_keras/mixed_float16"] == (
        "ArgumentValueError: the mixed precision policy 'mixed_float16' needs loss scaling, which tf-keras "
        "cannot do under parameter servers (asynchronous updates to one shared loss scale); fix: use "
        "tf_keras.mixed_precision.set_global_policy('mixed_bfloat16') (same range as float32, no loss scaling), "
        "or a synchronous backend for float16: horovod, multi_worker_mirrored or mirrored")


# --- in-process: where the allreduce goes, and the refusals -------------------------------------------
def test_keras_3_under_mixed_float16_gets_its_loss_scale_optimizer_outside_the_allreduce():
    import tfdist.horovod as hvd
    from tfdist.runtime.allreduce import ALLREDUCE_MARK

    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        plain = keras.optimizers.SGD(0.1)
        wrapped = hvd.DistributedOptimizer(plain)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert isinstance(wrapped, keras.optimizers.LossScaleOptimizer) and wrapped.inner_optimizer is plain
    assert "apply" in vars(wrapped) and "apply" not in vars(plain)  # allreduce first, then the finite test
    assert getattr(wrapped, ALLREDUCE_MARK) is not None


def test_keras_3_allreduce_moves_out_to_the_loss_scale_optimizer_compile_added():
    """A model whose own dtype policy is mixed_float16: compile wraps the distributed optimizer afterwards."""
    import tfdist.horovod as hvd
    from tfdist.runtime.allreduce import rehome_under_loss_scale

    plain = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    outer = keras.optimizers.LossScaleOptimizer(plain)
    assert rehome_under_loss_scale(outer) is outer
    assert "apply" in vars(outer) and "apply" not in vars(plain)


def test_keras_3_loss_scale_around_a_distributed_optimizer_is_refused_naming_the_fix():
    import tfdist.horovod as hvd

    inner = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    with pytest.raises(ArgumentValueError, match=r"this SGD already allreduces its gradients .*fix: wrap a new "
                                                 r"optimizer, once \(a LossScaleOptimizer around the plain"):
        hvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(inner))


def test_tf_keras_loss_scale_optimizer_is_rebuilt_around_horovods_wrapper():
    import tfdist.horovod as hvd

    given = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1), initial_scale=256.0)
    wrapped = hvd.DistributedOptimizer(given)
    assert isinstance(wrapped, tf_keras.mixed_precision.LossScaleOptimizer)
    assert type(wrapped.inner_optimizer).__module__.startswith("horovod")  # Horovod's subclass of SGD
    assert (wrapped.initial_scale, wrapped.dynamic) == (256.0, True)


def test_loss_scaling_with_accumulation_refuses_what_it_cannot_keep_exact():
    import tfdist.horovod as hvd

    with pytest.raises(ArgumentValueError, match=r"compression=fp16 with gradient accumulation \(2 steps\) inside "
                                                 r"a Keras 3 LossScaleOptimizer.*; fix: drop compression='fp16'"):
        hvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
                                 backward_passes_per_step=2, compression=hvd.Compression.fp16)
    with pytest.raises(ArgumentValueError, match=r"`backward_passes_per_step`=2 with the tf-keras "
                                                 r"LossScaleOptimizerV3 around SGD.*; fix: leave"):
        hvd.DistributedOptimizer(tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1)),
                                 backward_passes_per_step=2)


# --- keras.distribution (item 6) ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["single", "auto"])
def test_a_keras_distribution_on_the_tensorflow_backend_is_refused_naming_the_fix(kind):
    import tfdist
    from tfdist.strategies import OptionValueError

    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh((len(devices),), ["model"], devices)
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map["dense.*kernel"] = (None, "model")
    keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=layout_map,
                                                                         batch_dim_name="model"))
    try:
        with pytest.raises(OptionValueError, match=r"^keras.distribution is set to a ModelParallel on the "
                                                   r"TensorFlow backend, .* shards nothing .*; fix: call "
                                                   r"keras.distribution.set_distribution\(None\); for a model "
                                                   r"bigger than one device use make_strategy\('parameter_server', "
                                                   r"shards=N\)"):
            tfdist.make_strategy(kind)
    finally:
        keras.distribution.set_distribution(None)
    assert tfdist.make_strategy("single").kind == "single"  # unset again: accepted


def test_the_loss_scale_accessor_finds_the_inner_optimizer_of_both_kerases():
    from tfdist import upstream
    from tfdist.callbacks.learning_rate import uses_schedule

    for optimizer, inner in ((keras.optimizers.LossScaleOptimizer(sgd := keras.optimizers.SGD(0.1)), sgd),
                             (tf_keras.mixed_precision.LossScaleOptimizer(tsgd := tf_keras.optimizers.SGD(0.1)), tsgd)):
        assert upstream.loss_scale_inner(optimizer) is inner
        assert upstream.loss_scale_inner(inner) is None
        assert upstream.raw_learning_rate(optimizer) is upstream.raw_learning_rate(inner)
        assert uses_schedule(optimizer) is False  # strategy.optimizer can scale a wrapped optimizer's rate


def test_the_pages_python_block_runs():
    """docs/mixed-precision.md's script, as one process (auto picks single here)."""
    from doc_pages import DOCS, blocks, text

    (script,) = blocks(text(DOCS / "mixed-precision.md"), "python")
    exec(compile(script, "docs/mixed-precision.md", "exec"), {"__name__": "__doc_block__"})
    assert keras.mixed_precision.global_policy().name == "float32"
