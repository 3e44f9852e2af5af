"""The recommendation: the backend that reaches the target accuracy soonest, with reasons a person can check.

Without a measured ``Workload.ps_epochs_factor`` that is the backend with the most examples/s, and the
reasons say that asynchronous updates may need more epochs (so examples/s alone never claims "faster
to accuracy"). With it, parameter servers' examples/s count ``1 / ps_epochs_factor`` toward accuracy,
and when that changes the answer the reasons say so: which backend is faster per example, which
reaches the target sooner. The reasons also say what argues the other way: fault tolerance (a
parameter-server job survives losing a worker, a plain allreduce job does not, elastic Horovod
does) and a margin inside the model's error.

    advice = advise(cluster, workload)
    print(advice.recommended)          # "horovod" | "parameter_server" | "multi_worker_mirrored"
    for reason in advice.reasons: print("-", reason)
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tfdist.advise.model_inputs import Cluster, Workload
from tfdist.advise.cost import Prediction, predict_all
from tfdist.advise.errors import AdviseError
from tfdist.errors import with_fix
from tfdist.launch.backends import MODELLED
from tfdist.plan import backend_of  # the variant -> backend table's one copy

if TYPE_CHECKING:
    from tfdist.advise.memory import MemoryCheck

#: The backends a recommendation names (tfdist's strategy and launcher names): the modelled ones of
#: the one backend table, tfdist.launch.backends.
BACKENDS = MODELLED
#: Below this ratio between the two best backends the difference is inside the model's error.
CLOSE_RATIO = 1.15


@dataclasses.dataclass(frozen=True)
class Advice:
    """recommended: one of BACKENDS; variant: the winning entry of ``predictions`` (e.g.
    ``horovod_fp16``); reasons: sentences, the deciding one first; memory: the memory verdict the
    choice respected (None: no memory was described); unavailable: the backends that cannot launch on
    the cluster, with why (Horovod not installed: :class:`tfdist.launch.installed.HorovodInstall`)."""

    recommended: str
    variant: str
    predictions: dict[str, Prediction]
    reasons: tuple[str, ...]
    memory: MemoryCheck | None = None
    unavailable: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        """The ``--json`` object: recommended, variant, strategies {name: figures}, reasons; with a
        memory verdict also ``min_ps`` and ``min_ps_shards`` (the fewest ps tasks, and shards, that
        fit ``--ps-memory``; null without it or when none fits) and ``memory`` (the figures); with a
        backend that cannot launch, ``unavailable`` ({backend: why})."""
        data: dict[str, object] = {"recommended": self.recommended, "variant": self.variant,
                                   "strategies": {name: p.as_dict() for name, p in self.predictions.items()},
                                   "reasons": list(self.reasons)}
        if self.unavailable:
            data["unavailable"] = dict(self.unavailable)
        if self.memory is not None:
            figures = self.memory.as_dict()
            data.update(min_ps=figures["min_ps"], min_ps_shards=figures["min_ps_shards"], memory=figures)
        return data


def _best_of(predictions: dict[str, Prediction], backend: str) -> Prediction | None:
    candidates = [p for name, p in predictions.items() if backend_of(name) == backend]
    return max(candidates, key=lambda p: p.examples_per_second, default=None)


def _fmt(examples: float) -> str:
    return f"{examples:,.0f} examples/s" if examples >= 100 else f"{examples:.3g} examples/s"


def _toward_accuracy(prediction: Prediction, workload: Workload) -> float:
    """Examples/s as progress toward the target accuracy: parameter servers' divided by the epochs factor."""
    factor = workload.ps_epochs_factor
    if factor is not None and backend_of(prediction.name) == "parameter_server":
        return prediction.examples_per_second / factor
    return prediction.examples_per_second


