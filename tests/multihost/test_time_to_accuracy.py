"""benchmarks/time_to_accuracy.py in its quickest form: the three backends (Horovod, Horovod with fp16
compression, parameter servers) train the digits classifier on the lab (launched by `tfdist launch`
from host c) until a low target, and nothing is left behind.

The driver builds and closes its own lab (hosts c, w1, w2, p1) in a child process, so these tests
check what it reports (every run's curve, time and epochs to the target, what was left on the hosts
after each job, before its lab closed) and what the machine shows afterwards: no lab resource and no
process of the job, also when the driver is stopped with SIGTERM mid-run.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from support import REPO, subprocess_env

from tfdist.testing.netlab import leftovers

DRIVER = REPO / "benchmarks" / "time_to_accuracy.py"
TARGET = 0.5  # the digits model passes it in its first epoch or two under either backend
RUN_TIMEOUT = 900  # s: only a hang breaks this (4 TensorFlow processes on a loaded 2-core machine)


def _driver(tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, str(DRIVER), "--quick", "--max-epochs", "3", "--target", str(TARGET), *args]


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain ``text`` (the run's own directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if text in cmdline and str(DRIVER) not in cmdline:
                    found.append(f"{entry.name}: {cmdline[:200]}")
        except OSError:
            continue
    return found


def test_every_backend_reaches_the_target_with_a_curve_and_nothing_is_left(tmp_path):
    report = tmp_path / "tta.json"
    env = subprocess_env(TMPDIR=str(tmp_path), TF_USE_LEGACY_KERAS="1")
    done = subprocess.run(_driver(tmp_path, "--json", str(report)), check=False, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT, env=env, cwd=REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    data = json.loads(report.read_text())
    runs = data["runs"]
    assert sorted(run["backend"] for run in runs) == ["horovod", "horovod_fp16", "parameter_server"]
    ran = {run["backend"]: (run["strategy_kind"], run["compression"]) for run in runs}  # the job's strategy
    assert ran == {"horovod": ("horovod", "none"), "horovod_fp16": ("horovod", "fp16"),
                   "parameter_server": ("parameter_server", "none")}
    for run in runs:
        assert run["ok"] and run["reached"], run
        assert run["workers"] == 2 and run["link"] == "unshaped"
        curve = run["curve"]
        # training stopped at the first epoch that reached the target, and the time is that epoch's
        assert len(curve) == run["epochs_to_target"] <= 3
        assert curve[-1]["val_accuracy"] >= TARGET > max([p["val_accuracy"] for p in curve[:-1]], default=0)
        assert run["seconds_to_target"] == curve[-1]["seconds"] > 0
        assert [p["seconds"] for p in curve] == sorted(p["seconds"] for p in curve)
        assert run["examples_per_second"] > 0
        assert run["left_on_hosts"] == {}  # checked by the driver after the job, before its lab closed
        assert run["final_val_accuracy"] == curve[-1]["val_accuracy"]
    (summary,) = data["summaries"]
    epochs = {run["backend"]: run["epochs_to_target"] for run in runs}
    assert summary["epochs_factor"] == epochs["parameter_server"] / epochs["horovod"]
    finals = {run["backend"]: run["final_val_accuracy"] for run in runs}
    assert summary["fp16_minus_fp32_points"] == 100 * (finals["horovod_fp16"] - finals["horovod"])
    assert "fp16 vs fp32 Horovod: final val_accuracy median" in done.stdout
    assert "PS/Horovod time to target" in done.stdout and "epochs factor" in done.stdout
    assert "reaches the target sooner" in done.stdout
    assert "load" in done.stdout.splitlines()[-1]
    assert leftovers() == []  # the driver's lab is gone (its owner has exited)
    assert _processes_mentioning(str(tmp_path)) == []


def test_sigterm_mid_run_stops_the_job_and_closes_the_lab(tmp_path):
    argv = [sys.executable, str(DRIVER), "--quick", "--max-epochs", "40", "--target", "1.0"]  # runs on
    driver = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                              env=subprocess_env(TMPDIR=str(tmp_path), TF_USE_LEGACY_KERAS="1"))
    try:
        deadline = time.monotonic() + 300
        while not any("tta_job.py" in line for line in _processes_mentioning(str(tmp_path))):
            assert driver.poll() is None and time.monotonic() < deadline, driver.stdout.read()[-4000:]
            time.sleep(0.5)
        time.sleep(5)  # the job's tasks are starting on the hosts
        driver.send_signal(signal.SIGTERM)
        code = driver.wait(timeout=180)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    output = driver.stdout.read()
    assert code == 130, output[-4000:]
    assert "interrupted: the job was stopped and the lab closed" in output
    assert leftovers() == []
    assert _processes_mentioning(str(tmp_path)) == []


def _driver_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tfdist_bench_time_to_accuracy", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(backend: str, epochs: int | None, seconds: float, rate: float, link: str = "unshaped",
            final: float = 0.9) -> dict:
    """A run as the driver records it: ``epochs`` None means the target was not reached."""
    count = epochs or 10
    curve = [{"epoch": e, "seconds": seconds * e / count, "val_accuracy": 0.9} for e in range(1, count + 1)]
    return {"backend": backend, "link": link, "ok": True, "reached": epochs is not None,
            "epochs_to_target": epochs, "seconds_to_target": seconds if epochs else None,
            "examples_per_second": rate, "curve": curve, "final_val_accuracy": final}


def test_the_summary_flags_a_backend_faster_per_example_but_slower_to_the_target():
    driver = _driver_module()
    runs = [_record("horovod", 4, 10.0, 3000.0), _record("horovod", 6, 14.0, 2800.0),
            _record("horovod", 5, 12.0, 2900.0), _record("parameter_server", 10, 20.0, 1000.0),
            _record("parameter_server", 12, 26.0, 1100.0), _record("parameter_server", None, 30.0, 900.0)]
    text, (summary,) = driver.report(runs, [None], 0.97)
    assert summary["epochs_factor"] == 11 / 5  # medians of the runs that reached it: (10, 12) and (4, 5, 6)
    assert summary["ps_over_horovod_time"] == 23.0 / 12.0
    assert (summary["horovod_reached"], summary["parameter_server_reached"]) == (3, 2)
    assert "Horovod is faster per example; Horovod reaches the target sooner." in text
    assert re.search(r"^PS .*\|\s+2/3$", text, flags=re.MULTILINE) and "NOT" not in text
    # the other way round: faster per example, but so many more epochs that it arrives later
    runs = [_record("horovod", 3, 9.0, 3000.0), _record("parameter_server", 12, 30.0, 4000.0)]
    text, (summary,) = driver.report(runs, [None], 0.97)
    assert summary["epochs_factor"] == 4.0
    assert ("the parameter-server job is faster per example; Horovod reaches the target sooner (the faster "
            "one per example is NOT the sooner to the target)") in text.replace("=> The", "=> the")


def test_the_fp16_line_compares_median_final_accuracies_within_half_a_point():
    driver = _driver_module()
    runs = [_record("horovod", 5, 12.0, 1000.0, final=f) for f in (0.970, 0.972, 0.980)]
    runs += [_record("horovod_fp16", 5, 7.0, 2000.0, final=f) for f in (0.960, 0.9675, 0.990)]
    runs += [_record("parameter_server", 8, 20.0, 900.0)]
    text, (summary,) = driver.report(runs, [None], 0.97)
    assert abs(summary["fp16_minus_fp32_points"] - (-0.45)) < 1e-9  # medians 0.9675 vs 0.972
    assert summary["fp16_accuracy_kept"] is True
    assert summary["fp16_over_horovod_rate"] == 2.0 and summary["fp16_over_horovod_time"] == 7.0 / 12.0
    assert ("fp16 vs fp32 Horovod: final val_accuracy median 0.9675 vs 0.9720 (-0.45 points); equal within "
            "0.5 points: yes") in text
    row = r"^Horovod fp16 .*\| 0\.9675 \(0\.9600-0\.9900\) \|\s+3/3$"
    assert re.search(row, text, flags=re.MULTILINE), text
    runs[4]["final_val_accuracy"] = 0.9600  # fp16's median drops to 0.9600: 1.2 points below
    text, (summary,) = driver.report(runs, [None], 0.97)
    assert summary["fp16_accuracy_kept"] is False and "equal within 0.5 points: NO (fp16 below fp32)" in text


def test_backends_rotate_so_each_takes_each_place():
    driver = _driver_module()
    orders = [driver.rotated(driver.BACKENDS, repeat) for repeat in range(3)]
    assert [order[0] for order in orders] == list(driver.BACKENDS)
    assert all(sorted(order) == sorted(driver.BACKENDS) for order in orders)
