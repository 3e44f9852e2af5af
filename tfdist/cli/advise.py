"""``tfdist advise``: which strategy for this cluster, with predicted step times and the reasons.

Thin layer: parse options, call :mod:`tfdist.advise` (inputs, the model, the rendering) or, with
``--probe``, :mod:`tfdist.auto` (the pipeline ``tfdist launch --backend auto`` runs too), print a table
(100 columns) or one strict JSON object. Bad input raises click.BadParameter / click.UsageError (exit 2)
naming the option and the fix; every number is bounded and finite before the model sees it.
"""
from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from tfdist.advise import Advice, AdviseError, Cluster, Workload
from tfdist.advise import advise as advise_cluster
from tfdist.advise.memory import OPTIMIZER_SLOTS
from tfdist.advise.model_inputs import (DEFAULT_ALLREDUCE_OVERHEAD_MS, DEFAULT_PS_OVERHEAD_MS, MAX_BATCH_SIZE,
                                        MAX_LATENCY_S, MAX_OVERHEAD_MS, MAX_PS_EPOCHS_FACTOR, MAX_STEP_MS,
                                        MAX_WORKERS, MIN_STEP_MS, PS_PLACEMENTS)
from tfdist.advise.planner import plan_from_advice
from tfdist.advise.render import advice_json, render
from tfdist.advise.units import parse_bytes, parse_count, parse_rate
from tfdist.advise.user_inputs import manual_inputs, memory_check, parse_model_ref, parse_rates, parse_speeds
from tfdist.auto import AutoRequest, MeasureError, decide
from tfdist.cli.brief_help import BriefOption
from tfdist.cli.interrupt import exit_on_interrupt
from tfdist.cli.strict import StrictCommand
from tfdist.cli.types import EMBEDDING, OPTIMIZER, BoundedInt, FiniteFloat, Parsed, hosts_or_allocation, writable_plan_path
from tfdist.launch.errors import LaunchError
from tfdist.launch.hosts import HostList
from tfdist.launch.remote import SshOptions
from tfdist.plan import save_plan
from tfdist.probe import driver
from tfdist.probe.result import ProbeResult, render_measured

# dataclass field -> the option that sets it
_FLAGS = {"workers": "--workers", "speeds": "--worker-speeds", "workers_per_host": "--workers-per-host",
          "ps": "--ps", "ps_placement": "--ps-placement", "bandwidths": "--bandwidth",
          "ps_bandwidth": "--ps-bandwidth", "latency_s": "--latency-ms",
          "intra_host_bandwidth": "--intra-host-bandwidth", "params": "--params",
          "batch_size": "--batch-size", "step_ms": "--step-ms", "dtype_bytes": "--dtype-bytes",
          "overlap": "--overlap", "ps_epochs_factor": "--ps-epochs-factor",
          "ps_overhead_ms": "--ps-overhead-ms", "allreduce_overhead_ms": "--allreduce-overhead-ms",
          "hosts": "--hosts", "model": "--model", "optimizer": "--optimizer",
          "largest_variable": "--largest-variable", "ps_memory": "--ps-memory",
          "worker_memory": "--worker-memory", "embeddings": "--embedding"}

# what --time-step reads: every other option given with it is refused
_TIME_STEP = {"time_step", "model", "batch_size", "as_json"}
# options only --probe reads
_PROBE_ONLY = {"hosts": "--hosts", "model": "--model", "ssh_port": "--ssh-port",
               "ssh_identity_file": "--ssh-identity-file", "probe_seconds": "--probe-seconds"}
# what --probe measures, so giving it too is a contradiction (never silently ignored)
_MEASURED = {"bandwidth": "--bandwidth", "latency_ms": "--latency-ms", "ps_bandwidth": "--ps-bandwidth",
             "ps_placement": "--ps-placement", "workers_per_host": "--workers-per-host",
             "ps_memory": "--ps-memory", "worker_memory": "--worker-memory"}
_MEASURED_WITH_MODEL = {"params": "--params", "step_ms": "--step-ms", "dtype_bytes": "--dtype-bytes",
                        "worker_speeds": "--worker-speeds", "largest_variable": "--largest-variable"}
# what the memory check needs the optimizer for
_MEMORY = {"ps_memory": "--ps-memory", "worker_memory": "--worker-memory", "largest_variable": "--largest-variable"}
_WORKERS_LIMIT = f"the advisor models at most {MAX_WORKERS:,} workers"
_RATE = Parsed("RATE", lambda text: parse_rate(text, field=""))  # click names the option: field=""
_MODEL = Parsed("MODULE:FUNCTION", lambda text: parse_model_ref(text, field=""))
_RATES = Parsed("RATE[,RATE...]", lambda text: parse_rates(text, field=""))
_SPEEDS = Parsed("S,S,...", lambda text: parse_speeds(text, field=""))
_BYTES = Parsed("BYTES", lambda text: parse_bytes(text, field=""))


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)


