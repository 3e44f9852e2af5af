"""The system-metrics sampler without TensorFlow: /proc parsing on fake files, rates from counter
deltas (first sample, counters that go backwards), GPU readers that find nothing, the interval's
validation and the thread's start and stop."""
from __future__ import annotations

import math
import sys
import threading
import time

import pytest

from tfdist import system_metrics as sm
from tfdist.errors import TfdistError

STAT = """cpu  100 0 50 800 50 0 0 0 0 0
cpu0 50 0 25 400 25 0 0 0 0 0
intr 12345
"""
NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0
  eth0: 2000000    1500    0    0    0     0          0         0   500000     900    0    0    0     0       0          0
"""


def _fake_proc(root, stat=STAT, statm="5000 2500 300 10 0 800 0\n", dev=NET_DEV):
    (root / "self").mkdir(parents=True, exist_ok=True)
    (root / "net").mkdir(exist_ok=True)
    (root / "stat").write_text(stat)
    (root / "self" / "statm").write_text(statm)
    (root / "net" / "dev").write_text(dev)
    return root


def test_proc_files_parse_to_busy_and_total_jiffies_pages_and_interface_bytes():
    assert sm.parse_host_cpu(STAT) == (150.0, 1000.0)  # idle 800 + iowait 50 are not busy
    assert sm.parse_host_cpu("intr 1\n") is None
    assert sm.parse_rss_bytes("5000 2500 300\n", 4096) == 2500 * 4096
    assert sm.parse_net_dev(NET_DEV) == (501000, 2001000)  # (sent, received), loopback included
    assert sm.parse_net_dev(NET_DEV.split("\n", 2)[0]) is None


def test_the_hosts_link_bytes_leave_loopback_out_and_the_peak_memory_is_this_process(tmp_path):
    """What crossed the host's links (WorkerMetrics' bytes per step): loopback traffic between two
    ranks on one host never reaches a link."""
    sent, received = sm.parse_net_dev(NET_DEV)
    lo_sent, lo_received = sm.parse_net_dev("\n".join(line for line in NET_DEV.splitlines()
                                                       if line.strip().startswith(("Inter", "face", "lo:"))))
    assert sm.parse_net_dev(NET_DEV, loopback=False) == (sent - lo_sent, received - lo_received)
    assert lo_sent > 0  # the fake tree has loopback traffic to leave out
    only_loopback = "\n".join(NET_DEV.splitlines()[:3])  # a namespace with lo alone: nothing over links
    assert sm.parse_net_dev(only_loopback, loopback=False) == (0, 0)
    assert sm.link_bytes(str(_fake_proc(tmp_path))) == sent - lo_sent + received - lo_received
    assert sm.link_bytes(str(tmp_path / "nowhere")) is None
    import resource

    assert sm.peak_memory_bytes() == resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 > 10e6


def test_proc_reader_reads_a_fake_tree(tmp_path):
    reader = sm.ProcReader(str(_fake_proc(tmp_path)), gpus=lambda: ((50.0, 1024.0),), clock=lambda: 7.0)
    reading = reader()
    assert (reading.time, reading.host_cpu, reading.net_bytes, reading.gpus) == (
        7.0, (150.0, 1000.0), (501000, 2001000), ((50.0, 1024.0),))
    assert reading.rss_bytes == 2500 * reader.page_size
    assert reading.process_cpu_s is not None and reading.process_cpu_s > 0


def test_missing_proc_files_leave_their_figures_out(tmp_path):
    reading = sm.ProcReader(str(tmp_path), gpus=lambda: ())()
    assert (reading.host_cpu, reading.rss_bytes, reading.net_bytes) == (None, None, None)
    assert set(sm.values(reading, reading)) == set()


def test_the_first_sample_has_no_rates_only_memory_and_gpus():
    first = sm.Reading(time=10.0, process_cpu_s=1.0, host_cpu=(100, 1000), rss_bytes=300_000_000,
                       net_bytes=(0, 0), gpus=((75.0, 2048.0), (0.0, 10.0)))
    assert sm.values(None, first) == {"system/rss_mb": 300.0, "system/gpu0_util_percent": 75.0,
                                      "system/gpu0_memory_mb": 2048.0, "system/gpu1_util_percent": 0.0,
                                      "system/gpu1_memory_mb": 10.0}


def test_rates_come_from_counter_deltas_over_the_interval():
    before = sm.Reading(time=10.0, process_cpu_s=1.0, host_cpu=(100, 1000), rss_bytes=1_000_000,
                        net_bytes=(1_000_000, 0))
    after = sm.Reading(time=12.0, process_cpu_s=4.0, host_cpu=(400, 1400), rss_bytes=2_000_000,
                       net_bytes=(3_500_000, 250_000))
    assert sm.values(before, after) == pytest.approx({
        "system/rss_mb": 2.0,
        "system/cpu_percent": 150.0,           # 3 CPU seconds in 2 s: one and a half cores
        "system/host_cpu_percent": 75.0,       # 300 busy of 400 jiffies
        "system/net_sent_mbit_s": 10.0,        # 2.5 MB in 2 s = 1.25 MB/s = 10 Mbit/s
        "system/net_recv_mbit_s": 1.0,
    })


def test_a_counter_that_went_backwards_gives_no_rate_for_that_interval():
    before = sm.Reading(time=1.0, process_cpu_s=1.0, host_cpu=(500, 1000), net_bytes=(2**32 - 10, 100))
    after = sm.Reading(time=2.0, process_cpu_s=1.5, host_cpu=(100, 200), net_bytes=(5, 900))
    figures = sm.values(before, after)
    assert "system/net_sent_mbit_s" not in figures and "system/host_cpu_percent" not in figures
    assert figures["system/net_recv_mbit_s"] == pytest.approx(800 * 8 / 1e6)
    assert figures["system/cpu_percent"] == pytest.approx(50.0)
    assert sm.values(after, after) == {}  # no time passed: no rates


def test_nvidia_smi_output_parses_and_unavailable_figures_are_nan():
    gpus = sm.parse_nvidia_smi("35, 1200\n[N/A], 512\n")
    assert gpus[0] == (35.0, 1200.0) and math.isnan(gpus[1][0]) and gpus[1][1] == 512.0


def test_no_gpu_reader_gives_no_gpu_figures_and_no_warning(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # "not installed"
    monkeypatch.setattr(sm.shutil, "which", lambda name: None)
    with caplog.at_level("WARNING", logger="tfdist"):
        reader = sm.GpuReader()
        assert reader.read() == () and reader.read() == ()
    assert caplog.records == []


def test_a_failing_nvidia_smi_is_asked_once_then_left_alone(tmp_path, caplog):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n")
    smi.chmod(0o755)
    calls = tmp_path / "calls"
    reader = sm.GpuReader(nvidia_smi=str(smi))
    reader._nvml = None  # this host may have pynvml: test the nvidia-smi path
    with caplog.at_level("WARNING", logger="tfdist"):
        assert reader.read() == ()
    smi.write_text(f"#!/bin/sh\ntouch {calls}\necho '1, 2'\n")
    assert reader.read() == () and not calls.exists()
    assert caplog.records == []


def test_a_working_nvidia_smi_gives_one_pair_per_gpu(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '10, 100\\n90, 900\\n'\n")
    smi.chmod(0o755)
    reader = sm.GpuReader(nvidia_smi=str(smi))
    reader._nvml, reader._disabled = None, False
    assert reader.read() == ((10.0, 100.0), (90.0, 900.0))


@pytest.mark.parametrize("interval, error, message", [
    (0, ValueError, "`interval_s` must be a finite number of seconds >= 0.1, got 0"),
    (-1.0, ValueError, ">= 0.1, got -1.0"),
    (math.nan, ValueError, "got nan"),
    (math.inf, ValueError, "got inf"),
    ("1", TypeError, "`interval_s` must be a number of seconds, got '1'"),
    (True, TypeError, "got True"),
])
def test_bad_intervals_are_refused_naming_interval_s(interval, error, message):
    with pytest.raises(error) as raised:
        sm.SystemSampler(lambda *a: None, interval)
    assert isinstance(raised.value, TfdistError)
    assert message in str(raised.value) and "; fix: pass interval_s=1" in str(raised.value)


def test_good_intervals_are_kept_as_floats():
    assert sm.check_interval(2) == 2.0 and sm.check_interval(0.1) == 0.1


def _counting_reader(late: dict[int, float] | None = None):
    """Readings 0, 1, 2, ...; reading ``n`` first sleeps ``late[n]`` seconds (a sample taken late)."""
    count = iter(range(10**6))

    def read():
        n = next(count)
        time.sleep((late or {}).get(n, 0.0))
        return sm.Reading(time=time.monotonic(), process_cpu_s=float(n), rss_bytes=(n + 1) * 10**6)

    return read


def test_the_thread_samples_at_the_interval_until_stopped_then_is_gone():
    samples: list[tuple[float, dict]] = []
    sampler = sm.SystemSampler(lambda elapsed, wall, values: samples.append((elapsed, dict(values))),
                               interval_s=0.1, read=_counting_reader(late={1: 0.25}))
    sampler.start()
    deadline = time.monotonic() + 30
    while len(samples) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    sampler.stop()
    assert not sampler.running and not any(t.name == "tfdist-system-metrics" for t in threading.enumerate())
    count = len(samples)
    time.sleep(0.3)
    assert len(samples) == count >= 4  # nothing after stop
    elapsed = [e for e, _ in samples]
    assert elapsed == sorted(elapsed)
    # due on the grid start + k * interval: the second sample, taken 0.25 s late, skips the samples it
    # missed (none bunched after it) and the next is on the grid again, however soon after the late one.
    # So each comes no sooner than the grid point after the one before it (a wake-up 2 ms early tolerated)
    assert all(later >= (math.floor(earlier / 0.1 + 1e-9) + 1) * 0.1 - 0.002
               for earlier, later in zip(elapsed, elapsed[1:])), elapsed
    assert "system/cpu_percent" not in samples[0][1] and "system/cpu_percent" in samples[1][1]
    assert [v["system/rss_mb"] for _, v in samples[:3]] == [1.0, 2.0, 3.0]


def test_the_first_sample_is_taken_at_start_not_one_interval_later():
    """Told apart without a wall-clock bound: with an hour's interval, one sample comes at once."""
    samples: list[float] = []
    sampler = sm.SystemSampler(lambda elapsed, wall, values: samples.append(elapsed), interval_s=3600,
                               read=_counting_reader())
    sampler.start()
    deadline = time.monotonic() + 30
    while not samples and time.monotonic() < deadline:
        time.sleep(0.02)
    sampler.stop()
    assert len(samples) == 1 and not sampler.running


def test_a_sink_that_raises_ends_the_sampling_with_one_log_line(caplog):
    def sink(*args):
        raise OSError("disk full")

    sampler = sm.SystemSampler(sink, interval_s=0.1, read=_counting_reader())
    with caplog.at_level("ERROR", logger="tfdist"):
        sampler.start()
        sampler._thread.join(10)
    assert not sampler.running and sampler.samples == 0
    assert [r.getMessage() for r in caplog.records] == [
        "system metrics: sampling failed; no more samples in this run"]
    sampler.stop()
