"""Which strategy for this cluster? A cost model of Horovod, parameter servers and MultiWorkerMirrored.

Pure Python (no TensorFlow): describe the cluster and the workload, get predicted step times,
examples/s and scaling efficiency per strategy, and a recommendation with its reasons.

    from tfdist.advise import Cluster, Workload, advise, parse_rate
    cluster = Cluster(workers=2, speeds=(1.0, 0.25), ps=1, bandwidths=(parse_rate("1gbit"),))
    workload = Workload(params=669_706, batch_size=64, step_ms=10.0)
    advice = advise(cluster, workload)
    advice.recommended, advice.reasons
    print(render(advice, cluster, workload))   # the table of `tfdist advise`; advice_json(advice): --json

The model, its equations and its assumptions: :mod:`tfdist.advise.cost` and docs/advise.md. Its
inputs, :class:`Cluster` and :class:`Workload`, are :mod:`tfdist.advise.model_inputs` (named so
beside :mod:`tfdist.cluster`, the cluster spec of TF_CONFIG); what users type becomes them in
:mod:`tfdist.advise.user_inputs` (``manual_inputs``), what the probe measured in
:mod:`tfdist.probe.result` (``build_inputs``); the text and JSON are :mod:`tfdist.advise.render`'s.
Whether the tasks fit in memory (bytes per ps and per worker, what each host holds, the fewest ps
tasks and shards) is :mod:`tfdist.advise.memory` (``user_inputs.memory_check`` builds its verdict from
the options or the probed hosts, for ``tfdist advise`` and ``tfdist launch --backend auto`` alike;
``advise(cluster, workload, memory)`` never recommends a backend that does not fit). The advice as
a plan file is :mod:`tfdist.advise.planner`'s ``plan_from_advice``.

Layering: a pure cost model. It may import :mod:`tfdist.plan`, :mod:`tfdist.launch.backends` (the
backend table), :mod:`tfdist.errors`; never the probe, ssh or a process (:mod:`tfdist.probe` and
:mod:`tfdist.auto` sit above it).
"""
from __future__ import annotations

from tfdist.advise.model_inputs import Cluster, Workload
from tfdist.advise.cost import Prediction, predict_all
from tfdist.advise.errors import AdviseError
from tfdist.advise.user_inputs import manual_inputs
from tfdist.advise.recommend import BACKENDS, Advice, advise
from tfdist.advise.render import advice_json, render
from tfdist.advise.units import format_bytes, format_rate, parse_count, parse_rate

__all__ = ["BACKENDS", "Advice", "AdviseError", "Cluster", "Prediction", "Workload", "advice_json",
           "advise", "format_bytes", "format_rate", "manual_inputs", "parse_count",
           "parse_rate", "predict_all", "render"]
