"""The advisor's half of the plan: an advice, the cluster and the workload it was made for, as a
:class:`tfdist.plan.Plan` (the file format, its checks and its reading live in :mod:`tfdist.plan`)."""
from __future__ import annotations

from tfdist.advise.model_inputs import Cluster, Workload
from tfdist.advise.memory import planned_shards
from tfdist.advise.recommend import Advice
from tfdist.plan import Plan, variant_options

__all__ = ["plan_from_advice"]


def plan_from_advice(advice: Advice, cluster: Cluster, workload: Workload) -> Plan:
    """The plan of ``advice``: its recommended variant as options, for ``cluster`` and ``workload``.

    Parameter servers get ``shards=P`` with P > 1 ps tasks: the advisor models every variable split
    evenly over the P servers (memory and ps links alike: ``tfdist.advise.memory.planned_shards``, the
    shards the memory check counted). Only options that keep accuracy are
    planned: ``steps_per_execution`` (staler updates) is never set.
    """
    prediction = advice.predictions[advice.variant]
    options = variant_options(advice.variant)
    ps = cluster.ps if advice.recommended == "parameter_server" else 0
    shards = planned_shards(ps) if ps else None
    if shards is not None:
        options["shards"] = shards
    rate = prediction.examples_per_second
    inputs = {"hosts": cluster.hosts, "workers_per_host": cluster.workers_per_host,
              "speeds": list(cluster.speeds), "bandwidths_bytes_per_s": list(cluster.bandwidths),
              "ps_bandwidth_bytes_per_s": cluster.ps_bandwidth, "latency_s": cluster.latency_s,
              "params": workload.params, "dtype_bytes": workload.dtype_bytes, "step_ms": workload.step_ms,
              "overlap": workload.overlap,
              "embeddings": [table.as_dict() for table in workload.embeddings]}
    if advice.memory is not None:  # what the memory check was told and found
        figures = advice.memory.as_dict()
        inputs.update({name: figures[name] for name in ("optimizer", "slots_per_variable", "ps_memory",
                                                         "worker_memory", "ps_bytes", "min_ps")})
    return Plan(backend=advice.recommended, variant=advice.variant, options=options, workers=cluster.workers,
                ps=ps, batch_size=workload.batch_size, predicted_examples_per_second=rate,
                predicted_step_ms=1000.0 * workload.batch_size * cluster.workers / rate,
                bottleneck=prediction.bottleneck, explanation=prediction.explanation, inputs=inputs)
