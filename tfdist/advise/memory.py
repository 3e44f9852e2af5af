"""Will the model fit? Bytes per ps task and per worker, the fewest ps tasks and shards: pure arithmetic.

What a **ps task** holds (``ps_need``): the TensorFlow server itself (``SERVER_FOOTPRINT_BYTES``), the
pieces of variables placed on it and their optimizer slots (``OPTIMIZER_SLOTS``: a slot is a variable
of the same shape, colocated with its variable), and working space while it creates and updates them
(``working_pieces``: copies of the largest piece it holds). With ``shards=S`` a variable of r rows is
split into ``min(S, r)`` pieces (TensorFlow's FixedShardsPartitioner; with ``min_shard_bytes=B`` into
``min(P, r, ceil(bytes / B))``: a variable smaller than a shard is not split) whose row counts differ by
at most one; without either every variable sits whole on one ps. ParameterServerStrategy places the
variables and pieces round-robin over the P ps tasks in the order they are created, so how they fall
depends on that order (small ones shift the big ones); ``ps_need`` is an upper bound whatever the
order: a ps gets at most ``ceil(pieces / P) + EXTRA_VARIABLES`` of them (the optimizer's iteration
counter and the metrics' variables take turns too) and at most ``ceil(s / P)`` pieces of a variable
split in s; the largest pieces within those caps are counted. (Round-robin can be that unlucky:
kernels and biases alternating over 2 ps put every kernel on the first.)

What a **worker** holds (``worker_need``): under allreduce (Horovod, MultiWorkerMirrored) every worker
holds the whole model, its slots and one gradient of every variable; under parameter servers a worker
holds no variables, only its batch, activations and the values a step reads (which
the advisor does not model: only the server's footprint is counted, a lower bound).

What a **host** holds (``MemoryCheck.host_need``, the one rule for given and probed memory): every task
placed on it, its workers under the backend and, under parameter servers, its ps tasks (an allreduce
job starts none); each ps then has the host's memory less its workers' runtime (``ps_room``).

    model = ModelMemory.from_counts(params=128_000_000, dtype_bytes=4, optimizer="adagrad")
    ps_need(model, ps=2, shards=2).total     # bytes the fullest ps needs
    fewest_ps(model, cap=2 * 2**30)          # (ps, shards) or None
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from tfdist.advise.errors import AdviseError
from tfdist.advise.units import format_memory as format_bytes
from tfdist.errors import with_fix

#: Slot variables each optimizer keeps per model variable, each of that variable's shape, as counted
#: on tf-keras 2.21 and Keras 3.15 (tests/advise/test_memory_tensorflow.py builds each one). Scalars
#: beside them (the iteration counter, Keras 3's learning rate, Nadam's momentum product) are a few
#: bytes and not counted. ``sgd``: tf-keras' SGD keeps a momentum slot even at momentum=0 (tfdist's
#: default Keras), Keras 3's keeps none (give ``--optimizer 0``); ``momentum``: SGD with momentum > 0
#: (nesterov too); ``amsgrad``: Adam or AdamW with amsgrad=True; ``rmsprop``: momentum=0 and not
#: centered (each of those adds one slot: give ``--optimizer 2`` or ``3``).
OPTIMIZER_SLOTS: dict[str, int] = {
    "sgd": 1, "momentum": 1, "adagrad": 1, "rmsprop": 1, "lion": 1, "adam": 2, "adamw": 2, "adamax": 2,
    "nadam": 2, "ftrl": 2, "adadelta": 2, "amsgrad": 3,
}
#: Where Keras 3 keeps fewer slots than tf-keras.
KERAS3_SLOTS: dict[str, int] = {"sgd": 0}
#: The largest slot count a number given instead of a name may say.
MAX_SLOTS = 16
#: A TensorFlow ps server's own memory: 248 MB measured here (TensorFlow 2.21, CPU, a
#: ``tf.distribute.Server`` of a ps task started and idle: /proc/PID/status RssAnon, 2026-12-01; the
#: network lab measured about 250 MiB of anonymous memory). Its VmRSS is 628 MB, but the other 381 MB
#: (RssFile) are TensorFlow's shared libraries: page cache, shared by every TensorFlow process of the
#: host and reclaimable, so a memory cap does not kill for them.
SERVER_FOOTPRINT_BYTES = 250 * 10**6
#: The largest ps count searched for ``fewest_ps``.
MAX_PS = 10_000
#: Variables besides the model's that take turns in the round-robin placement: the optimizer's
#: iteration counter, the compiled loss's and metrics' totals and counts (a few scalars each).
EXTRA_VARIABLES = 4


def working_pieces(slots: int) -> int:
    """Copies of its largest piece a ps needs beyond variables and slots: ``2 (1 + slots)``.

    Each variable and slot is created from an initial value computed on the ps (one more copy while
    it is assigned), and an update computes temporaries of the variable's shape (tf-keras' Adam
    updates its slots densely even for sparse gradients). Fitted to measurements here (tf-keras
    2.21, ``fit`` of an Embedding model, each ps's peak RSS, VmHWM, beyond the server and the variables
    and slots): a 32M-parameter table on 1 ps, Adagrad 3.7 pieces (formula: 4) and Adam 5.9 (6).
    Checked on the issue's 128M-parameter table with Adagrad over 2 ps (peak VmHWM less the 381 MB of
    shared libraries): whole on one, 3,170 MB measured against 3,320 predicted; ``shards=2``, 1,713
    MB against 1,784. The network lab's 32M-parameter table with Adagrad (tests/multihost/
    test_memory.py): about 940 MiB whole on one ps against 969 predicted, 530 MiB per half against 603.
    """
    return 2 * (1 + slots)


def parse_optimizer(text: str, field: str = "--optimizer") -> tuple[str, int]:
    """``(name, slots)`` of an optimizer name of ``OPTIMIZER_SLOTS`` (any case), or of a number of
    slot variables per variable (``"3"``: ``("3 slots", 3)``)."""
    raw = str(text).strip()
    key = raw.lower()
    if key in OPTIMIZER_SLOTS:
        return key, OPTIMIZER_SLOTS[key]
    if key.isascii() and key.isdigit() and len(key) <= 3 and int(key) <= MAX_SLOTS:
        return f"{int(key)} slot(s)", int(key)
    names = ", ".join(f"{name} {count}" for name, count in OPTIMIZER_SLOTS.items())
    shown = repr(raw if len(raw) <= 24 else raw[:24] + "...")
    subject = f"{field} {shown}" if field else shown
    raise AdviseError(with_fix(f"{subject} is not an optimizer the advisor knows (slots per variable: {names})",
                               f"name one of them, or give its slot variables per variable, 0 to {MAX_SLOTS}"),
                      "optimizer")


@dataclasses.dataclass(frozen=True)
class Variable:
    """One model variable: ``elements`` in all, ``rows`` along its first axis (what a partitioner
    splits; 1 for a scalar), ``dtype_bytes`` per element."""

    elements: int
    rows: int
    dtype_bytes: int = 4

    def __post_init__(self) -> None:
        for name in ("elements", "rows", "dtype_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise AdviseError(with_fix(f"a variable's `{name}` must be a whole number >= 1, got {value!r}",
                                           "describe each variable by its element count, rows and dtype size"),
                                  name)
        if self.elements % self.rows:
            raise AdviseError(with_fix(f"a variable of {self.elements} elements cannot have {self.rows} rows",
                                       "give rows = the first dimension of its shape"), "rows")

    @property
    def bytes(self) -> int:
        return self.elements * self.dtype_bytes

    def parts(self, shards: int | None, min_shard_bytes: int | None, ps: int) -> int:
        """How many pieces ParameterServerStrategy splits it into (rank 0 and 1 row: never split)."""
        if shards is not None:
            return max(1, min(shards, self.rows))
        if min_shard_bytes is not None:
            return max(1, min(self.rows, ps, math.ceil(self.bytes / min_shard_bytes)))
        return 1

    def piece_bytes(self, parts: int) -> int:
        """The largest of its ``parts`` pieces: the first ones get one row more."""
        return -(-self.rows // parts) * (self.elements // self.rows) * self.dtype_bytes


@dataclasses.dataclass(frozen=True)
class ModelMemory:
    """The model's variables (creation order not needed) and the optimizer's slots per variable.

    ``measured``: the variables were listed from the model (``--probe --model``); otherwise they were
    derived from counts (:meth:`from_counts`). ``gradient_bytes``: one gradient of every variable on an
    allreduce worker, where embedding tables' gradients are the rows a step gathers (``IndexedSlices``);
    None: as many bytes as the variables (every gradient dense).
    """

    variables: tuple[Variable, ...]
    optimizer: str
    slots: int
    measured: bool = False
    gradient_bytes: int | None = None

    @classmethod
    def from_counts(cls, params: int, dtype_bytes: int, optimizer: str, slots: int | None = None,
                    largest: int | None = None) -> ModelMemory:
        """From ``--params`` alone: the largest variable (``largest``, default all ``params``: the
        conservative case) and the rest as one more variable; both split row by row."""
        slots = OPTIMIZER_SLOTS[optimizer] if slots is None else slots
        largest = params if largest is None else largest
        if largest > params:
            raise AdviseError(with_fix(f"the largest variable ({largest:,} parameters) is larger than the model "
                                       f"({params:,})", "give --largest-variable at most --params"),
                              "largest_variable")
        found = [Variable(largest, largest, dtype_bytes)]
        if params > largest:
            found.append(Variable(params - largest, params - largest, dtype_bytes))
        return cls(tuple(found), optimizer, slots)

    @classmethod
    def from_shapes(cls, shapes: Sequence[tuple[Sequence[int], int]], optimizer: str,
                    slots: int) -> ModelMemory:
        """From the model's variables as ``(shape, dtype_bytes)`` pairs (``model.weights``)."""
        found = []
        for shape, size in shapes:
            elements = math.prod(int(d) for d in shape) if len(shape) else 1
            if elements:
                found.append(Variable(elements, int(shape[0]) if len(shape) else 1, int(size)))
        if not found:
            raise AdviseError(with_fix("the model has no variables", "build the model (give it an Input)"),
                              "model")
        return cls(tuple(found), optimizer, slots, measured=True)

    @property
    def variable_bytes(self) -> int:
        return sum(v.bytes for v in self.variables)

    @property
    def slot_bytes(self) -> int:
        return self.slots * self.variable_bytes

    @property
    def largest(self) -> Variable:
        return max(self.variables, key=lambda v: v.bytes)


