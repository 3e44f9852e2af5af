"""``tfdist advise``: which strategy for this cluster, with predicted step times and the reasons.

Thin layer: parse options, call :mod:`tfdist.advise`, print a table (100 columns) or one JSON object.
Bad input raises click.BadParameter / click.UsageError (exit 2) naming the option and the fix.
"""
from __future__ import annotations

import json
import textwrap
from typing import Any

import click

from tfdist.advise import Advice, AdviseError, Cluster, Workload
from tfdist.advise import advise as advise_cluster
from tfdist.advise.cluster import PS_PLACEMENTS
from tfdist.advise.units import RATE_EXAMPLES, format_bytes, format_rate, parse_count, parse_rate
from tfdist.cli.strict import StrictCommand

WIDTH = 100
# dataclass field -> the option that sets it
_FLAGS = {"workers": "--workers", "speeds": "--worker-speeds", "workers_per_host": "--workers-per-host",
          "ps": "--ps", "ps_placement": "--ps-placement", "bandwidths": "--bandwidth",
          "ps_bandwidth": "--ps-bandwidth", "latency_s": "--latency-ms",
          "intra_host_bandwidth": "--intra-host-bandwidth", "params": "--params",
          "batch_size": "--batch-size", "step_ms": "--step-ms", "dtype_bytes": "--dtype-bytes",
          "overlap": "--overlap"}


class RateType(click.ParamType):
    """A link rate with its unit (``1gbit``), or with ``many=True`` a comma-separated list of them."""

    name = "RATE"

    def __init__(self, many: bool = False) -> None:
        self.many = many

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (float, tuple)):
            return value
        parts = str(value).split(",") if self.many else [str(value)]
        try:  # click names the option: the message starts with the value
            rates = tuple(parse_rate(part, field="") for part in parts)
        except AdviseError as exc:
            self.fail(str(exc), param, ctx)
        return rates if self.many else rates[0]


class CountType(click.ParamType):
    """A parameter count: ``669706``, ``5,824,522``, ``23.8M``."""

    name = "COUNT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return parse_count(value, field="")
        except AdviseError as exc:
            self.fail(str(exc), param, ctx)


class SpeedsType(click.ParamType):
    """Relative worker speeds, comma-separated: ``1,1,0.25``."""

    name = "S,S,..."

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple:
        if isinstance(value, tuple):
            return value
        speeds = []
        for part in str(value).split(","):
            try:
                speed = float(part)
            except ValueError:
                self.fail(f"{part.strip()!r} is not a number; fix: give one relative speed per worker, "
                          "e.g. 1,1,0.25 (1 = the speed --step-ms was timed at)", param, ctx)
            if not 0 < speed < float("inf"):
                self.fail(f"{part.strip()!r} is not a positive speed; fix: every speed is > 0, e.g. 0.25 for "
                          "a worker four times slower", param, ctx)
            speeds.append(speed)
        return tuple(speeds)


@click.command("advise", cls=StrictCommand)
@click.option("--workers", type=click.IntRange(min=1), required=True, help="Number of workers (GPUs, ranks).")
@click.option("--ps", type=click.IntRange(min=0), default=1, show_default=True,
              help="Parameter-server tasks to model (0: leave parameter_server out).")
@click.option("--ps-placement", type=click.Choice(PS_PLACEMENTS), default="separate", show_default=True,
              help="separate: each ps on its own host; colocated: ps j on worker host j, sharing its link.")
@click.option("--params", type=CountType(), required=True,
              help="Parameter count of the model, e.g. 669706 or 23.8M (model.count_params()).")
@click.option("--dtype-bytes", type=click.IntRange(1, 16), default=4, show_default=True,
              help="Bytes per parameter (4: float32).")
@click.option("--batch-size", type=click.IntRange(min=1), required=True, help="Examples per step per worker.")
@click.option("--step-ms", type=click.FloatRange(min=0, min_open=True, max=1e9), required=True,
              help="Compute time of one step at --batch-size on one worker of speed 1, in ms (no "
                   "communication).")
@click.option("--worker-speeds", type=SpeedsType(),
              help="Relative speed of each worker, e.g. 1,1,0.25 (default: all 1).")
@click.option("--workers-per-host", "--gpus-per-host", "workers_per_host", type=click.IntRange(min=1),
              default=1, show_default=True, help="Workers sharing one host and its link (GPUs per server).")
@click.option("--bandwidth", type=RateType(many=True), required=True,
              help=f"Each worker host's link rate: one for all, or one per host, comma-separated; "
                   f"{RATE_EXAMPLES}.")
@click.option("--ps-bandwidth", type=RateType(),
              help="Each separate ps host's link (default: the slowest --bandwidth).")