def _bad(exc: AdviseError) -> click.BadParameter:
    """The library's error as the option's usage error (exit 2)."""
    flag = _FLAGS.get(exc.field, "--" + exc.field.replace("_", "-")) if exc.field else None
    return click.BadParameter(str(exc), param_hint=f"'{flag}'" if flag else None)


@click.command("advise", cls=StrictCommand,
               epilog="Every option, the model and its assumptions, --probe: docs/advise.md.")
@click.option("--workers", cls=BriefOption, type=BoundedInt(1, MAX_WORKERS, limit=_WORKERS_LIMIT), metavar="N",
              help="Workers (GPUs, ranks).")
@click.option("--ps", cls=BriefOption, type=BoundedInt(0, MAX_WORKERS), default=1, show_default=True,
              metavar="N", help="Parameter servers (0: none).")
@click.option("--ps-placement", type=click.Choice(PS_PLACEMENTS), default="separate", show_default=True,
              metavar="WHERE", help="separate or colocated.")
@click.option("--params", type=Parsed("COUNT", lambda text: parse_count(text, field="")),
              help="Model parameters, e.g. 23.8M.")
@click.option("--dtype-bytes", cls=BriefOption, type=BoundedInt(1, 16), default=4, show_default=True,
              metavar="N", help="Bytes per parameter.")
@click.option("--batch-size", cls=BriefOption, type=BoundedInt(1, MAX_BATCH_SIZE), required=True, metavar="N",
              help="Examples per step per worker.")
@click.option("--step-ms", cls=BriefOption, type=FiniteFloat(MIN_STEP_MS, MAX_STEP_MS), metavar="MS",
              help="Compute per step (see --time-step).")
@click.option("--worker-speeds", type=_SPEEDS, help="Relative speeds, e.g. 1,1,0.25.")
@click.option("--workers-per-host", "--gpus-per-host", "workers_per_host", cls=BriefOption,
              type=BoundedInt(1, MAX_WORKERS), default=1, show_default=True, metavar="N",
              help="Workers sharing a host.")
@click.option("--bandwidth", type=_RATES, help="Worker hosts' links, e.g. 10gbit.")
@click.option("--ps-bandwidth", type=_RATE, help="Each ps host's link.")
@click.option("--intra-host-bandwidth", type=_RATE, default="80gbit", show_default=True,
              help="Between a host's workers.")
@click.option("--latency-ms", cls=BriefOption, type=FiniteFloat(0, MAX_LATENCY_S * 1000), default=0.1,
              show_default=True, metavar="MS", help="One-way latency.")
@click.option("--overlap", cls=BriefOption, type=FiniteFloat(0, 1), default=0.0, show_default=True,
              metavar="F", help="Share of transfer hidden.")
@click.option("--ps-overhead-ms", cls=BriefOption, type=FiniteFloat(0, MAX_OVERHEAD_MS),
              default=DEFAULT_PS_OVERHEAD_MS, show_default=True, metavar="MS", help="Fixed ps step cost.")
@click.option("--allreduce-overhead-ms", cls=BriefOption, type=FiniteFloat(0, MAX_OVERHEAD_MS),
              default=DEFAULT_ALLREDUCE_OVERHEAD_MS, show_default=True, metavar="MS", help="Fixed ring step cost.")
@click.option("--ps-epochs-factor", cls=BriefOption,
              type=FiniteFloat(0, MAX_PS_EPOCHS_FACTOR, low_open=True), metavar="F",
              help="ps epochs over sync epochs to accuracy.")
@click.option("--optimizer", type=OPTIMIZER, help="Its slots, for memory: adam, sgd, ...")
@click.option("--largest-variable", type=Parsed("COUNT", lambda text: parse_count(text, field="")),
              help="Its largest variable (default: --params).")
@click.option("--ps-memory", type=_BYTES, help="Each ps host's memory, e.g. 16GiB.")
@click.option("--worker-memory", type=_BYTES, help="Each worker host's memory.")
@click.option("--embedding", "embeddings", type=EMBEDDING, multiple=True, metavar="ROWSxDIM[:N]",
              help="A sparse embedding table; repeatable.")
@click.option("--probe", is_flag=True, help="Measure --hosts over ssh instead.")
@click.option("-H", "--hosts", metavar="HOST:SLOTS,...", help="--probe: the hosts, e.g. h1:1,h2:1.")
@click.option("--model", metavar="MODULE:FUNCTION", type=_MODEL, help="Builds the model to time.")
@click.option("--time-step", is_flag=True, help="Time --model here; print --step-ms.")
@click.option("--ssh-port", cls=BriefOption, type=BoundedInt(1, 65535), metavar="PORT",
              help="--probe: every host's sshd port.")