def advise(cluster: Cluster, workload: Workload, memory: MemoryCheck | None = None,
           unavailable: Mapping[str, str] | None = None) -> Advice:
    """Predict every strategy and recommend the one soonest to accuracy (without a measured epochs
    factor: the most examples/s), with reasons. With ``memory`` a backend whose tasks would not fit
    is never recommended (the reasons say why, with the numbers); when none fits, AdviseError. Nor is
    a backend of ``unavailable`` ({backend: why it cannot launch}); the reasons say why."""
    predictions = predict_all(cluster, workload)
    unavailable = {backend: why for backend, why in (unavailable or {}).items()
                   if any(backend_of(name) == backend for name in predictions)}
    unfit = {} if memory is None else {backend_of(name): memory.refusal(backend_of(name))
                                       for name in predictions if not memory.fits(backend_of(name))}
    candidates = [predictions[name] for name in allowed(predictions, memory, unavailable)]
    if not candidates and memory is None:  # only a caller's unavailable list can leave nothing here
        raise AdviseError(with_fix(f"no backend can launch: {'; '.join(unavailable.values())}",
                                   "install a backend on the hosts as said"), "hosts")
    if not candidates:
        why: dict[str, list[str]] = {}
        for backend in unfit:
            if backend not in unavailable:
                why.setdefault(memory.refusal(backend, detail=False), []).append(backend)
        for backend, text in unavailable.items():
            why.setdefault(f"cannot launch here ({text})", []).append(backend)
        if memory.probed:  # --probe refuses --ps-memory and --worker-memory: name what it measured
            where, fix, field = ("the probed hosts' memory",
                                 "give the probed hosts more memory, or more ps tasks as said", "hosts")
        else:
            where, fix = "the memory given", "give the hosts more memory, or more ps tasks as said"
            ps_short = "parameter_server" in unfit and memory.ps_fits is False
            field = (memory.ps_host.given if ps_short else "--worker-memory").strip("-").replace("-", "_")
        raise AdviseError(with_fix(f"no backend fits in {where}: " + "; ".join(
            f"{', '.join(names)}: {text}" for text, names in why.items()), fix), field)
    fastest = max(candidates, key=lambda p: p.examples_per_second)
    best = max(candidates, key=lambda p: _toward_accuracy(p, workload))
    faster_unavailable = [b for b in unavailable
                          if _best_of(predictions, b).examples_per_second > best.examples_per_second]
    recommended = backend_of(best.name)
    others = {b: p for b in BACKENDS if b != recommended and b not in unavailable  # said first, below
              for p in [_best_of(predictions, b)] if p is not None}
    # the contrast: parameter servers against allreduce, else the best other backend
    contrast = others.get("parameter_server") or max(others.values(), key=lambda p: p.examples_per_second,
                                                        default=None)
    reasons = []
    if backend_of(fastest.name) != recommended:  # the epochs factor turned the answer
        ps_rate = predictions["parameter_server"]
        reasons.append(f"{best.name} reaches the target accuracy sooner although {fastest.name} is faster "
                       f"per example ({_fmt(fastest.examples_per_second)} vs "
                       f"{_fmt(best.examples_per_second)}): "
                       f"parameter servers need {workload.ps_epochs_factor:g}x the epochs (ps epochs "
                       f"factor), so their {_fmt(ps_rate.examples_per_second)} count as "
                       f"{_fmt(_toward_accuracy(ps_rate, workload))} toward accuracy")
    else:
        comparisons = ", ".join(f"{best.examples_per_second / p.examples_per_second:.2f}x {p.name} "
                                f"({_fmt(p.examples_per_second)})" for p in others.values())
        fit = " of the backends that fit" if any(
            _best_of(predictions, b).examples_per_second > best.examples_per_second for b in unfit) else ""
        if faster_unavailable:
            fit += " of the backends that can launch" if not fit else " and can launch"
        reasons.append(f"{best.name} is predicted fastest{fit}: {_fmt(best.examples_per_second)}"
                       + (f", {comparisons}" if comparisons else ""))
    reasons.append(f"{best.name} is limited by {best.explanation}")
    if contrast is not None:
        reasons.append(f"{contrast.name} is limited by {contrast.explanation}")
        if _toward_accuracy(best, workload) < CLOSE_RATIO * _toward_accuracy(contrast, workload):
            reasons.append(f"{best.name} and {contrast.name} are within {CLOSE_RATIO - 1:.0%}, inside this "
                           "model's error: measure both on the cluster before deciding")
    if "parameter_server" not in predictions:
        reasons.append("parameter_server was not considered: no ps task (give --ps 1 or more to compare it)")
    reasons += _variant_hints(best, predictions, workload)
    reasons += _caveats(recommended, predictions, cluster, workload, horovod="horovod" not in unavailable)
    if workload.embeddings:
        reasons.append(SPARSE_UPDATE_CAVEAT)
    if memory is not None:
        faster = [b for b in unfit if _best_of(predictions, b).examples_per_second > best.examples_per_second]
        first = [f"{b} would be faster but does not fit: {unfit[b]}" for b in faster]
        later = [f"{b} does not fit: {unfit[b]}" for b in unfit if b not in faster]
        reasons = first + reasons + later + _memory_notes(memory, unfit)
    if unavailable:
        reasons = ([f"{b} would be faster but cannot launch here: {unavailable[b]}" for b in faster_unavailable]
                   + reasons + [f"{b} cannot launch here: {unavailable[b]}" for b in unavailable
                                if b not in faster_unavailable])
    return Advice(recommended, best.name, predictions, tuple(reasons), memory, dict(unavailable))


