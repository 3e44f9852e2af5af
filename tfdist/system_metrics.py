"""System metrics of one task (CPU, memory, network, GPU), sampled in a background thread.

    sampler = SystemSampler(lambda elapsed_s, wall_time, values: print(elapsed_s, values), interval_s=1.0)
    sampler.start()
    ...                 # train
    sampler.stop()      # joins the thread

Each sample gives, under the tags TensorBoard shows (``tfdist.callbacks.SystemMetrics`` writes them):

| tag                             | value                                                            |
|---------------------------------|------------------------------------------------------------------|
| ``system/cpu_percent``          | this process's CPU time over the interval, % of one core (top's  |
|                                 | figure: 200 means two busy cores)                                 |
| ``system/host_cpu_percent``     | the host's busy CPU time, % of all its cores (``/proc/stat``)     |
| ``system/rss_mb``               | this process's resident memory, MB (10^6 bytes)                   |
| ``system/net_sent_mbit_s``      | bytes sent by all interfaces of the host (of the network          |
| ``system/net_recv_mbit_s``      | namespace, inside one; loopback included), Mbit/s over the interval |
| ``system/gpu<i>_util_percent``  | GPU ``i``'s utilisation (pynvml when installed, else nvidia-smi)  |
| ``system/gpu<i>_memory_mb``     | GPU ``i``'s memory in use, MB (MiB as NVML reports it)             |

Rates need two readings: the first sample has only ``rss_mb`` and the GPU figures, and a counter
that went backwards (wrapped, or an interface was reset) gives no rate for that interval. Without
GPUs, or without pynvml and nvidia-smi, there are no GPU tags (no error, one debug log line). CPU,
memory and network are read from Linux's ``/proc``; elsewhere those tags are left out. Importing
this module does not import TensorFlow.
"""
from __future__ import annotations

import logging
import math
import numbers
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tfdist.errors import ArgumentTypeError, ArgumentValueError, with_fix

log = logging.getLogger("tfdist")

#: The sampling interval when none is given, and the shortest one accepted (seconds).
DEFAULT_INTERVAL_S = 1.0
MIN_INTERVAL_S = 0.1
#: Where Linux shows the counters read here.
PROC = "/proc"
PREFIX = "system/"

Sink = Callable[[float, float, Mapping[str, float]], object]


def check_interval(interval_s: Any) -> float:
    """``interval_s`` as a float, or an error naming it unless it is a finite number >= 0.1 s."""
    if isinstance(interval_s, bool) or not isinstance(interval_s, numbers.Real):
        raise ArgumentTypeError(with_fix(
            f"`interval_s` must be a number of seconds, got {interval_s!r}",
            f"pass interval_s={DEFAULT_INTERVAL_S:g} (the default) or another number of seconds"))
    if not math.isfinite(interval_s) or interval_s < MIN_INTERVAL_S:
        raise ArgumentValueError(with_fix(
            f"`interval_s` must be a finite number of seconds >= {MIN_INTERVAL_S:g}, got {interval_s!r}",
            f"pass interval_s={DEFAULT_INTERVAL_S:g} (the default) or another value >= {MIN_INTERVAL_S:g}"))
    return float(interval_s)


# --- readings -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reading:
    """Raw counters at one instant; ``None`` where they could not be read."""

    time: float                                        # monotonic seconds
    process_cpu_s: float | None = None                 # user + system time of this process
    host_cpu: tuple[float, float] | None = None        # (busy, total) jiffies of all cores
    rss_bytes: int | None = None
    net_bytes: tuple[int, int] | None = None           # (sent, received) over all interfaces
    gpus: tuple[tuple[float, float], ...] = ()         # (utilisation %, memory MB) per GPU


def parse_host_cpu(stat: str) -> tuple[float, float] | None:
    """``(busy, total)`` jiffies from ``/proc/stat``'s ``cpu`` line (idle and iowait are not busy;
    guest time is already inside user time, so it is not added again)."""
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [float(value) for value in fields[1:9]]
            total = sum(values)
            idle = values[3] + (values[4] if len(values) > 4 else 0.0)
            return total - idle, total
    return None


