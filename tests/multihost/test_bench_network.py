"""`benchmarks/network.py` (`make bench-network`) on its smallest setting: one link rate, identical
workers, 1 ps, short phases; still both backends, a parked job resumed, `tfdist advise` per row.

Checks the table and the JSON (measured Horovod and parameter-server figures, a prediction and an
advice per row; a parked job used no CPU and ran again), then that the run left nothing: none of its
lab's namespaces and no process of its jobs (their command lines name the test's work directory).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from support import REPO, subprocess_env

BENCH = REPO / "benchmarks" / "network.py"
TIMEOUT = 1200  # s: a run still going then has hung (it takes ~3 min on an idle 2-core machine)


def _processes_naming(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if text in cmdline:
                    found.append(f"{entry.name}: {cmdline[:200]}")
        except OSError:
            continue
    return found


def test_the_network_benchmark_measures_both_backends_and_predicts_each_row(tmp_path):
    workdir, result = tmp_path / "work", tmp_path / "bench.json"
    argv = [sys.executable, str(BENCH), "--quick", "--rates", "50", "--speeds", "identical", "--ps", "1",
            "--phase-seconds", "1", "--compute-seconds", "1", "--park-check", "5", "--workdir", str(workdir),
            "--json", str(result)]
    env = subprocess_env(TF_USE_LEGACY_KERAS="1")
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.terminate()  # the benchmark stops its jobs and closes its lab on SIGTERM
        out, err = process.communicate(timeout=120)
        raise AssertionError(f"network.py still running after {TIMEOUT} s:\n{err[-3000:]}") from None
    assert process.returncode == 0, f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"

    report = json.loads(result.read_text())
    rows = report["rows"]
    assert [(r["model"], r["rate_mbit"], r["speeds"], r["ps"]) for r in rows] == [("small", 50.0, "identical", 1)]
    for row in rows:
        assert row["horovod"] and all(x > 0 for x in row["horovod"]), row
        assert row["parameter_server"] and all(x > 0 for x in row["parameter_server"]), row
        prediction = row["prediction"]
        assert prediction["horovod"] > 0 and prediction["parameter_server"] > 0, prediction
        assert prediction["recommended"] in ("horovod", "parameter_server", "multi_worker_mirrored")
        assert prediction["command"].startswith("advise --workers 2 --ps 1 --params 669706 --batch-size 64")
        assert row["faster"] in ("horovod", "parameter_server")
        assert row["advice_right"] == (prediction["recommended"] == row["faster"])
    timed = [p for p in report["phases"] if p["kind"] == "timed"]
    assert sorted(p["job"] for p in timed) == ["horovod", "ps1"]
    assert all(p["params"] == 669706 for p in report["phases"])
    # both jobs were parked together, used no CPU while stopped, and trained again afterwards
    checks = report["parking_checks"]
    assert sorted(checks) == ["small horovod", "small ps1"], checks
    for name, check in checks.items():
        assert check["processes"] == (2 if name.endswith("horovod") else 4), check  # ranks; chief+2 workers+ps
        assert check["cpu_seconds_while_parked"] < 0.2, check
        assert check["resumed_steps"] >= 3, check

    line = next(line for line in out.splitlines() if line.startswith("small | 50 Mbit | identical"))
    cells = [cell.strip() for cell in line.split("|")]
    assert cells[3] == "1" and float(cells[4].replace(",", "")) > 0 and float(cells[5].replace(",", "")) > 0
    assert "(" in cells[7] and "%" in cells[7] and cells[9] in ("horovod", "ps", "mwms")
    assert re.search(r"^all regimes: advice picked the faster backend in [01]/1 \(", out, flags=re.M), out
    assert f"nproc {os.cpu_count()}" in out and "load average" in out

    # nothing left: the run's lab (names carry its pid) and its jobs' processes are gone
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"tfl{process.pid}n" not in namespaces, namespaces
    assert _processes_naming(str(workdir)) == []