def _memory_notes(memory: MemoryCheck, unfit: dict[str, str]) -> list[str]:
    """What the memory verdict adds: the ps tasks' need against the cap and the fewest ps that fit."""
    from tfdist.advise.units import format_memory

    notes = []
    if memory.ps_memory is not None and memory.planned is not None and "parameter_server" not in unfit:
        notes.append(f"memory: the fullest of {memory.ps} ps needs {format_memory(memory.planned.total)} "
                     f"with shards={memory.planned.shards or 1}, within {memory.ps_cap}")
    if memory.ps_memory is not None and memory.smallest is not None and "parameter_server" not in unfit:
        notes.append(f"memory: the fewest ps tasks that fit {memory.ps_cap}: "
                     f"{memory.smallest.ps} with shards={memory.smallest.shards or 1} "
                     f"({format_memory(memory.smallest.total)} each)")
    return notes


#: What the embedding tables' figures assume of the optimizer (docs/advise.md, Embedding tables).
SPARSE_UPDATE_CAVEAT = (
    "the embedding tables' figures assume an optimizer whose sparse update touches only the looked-up rows "
    "(Adagrad, SGD without momentum); Adam, RMSprop and SGD with momentum update every row of the table and "
    "its slots each step (under parameter servers on the ps, once per worker step), work the model leaves out")


def allowed(predictions: dict[str, Prediction], memory: MemoryCheck | None = None,
            unavailable: Mapping[str, str] | None = None) -> list[str]:
    """The variants of ``predictions`` the advisor may recommend: those whose backend fits ``memory``
    (None: no memory was described) and can launch (not in ``unavailable``), fp16 and PowerSGD only
    where the wire limits plain horovod. An adaptive run switches only to these."""
    return [name for name in predictions
            if _may_recommend(name, predictions) and (memory is None or memory.fits(backend_of(name)))
            and backend_of(name) not in (unavailable or {})]


#: Each compressed variant and the plain one whose wire it relieves.
_COMPRESSED = {"horovod_fp16": "horovod", "horovod_powersgd": "horovod",
               "multi_worker_mirrored_powersgd": "multi_worker_mirrored"}


def _may_recommend(name: str, predictions: dict[str, Prediction]) -> bool:
    """Compression only where the wire limits its plain backend: elsewhere fp16's casts and PowerSGD's
    own work cost time, and their rounding or low rank buys nothing."""
    return name not in _COMPRESSED or predictions[_COMPRESSED[name]].bottleneck == "network"


