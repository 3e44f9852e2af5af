"""A model bigger than one ps host, on memory-capped lab hosts (docs/parameter-servers.md, "A model
bigger than one ps").

One lab for both jobs: the launcher, the chief and worker:0 on h0 (no cap), ps:0 on h2 and ps:1 on
h1 (`--hosts h0:1,h1:1,h2:1 --workers 1 --ps 2`, the default placement), h1 and h2 capped. The model
(tests/scripts/ps_memory.py) is a 1,048,576 x 128 float32 embedding table (``TABLE``, 512 MiB) trained
with Adagrad, whose one slot per variable is as big again.

The cap is calibrated on this machine, because what a ps holds depends on it: the same job peaked at
1,175-1,203 MiB per ps host with ``shards=2`` and 2,112 MiB with ``shards=1`` on one machine, and at
1,670-1,830 and 3,229 MiB on another (anonymous memory both: the cgroup's ``rss``). The ratio held on
both (1.76): with ``shards=1`` ps:1 holds the whole table and slot, and receives the slot's initial
value (computed on the chief) in one gRPC message, which it holds whole while it builds the slot from
it; with ``shards=2`` each ps holds and receives half. So the lab first runs ``shards=2`` under a
generous cap (``CALIBRATION_CAP``), reads the two ps hosts' peak, and caps them at ``HEADROOM`` (1.25x)
of it, rounded up to 64 MiB: ``shards=2`` fits with a quarter to spare, and ``shards=1``, needing about
1.4 times the cap, cannot fit whatever the timing.

* ``shards=1`` (the table and its slot on ps:1): h1 runs out of memory, the OOM killer ends ps:1, and
  the launcher ends the job at once with one line naming ps:1, h1, the cap and the fix, although
  ``--task-timeout`` is 600 s;
* ``shards=2``: each ps holds half, the job trains to completion (the loss falls), and the export
  reloads on h0, which has no cap, with every one of the model's parameters.

The ``MEMORY ...`` lines (``pytest -s``) print the calibration, what each job took and each ps host's peak.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lab_jobs import Launch
from support import assert_nothing_left
from tfdist.testing.cgroups import MemoryCgroups

VOCAB, DIM = 1_048_576, 128  # ps_memory.py's table
TABLE = VOCAB * DIM * 4  # bytes: 512 MiB
#: The ps hosts' cap while the calibration job runs: above any peak measured (3.2 GiB with shards=1).
CALIBRATION_CAP = 8 << 30
#: The cap is this much above the calibration's peak (shards=2); shards=1 needs about 1.76x that peak.
HEADROOM = 1.25
LAYOUT = ("--hosts", "h0:1,h1:1,h2:1", "--workers", "1", "--ps", "2", "--task-timeout", "600")
PS_HOSTS = {"ps:0": "h2", "ps:1": "h1"}
PARAMETERS = VOCAB * DIM + 2 * DIM + 1  # the table, the Dense kernel (2 ids x 128) and bias

@pytest.fixture(scope="module")
def lab():
    from tfdist.testing.netlab import Lab

    memory = MemoryCgroups.detect()
    if memory is None:
        pytest.fail("no cgroup memory controller on this machine: the memory-capped lab needs cgroup v1 "
                    "`memory` or v2 with memory in cgroup.controllers")
    with Lab(["h0", "h1", "h2"]) as lab:
        for host in ("h1", "h2"):
            lab.limit_memory(host, CALIBRATION_CAP)
        yield lab


@pytest.fixture(scope="module")
def cap(lab, tmp_path_factory) -> int:
    """The ps hosts' cap for this machine: ``HEADROOM`` above what a ``shards=2`` job peaked at (the
    module docstring says why), set on h1 and h2."""
    for host in ("h1", "h2"):
        peak_mib(lab, host)
    out = tmp_path_factory.mktemp("calibration")
    job = Launch(lab, *LAYOUT, script="ps_memory.py", args=("2", str(out), str(VOCAB), str(DIM)))
    code = job.wait(timeout=600)
    assert code == 0, job.tail()
    peak = max(peak_mib(lab, "h1"), peak_mib(lab, "h2")) << 20
    assert peak > TABLE // 2, peak  # a ps holds at least its half of the table: the peak was read
    limit = -(-int(peak * HEADROOM) // (64 << 20)) * (64 << 20)
    print(f"MEMORY calibration (shards=2, cap {CALIBRATION_CAP >> 20} MiB): peak {peak >> 20} MiB; "
          f"cap {limit >> 20} MiB")
    for host in ("h1", "h2"):
        lab.limit_memory(host, limit)
    return limit


def peak_mib(lab, host: str) -> int:
    """The host's memory cgroup peak (v1 max_usage_in_bytes, v2 memory.peak), in MiB; then reset."""
    memory = MemoryCgroups.detect()
    group = memory.path(lab.namespace(host))
    name = "memory.max_usage_in_bytes" if memory.version == 1 else "memory.peak"
    try:
        peak = int((group / name).read_text())
    except (OSError, ValueError):
        return -1
    if memory.version == 1:
        (group / name).write_text("0")
    return peak >> 20