def parse_rss_bytes(statm: str, page_size: int) -> int | None:
    """Resident bytes from ``/proc/<pid>/statm`` (second field, in pages)."""
    fields = statm.split()
    return int(fields[1]) * page_size if len(fields) > 1 else None


def parse_net_dev(dev: str, loopback: bool = True) -> tuple[int, int] | None:
    """``(sent, received)`` bytes summed over every interface of ``/proc/net/dev`` (without ``lo``
    unless ``loopback``: a host with loopback alone carried nothing over links, ``(0, 0)``); None when
    the text lists no interface."""
    sent = received = 0
    found = False
    for line in dev.splitlines():
        name, colon, counters = line.partition(":")
        fields = counters.split()
        if not colon or len(fields) < 9 or not fields[0].isdigit():
            continue  # the two header lines
        found = True
        if not loopback and name.strip() == "lo":
            continue
        received += int(fields[0])
        sent += int(fields[8])
    return (sent, received) if found else None


def link_bytes(proc: str = PROC) -> int | None:
    """The bytes this host's network interfaces (of its network namespace) sent and received, loopback
    left out: what crossed its links; None where ``/proc/net/dev`` cannot be read."""
    dev = _read_text(proc, "net", "dev")
    found = parse_net_dev(dev, loopback=False) if dev else None
    return None if found is None else sum(found)


def _read_text(proc: str, *parts: str) -> str | None:
    """The text of ``proc/parts...``; None when it cannot be read."""
    try:
        with open(os.path.join(proc, *parts)) as handle:
            return handle.read()
    except OSError:
        return None