@click.option("--intra-host-bandwidth", type=RateType(), default="80gbit", show_default=True,
              help="Rate between workers of one host.")
@click.option("--latency-ms", type=click.FloatRange(0, 10_000), default=0.1, show_default=True,
              help="One-way network latency per message, ms.")
@click.option("--overlap", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Share of communication hidden behind compute (0: none; Horovod on GPUs: about 0.5).")
@click.option("--probe", is_flag=True, hidden=True)  # not yet: refused with the way round it
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
def advise(workers: int, ps: int, ps_placement: str, params: int, dtype_bytes: int, batch_size: int,
           step_ms: float, worker_speeds: tuple[float, ...] | None, workers_per_host: int,
           bandwidth: tuple[float, ...], ps_bandwidth: float | None, intra_host_bandwidth: float,
           latency_ms: float, overlap: float, probe: bool, as_json: bool) -> None:
    """Predict step time, examples/s and scaling efficiency of Horovod, parameter servers and
    MultiWorkerMirrored on the cluster described, and recommend one, with its reasons.

    \b
    tfdist advise --workers 2 --ps 1 --params 669706 --batch-size 64 --step-ms 10 --bandwidth 1gbit
    tfdist advise --workers 2 --params 5.8M --batch-size 64 --step-ms 70 --worker-speeds 1,0.25 \\
        --bandwidth 10gbit --json
    tfdist advise --workers 128 --gpus-per-host 4 --ps 0 --params 138M --batch-size 64 \\
        --step-ms 415.6 --bandwidth 25gbit --latency-ms 0.01 --overlap 0.5

    The model and its assumptions: docs/advise.md.
    """
    if probe:
        raise click.UsageError("--probe is not implemented yet (it needs `tfdist launch --hosts` to measure "
                               "links and step times); fix: time a step on one worker and give --step-ms, "
                               "--bandwidth and --latency-ms yourself")
    hosts = -(-workers // workers_per_host)
    if len(bandwidth) not in (1, hosts):
        raise click.BadParameter(f"{len(bandwidth)} rates for {hosts} worker host(s) ({workers} workers, "
                                 f"{workers_per_host} per host); fix: give one rate for all hosts or one per "
                                 "host",
                                 param_hint="'--bandwidth'")
    if worker_speeds is not None and len(worker_speeds) != workers:
        example = ",".join(["1"] * max(1, workers - 1) + ["0.25"])
        raise click.BadParameter(f"{len(worker_speeds)} speed(s) for {workers} worker(s); fix: give one "
                                 f"speed per worker, e.g. {example}",
                                 param_hint="'--worker-speeds'")
    try:
        cluster = Cluster(workers=workers, bandwidths=bandwidth, speeds=worker_speeds or (),
                          workers_per_host=workers_per_host, ps=ps, ps_placement=ps_placement,
                          ps_bandwidth=ps_bandwidth, latency_s=latency_ms / 1000,
                          intra_host_bandwidth=intra_host_bandwidth)
        workload = Workload(params=params, batch_size=batch_size, step_ms=step_ms, dtype_bytes=dtype_bytes,
                            overlap=overlap)
    except AdviseError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{_FLAGS.get(exc.field, exc.field)}'") from None
    result = advise_cluster(cluster, workload)
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        click.echo(render(result, cluster, workload))


def render(result: Advice, cluster: Cluster, workload: Workload) -> str:
    """The human table: inputs, one line per strategy, the recommendation and its reasons."""
    if len(set(cluster.speeds)) == 1:
        speeds = f"all speed {cluster.speeds[0]:g}"
    else:
        shown = ", ".join(f"{s:g}" for s in cluster.speeds[:8])
        speeds = f"speeds {shown}" + (f", ... ({cluster.workers} in all)" if cluster.workers > 8 else "")
    rates = sorted(set(cluster.bandwidths))
    links = ", ".join(format_rate(r) for r in rates)
    ps = (f"{cluster.ps} ps ({cluster.ps_placement}, link {format_rate(cluster.ps_bandwidth)})" if cluster.ps
          else "no ps")
    lines = textwrap.wrap(
        f"Cluster: {cluster.workers} worker(s) on {cluster.hosts} host(s) ({speeds}), {ps}; "
        f"links {links}, latency {cluster.latency_s * 1000:g} ms. Model: {workload.params:,} params x "
        f"{workload.dtype_bytes} B = {format_bytes(workload.model_bytes)}, batch {workload.batch_size} per "
        "worker, "
        f"{workload.step_ms:g} ms compute per step, overlap {workload.overlap:g}.", WIDTH)
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