@click.option("--ssh-identity-file", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="--probe: the private key ssh uses.")
@click.option("--probe-seconds", cls=BriefOption, type=FiniteFloat(0.5, 60), default=driver.DEFAULT_SECONDS,
              show_default=True, metavar="S", help="--probe: most seconds per link (a steady rate ends sooner).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--save", "save_path", metavar="PLAN.json", callback=writable_plan_path,
              help="Also write the plan (TFDIST_PLAN).")
def advise(**options: Any) -> None:
    """Recommend Horovod, parameter servers or MultiWorkerMirrored for a cluster.

    \b
    tfdist advise --workers 2 --params 669706 --batch-size 64 --step-ms 10 --bandwidth 1gbit
    tfdist advise --time-step --model models:build_model --batch-size 64
    tfdist advise --probe --hosts h1:1,h2:1,h3:1 --model models:build_model --batch-size 64
    """
    with exit_on_interrupt("advise"):
        _advise(**options)


def _advise(workers: int, ps: int, ps_placement: str, params: int, dtype_bytes: int, batch_size: int,
            step_ms: float, worker_speeds: tuple[float, ...] | None, workers_per_host: int,
            bandwidth: tuple[float, ...] | None, ps_bandwidth: float | None, intra_host_bandwidth: float,
            latency_ms: float, overlap: float, ps_overhead_ms: float,
            allreduce_overhead_ms: float, ps_epochs_factor: float | None,
            probe: bool, hosts: str | None, model: str | None,
            ssh_port: int | None, ssh_identity_file: str | None, probe_seconds: float, as_json: bool,
            save_path: str | None, optimizer: tuple[str, int] | None, largest_variable: int | None,
            ps_memory: int | None, worker_memory: int | None, embeddings: tuple = (), time_step: bool = False) -> None:
    """The command's body, with click's options; a Ctrl-C (during a probe, say) exits 130
    (``exit_on_interrupt``)."""
    ctx = click.get_current_context()
    if time_step:
        _time_step(ctx, model, batch_size, as_json)
        return
    if optimizer is None:
        for name, flag in _MEMORY.items():
            if _given(ctx, name):
                raise click.UsageError(f"{flag} needs --optimizer: its slots are part of what each task holds; "
                                       "fix: add e.g. --optimizer adam (slots per variable: "
                                       + ", ".join(f"{k} {v}" for k, v in OPTIMIZER_SLOTS.items()) + ")")
    if probe:
        hosts = hosts_or_allocation(hosts)
        check_probe_options(ctx, model, hosts)
        request = AutoRequest(
            _parsed(hosts), ps, batch_size, model, workers, ssh=SshOptions(ssh_port, ssh_identity_file),
            probe_seconds=probe_seconds, params=params, step_ms=step_ms, dtype_bytes=dtype_bytes,
            worker_speeds=worker_speeds, overlap=overlap, embeddings=tuple(embeddings),
            ps_epochs_factor=ps_epochs_factor, ps_overhead_ms=ps_overhead_ms,
            allreduce_overhead_ms=allreduce_overhead_ms, optimizer=optimizer, largest_variable=largest_variable)
        try:
            decision = decide(request, log=lambda message: click.echo(message, err=True))
        except (MeasureError, LaunchError) as exc:
            raise click.UsageError(str(exc)) from None
        except AdviseError as exc:
            raise _bad(exc) from None
        _print(decision.advice, decision.cluster, decision.workload, as_json, decision.found, save_path)
        return
    for name, flag in _PROBE_ONLY.items():
        if _given(ctx, name):
            also = " (or --time-step, to time it on this machine)" if name == "model" else ""
            raise click.UsageError(f"{flag} applies only to --probe; fix: add --probe{also}, or drop {flag}")
    required = {"workers": workers, "params": params, "step_ms": step_ms, "bandwidth": bandwidth}
    for name, value in required.items():  # required unless --probe measures them
        if value is None:
            param = next(p for p in ctx.command.params if p.name == name)
            raise click.MissingParameter(ctx=ctx, param=param)
    try:
        cluster, workload = manual_inputs(
            workers=workers, bandwidths=bandwidth, params=params, batch_size=batch_size, step_ms=step_ms,
            speeds=worker_speeds, workers_per_host=workers_per_host, ps=ps, ps_placement=ps_placement,
            ps_bandwidth=ps_bandwidth, latency_ms=latency_ms, intra_host_bandwidth=intra_host_bandwidth,
            dtype_bytes=dtype_bytes, overlap=overlap, ps_epochs_factor=ps_epochs_factor,
            ps_overhead_ms=ps_overhead_ms, allreduce_overhead_ms=allreduce_overhead_ms, embeddings=embeddings)
    except AdviseError as exc:
        raise _bad(exc) from None
    memory = dict(optimizer=optimizer, largest=largest_variable, ps_memory=ps_memory, worker_memory=worker_memory)
    _print(_advice(cluster, workload, memory), cluster, workload, as_json, save_path=save_path)


