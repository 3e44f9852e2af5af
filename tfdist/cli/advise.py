"""``tfdist advise``: which strategy for this cluster, with predicted step times and the reasons.

Thin layer: parse options, call :mod:`tfdist.advise`, print a table (100 columns) or one JSON object.
Bad input raises click.BadParameter / click.UsageError (exit 2) naming the option and the fix.
"""
from __future__ import annotations

import dataclasses
import json
import textwrap
from typing import Any

import click
from click.core import ParameterSource

from tfdist.advise import Advice, AdviseError, Cluster, Workload
from tfdist.advise import advise as advise_cluster
from tfdist.advise.cluster import DEFAULT_ALLREDUCE_OVERHEAD_MS, DEFAULT_PS_OVERHEAD_MS, PS_PLACEMENTS
from tfdist.advise.probe import DEFAULT_SECONDS, ProbeResult
from tfdist.advise.units import RATE_EXAMPLES, format_bytes, format_rate, parse_count, parse_rate
from tfdist.cli.strict import StrictCommand
from tfdist.launch.remote import SshOptions

WIDTH = 100
# dataclass field -> the option that sets it
_FLAGS = {"workers": "--workers", "speeds": "--worker-speeds", "workers_per_host": "--workers-per-host",
          "ps": "--ps", "ps_placement": "--ps-placement", "bandwidths": "--bandwidth",
          "ps_bandwidth": "--ps-bandwidth", "latency_s": "--latency-ms",
          "intra_host_bandwidth": "--intra-host-bandwidth", "params": "--params",
          "batch_size": "--batch-size", "step_ms": "--step-ms", "dtype_bytes": "--dtype-bytes",
          "overlap": "--overlap", "ps_epochs_factor": "--ps-epochs-factor",
          "ps_overhead_ms": "--ps-overhead-ms", "allreduce_overhead_ms": "--allreduce-overhead-ms"}

# options only --probe reads
_PROBE_ONLY = {"hosts": "--hosts", "model": "--model", "ssh_port": "--ssh-port",
               "ssh_identity_file": "--ssh-identity-file", "probe_seconds": "--probe-seconds"}
# what --probe measures, so giving it too is a contradiction (never silently ignored)
_MEASURED = {"bandwidth": "--bandwidth", "latency_ms": "--latency-ms", "ps_bandwidth": "--ps-bandwidth",
             "ps_placement": "--ps-placement", "workers_per_host": "--workers-per-host"}
_MEASURED_WITH_MODEL = {"params": "--params", "step_ms": "--step-ms", "dtype_bytes": "--dtype-bytes",
                        "worker_speeds": "--worker-speeds"}


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)


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
@click.option("--workers", type=click.IntRange(min=1),
              help="Number of workers (GPUs, ranks); with --probe default the slots left after the ps.")
@click.option("--ps", type=click.IntRange(min=0), default=1, show_default=True,
              help="Parameter-server tasks to model (0: leave parameter_server out).")
@click.option("--ps-placement", type=click.Choice(PS_PLACEMENTS), default="separate", show_default=True,
              help="separate: each ps on its own host; colocated: ps j on worker host j, sharing its link.")
@click.option("--params", type=CountType(),
              help="Parameter count of the model, e.g. 669706 or 23.8M (model.count_params()); --probe "
                   "--model measures it.")
@click.option("--dtype-bytes", type=click.IntRange(1, 16), default=4, show_default=True,
              help="Bytes per parameter (4: float32).")
@click.option("--batch-size", type=click.IntRange(min=1), required=True, help="Examples per step per worker.")
@click.option("--step-ms", type=click.FloatRange(min=0, min_open=True, max=1e9),
              help="Compute time of one step at --batch-size on one worker of speed 1, in ms (no "
                   "communication).")
@click.option("--worker-speeds", type=SpeedsType(),
              help="Relative speed of each worker, e.g. 1,1,0.25 (default: all 1).")
@click.option("--workers-per-host", "--gpus-per-host", "workers_per_host", type=click.IntRange(min=1),
              default=1, show_default=True, help="Workers sharing one host and its link (GPUs per server).")
