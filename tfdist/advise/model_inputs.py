"""What the cost model is told: the cluster (workers, their speeds, ps tasks, links) and the workload.

Frozen dataclasses, validated on construction; rates are bytes/s (:func:`tfdist.advise.units.parse_rate`
turns ``1gbit`` into one), times are milliseconds in :class:`Workload` and seconds in :class:`Cluster`.

    cluster = Cluster(workers=2, speeds=(1.0, 0.25), ps=1, bandwidths=(125e6,))
    workload = Workload(params=669_706, batch_size=64, step_ms=10.0)
"""
from __future__ import annotations

import dataclasses
import math

from tfdist.advise.errors import AdviseError
from tfdist.advise.units import MAX_COUNT, MAX_RATE, MIN_RATE
from tfdist.errors import with_fix

PS_PLACEMENTS = ("separate", "colocated")
#: Default rate between workers of one host (bytes/s): 80 Gbit/s, about a PCIe 3.0 x16 link or shared
#: memory between processes; faster than any network link the advisor is meant for.
DEFAULT_INTRA_HOST_BANDWIDTH = 80e9 / 8
#: Default one-way latency of a network message (seconds): 0.1 ms, a LAN switch hop plus TCP stacks.
DEFAULT_LATENCY_S = 1e-4
#: Default fixed cost of one Horovod step beyond compute and the ring (ms): Horovod's background cycle
#: (HOROVOD_CYCLE_TIME, 1 ms). Framework work per step adds to it where steps are short: measure it,
#: ``Workload.allreduce_overhead_ms``.
DEFAULT_ALLREDUCE_OVERHEAD_MS = 1.0
#: Default fixed cost of one parameter-server step beyond compute and transfers (ms): the coordinator's
#: dispatch and the RPCs that read and update the variables, read off the loopback benchmark (README:
#: the ps path costs ~8 ms more per step than Horovod's on the small MLP). Where RPCs cost more (the
#: network lab's namespaces: ~70 ms), measure it: ``Workload.ps_overhead_ms``.
DEFAULT_PS_OVERHEAD_MS = 5.0
# Bounds on every number the model takes. Inside them every prediction is finite (the widest case:
# 10**13 float64 parameters over 1 kbit/s links, or a 1 us step on a worker 10**6 times faster, stays
# far from float overflow), and one prediction takes well under a second.
MAX_WORKERS = 100_000
MAX_BATCH_SIZE = 10**9
MAX_PARAMS = MAX_COUNT
#: Compute time of one step (ms): 1 us to about 11.6 days.
MIN_STEP_MS, MAX_STEP_MS = 1e-3, 1e9
#: Relative worker speeds, and the widest spread between the slowest and the fastest.
MIN_SPEED, MAX_SPEED = 1e-6, 1e6
_MAX_SPEED_RATIO = 1e6
#: Fixed costs per step (ms) and the ps epochs factor.
MAX_OVERHEAD_MS = 1e6
MAX_PS_EPOCHS_FACTOR = 1e6
MAX_LATENCY_S = 10.0
#: A rate of work over memory (bytes/s): 1 kB/s to 100 TB/s.
MIN_WORK_RATE, MAX_WORK_RATE = 1e3, 1e14
#: The parameter-server prediction walks every worker for every worker host (hosts x workers
#: steps, a few passes): above this many it would take minutes, so such a cluster is refused.
MAX_PS_MODEL_SIZE = 10**6
_SHOWN_SPEEDS = 4


def example_speeds(workers: int) -> str:
    """A ``--worker-speeds`` example for ``workers`` workers, short whatever the count:
    ``1,0.25``, ``1,1,0.25``, or ``1,1,...,0.25 (5000 values)``."""
    if workers <= _SHOWN_SPEEDS:
        return ",".join(["1"] * max(1, workers - 1) + ["0.25"])
    return f"1,1,...,0.25 ({workers:,} values)"


def _positive(value: float, field: str, fix: str) -> None:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value <= 0):
        raise AdviseError(with_fix(f"`{field}` must be a positive finite number, got {value!r}", fix), field)


