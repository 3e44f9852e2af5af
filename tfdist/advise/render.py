"""The advice as people and programs read it: the table (100 columns) and the ``--json`` object.

Pure text functions, shared by ``tfdist advise`` and ``tfdist launch --backend auto`` (which prints the
same table before it launches). Whatever the cluster's size, what a human reads stays short: at most
a few speeds and link rates are listed, then a count.

    text = render(advice, cluster, workload)
    data = advice_json(advice)          # strict JSON: never NaN or Infinity
"""
from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Mapping
from typing import Any

from tfdist.advise.model_inputs import Cluster, Workload
from tfdist.advise.errors import AdviseError
from tfdist.advise.recommend import Advice
from tfdist.advise.units import format_bytes, format_rate
from tfdist.errors import with_fix

WIDTH = 100
_LISTED = 8  # speeds named before "... (N in all)"
_RATES = 4  # distinct link rates named before "A to B (N different rates)"


def render(result: Advice, cluster: Cluster, workload: Workload) -> str:
    """The human table: inputs, one line per strategy, the recommendation and its reasons."""
    if len(set(cluster.speeds)) == 1:
        speeds = f"all speed {cluster.speeds[0]:g}"
    else:
        shown = ", ".join(f"{s:g}" for s in cluster.speeds[:_LISTED])
        more = f", ... ({cluster.workers} in all)" if cluster.workers > _LISTED else ""
        speeds = f"speeds {shown}{more}"
    rates = sorted(set(cluster.bandwidths))
    links = (", ".join(format_rate(r) for r in rates) if len(rates) <= _RATES else
             f"{format_rate(rates[0])} to {format_rate(rates[-1])} ({len(rates)} different rates)")
    ps = (f"{cluster.ps} ps ({cluster.ps_placement}, link {format_rate(cluster.ps_bandwidth)})" if cluster.ps
          else "no ps")
    lines = textwrap.wrap(
        f"Cluster: {cluster.workers} worker(s) on {cluster.hosts} host(s) ({speeds}), {ps}; "
        f"links {links}, latency {cluster.latency_s * 1000:g} ms. Model: {workload.params:,} params x "
        f"{workload.dtype_bytes} B = {format_bytes(workload.model_bytes)}, batch {workload.batch_size} per "
        "worker, "
        f"{workload.step_ms:g} ms compute per step, overlap {workload.overlap:g}.{_tables(workload)}", WIDTH)
    if result.memory is not None:
        for line in result.memory.describe():
            lines += textwrap.wrap(line, WIDTH, subsequent_indent="  ")
    lines.append("")
    header = (f"{'strategy':<24}{'step ms':>10}{'examples/s':>14}{'efficiency':>12}{'waiting ms':>12}"
              "  bottleneck")
    lines += [header, "-" * len(header)]
    for name, p in result.predictions.items():
        mark = " *" if name == result.variant else ""
        lines.append(f"{name + mark:<24}{p.step_ms:>10,.1f}{p.examples_per_second:>14,.1f}"
                     f"{p.scaling_efficiency:>11.1%} {p.waiting_ms:>12,.1f}  {p.bottleneck}")
    legend = ("* recommended. step ms: one worker's step (allreduce: all workers together; parameter_server: "
              "each its own). efficiency: examples/s over N ideal workers at the fastest speed. waiting ms: "
              "per step, idle for the slowest worker (allreduce) or a saturated link (parameter_server).")
    lines += ["", *textwrap.wrap(legend, WIDTH), ""]
    variant = f" ({result.variant})" if result.variant != result.recommended else ""
    lines.append(f"Recommended: {result.recommended}{variant}")
    for reason in result.reasons:
        lines += textwrap.wrap(reason, WIDTH, initial_indent="- ", subsequent_indent="  ")
    return "\n".join(lines)


def _tables(workload: Workload) -> str:
    """The embedding tables, and what a step moves of them, for the Model line ("" without tables)."""
    if not workload.embeddings:
        return ""
    shown = "; ".join(e.describe() for e in workload.embeddings[:_LISTED])
    more = f"; ... ({len(workload.embeddings)} in all)" if len(workload.embeddings) > _LISTED else ""
    return (f" Embedding tables (sparse updates): {shown}{more}; a worker step moves "
            f"{format_bytes(workload.sparse_step_bytes)} of their rows, the rest "
            f"{format_bytes(workload.dense_bytes)} whole.")


def _non_finite(value: Any, path: str = "") -> str | None:
    """The path of the first NaN or infinity in a JSON-like value, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return path or "the value"
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _non_finite(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def advice_json(result: Advice, measured: Mapping[str, Any] | None = None) -> str:
    """The ``--json`` text: the advice (and ``"measured"``: what the probe measured, as
    :meth:`tfdist.probe.result.ProbeResult.as_dict` gives it), strict JSON (``allow_nan=False``).

    A prediction that is not finite (which the bounds of :class:`Cluster` and :class:`Workload` are
    there to prevent) raises :class:`AdviseError` naming the figure, rather than writing ``Infinity``,
    which JSON parsers refuse.
    """
    data: dict[str, Any] = result.as_dict()
    if measured is not None:
        data["measured"] = dict(measured)
    where = _non_finite(data)
    if where is not None:
        raise AdviseError(with_fix(f"the prediction {where} is not a finite number, which JSON cannot hold",
                                   "report this input as a bug; meanwhile check the inputs' units"), "")
    return json.dumps(data, indent=2, allow_nan=False)
