"""make_strategy("multi_worker_mirrored", compression="powersgd") on two real worker processes
(`tfdist launch --backend multi_worker_mirrored`, issue 38). One job (tests/scripts/mwms_powersgd.py,
about 15 s) runs its phases (plain, full rank, fit's resume, the loop's resume) one after the other on one
cluster; the tests here share it and each reads the part it checks."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from support import SCRIPTS, subprocess_env

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("mwms_powersgd")
    result = subprocess.run(
        [sys.executable, "-m", "tfdist", "launch", "--backend", "multi_worker_mirrored", "--workers", "2", "--",
         sys.executable, str(SCRIPTS / "mwms_powersgd.py"), str(outdir)],
        capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return [json.loads((outdir / f"worker{rank}.json").read_text()) for rank in (0, 1)]


def _flat(weights: list) -> np.ndarray:
    return np.concatenate([np.ravel(np.array(w)) for w in weights])


def test_the_two_workers_end_with_the_same_weights(workers):
    assert [(w["rank"], w["replicas"]) for w in workers] == [(0, 2), (1, 2)]
    for part in ("full_rank", "uninterrupted", "resumed"):
        np.testing.assert_allclose(_flat(workers[0][part]), _flat(workers[1][part]), rtol=1e-6, atol=1e-7,
                                   err_msg=part)
    assert workers[0]["resume_loss"] == workers[1]["resume_loss"]
    assert workers[0]["resume_loss"][-1] < 0.2 * workers[0]["resume_loss"][0]  # rank 2 of 8x16 still learns


def test_full_rank_from_the_first_step_trains_as_plain_aggregation(workers):
    chief = workers[0]
    np.testing.assert_allclose(_flat(chief["full_rank"]), _flat(chief["plain"]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(chief["full_rank_loss"], chief["plain_loss"], rtol=1e-5)


def test_keras_3_trains_through_powersgd_as_plain_aggregation_at_full_rank(workers):
    """Keras 3 under MultiWorkerMirrored (tfdist's keras3_multi_worker) with PowerSGD in its optimizer's
    sum of the replicas' gradients: every step went through it, and at full rank it is Keras 3's own sum."""
    chief, other = workers
    assert chief["keras_3_powersgd_steps"] == other["keras_3_powersgd_steps"] == 2 * 512 // 32
    np.testing.assert_allclose(_flat(chief["keras_3_full_rank"]), _flat(other["keras_3_full_rank"]), rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_allclose(_flat(chief["keras_3_full_rank"]), _flat(chief["keras_3_plain"]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(chief["keras_3_full_rank_loss"], chief["keras_3_plain_loss"], rtol=1e-5)


def test_the_checkpoint_holds_the_error_feedback_and_a_resumed_run_goes_on_as_the_uninterrupted_one(workers):
    chief = workers[0]
    state = chief["saved_state"]
    errors = {name: norm for name, norm in state.items() if "/errors/" in name}
    factors = {name: norm for name, norm in state.items() if "/factors/" in name}
    assert len(errors) == 2 and len(factors) == 2, sorted(state)  # the two kernels (8x16, 16x1)
    assert max(errors.values()) > 1e-3, errors  # rank 2 of an 8x16 gradient loses something: saved
    assert chief["resumed_loss"] == chief["resume_loss"][2:]
    np.testing.assert_array_equal(_flat(chief["resumed"]), _flat(chief["uninterrupted"]))


def test_a_loop_goes_through_powersgd_and_its_checkpoint_averages_the_workers_errors_first(workers):
    before = [_flat(w["loop_errors_before_save"]) for w in workers]
    after = [_flat(w["loop_errors_after_save"]) for w in workers]
    assert np.abs(before[0] - before[1]).max() > 1e-3  # each worker's own error feedback (minimize went through it)
    np.testing.assert_array_equal(after[0], after[1])
    np.testing.assert_allclose(after[0], (before[0] + before[1]) / 2, rtol=1e-5, atol=1e-6)
    for w in workers:
        np.testing.assert_array_equal(_flat(w["loop_resumed"]), _flat(w["loop_uninterrupted"]))
    np.testing.assert_array_equal(_flat(workers[0]["loop_uninterrupted"]), _flat(workers[1]["loop_uninterrupted"]))
