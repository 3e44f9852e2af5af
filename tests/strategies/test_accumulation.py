"""Gradient accumulation with one allreduce per update (issue 22, item 5).

In-process: Keras 3 ``backward_passes_per_step=k`` becomes the optimizer's own
``gradient_accumulation_steps=k`` (or is refused naming the conflict). Under horovodrun
(tests/scripts/hvd_precision.py, one job per Keras shared with test_mixed_precision.py through
``precision_job``): gradients go over the wire once per k micro-steps, counted in Horovod's
timeline, and 2 ranks x k micro-steps of batch b equal one process with batch 2·k·b.
"""
# The job is started by test_mixed_precision.run_precision_job, once per session for both modules;
# the fixture is repeated here because pytest fixtures do not cross test modules.
from __future__ import annotations

import json
import re

import numpy as np
import pytest

keras = pytest.importorskip("keras")
pytest.importorskip("horovod.tensorflow")

from tfdist.errors import ArgumentValueError  # noqa: E402


# --- in-process: the mapping and its refusals ---------------------------------------------------------
def test_keras_3_backward_passes_become_the_optimizers_gradient_accumulation_steps():
    import tfdist.horovod as hvd
    from tfdist.strategies.allreduce import ALLREDUCE_MARK

    optimizer = keras.optimizers.SGD(0.1)
    assert hvd.DistributedOptimizer(optimizer, backward_passes_per_step=3) is optimizer
    assert optimizer.gradient_accumulation_steps == 3
    assert getattr(optimizer, ALLREDUCE_MARK).backward_passes_per_step == 3
    assert "apply" not in vars(optimizer)  # the allreduce waits for the update, in _clip_gradients
    assert "_clip_gradients" in vars(optimizer)
    optimizer.build([keras.Variable(np.zeros(2, "float32"))])
    assert len(optimizer._accumulated_gradients) == 1  # Keras made the accumulators
    assert optimizer.get_config()["gradient_accumulation_steps"] == 3  # saved as the user's own setting

    own = keras.optimizers.SGD(0.1, gradient_accumulation_steps=2)
    assert hvd.DistributedOptimizer(own) is own and "_clip_gradients" in vars(own)


def test_conflicting_or_too_late_accumulation_is_refused_naming_the_fix():
    import tfdist.horovod as hvd

    with pytest.raises(ArgumentValueError, match=r"`backward_passes_per_step`=2, but the SGD already has "
                                                 r"gradient_accumulation_steps=3; fix: give one of them"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, gradient_accumulation_steps=3),
                                 backward_passes_per_step=2)
    built = keras.optimizers.SGD(0.1)
    built.build([keras.Variable(np.zeros(2, "float32"))])
    with pytest.raises(ArgumentValueError, match=r"`backward_passes_per_step`=2 needs gradient accumulators, "
                                                 r"and this SGD was built without them; fix: wrap the optimizer "
                                                 r"before compile/fit, or create it with gradient_accumulation_steps=2"):
        hvd.DistributedOptimizer(built, backward_passes_per_step=2)


# --- under horovodrun ---------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["tf_keras", "keras_3"])
def precision_job(request, tmp_path_factory):
    """The hvd_precision.py job for one Keras (shared with test_mixed_precision.py through the session's
    base temporary directory: whichever module runs first starts it)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_mixed_precision_tests",
                                                  Path(__file__).with_name("test_mixed_precision.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run_precision_job(tmp_path_factory, request.param)


# --- what the job shows ---------------------------------------------------------------------------------
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


def test_the_clip_gradients_accessor_pins_keras_3_and_fails_closed():
    from tfdist import upstream

    optimizer = keras.optimizers.SGD(0.1, clipnorm=1.0)
    assert upstream.clip_gradients(optimizer).__func__ is type(optimizer)._clip_gradients
    with pytest.raises(upstream.UpstreamChangedError, match=r"has no usable `_clip_gradients`"):
        upstream.clip_gradients(object())