@click.option("--bandwidth", type=RateType(many=True),
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
@click.option("--ps-overhead-ms", type=click.FloatRange(0, 1e6), default=DEFAULT_PS_OVERHEAD_MS,
              show_default=True,
              help="Fixed cost of a parameter-server step beyond compute and transfers (the coordinator's "
                   "dispatch, the RPCs reading and updating variables), ms: measure it where RPCs are slow "
                   "(docs/advise.md).")
@click.option("--allreduce-overhead-ms", type=click.FloatRange(0, 1e6), default=DEFAULT_ALLREDUCE_OVERHEAD_MS,
              show_default=True,
              help="Fixed cost of an allreduce step beyond compute and the ring (Horovod's cycle, per-step "
                   "framework work; MultiWorkerMirrored pays 1 ms more), ms: measure it where steps are short "
                   "or RPCs slow (docs/advise.md).")
@click.option("--ps-epochs-factor", type=click.FloatRange(min=0, min_open=True, max=1e6),
              help="Epochs parameter servers need to reach your target accuracy over the epochs synchronous "
                   "training needs, measured (e.g. 1.3; benchmarks/time_to_accuracy.py measures it): the "
                   "recommendation then weighs time to accuracy, not examples/s alone.")
@click.option("--probe", is_flag=True,
              help="Measure instead of asking: the links between --hosts, and with --model each worker "
                   "host's step time and the model's size (over ssh, as `tfdist launch --hosts`).")
@click.option("-H", "--hosts", metavar="HOST:SLOTS,...",
              help="--probe: the hosts, as in `tfdist launch --hosts` (same placement), e.g. h1:1,h2:1,h3:1.")
@click.option("--model", metavar="MODULE:FUNCTION",
              help="--probe: a function returning the Keras model (with an Input), e.g. models:build_model; "
                   "imported on each host from this directory and PYTHONPATH.")
@click.option("--ssh-port", type=click.IntRange(1, 65535), help="--probe: the port of every host's sshd.")
@click.option("--ssh-identity-file", type=click.Path(exists=True, dir_okay=False),
              help="--probe: the private key ssh uses.")
@click.option("--probe-seconds", type=click.FloatRange(0.5, 60), default=DEFAULT_SECONDS, show_default=True,
              help="--probe: seconds of transfer per link.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
def advise(workers: int, ps: int, ps_placement: str, params: int, dtype_bytes: int, batch_size: int,
           step_ms: float, worker_speeds: tuple[float, ...] | None, workers_per_host: int,
           bandwidth: tuple[float, ...], ps_bandwidth: float | None, intra_host_bandwidth: float,
           latency_ms: float, overlap: float, ps_overhead_ms: float,
           allreduce_overhead_ms: float, ps_epochs_factor: float | None,
           probe: bool, hosts: str | None, model: str | None,
           ssh_port: int | None, ssh_identity_file: str | None, probe_seconds: float, as_json: bool) -> None:
    """Predict step time, examples/s and scaling efficiency of Horovod, parameter servers and
    MultiWorkerMirrored on the cluster described, and recommend one, with its reasons.

    \b
    tfdist advise --workers 2 --ps 1 --params 669706 --batch-size 64 --step-ms 10 --bandwidth 1gbit
    tfdist advise --workers 2 --params 5.8M --batch-size 64 --step-ms 70 --worker-speeds 1,0.25 \\
        --bandwidth 10gbit --json
    tfdist advise --workers 128 --gpus-per-host 4 --ps 0 --params 138M --batch-size 64 \\
        --step-ms 415.6 --bandwidth 25gbit --latency-ms 0.01 --overlap 0.5
    tfdist advise --probe --hosts h1:1,h2:1,h3:1 --ps 1 --model models:build_model --batch-size 64

    The model and its assumptions: docs/advise.md.
    """
    ctx = click.get_current_context()
    if probe:
        measured = _probe(ctx, hosts, workers, ps, model, batch_size, params, step_ms, dtype_bytes,
                          worker_speeds, overlap, SshOptions(ssh_port, ssh_identity_file), probe_seconds)
        cluster, workload, found = measured
        workload = dataclasses.replace(workload, ps_epochs_factor=ps_epochs_factor,
                                       ps_overhead_ms=ps_overhead_ms,
                                       allreduce_overhead_ms=allreduce_overhead_ms)
        result = advise_cluster(cluster, workload)
        if as_json:
            click.echo(json.dumps({**result.as_dict(), "measured": found.as_dict()}, indent=2))
        else:
            click.echo(render_measured(found) + "\n\n" + render(result, cluster, workload))
        return
    for name, flag in _PROBE_ONLY.items():
        if _given(ctx, name):
            raise click.UsageError(f"{flag} applies only to --probe; fix: add --probe, or drop {flag}")
    required = {"workers": workers, "params": params, "step_ms": step_ms, "bandwidth": bandwidth}
    for name, value in required.items():  # required unless --probe measures them
        if value is None:
            param = next(p for p in ctx.command.params if p.name == name)
            raise click.MissingParameter(ctx=ctx, param=param)
    host_count = -(-workers // workers_per_host)
    if len(bandwidth) not in (1, host_count):
        raise click.BadParameter(f"{len(bandwidth)} rates for {host_count} worker host(s) ({workers} "
                                 f"workers, {workers_per_host} per host); fix: give one rate for all hosts "
                                 "or one per host",
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
                            overlap=overlap, ps_epochs_factor=ps_epochs_factor,
                            ps_overhead_ms=ps_overhead_ms, allreduce_overhead_ms=allreduce_overhead_ms)
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


def check_probe_options(ctx: click.Context, model: str | None) -> None:
    """Refuse options that --probe measures itself (naming both and the fix) and require what it cannot."""
    measured = {**_MEASURED, **(_MEASURED_WITH_MODEL if model else {})}
    for name, flag in measured.items():
        if _given(ctx, name):
            what = "with --model measures" if name in _MEASURED_WITH_MODEL else "measures"
            raise click.UsageError(f"--probe {what} {flag} itself, so {flag} and --probe contradict each "
                                   f"other; fix: drop {flag}, or drop --probe and describe the cluster "
                                   "yourself")
    if not _given(ctx, "hosts"):
        raise click.UsageError("--probe needs --hosts, the hosts to measure; fix: add e.g. --hosts "
                               "h1:1,h2:1,h3:1 (as for `tfdist launch --hosts`)")
    if model is None:
        for name, flag in (("params", "--params"), ("step_ms", "--step-ms")):
            if not _given(ctx, name):
                raise click.UsageError(f"--probe without --model does not know {flag}; fix: add --model "
                                       f"module:build_fn to measure it, or give {flag}")


def _probe(ctx: click.Context, hosts: str, workers: int | None, ps: int, model: str | None, batch_size: int,
           params: int | None, step_ms: float | None, dtype_bytes: int, worker_speeds: tuple | None,
           overlap: float, ssh: SshOptions, seconds: float) -> tuple[Cluster, Workload, ProbeResult]:
    """Check the options, probe the hosts (progress on stderr), build the advisor's inputs."""
    from tfdist.advise.probe import default_workers, probe_hosts
    from tfdist.launch.hosts import parse_hosts
    from tfdist.launch.plan import LaunchError

    check_probe_options(ctx, model)
    try:
        if workers is None:
            workers = default_workers(parse_hosts(hosts), ps)
        found = probe_hosts(hosts, workers, ps, model=model, batch_size=batch_size, options=ssh,
                            seconds=seconds, log=lambda message: click.echo(message, err=True))
    except (AdviseError, LaunchError) as exc:
        raise click.UsageError(str(exc)) from None
    return build_inputs(found, workers, ps, batch_size, params, step_ms, dtype_bytes, worker_speeds, overlap)


def build_inputs(found: ProbeResult, workers: int, ps: int, batch_size: int, params: int | None = None,
                 step_ms: float | None = None, dtype_bytes: int | None = None,
                 worker_speeds: tuple | None = None,
                 overlap: float = 0.0) -> tuple[Cluster, Workload, ProbeResult]:
    """The advisor's Cluster and Workload from what the probe measured (and what the user gave)."""
    try:
        cluster = found.to_cluster(workers, ps)
        if worker_speeds is not None:
            if len(worker_speeds) != workers:
                raise click.BadParameter(f"{len(worker_speeds)} speed(s) for {workers} worker(s); fix: give "
                                         "one speed per worker", param_hint="'--worker-speeds'")
            cluster = dataclasses.replace(cluster, speeds=worker_speeds)
        workload = found.to_workload(batch_size, step_ms=step_ms, params=params,
                                     dtype_bytes=None if found.params is not None else dtype_bytes,
                                     overlap=overlap)
    except AdviseError as exc:
        flag = _FLAGS.get(exc.field, "--" + exc.field.replace("_", "-"))
        raise click.BadParameter(str(exc), param_hint=f"'{flag}'") from None
    return cluster, workload, found


def render_measured(found: ProbeResult) -> str:
    """The "Measured:" block: per host its link rate, latency, step time and speed; the model."""
    lines = ["Measured:"]
    for host in found.hosts:
        step = f", step {host.step_ms:,.1f} ms, speed {host.speed:.2f}" if host.step_ms is not None else ""
        lines.append(f"  {host.host}: link {format_rate(host.rate_bps / 8)}, latency "
                     f"{host.latency_s * 1000:.3g} ms{step}")
    if found.params is not None:
        lines.append(f"  model: {found.params:,} params x {found.dtype_bytes} B, batch {found.batch_size}")
    return "\n".join(lines)
