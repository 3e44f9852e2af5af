"""examples/recommender.py: one parameter-server job as docs/examples.md shows it (chief, 2 workers,
2 ps, ``--shards 2``, ``--export``), then one process that reloads the export and tries the bad flags.

The job is costly (five TensorFlow processes), so it runs once (a module-scoped fixture) and every
test below asserts on what it printed and wrote: training beat chance, the item table really was
split over both ps tasks, only touched rows changed, and the export (its shards merged) serves the
trained weights in a fresh process.
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO, SCRIPTS, subprocess_env

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

EXAMPLE = REPO / "examples" / "recommender.py"
TIMEOUT = 900  # seconds; 2 cores shared with other jobs, so generous
USERS, ITEMS, DIM, TEST_EXAMPLES = 1000, 20000, 16, 4096  # the example's defaults, given explicitly
CHANCE_LOSS = math.log(2)  # binary cross-entropy of a constant 0.5 on balanced clicks


def _fields(stdout: str) -> dict[str, str]:
    lines = re.findall(r"RESULT (.*)$", stdout, flags=re.MULTILINE)
    assert len(lines) == 1, f"expected one RESULT line (from the chief only), got {lines}"
    return dict(field.split("=", 1) for field in lines[0].split())


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> dict:
    """The docs' launch line, run once: its RESULT fields, then the reload-and-flags check's JSON."""
    out = tmp_path_factory.mktemp("recommender")
    export = out / "exports" / "recommender" / "1"
    tfdist_cli = str(Path(sys.executable).parent / "tfdist")
    run = subprocess.run(
        [tfdist_cli, "launch", "--workers", "2", "--ps", "2", "--", sys.executable, str(EXAMPLE),
         "--backend", "parameter_server", "--shards", "2", "--users", str(USERS), "--items", str(ITEMS),
         "--embedding-dim", str(DIM), "--test-examples", str(TEST_EXAMPLES), "--export", str(export)],
        capture_output=True, text=True, timeout=TIMEOUT, env=subprocess_env(), cwd=REPO)
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"exit {run.returncode}\n{output[-6000:]}"
    result = _fields(run.stdout)
    check = subprocess.run([sys.executable, str(SCRIPTS / "recommender_check.py"), str(export), str(USERS),
                            str(ITEMS), str(TEST_EXAMPLES)],
                           capture_output=True, text=True, timeout=TIMEOUT, env=subprocess_env(), cwd=REPO)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    found = [line for line in check.stdout.splitlines() if line.startswith("CHECK ")]
    assert len(found) == 1, check.stdout[-3000:]
    return {"result": result, "export": export, "check": json.loads(found[0][len("CHECK "):])}


def test_the_launched_job_trains_past_chance(job):
    result = job["result"]
    assert (result["strategy"], int(result["workers"]), int(result["ps"])) == ("parameter_server", 2, 2)
    first, last = float(result["first_loss"]), float(result["last_loss"])
    assert last < 0.9 * first, f"the training loss did not fall: {first} -> {last}"
    assert float(result["test_auc"]) > 0.65, f"test AUC {result['test_auc']}: no better than chance (0.5)"
    assert float(result["test_loss"]) < CHANCE_LOSS, f"test loss {result['test_loss']} not below ln 2"
    assert float(result["examples_per_second"]) > 0


def test_the_item_table_is_split_over_both_ps_tasks(job):
    result = job["result"]
    assert int(result["table_shards"]) == 2
    devices = result["table_devices"].split(",")
    assert [re.search(r"/job:ps/replica:0/task:(\d)", d).group(1) for d in devices] == ["0", "1"], devices
    rows = [int(r) for r in result["table_shard_rows"].split(",")]
    assert sum(rows) == ITEMS and min(rows) > 0, rows
    assert int(result["table_bytes"]) == ITEMS * DIM * 4


def test_the_table_gets_sparse_gradients_and_only_the_rows_a_batch_touched_changed(job):
    """Sparse updates: the item table's gradient is IndexedSlices (a dense gradient with zero rows would
    also leave untouched rows unchanged under Adagrad, so the rows alone cannot tell); sampled rows no
    training pair uses keep their initial values, the most used ones moved."""
    result = job["result"]
    assert result["table_gradient"] == "IndexedSlices", result
    unchanged, sampled = map(int, result["untouched_rows_unchanged"].split("/"))
    assert sampled > 0 and unchanged == sampled, result["untouched_rows_unchanged"]
    changed, sampled = map(int, result["touched_rows_changed"].split("/"))
    assert sampled > 0 and changed == sampled, result["touched_rows_changed"]


def test_the_export_reloads_in_a_fresh_process_with_the_table_whole(job):
    assert job["result"]["export"] == str(job["export"])
    assert sorted(p.name for p in job["export"].parent.iterdir()) == ["1"]  # no temporary sibling left
    check = job["check"]
    assert not check["tfdist_imported"] and not check["horovod_imported"]
    shapes = dict((name, shape) for name, shape in check["variables"])
    assert shapes["item_embedding/embeddings:0"] == [ITEMS, DIM]  # the two shards merged into one table
    assert shapes["user_embedding/embeddings:0"] == [USERS, DIM]
    # the served weights are the trained ones: the whole test set scores as the run's own evaluate did (under
    # parameter servers each worker evaluates from its own copy of the data, so that figure is an estimate)
    assert check["reloaded_auc"] > 0.65, check["reloaded_auc"]
    assert check["reloaded_auc"] == pytest.approx(float(job["result"]["test_auc"]), abs=0.05)


@pytest.mark.parametrize("case, flag, accepted", [
    ("shards-zero", "--shards", "is not an integer >= 1; fix: pass e.g. 2"),
    ("items-zero", "--items", "is not a whole count >= 1; fix: pass a number with an optional k or M"),
    ("items-word", "--items", "'many' is not a whole count >= 1"),
    ("noise", "--noise", "is not a probability from 0 to below 0.5; fix: pass e.g. 0.05"),
    ("lr", "--lr", "is not a positive learning rate; fix: pass e.g. 0.1"),
    ("topics", "--topics", "one topic leaves nothing to learn (every pair would match); fix: pass 2 or more"),
    ("backend", "--backend", "invalid choice: 'horovd'"),
    ("shards-on-horovod", "--shards", "--backend horovod has none; fix: drop --shards"),
    ("shards-on-single", "--shards", "--backend single has none; fix: drop --shards"),
    ("shards-under-auto-single", "--shards 2",
     "--backend auto picked single, which has no ps tasks; fix: drop --shards"),
])
def test_bad_flags_are_refused_naming_the_flag_and_the_fix(job, case, flag, accepted):
    refused = job["check"]["flags"][case]
    assert refused["code"] == 2, refused
    error = refused["stderr"].strip().splitlines()[-1]
    assert flag in error and accepted in error, error
    assert "Traceback" not in refused["stderr"]
