"""The cost model: predicted step time, examples/s and scaling efficiency of each strategy.

An α–β model (latency α per message, 1/β the link rate) of one training step; docs/advise.md has the
equations and a worked example. Notation: N workers, G per host, H = ceil(N/G) hosts, M bytes of
parameters (= bytes of one gradient), B_h the link rate of host h, b the batch per worker, t_i the
compute time of worker i (``step_ms / speed_i``), o the overlap share.

Assumptions, stated once:

* Links are full duplex (a ring sends and receives at once); a link's rate is the same both ways.
  Compute is not slowed by communication (no CPU contention: on a machine where workers share
  cores, measure ``step_ms`` under that load).
* **Fixed costs** per step (Horovod's cycle and per-step framework work, the parameter-server
  coordinator's dispatch and variable RPCs) are CPU work on the worker: a worker of speed s takes
  f / s. On the network lab this turned one more regime right than a constant f (docs/advise.md).
* **Overlap**: up to ``o`` of a step's communication runs during the backward pass; what can be
  hidden is at most the compute time: ``exposed = comm - min(o * comm, t)``.
* **Horovod ring-allreduce** (synchronous): every step waits for the slowest worker:
  ``step = max_i t_i + exposed(ring) + f / min_i s_i`` (f: ``Workload.allreduce_overhead_ms``, default
  Horovod's 1 ms cycle; s_i the speeds) with
  ``ring = k * 2(N-1) α + 2(N-1)/N * M / B_min``, k = ceil(M / HOROVOD_FUSION_BYTES) fused
  allreduces, B_min the slowest link of the ring (the host links if H > 1, the intra-host rate
  if G > 1). Every ring step pays the network α (the ring moves at its slowest edge).
  *fp16 compression*: 2 bytes a parameter on the wire (M/2 for float32; for dtype_bytes > 2) plus a
  cast of M bytes at FP16_CAST_BYTES_PER_S. *Hierarchical* (``HOROVOD_HIERARCHICAL_ALLREDUCE=1``,
  H > 1 and G > 1): reduce-scatter and all-gather inside each host (``2(G-1)/G * M / B_intra``,
  intra-host latency taken as 0) then a ring among the H hosts, whose G concurrent chunks share
  each host's link (``k * 2(H-1) α + 2(H-1)/H * M / B_min``); the phases run one after the other.
* **MultiWorkerMirrored**: the same flat ring through TensorFlow's CollectiveAllReduce (RING over
  gRPC) at MWMS_BANDWIDTH_FACTOR of the link rate plus Horovod's fixed cost per step and
  MWMS_EXTRA_OVERHEAD_S, and no
  overlap (Keras reduces all gradients together after the backward pass). Both constants are
  assumptions to calibrate with the lab benchmark (issue 11 §4).
* **ParameterServerStrategy** (asynchronous): P ps tasks hold even shards of the variables (M/P
  each; tfdist's ``shards=P`` or ``min_shard_bytes`` with ``max_shards=P`` come close for large
  variables; small variables are not split, so real shards are uneven). Each worker steps at its
  own pace: ``step_i = t_i + exposed(2 M_i / B_h + 2α) + f_ps / s_i + 2M / PS_SERIALIZE_BYTES_PER_S``
  (f_ps: ``Workload.ps_overhead_ms``, measured),
  M_i the bytes of the shards not on its own host: it pulls M_i and pushes M_i, one after the
  other. Each ps link carries 2 M / P per worker step (pull and push counted together: the
  conservative bound; the lab's 2.6-3.6x at 50 Mbit/s lies nearer it than the full-duplex 2x),
  shared by every worker stepping concurrently; a ps colocated with workers shares their host's
  link. A link that would carry more than its rate slows the workers that use it by one factor
  until it fits (:func:`_share_links`). Throughput = sum of b / step_i.

* **Embedding tables** (``Workload.embeddings``): their gradients are ``IndexedSlices``, so a step
  moves only the rows it looks up: b × lookups rows per table (repeats included, as TensorFlow gathers
  them), each dim × dtype bytes plus an 8-byte index: R bytes per worker step. M_d is the rest of the
  model. Parameter servers: a worker pulls M_d + R and pushes as much (M above is then M_d + R).
  Horovod (``sparse_as_dense=False``, its default) and MultiWorkerMirrored: M_d is allreduced as above
  and each table's rows are allgathered over the flat ring on their own, ``g K (N-1)α + (N-1) R / B_min``
  for K tables (g = 2 allgathers for Horovod, values and indices, which fp16 compression does not
  touch; g = 3 for TensorFlow's collectives, which gather the lengths first).

Scaling efficiency = examples/s / (N × b / t_fastest): against N ideal workers all as fast as the
fastest one, with no communication; 1.0 is perfect scaling.
"""
from __future__ import annotations