def _whole(value: int, field: str, low: int, high: int, fix: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        huge = isinstance(value, int) and abs(value) > 10**18
        shown = f"a number of {len(str(abs(value)))} digits" if huge else repr(value)
        raise AdviseError(with_fix(f"`{field}` must be a whole number from {low} to {high}, got {shown}",
                                   fix), field)


def _within(value: float, field: str, low: float, high: float, unit: str, fix: str) -> None:
    """A positive finite number from ``low`` to ``high``."""
    _positive(value, field, fix)
    if not low <= value <= high:
        raise AdviseError(with_fix(f"`{field}` must be from {low:g} to {high:g}{unit}, got {value!r}", fix),
                          field)


def _rate(value: float, field: str, fix: str) -> None:
    """A link rate in bytes/s from MIN_RATE (1 kbit/s) to MAX_RATE (100 Tbit/s)."""
    _positive(value, field, fix)
    if not MIN_RATE <= value <= MAX_RATE:
        raise AdviseError(with_fix(f"`{field}` must be from {MIN_RATE:g} to {MAX_RATE:g} bytes/s (1 kbit/s "
                                   f"to 100 Tbit/s), got {value!r}", fix), field)


#: Bytes of one row index an ``IndexedSlices`` gradient carries beside the row: int64 ids (int32 ids
#: carry 4; counted as 8, the conservative case).
INDEX_BYTES = 8
MAX_LOOKUPS = 10**6
_MAX_EMBEDDINGS = 1000


@dataclasses.dataclass(frozen=True)
class Embedding:
    """A table whose gradient is sparse (``IndexedSlices``, e.g. a Keras ``Embedding``): ``rows`` x
    ``dim`` parameters, of which a step reads and updates only the looked-up rows, ``lookups`` per
    example (1 for one id, L for a bag or a sequence of L ids, a mean such as 2.5 for bags of varying
    size; repeats counted, as TensorFlow gathers them)."""

    rows: int
    dim: int
    lookups: float = 1

    def __post_init__(self) -> None:
        fix = "give the table as ROWSxDIM[:LOOKUPS], e.g. 1000000x128:1"
        _whole(self.rows, "embeddings", 1, MAX_PARAMS, fix)
        _whole(self.dim, "embeddings", 1, MAX_PARAMS, fix)
        _within(self.lookups, "embeddings", 1e-6, MAX_LOOKUPS, " lookups per example", fix)
        if self.rows * self.dim > MAX_PARAMS:
            raise AdviseError(with_fix(f"`embeddings`: a {self.rows:,} x {self.dim:,} table is more than "
                                       f"{MAX_PARAMS:,} parameters", fix), "embeddings")

    @property
    def params(self) -> int:
        return self.rows * self.dim

    def describe(self) -> str:
        return f"{self.rows:,} x {self.dim:,}, {self.lookups:,g} lookup(s) per example"

    def as_dict(self) -> dict[str, float]:
        """As the JSON of ``--json`` and of a plan's inputs hold it."""
        return {"rows": self.rows, "dim": self.dim, "lookups": self.lookups}


@dataclasses.dataclass(frozen=True)
class Workload:
    """The model and its step on one worker.

    params: parameter count (``model.count_params()``); dtype_bytes: bytes per parameter (4: float32).
    batch_size: examples per step per worker. step_ms: compute time of one step at that batch on a
    worker of speed 1 (forward, backward and update, without any communication).
    overlap: share of the communication that can run while the worker computes (0 to 1).
    ps_epochs_factor: epochs parameter servers need to reach the target accuracy, over the epochs
    synchronous training needs (measured: e.g. 1.3 when asynchronous updates need 30 % more); None:
    unknown, and the recommendation says that throughput alone does not decide time to accuracy.
    ps_overhead_ms: the fixed cost of one parameter-server step on a worker beyond its compute and its
    transfers (the coordinator's dispatch, the RPCs reading and updating variables); measured as a
    worker's step on fast links minus its compute and transfers. allreduce_overhead_ms: the same for one
    Horovod step beyond compute and the ring.
    embeddings: the tables among ``params`` whose gradients are sparse (:class:`Embedding`): a step
    moves only the rows it looks up (parameter servers: pulled and pushed; allreduce: allgathered as
    ``IndexedSlices``), not the whole table. Empty: every parameter moves every step.
    """

    params: int
    batch_size: int
    step_ms: float
    dtype_bytes: int = 4
    overlap: float = 0.0
    ps_epochs_factor: float | None = None
    ps_overhead_ms: float = DEFAULT_PS_OVERHEAD_MS
    allreduce_overhead_ms: float = DEFAULT_ALLREDUCE_OVERHEAD_MS
    embeddings: tuple[Embedding, ...] = ()
    #: The shapes of the model's dense weight matrices (a kernel of more than 2 dimensions as PowerSGD
    #: sees it, ``tfdist.runtime.lowrank.matrix_shape``): what low-rank compression would send. Empty:
    #: not known, and PowerSGD is not predicted.
    matrices: tuple[tuple[int, int], ...] = ()
    #: PowerSGD's own work on a worker of speed 1, in bytes of compressed matrix per second (the probe
    #: times it on the model's kernels); None: the cost model's assumed rate.
    powersgd_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        _whole(self.params, "params", 1, MAX_PARAMS, "give the model's parameter count, e.g. 669706")
        _whole(self.batch_size, "batch_size", 1, MAX_BATCH_SIZE,
               "give the examples per step per worker, e.g. 64")
        _whole(self.dtype_bytes, "dtype_bytes", 1, 16, "4 for float32, 2 for float16/bfloat16")
        _within(self.step_ms, "step_ms", MIN_STEP_MS, MAX_STEP_MS, " milliseconds",
                "time a step on one worker, e.g. 10 (milliseconds)")
        if (isinstance(self.overlap, bool) or not isinstance(self.overlap, (int, float))
                or not 0 <= self.overlap <= 1):
            raise AdviseError(with_fix(f"`overlap` must be from 0 to 1, got {self.overlap!r}",
                                       "0: no communication hidden behind compute; 0.5: half of it"),
                              "overlap")
        for field, default in (("ps_overhead_ms", DEFAULT_PS_OVERHEAD_MS),
                               ("allreduce_overhead_ms", DEFAULT_ALLREDUCE_OVERHEAD_MS)):
            value = getattr(self, field)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not 0 <= value <= MAX_OVERHEAD_MS):
                raise AdviseError(with_fix(f"`{field}` must be 0 or more milliseconds (at most "
                                           f"{MAX_OVERHEAD_MS:g}), got {value!r}",
                                           f"give the measured fixed cost of a step, e.g. {default:g}"),
                                  field)
        if self.ps_epochs_factor is not None:
            _within(self.ps_epochs_factor, "ps_epochs_factor", 0.0, MAX_PS_EPOCHS_FACTOR, "",
                    "give the epochs parameter servers need to reach the target over the epochs allreduce "
                    "needs, e.g. 1.3; or leave it out")
        self._check_embeddings()
        self._check_matrices()
        if self.powersgd_bytes_per_s is not None:
            _within(self.powersgd_bytes_per_s, "powersgd_bytes_per_s", MIN_WORK_RATE, MAX_WORK_RATE, " bytes/s",
                    "give the measured rate of PowerSGD's work, e.g. 5e8; or leave it out")

    def _check_matrices(self) -> None:
        ok = isinstance(self.matrices, tuple) and all(
            isinstance(m, tuple) and len(m) == 2 and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1
                                                         for d in m) for m in self.matrices)
        if not ok:
            raise AdviseError(with_fix(f"`matrices` must be a tuple of (rows, columns) pairs, got {self.matrices!r:.120}",
                                       "pass e.g. ((784, 512), (512, 512)), or leave it out"), "matrices")
        held = sum(m * n for m, n in self.matrices)
        if held > self.params - self.sparse_params:
            raise AdviseError(with_fix(f"the matrices hold {held:,} parameters, more than the model's "
                                       f"{self.params - self.sparse_params:,} outside embedding tables",
                                       "give the model's own kernels, counted in its parameters"), "matrices")

    def _check_embeddings(self) -> None:
        if not isinstance(self.embeddings, tuple) or not all(isinstance(e, Embedding) for e in self.embeddings):
            raise AdviseError(with_fix(f"`embeddings` must be a tuple of Embedding, got {self.embeddings!r}",
                                       "pass e.g. (Embedding(rows=1000000, dim=128),)"), "embeddings")
        if len(self.embeddings) > _MAX_EMBEDDINGS:
            raise AdviseError(with_fix(f"`embeddings`: {len(self.embeddings):,} tables are more than "
                                       f"{_MAX_EMBEDDINGS:,}", "give the largest tables only"), "embeddings")
        if self.sparse_params > self.params:
            raise AdviseError(with_fix(f"the embedding tables hold {self.sparse_params:,} parameters, more than "
                                       f"the model's {self.params:,}",
                                       "give each table's rows and width as in the model, and count the tables "
                                       "in the model's parameter count too"), "embeddings")

    @property
    def model_bytes(self) -> int:
        """M: bytes of the parameters, also the bytes of one dense gradient."""
        return self.params * self.dtype_bytes

    @property
    def sparse_params(self) -> int:
        """Parameters in the embedding tables (sparse gradients)."""
        return sum(e.params for e in self.embeddings)

    @property
    def dense_bytes(self) -> int:
        """Bytes of the parameters outside the embedding tables: what moves whole every step."""
        return (self.params - self.sparse_params) * self.dtype_bytes

    @property
    def sparse_step_bytes(self) -> float:
        """Bytes of the embedding rows one worker step reads (and, as a gradient, updates): every
        looked-up row with its index, ``batch_size x lookups`` rows per table."""
        return sum(self.batch_size * e.lookups * (e.dim * self.dtype_bytes + INDEX_BYTES)
                   for e in self.embeddings)

    @property
    def step_bytes(self) -> float:
        """Bytes one parameter-server worker pulls each step (and pushes back as its gradient): the
        dense parameters whole and the looked-up rows; the whole model when there are no tables."""
        return self.dense_bytes + self.sparse_step_bytes

    @property
    def step_s(self) -> float:
        return self.step_ms / 1000


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Workers, their relative speeds, ps tasks, and the links.

    workers: N. speeds: one per worker, relative (2 = twice as fast as the workload's ``step_ms``);
    empty means all 1. workers_per_host: G workers (GPUs) share a host and its link; hosts are
    filled in order, H = ceil(N / G). ps: P parameter-server tasks, variables sharded evenly across
    them. ps_placement: ``separate`` (each ps on a host of its own, as in the network lab) or
    ``colocated`` (ps j on worker host j mod H, sharing its link). bandwidths: each worker host's
    link rate (bytes/s, both directions), one value for all or one per host. ps_bandwidth: each
    separate ps host's link (default: the slowest worker link). latency_s: one-way latency of a
    network message. intra_host_bandwidth: between workers of one host.
    """

    workers: int
    bandwidths: tuple[float, ...]
    speeds: tuple[float, ...] = ()
    workers_per_host: int = 1
    ps: int = 0
    ps_placement: str = "separate"
    ps_bandwidth: float | None = None
    latency_s: float = DEFAULT_LATENCY_S
    intra_host_bandwidth: float = DEFAULT_INTRA_HOST_BANDWIDTH

    def __post_init__(self) -> None:
        _whole(self.workers, "workers", 1, MAX_WORKERS, "give the number of workers, e.g. 2")
        _whole(self.workers_per_host, "workers_per_host", 1, MAX_WORKERS, "e.g. 4 GPUs per host, or 1")
        _whole(self.ps, "ps", 0, MAX_WORKERS, "give the number of ps tasks, e.g. 1 (0: no parameter server)")
        speeds = tuple(self.speeds) or (1.0,) * self.workers
        if len(speeds) != self.workers:
            raise AdviseError(with_fix(f"`speeds` has {len(speeds)} value(s) for {self.workers} worker(s)",
                                       f"give one speed per worker ({self.workers}), e.g. "
                                       f"{example_speeds(self.workers)}"), "speeds")
        for speed in speeds:
            _positive(speed, "speeds", "each speed is > 0: 1 is the speed step_ms was timed at, 0.25 a "
                      "quarter of it")
        if max(speeds) / min(speeds) > _MAX_SPEED_RATIO:
            raise AdviseError(with_fix(f"`speeds` span more than {_MAX_SPEED_RATIO:.0e}x: {min(speeds)!r} "
                                       f"to {max(speeds)!r}", "drop the stalled worker from the cluster"),
                              "speeds")
        for speed in speeds:
            _within(speed, "speeds", MIN_SPEED, MAX_SPEED, "", "give relative speeds, e.g. 1 for the speed "
                    "step_ms was timed at and 0.25 for a quarter of it")
        object.__setattr__(self, "speeds", tuple(float(s) for s in speeds))
        if self.ps_placement not in PS_PLACEMENTS:
            raise AdviseError(with_fix(f"`ps_placement` must be one of {PS_PLACEMENTS}, got "
                                       f"{self.ps_placement!r}",
                                       "separate: ps tasks on their own hosts; colocated: on worker hosts"),
                              "ps_placement")
        bandwidths = tuple(self.bandwidths)
        if len(bandwidths) == 1:
            bandwidths *= self.hosts
        if len(bandwidths) != self.hosts:
            raise AdviseError(with_fix(f"`bandwidths` has {len(bandwidths)} rate(s) for {self.hosts} worker "
                                       f"host(s)", "give one rate for all hosts, or one per worker host"),
                              "bandwidths")
        for rate in bandwidths:
            _rate(rate, "bandwidths", "give the link rate in bytes/s, e.g. parse_rate('1gbit')")
        object.__setattr__(self, "bandwidths", tuple(float(b) for b in bandwidths))
        if self.ps_bandwidth is None:
            object.__setattr__(self, "ps_bandwidth", min(bandwidths))
        _rate(self.ps_bandwidth, "ps_bandwidth", "give the ps hosts' link rate in bytes/s")
        _rate(self.intra_host_bandwidth, "intra_host_bandwidth", "e.g. parse_rate('80gbit')")
        if (isinstance(self.latency_s, bool) or not isinstance(self.latency_s, (int, float))
                or not math.isfinite(self.latency_s) or not 0 <= self.latency_s <= MAX_LATENCY_S):
            raise AdviseError(with_fix(f"`latency_s` must be from 0 to {MAX_LATENCY_S:g} seconds, got "
                                       f"{self.latency_s!r}",
                                       "give the one-way latency, e.g. 0.0001 (0.1 ms)"), "latency_s")
        if self.ps and self.hosts * self.workers > MAX_PS_MODEL_SIZE:
            raise AdviseError(with_fix(
                f"`workers` {self.workers:,} on {self.hosts:,} worker host(s) with ps tasks is too large for "
                f"the parameter-server model (worker hosts x workers at most {MAX_PS_MODEL_SIZE:,})",
                "model a smaller cluster (per-worker figures carry over), put several workers on a host "
                "(`workers_per_host`), or set `ps` to 0 to leave parameter_server out"), "workers")

    @property
    def hosts(self) -> int:
        """H: worker hosts (ps hosts of a ``separate`` placement not counted)."""
        return -(-self.workers // self.workers_per_host)

    def host_of(self, worker: int) -> int:
        return worker // self.workers_per_host

    def workers_on(self, host: int) -> range:
        return range(host * self.workers_per_host, min(self.workers, (host + 1) * self.workers_per_host))

    def ps_on(self, host: int) -> int:
        """How many ps tasks share worker host ``host`` (0 unless colocated)."""
        if self.ps_placement != "colocated" or not 0 <= host < self.hosts:
            return 0
        return self.ps // self.hosts + (host < self.ps % self.hosts)  # ps j goes to host j mod H