def peak_memory_bytes() -> int | None:
    """This process's peak resident memory (``getrusage``'s ``ru_maxrss``, KiB on Linux); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def parse_nvidia_smi(csv: str) -> tuple[tuple[float, float], ...]:
    """``((util %, memory MB), ...)`` from ``nvidia-smi --query-gpu=utilization.gpu,memory.used
    --format=csv,noheader,nounits``; a GPU whose figures are ``[N/A]`` reads as NaN."""
    gpus = []
    for line in csv.strip().splitlines():
        values = [value.strip() for value in line.split(",")]
        if len(values) != 2:
            continue
        gpus.append(tuple(_float_or_nan(value) for value in values))
    return tuple(gpus)  # type: ignore[return-value]


def _float_or_nan(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


class GpuReader:
    """GPU utilisation and memory through pynvml when importable, else ``nvidia-smi``; ``()``
    when neither works, after which it stops trying (one debug line, no warnings)."""

    NVIDIA_SMI_QUERY = ("--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits")

    def __init__(self, nvidia_smi: str | None = None) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._smi = nvidia_smi
        self._disabled = False
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception as exc:  # not installed, or no driver: fall back to nvidia-smi
            self._nvml = None
            self._smi = self._smi or shutil.which("nvidia-smi")
            if self._smi is None:
                self._disable(f"no pynvml ({exc.__class__.__name__}) and no nvidia-smi on PATH")

    def _disable(self, why: str) -> None:
        self._disabled = True
        log.debug("system metrics: no GPU figures (%s)", why)

    def read(self) -> tuple[tuple[float, float], ...]:
        if self._disabled:
            return ()
        try:
            if self._nvml is not None:
                return tuple((float(self._nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                              self._nvml.nvmlDeviceGetMemoryInfo(h).used / 2**20) for h in self._handles)
            done = subprocess.run([self._smi, *self.NVIDIA_SMI_QUERY], capture_output=True, text=True,
                                  timeout=5, check=True)
            return parse_nvidia_smi(done.stdout)
        except Exception as exc:  # a driver that went away, a failing nvidia-smi: stop asking
            self._disable(f"{exc.__class__.__name__}: {exc}")
            return ()


class ProcReader:
    """Reads a ``Reading`` of this process and host from ``/proc`` (``proc`` may be a fake tree)."""

    def __init__(self, proc: str = PROC, gpus: Callable[[], tuple[tuple[float, float], ...]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.proc = proc
        self.page_size = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.gpus = gpus if gpus is not None else GpuReader().read
        self.clock = clock

    def __call__(self) -> Reading:
        times = os.times()
        stat, statm, dev = (_read_text(self.proc, *parts) for parts in (("stat",), ("self", "statm"), ("net", "dev")))
        return Reading(time=self.clock(), process_cpu_s=times.user + times.system,
                       host_cpu=parse_host_cpu(stat) if stat else None,
                       rss_bytes=parse_rss_bytes(statm, self.page_size) if statm else None,
                       net_bytes=parse_net_dev(dev) if dev else None,
                       gpus=self.gpus())


# --- the maths ----------------------------------------------------------------------------------
def values(previous: Reading | None, now: Reading) -> dict[str, float]:
    """The tagged figures of ``now``; rates over the time since ``previous`` (none without it, for
    a zero interval, or for a counter that went backwards)."""
    out: dict[str, float] = {}
    if now.rss_bytes is not None:
        out[PREFIX + "rss_mb"] = now.rss_bytes / 1e6
    for index, (util, memory) in enumerate(now.gpus):
        out[f"{PREFIX}gpu{index}_util_percent"] = util
        out[f"{PREFIX}gpu{index}_memory_mb"] = memory
    seconds = now.time - previous.time if previous is not None else 0.0
    if previous is None or seconds <= 0:
        return out
    if now.process_cpu_s is not None and previous.process_cpu_s is not None:
        used = now.process_cpu_s - previous.process_cpu_s
        if used >= 0:
            out[PREFIX + "cpu_percent"] = 100.0 * used / seconds
    if now.host_cpu is not None and previous.host_cpu is not None:
        busy, total = (a - b for a, b in zip(now.host_cpu, previous.host_cpu))
        if total > 0 and 0 <= busy <= total:
            out[PREFIX + "host_cpu_percent"] = 100.0 * busy / total
    if now.net_bytes is not None and previous.net_bytes is not None:
        sent, received = (a - b for a, b in zip(now.net_bytes, previous.net_bytes))
        if sent >= 0:
            out[PREFIX + "net_sent_mbit_s"] = sent * 8 / 1e6 / seconds
        if received >= 0:
            out[PREFIX + "net_recv_mbit_s"] = received * 8 / 1e6 / seconds
    return out


# --- the thread ---------------------------------------------------------------------------------
class SystemSampler:
    """Sample every ``interval_s`` seconds in a daemon thread and hand each sample to ``sink``
    as ``sink(elapsed_s, wall_time, values)``; ``elapsed_s`` counts from ``start()``.

    Samples are due at ``start + k * interval_s`` (late ones are skipped, not bunched), the first
    one at ``start()``. A sink that raises ends the sampling (logged once); training goes on.
    """

    def __init__(self, sink: Sink, interval_s: float = DEFAULT_INTERVAL_S, *,
                 read: Callable[[], Reading] | None = None) -> None:
        self.interval_s = check_interval(interval_s)
        self.sink = sink
        self._read = read
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous: Reading | None = None
        self._start = 0.0
        self.samples = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def sample(self) -> dict[str, float]:
        """Take one reading, return the figures and hand them to the sink."""
        if self._read is None:
            self._read = ProcReader()
        now = self._read()
        figures = values(self._previous, now)
        self._previous = now
        self.sink(now.time - self._start, time.time(), figures)
        self.samples += 1
        return figures

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._previous = None
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="tfdist-system-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        due = self._start
        while True:
            try:
                self.sample()
            except Exception:
                log.exception("system metrics: sampling failed; no more samples in this run")
                return
            now = time.monotonic()
            due += self.interval_s * max(1, math.ceil((now - due) / self.interval_s))
            if self._stop.wait(max(0.0, due - now)):
                return

    def stop(self, timeout: float = 10.0) -> None:
        """Stop sampling and wait (up to ``timeout``) for the thread to end."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
