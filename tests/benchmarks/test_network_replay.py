"""``benchmarks/network.py --replay``: a recorded lab run's table, its regimes predicted again by this
tfdist, without the lab (no root, no TensorFlow)."""
from __future__ import annotations

import json
import subprocess
import sys

from support import REPO, subprocess_env

ADVISE = ("advise --workers 2 --ps 1 --params 669706 --batch-size 64 --step-ms 13.3 --worker-speeds 1,1.0000 "
          "--bandwidth 50.0mbit --latency-ms 0.0400 --json")


def _recorded(tmp_path, horovod: list[float], ps: list[float]):
    row = {"model": "small", "rate_mbit": 50.0, "speeds": "identical", "ps": 1, "horovod": horovod,
           "parameter_server": ps, "compute": {"w1_ms": 13.3, "w2_ms": 13.3},
           "prediction": {"command": ADVISE, "recommended": "parameter_server", "horovod": 1.0,
                          "parameter_server": 2.0}}  # stale figures: the replay must not reuse them
    data = {"settings": {"quick": False, "models": ["small"], "rates": [50.0], "ps": [1], "repeats": 2,
                         "speeds": ["identical"]},
            "started": "2026-11-30T14:49:11+00:00", "wall_seconds": 60.0, "nproc": 2,
            "load_average": [[0.5, 0.5, 0.5], [1.0, 1.0, 1.0]], "link_rate_unlimited_mbit": 10000.0,
            "latency_ms": 0.04, "parking_checks": {},
            "compute": [{"model": "small", "speeds": "identical", "w1_ms": 13.3, "w2_ms": 13.3}],
            "phases": [{"kind": "timed", "model": "small", "job": job, "rate_mbit": 50.0, "speeds": "identical",
                        "examples_per_second": value}
                       for job, values in (("horovod", horovod), ("ps1", ps)) for value in values],
            "rows": [row]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    return path


def _advise_now() -> dict:
    done = subprocess.run([sys.executable, "-m", "tfdist", *ADVISE.split()], capture_output=True, text=True,
                          env=subprocess_env(), check=True, timeout=120)
    return json.loads(done.stdout)


def test_replay_predicts_again_and_judges_against_the_recorded_measurements(tmp_path):
    path = _recorded(tmp_path, horovod=[260.0, 270.0], ps=[70.0, 80.0])
    out = tmp_path / "again.json"
    done = subprocess.run([sys.executable, "benchmarks/network.py", "--replay", str(path), "--json", str(out)],
                          capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    now = _advise_now()
    predicted = now["strategies"]["horovod"]["examples_per_second"]
    row = json.loads(out.read_text())["rows"][0]
    assert row["prediction"]["horovod"] == predicted  # re-run, not the recorded 1.0
    assert row["faster"] == "horovod" and row["advice_right"] is (now["recommended"] == "horovod")
    assert row["error_pct"]["horovod"] == (predicted - 265.0) / 265.0 * 100
    line = next(line for line in done.stdout.splitlines() if line.startswith("small |"))
    assert "265 (260-270)" in line and "75 (70-80)" in line and f"{predicted:,.0f} (" in line
    assert "predictions re-run now with this tfdist" in done.stdout