def _variant_hints(best: Prediction, predictions: dict[str, Prediction], workload: Workload) -> list[str]:
    hints = []
    # fp16 compression halves the dense gradients; embedding rows are allgathered uncompressed
    halved = "the dense gradients' bytes halved (not the embedding rows)" if workload.embeddings else \
        "half the bytes on the wire"
    plain = predictions["horovod"]
    fp16 = predictions.get("horovod_fp16")
    if (best.name == "horovod" and fp16 is not None and not _may_recommend(fp16.name, predictions)
            and fp16.examples_per_second > plain.examples_per_second):
        gain = fp16.examples_per_second / plain.examples_per_second
        hints.append(f"no fp16 compression: plain horovod is limited by {plain.bottleneck}, not the wire; "
                     f"{halved} would gain {gain:.2f}x in the model, and where the link is not full the "
                     "casts cost more than that (measured on the lab's unlimited links)")
    if best.name == "horovod_fp16":
        gain = best.examples_per_second / plain.examples_per_second
        hints.append(f"use fp16 compression (make_strategy('horovod', compression='fp16')): {halved}, "
                     f"{gain:.2f}x plain horovod; gradients are rounded to float16 for the allreduce")
    elif best.name in ("horovod_powersgd", "multi_worker_mirrored_powersgd"):
        base = predictions[_COMPRESSED[best.name]]
        hints.append(f"use PowerSGD (make_strategy('{base.name}', compression='powersgd')): each weight matrix "
                     f"sent as two rank-4 factors, {base.wire_bytes / max(best.wire_bytes, 1):.0f}x fewer bytes, "
                     f"{best.examples_per_second / base.examples_per_second:.2f}x plain {base.name}; it changes the "
                     "optimisation (a low-rank gradient with error feedback), which may need more epochs to the "
                     "same accuracy: compare time to accuracy, not only examples/s")
    elif best.name == "horovod_hierarchical":
        hints.append(f"set HOROVOD_HIERARCHICAL_ALLREDUCE=1: "
                     f"{best.examples_per_second / plain.examples_per_second:.2f}x the flat ring (fewer "
                     "latency-bound steps across hosts)")
    return hints


def _caveats(recommended: str, predictions: dict[str, Prediction], cluster: Cluster,
             workload: Workload, horovod: bool = True) -> list[str]:
    """What argues the other way, and what the figures leave out; ``horovod``: whether Horovod can
    launch (else elastic Horovod is not offered)."""
    caveats = []
    elastic = (", elastic Horovod (tfdist launch --backend horovod --elastic) goes on after re-forming its ring"
               if horovod else "")
    ps = predictions.get("parameter_server")
    factor = workload.ps_epochs_factor
    if recommended == "parameter_server" and factor is None:
        caveats.append("asynchronous updates: each worker's gradients apply to weights others have moved "
                       "since, so reaching a target accuracy can take more epochs than synchronous training; "
                       "more examples/s is not necessarily less time to accuracy: measure the epochs both "
                       "need on your model and give their ratio as the ps epochs factor")
    elif recommended == "parameter_server":
        caveats.append(f"time to accuracy counted: parameter servers need {factor:g}x the epochs of "
                       "synchronous training (ps epochs factor) and still come first")
    elif factor is not None and ps is not None:
        caveats.append(f"time to accuracy counted: with parameter servers needing {factor:g}x the epochs "
                       f"(ps epochs factor), {recommended} still comes first")
    caveats.append("these are steady-state rates: in a run of a few epochs, start-up (tracing, the first "
                   "broadcast, seconds) can decide which backend reaches the target first")
    if recommended == "parameter_server":
        caveats.append("fault tolerance agrees: a parameter-server job goes on when a worker is lost "
                       "(losing a ps task or the chief stops it)")
    elif ps is not None:
        caveats.append(f"if the job must survive losing a worker, fault tolerance argues the other way: "
                       f"parameter_server goes on without it (at {_fmt(ps.examples_per_second)}); a plain "
                       f"allreduce job stops{elastic}")
    else:
        caveats.append(f"a plain allreduce job stops when a worker is lost{elastic.replace(',', ';', 1)}")
    mwms = predictions["multi_worker_mirrored"]
    if recommended == "horovod" and cluster.workers > 1:
        caveats.append(f"multi_worker_mirrored runs the same ring through TensorFlow's gRPC collectives "
                       f"({_fmt(mwms.examples_per_second)} with assumed overheads): the choice when Horovod "
                       "is not installed")
    return caveats