def test_one_shard_runs_a_ps_out_of_memory_and_the_job_ends_at_once_with_one_line(lab, cap, tmp_path):
    for host in ("h1", "h2"):
        peak_mib(lab, host)
    start = time.monotonic()
    job = Launch(lab, *LAYOUT, script="ps_memory.py", args=("1", str(tmp_path), str(VOCAB), str(DIM)))
    code = job.wait(timeout=300)
    took = time.monotonic() - start
    served, died = job.seconds(r"^\[ps:1@h1\] +\[tfdist\] ps:1 serving"), job.seconds("out of memory")
    print(f"MEMORY shards=1: exit {code} after {took:.1f} s (ps:1 served at {served or 0:.1f} s, the OOM line "
          f"at {died or 0:.1f} s); peaks MiB "
          f"h1 {peak_mib(lab, 'h1')}, h2 {peak_mib(lab, 'h2')} (cap {cap >> 20})")
    assert code == 1, job.tail()
    memory = [line for _, line in job.lines if "out of memory" in line]
    assert len(memory) == 1, job.tail()
    line = memory[0]
    assert line.startswith("tfdist launch: ps:1 on h1 ran out of memory: the kernel's OOM killer killed it "
                           f"(SIGKILL) at its memory limit of {cap / (1 << 30):.2f} GiB ({cap} bytes)"), line
    assert "so the job ends now; fix: split the variables over more ps tasks: raise --ps and pass shards=N to " \
           "make_strategy('parameter_server', ...)" in line
    assert f"`tfdist advise --ps-memory {cap} --optimizer NAME`" in line
    assert not (tmp_path / "chief.json").exists()
    assert took < 240  # bound against a hang only: the 600 s --task-timeout never came into play
    # the job ends soon after its OOM line, not --task-timeout (600 s) later: generous for a loaded machine
    assert died is not None and took - died < 60, (died, took, job.tail())
    assert_nothing_left(lab)


def test_two_shards_train_to_completion_and_the_export_reloads_without_the_cap(lab, cap, tmp_path):
    for host in ("h1", "h2"):
        peak_mib(lab, host)
    start = time.monotonic()
    job = Launch(lab, *LAYOUT, script="ps_memory.py", args=("2", str(tmp_path), str(VOCAB), str(DIM)))
    code = job.wait(timeout=600)  # bound against a hang only (48 s on this machine, unloaded, without the lab)
    took = time.monotonic() - start
    seconds = json.loads((tmp_path / "chief.json").read_text())["seconds"] if code == 0 else {}
    print(f"MEMORY shards=2: exit {code} after {took:.1f} s (chief {seconds}); peaks MiB "
          f"h1 {peak_mib(lab, 'h1')}, h2 {peak_mib(lab, 'h2')} (cap {cap >> 20})")
    assert code == 0, job.tail()
    assert not [line for _, line in job.lines if "out of memory" in line]
    result = json.loads((tmp_path / "chief.json").read_text())
    assert result["parameters"] == PARAMETERS
    assert result["shard_shapes"] == [[VOCAB // 2, DIM], [VOCAB // 2, DIM]]
    assert sorted(device.split("/device")[0] for device in result["shard_devices"]) == [
        "/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"]  # half on h2, half on h1
    losses = result["loss"]
    assert losses[-1] < 0.5 * losses[0], losses
    # tf.saved_model.load of the export, from disk, on h0 (no cap): every parameter, shards merged
    assert result["reloaded"] == {"parameters": PARAMETERS, "shape": [4, 1], "finite": True}
    assert Path(result["export"]).parent == tmp_path and (tmp_path / "export" / "saved_model.pb").is_file()
    assert_nothing_left(lab)
