"""PowerSGD in a real ``horovodrun -np 2`` job (issue 38), on tf-keras and Keras 3 in the same ranks
(tests/scripts/hvd_powersgd.py): every rank ends with the same weights, the middle kernel's updates
are low-rank once compression starts, and a run resumed from the chief's ``tf.train.Checkpoint`` of
the model and optimizer (error feedback and factors included) takes the steps the run took. The algorithm itself is checked against a NumPy
reference in tests/test_powersgd.py."""
from __future__ import annotations

import json

import numpy as np
import pytest
from support import horovodrun

pytestmark = [pytest.mark.horovod, pytest.mark.no_gpu]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    outdir = tmp_path_factory.mktemp("hvd-powersgd")
    result = horovodrun("hvd_powersgd.py", str(outdir), np=2, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [json.loads((outdir / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.parametrize("keras", ["tf_keras", "keras_3"])
def test_ranks_end_identical_with_low_rank_updates(ranks, keras):
    first, second = ranks[0][keras], ranks[1][keras]
    assert all(np.array_equal(np.array(a), np.array(b)) for a, b in zip(first["weights"], second["weights"]))
    assert first["compressed"] == [True, False, True, False, False, False]  # the kernels; biases and 48 x 4 whole
    assert first["step"] == 8
    assert 1 <= first["update_rank"] <= 8 < 48  # 4 updates of rank 2, where plain SGD's would be full rank


@pytest.mark.parametrize("keras", ["tf_keras", "keras_3"])
def test_a_run_resumed_from_the_chiefs_checkpoint_continues_where_it_stopped(ranks, keras):
    """The error feedback and factors come back with the checkpoint; the errors, made equal on both
    ranks at the epoch's end, make the chief's copy the whole state: the resumed steps are the ones
    the run took."""
    for each in ranks:
        found = each[keras]
        assert (found["step_at_checkpoint"], found["resumed_step"]) == (6, 8)
        for resumed, went_on in zip(found["resumed_weights"], found["weights"]):
            np.testing.assert_allclose(np.array(resumed), np.array(went_on), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("keras", ["tf_keras", "keras_3"])
def test_make_strategy_compression_powersgd_trains_with_it_and_ends_each_epoch_with_equal_errors(ranks, keras):
    first, second = ranks[0][f"strategy-{keras}"], ranks[1][f"strategy-{keras}"]
    assert first["step"] == second["step"] == 8  # 2 epochs of 4 steps went through PowerSGD's allreduce
    assert all(np.isfinite(np.array(w)).all() for w in first["weights"])
    assert all(np.array_equal(np.array(a), np.array(b)) for a, b in zip(first["weights"], second["weights"]))
    error = np.array(first["errors_equal_at_epoch_end"][0])
    np.testing.assert_array_equal(error, np.array(second["errors_equal_at_epoch_end"][0]))
    assert np.abs(error).max() > 0


@pytest.mark.parametrize("keras", ["tf_keras", "keras_3"])
def test_under_mixed_float16_the_skipped_overflows_leave_powersgds_state_in_the_gradients_units(ranks, keras):
    """The loss-scale optimizer hands PowerSGD scaled gradients, from a scale of 2**20 that overflows
    float16: the first steps are skipped on every rank, the scale comes down (to 2**15 here), and the
    rest train. The errors stay in the gradient's own units (about 1.5 here; without the division by
    the scale they are the scaled gradients' errors, some 2**15 times larger), finite, and the ranks
    end identical."""
    first, second = ranks[0][f"mixed-{keras}"], ranks[1][f"mixed-{keras}"]
    assert all(np.array_equal(np.array(a), np.array(b)) for a, b in zip(first["weights"], second["weights"]))
    assert all(np.isfinite(np.array(w)).all() for w in first["weights"])
    assert first["step"] == 24  # every step went through PowerSGD's allreduce, the skipped ones too
    assert 1.0 <= first["scale"] < 2.0 ** 20  # overflows were skipped and the scale lowered
    assert first["largest_error"] > 0  # compressed steps were applied and left their errors
    assert np.isfinite(first["largest_error"]) and first["largest_error"] < 10.0, first["largest_error"]