import dataclasses
import math

from tfdist.advise.model_inputs import Cluster, Workload
from tfdist.advise.errors import AdviseError
from tfdist.advise.units import format_bytes, format_rate
from tfdist.errors import with_fix
from tfdist.runtime.lowrank import PowerSGDSettings, compressed, wire_numbers
from tfdist.plan import backend_of

#: Horovod's fusion buffer (HOROVOD_FUSION_THRESHOLD default, 64 MiB): one allreduce per buffer.
HOROVOD_FUSION_BYTES = 64 * 2**20
#: Rate of the float32 -> float16 -> float32 casts of fp16 compression (one memory pass each way).
FP16_CAST_BYTES_PER_S = 5e9
#: TensorFlow's RING collective over gRPC vs Horovod+Gloo: an assumed share of the link rate it reaches
#: (serialisation through gRPC, no tensor fusion across steps); to be calibrated (issue 11 §4).
MWMS_BANDWIDTH_FACTOR = 0.6
#: MultiWorkerMirrored's per-step cost beyond Horovod's fixed cost (collective launch, cross-worker
#: barrier); assumed.
MWMS_EXTRA_OVERHEAD_S = 1e-3
#: gRPC (de)serialisation of pulled variables and pushed gradients, per byte; the loopback benchmark's
#: growth of that extra cost with model size (small 2.7 MB vs large 23 MB MLP) puts it near 4 GB/s.
PS_SERIALIZE_BYTES_PER_S = 4e9

#: PowerSGD's own work per byte of a compressed matrix (adding the error, M Q, M^T P, P Q^T and the new
#: error: about five passes over M, plus a small QR): measured 3.0 ms a step for the 784 x 512 float32
#: kernel at rank 4 on one core of this machine (1.6 MB), with another test beside it.
POWERSGD_MATRIX_BYTES_PER_S = 5e8