@dataclasses.dataclass(frozen=True)
class PsNeed:
    """What the fullest of ``ps`` ps tasks needs with ``shards`` (None: no partitioner):
    ``variables`` bytes of pieces, ``slots`` their slots, ``working`` its working space,
    ``footprint`` the server itself; ``total`` all of it."""

    ps: int
    shards: int | None
    variables: int
    slots: int
    working: int
    footprint: int = SERVER_FOOTPRINT_BYTES

    @property
    def total(self) -> int:
        return self.variables + self.slots + self.working + self.footprint

    def describe(self) -> str:
        """``2.4 GB (variables 1.02 GB + slots 1.02 GB + working space 0 B + server 630 MB)``."""
        return (f"{format_bytes(self.total)} (variables {format_bytes(self.variables)} + slots "
                f"{format_bytes(self.slots)} + working space {format_bytes(self.working)} + server "
                f"{format_bytes(self.footprint)})")


def ps_need(model: ModelMemory, ps: int, shards: int | None = None,
            min_shard_bytes: int | None = None) -> PsNeed:
    """The bytes the fullest of ``ps`` ps tasks needs, an upper bound whatever the creation order
    (module docstring). ``shards`` 1 or None: no partitioner."""
    if isinstance(ps, bool) or not isinstance(ps, int) or ps < 1:
        raise AdviseError(with_fix(f"`ps` must be 1 or more to hold variables, got {ps!r}", "give --ps 1 or more"),
                          "ps")
    shards = None if shards == 1 else shards
    pieces = []  # (piece bytes, pieces of it one ps can hold)
    total = 0
    for variable in model.variables:
        parts = variable.parts(shards, min_shard_bytes, ps)
        total += parts
        pieces.append((variable.piece_bytes(parts), -(-parts // ps)))
    room = -(-total // ps) + EXTRA_VARIABLES
    held = largest = 0
    for size, cap in sorted(pieces, reverse=True):
        take = min(cap, room)
        held += take * size
        largest = max(largest, size if take else 0)
        room -= take
        if not room:
            break
    return PsNeed(ps, shards, held, model.slots * held, working_pieces(model.slots) * largest)


def fewest_shards(model: ModelMemory, ps: int, cap: int) -> PsNeed | None:
    """The fewest shards (1 to ``ps``) with which the fullest of ``ps`` ps tasks fits in ``cap``
    bytes, as its :class:`PsNeed`; None when none does."""
    for shards in range(1, ps + 1):
        need = ps_need(model, ps, shards)
        if need.total <= cap:
            return need
    return None


def fewest_ps(model: ModelMemory, cap: int, limit: int = MAX_PS) -> PsNeed | None:
    """The fewest ps tasks P whose fullest ps fits in ``cap`` bytes with ``shards=P`` (every variable
    split over all of them), and with them the fewest shards that fit; None when no P up to
    ``limit`` does (a row of the largest variable, its slots and the server are above the cap)."""
    if SERVER_FOOTPRINT_BYTES >= cap:
        return None
    per_row = max(v.piece_bytes(v.rows) for v in model.variables) * (1 + model.slots + working_pieces(model.slots))
    if SERVER_FOOTPRINT_BYTES + per_row > cap:
        return None
    state = model.variable_bytes * (1 + model.slots)
    ps = max(1, math.ceil(state / (cap - SERVER_FOOTPRINT_BYTES)))  # the variables and slots alone need it
    while ps <= limit:
        if ps_need(model, ps, ps).total <= cap:
            return fewest_shards(model, ps, cap)
        ps += 1
    return None


@dataclasses.dataclass(frozen=True)
class WorkerNeed:
    """A worker's bytes under ``kind`` (``allreduce`` or ``parameter_server``): ``model`` (variables,
    slots and one gradient of each: allreduce only), ``working`` (allreduce: the update's working
    space, as on a ps) and ``footprint`` (the TensorFlow runtime). The batch, activations and what a
    parameter-server step reads are not counted."""

    kind: str
    model: int
    working: int = 0
    footprint: int = SERVER_FOOTPRINT_BYTES

    @property
    def total(self) -> int:
        return self.model + self.working + self.footprint


def worker_need(model: ModelMemory, kind: str) -> WorkerNeed:
    """Allreduce: every worker holds the model, its slots and a gradient of every variable, and
    updates them itself; parameter servers: none of them (the variables live on the ps tasks)."""
    if kind == "parameter_server":
        return WorkerNeed(kind, 0)
    gradient = model.variable_bytes if model.gradient_bytes is None else model.gradient_bytes
    return WorkerNeed("allreduce", model.variable_bytes * (1 + model.slots) + gradient,
                      working_pieces(model.slots) * model.largest.bytes)


@dataclasses.dataclass(frozen=True)
class HostLoad:
    """One host and what runs on it: ``workers`` and ``ps`` tasks, ``memory`` its usable bytes (None:
    not known, not checked); ``name`` the probed host ("" for hosts described by options) and ``given``
    the option that gave its memory (``--worker-memory`` or ``--ps-memory``; "" when probed).

        HostLoad(workers=8, ps=0, memory=64 * 2**30, given="--worker-memory")
    """

    workers: int
    ps: int
    memory: int | None
    name: str = ""
    given: str = ""

    def cap(self) -> str:
        """How a text names its memory: ``--worker-memory 64 GiB`` or ``the probed 8 GiB of host w1``."""
        if self.name:
            return f"the probed {format_bytes(self.memory)} of host {self.name}"
        return f"{self.given} {format_bytes(self.memory)}"

    def tasks(self) -> str:
        """``8 workers``, ``2 workers and 1 ps``."""
        parts = [f"{n} {word}{'s' if n > 1 and word == 'worker' else ''}"
                 for n, word in ((self.workers, "worker"), (self.ps, "ps")) if n]
        return " and ".join(parts)


@dataclasses.dataclass(frozen=True)
class MemoryCheck:
    """The memory verdict for one described cluster.

    The rule, in :meth:`host_need` alone: a host must hold every task placed on it, its workers' needs
    under the backend plus, under parameter servers, its ps tasks' (an allreduce job starts no ps).

    hosts: every distinct host (:class:`HostLoad`); ps_memory / worker_memory: the smallest known
    memory of a host holding ps tasks / workers (None: not known, not checked); ps: the cluster's ps
    tasks; planned: the fullest ps with the shards the plan would set (None without ps tasks); fewest:
    the fewest shards for ``ps`` that fit (None: none fits, or no cap); smallest: the fewest ps tasks
    and shards that fit (None: none, or no cap), both against ``ps_room``, what each ps has on the
    tightest of its hosts; allreduce / ps_worker: a worker's need under each; probed: the memory was
    measured by ``--probe``, not given.
    """

    model: ModelMemory
    ps: int
    ps_memory: int | None
    worker_memory: int | None
    planned: PsNeed | None
    fewest: PsNeed | None
    smallest: PsNeed | None
    allreduce: WorkerNeed
    ps_worker: WorkerNeed
    probed: bool = False
    hosts: tuple[HostLoad, ...] = ()

    def host_need(self, host: HostLoad, backend: str) -> int:
        """The bytes ``host`` must hold under ``backend``: the one rule for what a host holds."""
        if backend == "parameter_server":
            ps = host.ps * self.planned.total if host.ps and self.planned is not None else 0
            return host.workers * self.ps_worker.total + ps
        return host.workers * self.allreduce.total

    def _known(self, kind: str) -> list[HostLoad]:
        return [h for h in self.hosts if getattr(h, kind) and h.memory is not None]

    def _tightest(self, kind: str, backend: str) -> HostLoad | None:
        """The known host holding ``kind`` tasks that is shortest of memory under ``backend``."""
        return max(self._known(kind), key=lambda h: (self.host_need(h, backend) - h.memory, h.workers + h.ps),
                   default=None)

    @property
    def ps_host(self) -> HostLoad | None:
        """The host holding ps tasks where each has the least room (None: none known)."""
        return min(self._known("ps"), key=lambda h: (h.memory - h.workers * self.ps_worker.total) // h.ps,
                   default=None)

    @property
    def ps_room(self) -> int | None:
        """The bytes each ps has on the tightest of its hosts, beside that host's workers."""
        host = self.ps_host
        return None if host is None else max(0, host.memory - host.workers * self.ps_worker.total) // host.ps

    @property
    def ps_cap(self) -> str:
        """How the text names the ps cap: ``--ps-memory 2 GiB``, ``the probed 2 GiB per ps``, or what a
        host leaves each of its ps beside its workers."""
        host = self.ps_host
        if host.workers == 0 and host.ps == 1:
            return f"the probed {format_bytes(host.memory)} per ps" if self.probed else host.cap()
        beside = f"less the runtime of its {host.tasks().split(' and ')[0]}" if host.workers else ""
        shared = f"shared by its {host.ps} ps" if host.ps > 1 else ""
        return f"{format_bytes(self.ps_room)} per ps ({host.cap()} {', '.join(p for p in (beside, shared) if p)})"

    @property
    def worker_cap(self) -> str:
        host = self._tightest("workers", "allreduce")
        return host.cap() if host is not None else ""

    def _fit(self, kind: str, backend: str) -> bool | None:
        hosts = self._known(kind)
        return all(self.host_need(h, backend) <= h.memory for h in hosts) if hosts else None

    @property
    def ps_fits(self) -> bool | None:
        """Whether every host holding ps tasks holds them, with the planned shards, and its workers
        (None: no memory known or no ps)."""
        return None if self.planned is None else self._fit("ps", "parameter_server")

    def worker_fits(self, kind: str) -> bool | None:
        """Whether every worker host holds its tasks under ``kind`` (None: no memory known)."""
        return self._fit("workers", "parameter_server" if kind == "parameter_server" else "allreduce")

    def fits(self, backend: str) -> bool:
        """False only when a known memory is exceeded."""
        if backend == "parameter_server":
            return self.ps_fits is not False and self.worker_fits(backend) is not False
        return self.worker_fits(backend) is not False

    def _on_host(self, host: HostLoad, backend: str) -> str:
        """``; 8 workers on one host need 300 GiB`` (nothing for a host of one task)."""
        if host.workers + (host.ps if backend == "parameter_server" else 0) <= 1:
            return ""
        tasks = host.tasks() if backend == "parameter_server" else f"{host.workers} workers"
        return f"; {tasks} on one host need {format_bytes(self.host_need(host, backend))}"

    def refusal(self, backend: str, detail: bool = True) -> str:
        """Why ``backend`` cannot run here, with the numbers and the fix (without the backend's name);
        ``detail=False``: without the breakdown of the bytes, for a one-line error."""
        if backend == "parameter_server" and self.ps_fits is False:
            fix = (f"--ps {self.smallest.ps} with shards={self.smallest.shards or 1} is the fewest that fit"
                   if self.smallest else "no ps count fits (a row of the largest variable, its slots and the "
                   "server are above the cap): give the ps hosts more memory")
            need = self.planned.describe() if detail else format_bytes(self.planned.total)
            return (f"with {self.ps} ps and shards={self.planned.shards or 1} the fullest ps needs {need}, above "
                    f"{self.ps_cap}; {fix}")
        if backend == "parameter_server":
            host = self._tightest("workers", backend)
            return (f"each worker needs {format_bytes(self.ps_worker.total)} (the TensorFlow runtime)"
                    f"{self._on_host(host, backend)}, above {host.cap()}")
        need = self.allreduce
        host = self._tightest("workers", "allreduce")
        breakdown = (f" (variables, {self.model.optimizer} slots and gradients {format_bytes(need.model)} + "
                     f"working space {format_bytes(need.working)} + runtime {format_bytes(need.footprint)})"
                     if detail else "")
        return (f"every worker holds the whole model: {format_bytes(need.total)}{breakdown}"
                f"{self._on_host(host, 'allreduce')}, above {host.cap()}")

    def describe(self) -> list[str]:
        """The text's Memory lines."""
        model = self.model
        if model.measured:
            listed = f"{len(model.variables)} variables listed from the model"
        elif len(model.variables) == 1:
            listed = "taken as one variable: give --largest-variable, or --probe --model to list them"
        else:
            listed = f"the largest {format_bytes(model.largest.bytes)}, the rest taken as one more"
        lines = [f"Memory: {format_bytes(model.variable_bytes)} of variables ({listed}) + "
                 f"{format_bytes(model.slot_bytes)} of {model.optimizer} slots ({model.slots} per variable)."]
        if self.planned is not None:
            cap = "" if self.ps_room is None else (
                f" of {self.ps_cap}: " + ("fits" if self.ps_fits else "does NOT fit"))
            lines.append(f"Each of {self.ps} ps (shards={self.planned.shards or 1}): {self.planned.describe()}{cap}.")
        if self.ps_room is not None:
            found = self.smallest
            lines.append(f"Fewest ps that fit {self.ps_cap}: " + (
                f"{found.ps} with shards={found.shards or 1} ({format_bytes(found.total)} each)." if found else
                "none (a row of the largest variable, its slots and the server are above it)."))
        cap = "" if self.worker_memory is None else f" ({self.worker_cap})"
        lines.append(f"Each worker{cap}: allreduce {format_bytes(self.allreduce.total)} (the whole model, slots, "
                     f"gradients, working space, runtime), parameter_server {format_bytes(self.ps_worker.total)} "
                     "(runtime only); the batch and activations are not counted.")
        fullest = max(self.hosts, key=lambda h: (h.workers, h.ps), default=None)
        if fullest is not None and fullest.workers and fullest.workers + fullest.ps > 1:
            lines.append(f"Each host holds all its tasks: {fullest.workers} workers need "
                         f"{format_bytes(self.host_need(fullest, 'allreduce'))} under allreduce, "
                         f"{fullest.tasks()} {format_bytes(self.host_need(fullest, 'parameter_server'))} "
                         "under parameter_server.")
        return lines

    def as_dict(self) -> dict[str, Any]:
        """The ``memory`` object of ``--json``."""
        def need(found: PsNeed | None) -> dict[str, Any] | None:
            if found is None:
                return None
            return {"ps": found.ps, "shards": found.shards or 1, "bytes": found.total,
                    "variables_bytes": found.variables, "slots_bytes": found.slots,
                    "working_bytes": found.working, "server_bytes": found.footprint}

        return {"optimizer": self.model.optimizer, "slots_per_variable": self.model.slots,
                "variables_bytes": self.model.variable_bytes, "slots_bytes": self.model.slot_bytes,
                "variables_listed": self.model.measured,
                "ps_memory": self.ps_memory, "worker_memory": self.worker_memory, "probed": self.probed,
                "ps": self.ps, "shards": (self.planned.shards or 1) if self.planned else None,
                "ps_bytes": self.planned.total if self.planned else None, "ps_fits": self.ps_fits,
                "ps_room": self.ps_room,
                "fewest_shards": (self.fewest.shards or 1) if self.fewest else None,
                "min_ps": self.smallest.ps if self.smallest else None,
                "min_ps_shards": (self.smallest.shards or 1) if self.smallest else None,
                "min_ps_need": need(self.smallest), "planned_need": need(self.planned),
                "worker_bytes": {"allreduce": self.allreduce.total, "parameter_server": self.ps_worker.total},
                "host_bytes": {backend: max((self.host_need(h, backend) for h in self.hosts), default=0)
                               for backend in ("allreduce", "parameter_server")},
                "server_bytes": SERVER_FOOTPRINT_BYTES,
                "worker_fits": {"allreduce": self.worker_fits("allreduce"),
                                "parameter_server": self.worker_fits("parameter_server")}}


def planned_shards(ps: int) -> int | None:
    """The shards a plan sets for ``ps`` ps tasks: ``ps`` when several (every variable split evenly,
    as the cost model assumes for the links), else none."""
    return ps if ps > 1 else None


def check_memory(model: ModelMemory, ps: int, ps_memory: int | None = None,
                 worker_memory: int | None = None, probed: bool = False,
                 hosts: Sequence[HostLoad] | None = None) -> MemoryCheck:
    """The verdict for ``ps`` ps tasks with the planned shards, the fewest shards and ps tasks that
    fit, and every host against its memory. ``hosts``: what each host runs and its memory (default:
    one worker per host of ``worker_memory`` bytes, each ps on a host of ``ps_memory``); with them
    ``ps_memory`` / ``worker_memory`` are the smallest memory of a host of each kind."""
    if hosts is None:
        hosts = [HostLoad(1, 0, worker_memory, given="--worker-memory")]
        hosts += [HostLoad(0, 1, ps_memory, given="--ps-memory")] if ps >= 1 else []
    else:
        ps_memory = min((h.memory for h in hosts if h.ps and h.memory is not None), default=None)
        worker_memory = min((h.memory for h in hosts if h.workers and h.memory is not None), default=None)
    planned = ps_need(model, ps, planned_shards(ps)) if ps >= 1 else None
    check = MemoryCheck(model, ps, ps_memory, worker_memory, planned, None, None,
                        worker_need(model, "allreduce"), worker_need(model, "parameter_server"), probed,
                        tuple(hosts))
    room = check.ps_room
    fewest = fewest_shards(model, ps, room) if ps >= 1 and room is not None else None
    smallest = fewest_ps(model, room) if room is not None else None
    return dataclasses.replace(check, fewest=fewest, smallest=smallest)


__all__ = ["EXTRA_VARIABLES", "KERAS3_SLOTS", "MAX_PS", "OPTIMIZER_SLOTS", "SERVER_FOOTPRINT_BYTES", "HostLoad",
           "MemoryCheck", "ModelMemory", "PsNeed", "Variable", "WorkerNeed", "check_memory", "fewest_ps",
           "fewest_shards", "parse_optimizer", "planned_shards", "ps_need", "worker_need", "working_pieces"]