def _advice(cluster: Cluster, workload: Workload, memory: dict) -> Advice:
    """The advice, with the memory verdict when --optimizer is given (the hosts' memory as given); a
    model that fits nowhere is a usage error naming the option (exit 2)."""
    try:
        check = memory_check(cluster, workload, **memory)
        return advise_cluster(cluster, workload, check)
    except AdviseError as exc:
        raise _bad(exc) from None


def _print(result: Advice, cluster: Cluster, workload: Workload, as_json: bool,
           found: ProbeResult | None = None, save_path: str | None = None) -> None:
    """The table, or the strict JSON object; a non-finite figure fails the run (exit 1), never
    reaches the output. With ``save_path`` the plan is written too (a note on stderr)."""
    if as_json:
        try:
            click.echo(advice_json(result, None if found is None else found.as_dict()))
        except AdviseError as exc:
            raise click.ClickException(str(exc)) from None
    else:
        text = render(result, cluster, workload)
        click.echo(render_measured(found) + "\n\n" + text if found is not None else text)
    if save_path is not None:
        plan = plan_from_advice(result, cluster, workload)
        try:
            save_plan(plan, save_path)
        except OSError as exc:
            raise click.ClickException(f"cannot write the plan to {save_path!r} ({exc.strerror}); fix: pass "
                                       "--save a path in a writable folder") from None
        click.echo(f"saved to {save_path}: {plan.describe()}", err=True)



def check_probe_options(ctx: click.Context, model: str | None, hosts: str | None) -> None:
    """Refuse options that --probe measures itself (naming both and the fix) and require what it cannot."""
    measured = {**_MEASURED, **(_MEASURED_WITH_MODEL if model else {})}
    for name, flag in measured.items():
        if _given(ctx, name):
            what = "with --model measures" if name in _MEASURED_WITH_MODEL else "measures"
            raise click.UsageError(f"--probe {what} {flag} itself, so {flag} and --probe contradict each "
                                   f"other; fix: drop {flag}, or drop --probe and describe the cluster "
                                   "yourself")
    if hosts is None:
        raise click.UsageError("--probe needs --hosts, the hosts to measure; fix: add e.g. --hosts "
                               "h1:1,h2:1,h3:1 (as for `tfdist launch --hosts`), or run inside a SLURM "
                               "allocation (its nodes stand in)")
    if model is None:
        for name, flag in (("params", "--params"), ("step_ms", "--step-ms")):
            if not _given(ctx, name):
                raise click.UsageError(f"--probe without --model does not know {flag}; fix: add --model "
                                       f"module:build_fn to measure it, or give {flag}")


def _parsed(hosts: str) -> HostList:
    """--hosts parsed once (the probe, the placement and the plan read it); a bad list is a usage error."""
    try:
        return HostList.parse(hosts)
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None


def _time_step(ctx: click.Context, model: str | None, batch_size: int, as_json: bool) -> None:
    """--time-step: time --model's training step at --batch-size on this machine (one compute agent, as
    --probe times each host) and print the flags to describe the cluster with: ``--step-ms ... --params
    ... --dtype-bytes ...`` (and ``--embedding`` per table found), or the agent's answer as JSON."""
    import json

    given = [p for p in ctx.command.params if p.name not in _TIME_STEP and _given(ctx, p.name)]
    if given:
        flags = ", ".join(p.opts[0] for p in given)
        raise click.UsageError(f"{flags} do(es) not apply to --time-step, which only times --model on this "
                               f"machine; fix: drop {flags}, then pass the flags it prints to `tfdist advise` "
                               "with the cluster's --workers and --bandwidth")
    if model is None:
        raise click.UsageError("--time-step needs --model, the function that builds the Keras model; fix: add "
                               "e.g. --model models:build_model")
    try:
        found = driver.time_step_here(model, batch_size, log=lambda message: click.echo(message, err=True))
    except AdviseError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        keys = ("step_ms", "window_ms", "params", "dtype_bytes", "batch_size", "embeddings")
        click.echo(json.dumps({key: found.get(key) for key in keys}))
        return
    tables = "".join(f" --embedding {int(rows)}x{int(dim)}:{lookups:g}" for rows, dim, lookups in
                     found.get("embeddings") or [])
    step = f"{max(float(found['step_ms']), MIN_STEP_MS):.3f}".rstrip("0").rstrip(".")
    click.echo(f"--step-ms {step} --params {int(found['params'])} --dtype-bytes {int(found['dtype_bytes'])}{tables}")