STRATEGY_NAMES = ("horovod", "horovod_fp16", "horovod_hierarchical", "horovod_powersgd", "parameter_server",
                  "multi_worker_mirrored", "multi_worker_mirrored_powersgd")


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One strategy's predicted figures.

    step_ms: one step of one worker (synchronous strategies: all workers step together, b×N
    examples; parameter servers: the mean of the workers' own steps, b examples each).
    waiting_ms: per step, time a worker idles: for the slowest worker (synchronous, the fastest
    worker's wait) or for a saturated link (parameter servers). communication_ms: transfer time per
    step before overlap. bottleneck: ``compute``, ``slowest worker``, ``network`` or ``ps link``;
    explanation: the same in words. wire_bytes: the bytes each worker sends per step (a synchronous
    backend: its share of the ring; parameter servers: the gradients it pushes to ps tasks on other
    hosts, and it pulls as many; the mean over the workers), which a job's measured communication time
    turns into an effective link rate (:mod:`tfdist.adapt.refit`).
    """

    name: str
    step_ms: float
    examples_per_second: float
    scaling_efficiency: float
    waiting_ms: float
    communication_ms: float
    bottleneck: str
    explanation: str
    wire_bytes: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {"step_ms": _rounded(self.step_ms, 4),
                "examples_per_second": _rounded(self.examples_per_second, 3),
                "scaling_efficiency": _rounded(self.scaling_efficiency, 5),
                "waiting_ms": _rounded(self.waiting_ms, 4),
                "communication_ms": _rounded(self.communication_ms, 4), "bottleneck": self.bottleneck,
                "explanation": self.explanation}


def _rounded(value: float, digits: int) -> float:
    """``value`` to ``digits`` decimals, or to 4 significant digits where that would round a nonzero
    figure to 0 (a microsecond step on a fast worker stays > 0 in the JSON)."""
    shown = round(value, digits)
    return shown if shown or not value else float(f"{value:.4g}")


def ideal_examples_per_second(cluster: Cluster, workload: Workload) -> float:
    """N workers at the fastest worker's speed, no communication: the denominator of efficiency."""
    return cluster.workers * workload.batch_size * max(cluster.speeds) / workload.step_s


def _exposed(comm: float, compute: float, overlap: float) -> float:
    return comm - min(overlap * comm, compute)


def _ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def _sync_prediction(name: str, cluster: Cluster, workload: Workload, comm: float, overhead: float,
                     overlap: float, link_text: str, wire_bytes: float) -> Prediction:
    computes = [workload.step_s / s for s in cluster.speeds]
    slowest, fastest = max(computes), min(computes)
    exposed = _exposed(comm, slowest, overlap)
    step = slowest + exposed + overhead / min(cluster.speeds)
    examples = cluster.workers * workload.batch_size / step
    waiting = slowest - fastest
    if cluster.workers == 1:
        bottleneck, text = "compute", "compute (one worker: nothing to communicate)"
    elif exposed > slowest:
        bottleneck = "network"
        text = (f"the network: the ring moves {format_bytes(wire_bytes)} per worker per step over "
                f"{link_text}, {_ms(exposed)} of the {_ms(step)} step after overlap")
    else:
        bottleneck = "slowest worker" if waiting > exposed else "compute"
        text = (f"compute: the slowest worker computes {_ms(slowest)} of the {_ms(step)} step; the ring adds "
                f"{_ms(exposed)} after overlap")
    if waiting > 0:
        text += (f"; every step waits for the slowest worker (speed {min(cluster.speeds):g}): the fastest "
                 f"idles {_ms(waiting)}")
    return Prediction(name, step * 1000, examples, examples / ideal_examples_per_second(cluster, workload),
                      waiting * 1000, comm * 1000, bottleneck, text, wire_bytes)


def horovod_powersgd(cluster: Cluster, workload: Workload, settings: PowerSGDSettings = PowerSGDSettings()) -> Prediction:
    """Horovod with PowerSGD (``compression='powersgd'``, issue 38): each compressed matrix sends its
    two rank-r factors, ``(m + n) r`` numbers, in two allreduces one after the other (P, then Q with
    the rest of the gradients), so a step pays the latency and Horovod's fixed cost twice; the rest
    goes whole. Its own work (about five passes over each compressed matrix) is time the step adds, at
    the rate the probe timed on the model's kernels (``workload.powersgd_bytes_per_s``), else at
    POWERSGD_MATRIX_BYTES_PER_S. ``workload.matrices`` says what is compressed."""
    return _powersgd("horovod_powersgd", cluster, workload, settings)


def multi_worker_mirrored_powersgd(cluster: Cluster, workload: Workload,
                                   settings: PowerSGDSettings = PowerSGDSettings()) -> Prediction:
    """MultiWorkerMirrored with PowerSGD (``make_strategy('multi_worker_mirrored', compression='powersgd')``,
    ``tfdist/runtime/collective_powersgd.py``): as :func:`horovod_powersgd`, through TensorFlow's
    collectives as :func:`multi_worker_mirrored` takes them (MWMS_BANDWIDTH_FACTOR of the link, its
    extra fixed cost a round, three gathers per embedding table, no overlap)."""
    return _powersgd("multi_worker_mirrored_powersgd", cluster, workload, settings)


def _powersgd(name: str, cluster: Cluster, workload: Workload, settings: PowerSGDSettings) -> Prediction:
    """PowerSGD's two rounds on the ring of ``name``'s backend (Horovod, or tf.distribute's collectives).
    Embedding tables are taken as allgathered rows, as without PowerSGD; the runtime sends their
    gradients dense (and may compress them as matrices), which the model leaves out."""
    n, width = cluster.workers, workload.dtype_bytes
    collectives = backend_of(name) == "multi_worker_mirrored"
    shapes = list(workload.matrices)
    squeezed = [(m, k) for m, k in shapes if compressed((m, k), settings)]
    numbers = wire_numbers(shapes, settings) + (workload.params - workload.sparse_params
                                                - sum(m * k for m, k in shapes))
    wire = float(numbers * width)
    extra = sum(m * k for m, k in squeezed) * width / (workload.powersgd_bytes_per_s or POWERSGD_MATRIX_BYTES_PER_S)
    overlap = 0.0 if collectives else workload.overlap
    if n == 1:
        return _sync_prediction(name, cluster, workload, 0.0, 0.0, overlap, "", 0.0)
    ring_rate, ring_text = ring_link(cluster)
    if collectives:  # one batch_reduce_to a round, whatever its size
        rounds, rate, fixed = (2 if squeezed else 1), ring_rate * MWMS_BANDWIDTH_FACTOR, MWMS_EXTRA_OVERHEAD_S
        ring_text += f" at an assumed {MWMS_BANDWIDTH_FACTOR:g} of its rate through gRPC"
    else:
        fused = max(1, math.ceil(wire / HOROVOD_FUSION_BYTES))
        rounds, rate, fixed = (2 * fused if squeezed else fused), ring_rate, 0.0
    comm = rounds * 2 * (n - 1) * cluster.latency_s + 2 * (n - 1) / n * wire / rate
    gather, gathered = _allgather(cluster, workload, rate, gathers_per_table=3 if collectives else 2)
    # its own work runs between the two allreduces on every worker: never hidden, slower on a slow worker
    overhead = (workload.allreduce_overhead_ms / 1000 + fixed) * (2 if squeezed else 1) + extra
    return _sync_prediction(name, cluster, workload, comm + gather, overhead, overlap, ring_text,
                            2 * (n - 1) / n * wire + gathered)


def ring_link(cluster: Cluster) -> tuple[float, str]:
    """The slowest link of a flat ring over all workers, and its description."""
    rates = []
    if cluster.hosts > 1:
        rates.append((min(cluster.bandwidths), "the slowest host link"))
    if cluster.workers_per_host > 1:
        rates.append((cluster.intra_host_bandwidth, "the links inside a host"))
    rate, what = min(rates)
    return rate, f"{what} ({format_rate(rate)})"


def _allgather(cluster: Cluster, workload: Workload, rate: float, gathers_per_table: int) -> tuple[float, float]:
    """The embedding rows' ``IndexedSlices`` allgathered over the flat ring, each table on its own
    (``gathers_per_table`` allgathers of it: Horovod 2, values and indices, neither compressed;
    TensorFlow's collectives 3, the lengths first): (seconds, bytes each worker receives). (0, 0)
    without tables."""
    n, rows = cluster.workers, float(workload.sparse_step_bytes)
    if not rows or n == 1:
        return 0.0, 0.0
    rounds = gathers_per_table * len(workload.embeddings)
    return rounds * (n - 1) * cluster.latency_s + (n - 1) * rows / rate, (n - 1) * rows


def horovod(cluster: Cluster, workload: Workload, compression: str = "none",
            hierarchical: bool = False) -> Prediction:
    """Horovod ring-allreduce, optionally with fp16 compression or hierarchical allreduce; embedding
    tables' sparse gradients allgathered (``sparse_as_dense=False``, the default)."""
    n, dense = cluster.workers, float(workload.dense_bytes)
    fp16 = compression == "fp16" and workload.dtype_bytes > 2
    wire = dense / workload.dtype_bytes * 2 if fp16 else dense
    extra = dense / FP16_CAST_BYTES_PER_S if compression == "fp16" else 0.0
    name = "horovod_fp16" if compression == "fp16" else "horovod_hierarchical" if hierarchical else "horovod"
    if n == 1:
        return _sync_prediction(name, cluster, workload, 0.0, 0.0, workload.overlap, "", 0.0)
    rounds = math.ceil(wire / HOROVOD_FUSION_BYTES)  # 0: nothing dense (every parameter in a table)
    alpha = cluster.latency_s
    ring_rate, ring_text = ring_link(cluster)
    if hierarchical and cluster.hosts > 1 and cluster.workers_per_host > 1:
        g, h = cluster.workers_per_host, cluster.hosts
        slowest = min(cluster.bandwidths)
        comm = (2 * (g - 1) / g * wire / cluster.intra_host_bandwidth
                + rounds * 2 * (h - 1) * alpha + 2 * (h - 1) / h * wire / slowest)
        link_text = f"the slowest host link ({format_rate(slowest)}) among {h} hosts"
        moved = 2 * (h - 1) / h * wire
    else:
        link_text = ring_text
        comm = rounds * 2 * (n - 1) * alpha + 2 * (n - 1) / n * wire / ring_rate
        moved = 2 * (n - 1) / n * wire
    gather, gathered = _allgather(cluster, workload, ring_rate, gathers_per_table=2)
    return _sync_prediction(name, cluster, workload, comm + gather + extra, workload.allreduce_overhead_ms / 1000,
                            workload.overlap, link_text, moved + gathered)


def multi_worker_mirrored(cluster: Cluster, workload: Workload) -> Prediction:
    """tf.distribute MultiWorkerMirroredStrategy: the flat ring at MWMS_BANDWIDTH_FACTOR, no overlap."""
    n, m = cluster.workers, float(workload.dense_bytes)
    if n == 1:
        return _sync_prediction("multi_worker_mirrored", cluster, workload, 0.0, 0.0, 0.0, "", 0.0)
    rate, link_text = ring_link(cluster)
    comm = (2 * (n - 1) * cluster.latency_s if m else 0.0) + 2 * (n - 1) / n * m / (rate * MWMS_BANDWIDTH_FACTOR)
    gather, gathered = _allgather(cluster, workload, rate * MWMS_BANDWIDTH_FACTOR, gathers_per_table=3)
    overhead = workload.allreduce_overhead_ms / 1000 + MWMS_EXTRA_OVERHEAD_S
    return _sync_prediction("multi_worker_mirrored", cluster, workload, comm + gather, overhead, 0.0,
                            link_text + f" at an assumed {MWMS_BANDWIDTH_FACTOR:g} of its rate through gRPC",
                            2 * (n - 1) / n * m + gathered)


def parameter_server(cluster: Cluster, workload: Workload) -> Prediction:
    """tf.distribute ParameterServerStrategy with ``cluster.ps`` tasks (at least 1), asynchronous."""
    if cluster.ps < 1:
        raise _no_ps()
    m, p = float(workload.step_bytes), cluster.ps  # the bytes a worker step pulls (and pushes)
    steps, comms, remotes = [], [], []
    for worker, speed in enumerate(cluster.speeds):
        host = cluster.host_of(worker)
        remote = m * (1 - cluster.ps_on(host) / p)
        comm = (2 * remote / cluster.bandwidths[host] + 2 * cluster.latency_s) if remote > 0 else 0.0
        compute = workload.step_s / speed
        steps.append(compute + _exposed(comm, compute, workload.overlap) + ps_fixed_s(workload, speed))
        comms.append(comm)
        remotes.append(remote)
    own_rates = [1 / s for s in steps]
    rates, worst_name, utilisation, capacity = _share_links(cluster, m, own_rates)
    total_rate = sum(rates)
    examples = workload.batch_size * total_rate
    mean_step = sum(1 / r for r in rates) / len(rates)
    waiting = max(0.0, mean_step - sum(steps) / len(steps))
    mean_comm = sum(comms) / len(comms)
    mean_compute = sum(workload.step_s / s for s in cluster.speeds) / cluster.workers
    share = format_bytes(2 * m / p)
    if utilisation > 1:
        bottleneck = "ps link"
        text = (f"{worst_name} ({format_rate(capacity)}): it carries {share} per worker step (pull "
                f"and push of 1/{p} of the {format_bytes(m)} a step moves) and saturates, so a worker waits "
                f"{_ms(waiting)} per step for it on average")
    elif mean_comm - min(workload.overlap * mean_comm, mean_compute) > mean_compute:
        bottleneck = "network"
        text = (f"the workers' links: each worker pulls and pushes {format_bytes(2 * m)} per step, "
                f"{_ms(mean_comm)} of its {_ms(mean_step)} step; the busiest link is {utilisation:.0%} used")
    else:
        bottleneck = "compute"
        text = (f"compute: a worker's step is {_ms(mean_step)} on average, of which compute "
                f"{_ms(mean_compute)} and transfers {_ms(mean_comm)}; the busiest link is "
                f"{utilisation:.0%} used")
    if min(cluster.speeds) < max(cluster.speeds):
        text += "; asynchronous: no worker waits for the slowest, each adds its own steps"
    return Prediction("parameter_server", mean_step * 1000, examples,
                      examples / ideal_examples_per_second(cluster, workload), waiting * 1000,
                      mean_comm * 1000, bottleneck, text, sum(remotes) / len(remotes))


def ps_fixed_s(workload: Workload, speed: float = 1.0) -> float:
    """What a parameter-server worker of ``speed`` spends a step beyond its compute and the wire (s):
    the fixed cost (``Workload.ps_overhead_ms``, CPU work: slower on a slower worker) and the gRPC
    (de)serialisation of the bytes it pulls and pushes."""
    return workload.ps_overhead_ms / 1000 / speed + ps_serialize_s(workload)


def ps_serialize_s(workload: Workload) -> float:
    """The gRPC (de)serialisation of what a parameter-server worker pulls and pushes a step (s)."""
    return 2 * workload.step_bytes / PS_SERIALIZE_BYTES_PER_S


def _ps_links(cluster: Cluster, m: float) -> dict[str, tuple[list[float], float]]:
    """Each link's bytes per step of each worker, and its rate: {name: (bytes per worker step, rate)}."""
    p, n = cluster.ps, cluster.workers
    links: dict[str, tuple[list[float], float]] = {}
    for host in range(cluster.hosts):
        here = cluster.workers_on(host)
        local_ps = cluster.ps_on(host)
        per_worker = [2 * m * (1 - local_ps / p) if w in here else local_ps * 2 * m / p for w in range(n)]
        name = (f"the link of worker host {host}, which also serves {local_ps} ps task(s)," if local_ps
                else f"the link of worker host {host}")
        links[name] = (per_worker, cluster.bandwidths[host])
    if cluster.ps_placement == "separate":
        links["each ps host's link"] = ([2 * m / p] * n, cluster.ps_bandwidth)  # the P ps hosts alike
    return links


def _share_links(cluster: Cluster, m: float, own_rates: list[float]) -> tuple[list[float], str, float, float]:
    """The workers' step rates once no link carries more than its rate, with the busiest link at the
    workers' own rates: (rates, its name, its utilisation, its rate).

    The fullest link above its rate slows the workers that use it by the same factor, which leaves it
    exactly full and no other link fuller; repeated until every link fits (at most once per link).
    """
    links = _ps_links(cluster, m)

    def utilisation(rates: list[float], per_worker: list[float], rate: float) -> float:
        return sum(b * r for b, r in zip(per_worker, rates)) / rate

    first = {name: utilisation(own_rates, *link) for name, link in links.items()}
    worst = max(first, key=first.__getitem__)
    rates = list(own_rates)
    for _ in range(len(links)):  # a link scaled to full only empties later, so one pass per link at most
        name, u = max(((name, utilisation(rates, *links[name])) for name in links), key=lambda item: item[1])
        if u <= 1 + 1e-9:  # full (a link scaled to full may read 1 + rounding)
            break
        rates = [r / u if b > 0 else r for r, b in zip(rates, links[name][0])]
    return rates, worst, first[worst], links[worst][1]


def _no_ps() -> AdviseError:
    return AdviseError(with_fix("the parameter-server prediction needs at least one ps task, `ps` is 0",
                                "set ps=1 or more"), "ps")


def predict_all(cluster: Cluster, workload: Workload) -> dict[str, Prediction]:
    """Every strategy that applies to the cluster, by name (a subset of STRATEGY_NAMES, in that order).

    ``horovod_fp16`` needs dtype_bytes > 2; ``horovod_hierarchical`` needs several hosts with several
    workers each; ``horovod_powersgd`` and ``multi_worker_mirrored_powersgd`` need the model's matrices
    (``Workload.matrices``) and one of them worth compressing at the default rank; ``parameter_server``
    needs ps >= 1.
    """
    found = {"horovod": horovod(cluster, workload)}
    if workload.dtype_bytes > 2 and cluster.workers > 1:
        found["horovod_fp16"] = horovod(cluster, workload, compression="fp16")
    if cluster.hosts > 1 and cluster.workers_per_host > 1:
        found["horovod_hierarchical"] = horovod(cluster, workload, hierarchical=True)
    low_rank = cluster.workers > 1 and any(compressed(shape, PowerSGDSettings()) for shape in workload.matrices)
    if low_rank:
        found["horovod_powersgd"] = horovod_powersgd(cluster, workload)
    if cluster.ps >= 1:
        found["parameter_server"] = parameter_server(cluster, workload)
    found["multi_worker_mirrored"] = multi_worker_mirrored(cluster, workload)
    if low_rank:
        found["multi_worker_mirrored_powersgd"] = multi_worker_mirrored_powersgd(cluster, workload)
    return found
