"""``tfdist advise``: which strategy for this cluster, with predicted step times and the reasons.

Thin layer: parse options, call :mod:`tfdist.advise` (inputs, the model, the rendering), print a table
(100 columns) or one strict JSON object. Bad input raises click.BadParameter / click.UsageError (exit 2)
naming the option and the fix; every number is bounded and finite before the model sees it.
"""
from __future__ import annotations

import dataclasses

import click
from click.core import ParameterSource

from tfdist.advise import Advice, AdviseError, Cluster, Workload
from tfdist.advise import advise as advise_cluster
from tfdist.advise.cluster import (DEFAULT_ALLREDUCE_OVERHEAD_MS, DEFAULT_PS_OVERHEAD_MS, MAX_BATCH_SIZE,
                                   MAX_LATENCY_S, MAX_OVERHEAD_MS, MAX_PS_EPOCHS_FACTOR, MAX_STEP_MS,
                                   MAX_WORKERS, MIN_STEP_MS, PS_PLACEMENTS)
from tfdist.advise.inputs import (build_inputs, manual_inputs, memory_check, parse_model_ref, parse_rates,
                                  parse_speeds)
from tfdist.advise.memory import OPTIMIZER_SLOTS
from tfdist.advise.probe import DEFAULT_SECONDS, ProbeResult
from tfdist.advise.render import advice_json, render, render_measured
from tfdist.advise.units import MEMORY_EXAMPLES, RATE_EXAMPLES, parse_bytes, parse_count, parse_rate
from tfdist.cli.strict import StrictCommand
from tfdist.cli.types import EMBEDDING, OPTIMIZER, BoundedInt, FiniteFloat, Parsed, hosts_or_allocation, writable_plan_path
from tfdist.launch.remote import SshOptions

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


@click.command("advise", cls=StrictCommand)
@click.option("--workers", type=BoundedInt(1, MAX_WORKERS, limit=_WORKERS_LIMIT),
              help="Number of workers (GPUs, ranks); with --probe default the slots left after the ps.")
@click.option("--ps", type=BoundedInt(0, MAX_WORKERS), default=1, show_default=True,
              help="Parameter-server tasks to model (0: leave parameter_server out).")
@click.option("--ps-placement", type=click.Choice(PS_PLACEMENTS), default="separate", show_default=True,
              help="separate: each ps on its own host; colocated: ps j on worker host j, sharing its link.")
@click.option("--params", type=Parsed("COUNT", lambda text: parse_count(text, field="")),
              help="Parameter count of the model, e.g. 669706 or 23.8M (model.count_params()); --probe "
                   "--model measures it.")
@click.option("--dtype-bytes", type=BoundedInt(1, 16), default=4, show_default=True,
              help="Bytes per parameter (4: float32).")
@click.option("--batch-size", type=BoundedInt(1, MAX_BATCH_SIZE), required=True,
              help="Examples per step per worker.")
@click.option("--step-ms", type=FiniteFloat(MIN_STEP_MS, MAX_STEP_MS),
              help="Compute time of one step at --batch-size on one worker of speed 1, in ms (no "
                   "communication).")
@click.option("--worker-speeds", type=_SPEEDS,
              help="Relative speed of each worker, e.g. 1,1,0.25 (default: all 1).")
@click.option("--workers-per-host", "--gpus-per-host", "workers_per_host", type=BoundedInt(1, MAX_WORKERS),
              default=1, show_default=True, help="Workers sharing one host and its link (GPUs per server).")
@click.option("--bandwidth", type=_RATES,
              help=f"Each worker host's link rate: one for all, or one per host, comma-separated; "
                   f"{RATE_EXAMPLES}.")
@click.option("--ps-bandwidth", type=_RATE,
              help="Each separate ps host's link (default: the slowest --bandwidth).")
@click.option("--intra-host-bandwidth", type=_RATE, default="80gbit", show_default=True,
              help="Rate between workers of one host.")
@click.option("--latency-ms", type=FiniteFloat(0, MAX_LATENCY_S * 1000), default=0.1, show_default=True,
              help="One-way network latency per message, ms.")
@click.option("--overlap", type=FiniteFloat(0, 1), default=0.0, show_default=True,
              help="Share of communication hidden behind compute (0: none; Horovod on GPUs: about 0.5).")
@click.option("--ps-overhead-ms", type=FiniteFloat(0, MAX_OVERHEAD_MS), default=DEFAULT_PS_OVERHEAD_MS,
              show_default=True,
              help="Fixed cost of a parameter-server step beyond compute and transfers (the coordinator's "
                   "dispatch, the RPCs reading and updating variables), ms: measure it where RPCs are slow "
                   "(docs/advise.md).")
@click.option("--allreduce-overhead-ms", type=FiniteFloat(0, MAX_OVERHEAD_MS),
              default=DEFAULT_ALLREDUCE_OVERHEAD_MS, show_default=True,
              help="Fixed cost of an allreduce step beyond compute and the ring (Horovod's cycle, per-step "
                   "framework work; MultiWorkerMirrored pays 1 ms more), ms: measure it where steps are short "
                   "or RPCs slow (docs/advise.md).")
@click.option("--ps-epochs-factor", type=FiniteFloat(0, MAX_PS_EPOCHS_FACTOR, low_open=True),
              help="Epochs parameter servers need to reach your target accuracy over the epochs synchronous "
                   "training needs, measured (e.g. 1.3; benchmarks/time_to_accuracy.py measures it): the "
                   "recommendation then weighs time to accuracy, not examples/s alone.")
@click.option("--optimizer", type=OPTIMIZER,
              help="The optimizer, for the memory its slots take: " + ", ".join(OPTIMIZER_SLOTS)
                   + ", or its slot variables per variable (e.g. 3); shows the memory each task needs.")
@click.option("--largest-variable", type=Parsed("COUNT", lambda text: parse_count(text, field="")),
              help="Parameters of the model's largest variable, e.g. an embedding table (default: all of "
                   "--params, the conservative case); --probe --model lists every variable.")
@click.option("--ps-memory", type=_BYTES,
              help=f"Memory of each ps task's host ({MEMORY_EXAMPLES}): parameter servers are recommended "
                   "only if they fit; says the fewest ps tasks and shards that do. --probe reads it.")
@click.option("--worker-memory", type=_BYTES,
              help="Memory of each worker's host, which holds its --gpus-per-host workers (and a colocated ps): "
                   "allreduce (each worker holds the whole model, slots and gradients) is recommended only if "
                   "they fit. --probe reads it.")
@click.option("--embedding", "embeddings", type=EMBEDDING, multiple=True,
              help="An embedding table among --params whose gradient is sparse, as ROWSxDIM[:LOOKUPS] (ids per "
                   "example, default 1), e.g. 1Mx128; repeat per table. A step then moves only the rows it "
                   "looks up, not the table (docs/advise.md, Embedding tables).")
@click.option("--probe", is_flag=True,
              help="Measure instead of asking: the links between --hosts, and with --model each worker "
                   "host's step time and the model's size (over ssh, as `tfdist launch --hosts`).")
@click.option("-H", "--hosts", metavar="HOST:SLOTS,...",
              help="--probe: the hosts, as in `tfdist launch --hosts` (same placement), e.g. h1:1,h2:1,h3:1.")
@click.option("--model", metavar="MODULE:FUNCTION", type=_MODEL,
              help="--probe: a function returning the Keras model (with an Input), e.g. models:build_model; "
                   "imported on each host from this directory and PYTHONPATH.")
@click.option("--ssh-port", type=BoundedInt(1, 65535), help="--probe: the port of every host's sshd.")
@click.option("--ssh-identity-file", type=click.Path(exists=True, dir_okay=False),
              help="--probe: the private key ssh uses.")
@click.option("--probe-seconds", type=FiniteFloat(0.5, 60), default=DEFAULT_SECONDS, show_default=True,
              help="--probe: seconds of transfer per link.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@click.option("--save", "save_path", metavar="PLAN.json", callback=writable_plan_path,
              help="Also write the recommendation as a plan: TFDIST_PLAN=PLAN.json makes make_strategy('auto') "
                   "apply it on every task (docs/advise.md, The plan).")
def advise(workers: int, ps: int, ps_placement: str, params: int, dtype_bytes: int, batch_size: int,
           step_ms: float, worker_speeds: tuple[float, ...] | None, workers_per_host: int,
           bandwidth: tuple[float, ...] | None, ps_bandwidth: float | None, intra_host_bandwidth: float,
           latency_ms: float, overlap: float, ps_overhead_ms: float,
           allreduce_overhead_ms: float, ps_epochs_factor: float | None,
           probe: bool, hosts: str | None, model: str | None,
           ssh_port: int | None, ssh_identity_file: str | None, probe_seconds: float, as_json: bool,
           save_path: str | None, optimizer: tuple[str, int] | None, largest_variable: int | None,
           ps_memory: int | None, worker_memory: int | None, embeddings: tuple = ()) -> None:
    """Predict step time, examples/s and scaling efficiency of Horovod, parameter servers and
    MultiWorkerMirrored on the cluster described, and recommend one, with its reasons.

    \b
    tfdist advise --workers 2 --ps 1 --params 669706 --batch-size 64 --step-ms 10 --bandwidth 1gbit
    tfdist advise --workers 2 --params 5.8M --batch-size 64 --step-ms 70 --worker-speeds 1,0.25 \\
        --bandwidth 10gbit --json
    tfdist advise --workers 128 --gpus-per-host 4 --ps 0 --params 138M --batch-size 64 \\
        --step-ms 415.6 --bandwidth 25gbit --latency-ms 0.01 --overlap 0.5
    tfdist advise --probe --hosts h1:1,h2:1,h3:1 --ps 1 --model models:build_model --batch-size 64
    tfdist advise --workers 2 --ps 2 --params 128M --batch-size 64 --step-ms 50 --bandwidth 10gbit \\
        --optimizer adagrad --ps-memory 2GiB
    tfdist advise --workers 2 --ps 1 --params 128.1M --embedding 1Mx128 --batch-size 64 --step-ms 20 \\
        --bandwidth 1gbit

    The model and its assumptions: docs/advise.md.
    """
    ctx = click.get_current_context()
    if optimizer is None:
        for name, flag in _MEMORY.items():
            if _given(ctx, name):
                raise click.UsageError(f"{flag} needs --optimizer: its slots are part of what each task holds; "
                                       "fix: add e.g. --optimizer adam (slots per variable: "
                                       + ", ".join(f"{k} {v}" for k, v in OPTIMIZER_SLOTS.items()) + ")")
    memory = dict(optimizer=optimizer, largest=largest_variable, ps_memory=ps_memory, worker_memory=worker_memory)
    if probe:
        hosts = hosts_or_allocation(hosts)
        cluster, workload, found = _probe(ctx, hosts, workers, ps, model, batch_size, params, step_ms,
                                          dtype_bytes, worker_speeds, overlap,
                                          SshOptions(ssh_port, ssh_identity_file), probe_seconds, embeddings)
        try:
            workload = dataclasses.replace(workload, ps_epochs_factor=ps_epochs_factor,
                                           ps_overhead_ms=ps_overhead_ms,
                                           allreduce_overhead_ms=allreduce_overhead_ms)
        except AdviseError as exc:
            raise _bad(exc) from None
        _print(_advice(cluster, workload, memory, found), cluster, workload, as_json, found, save_path)
        return
    for name, flag in _PROBE_ONLY.items():
        if _given(ctx, name):
            raise click.UsageError(f"{flag} applies only to --probe; fix: add --probe, or drop {flag}")
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
    _print(_advice(cluster, workload, memory), cluster, workload, as_json, save_path=save_path)


def _advice(cluster: Cluster, workload: Workload, memory: dict, found: ProbeResult | None = None) -> Advice:
    """The advice, with the memory verdict when --optimizer is given (the hosts' memory measured by
    --probe or given); a model that fits nowhere is a usage error naming the option (exit 2)."""
    try:
        check = memory_check(cluster, workload, **memory, found=found)
        return advise_cluster(cluster, workload, check)
    except AdviseError as exc:
        raise _bad(exc) from None


def _print(result: Advice, cluster: Cluster, workload: Workload, as_json: bool,
           found: ProbeResult | None = None, save_path: str | None = None) -> None:
    """The table, or the strict JSON object; a non-finite figure fails the run (exit 1), never
    reaches the output. With ``save_path`` the plan is written too (a note on stderr)."""
    if as_json:
        try:
            click.echo(advice_json(result, found))
        except AdviseError as exc:
            raise click.ClickException(str(exc)) from None
    else:
        text = render(result, cluster, workload)
        click.echo(render_measured(found) + "\n\n" + text if found is not None else text)
    if save_path is not None:
        from tfdist.advise.plan import plan_from_advice, save_plan

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


def _probe(ctx: click.Context, hosts: str, workers: int | None, ps: int, model: str | None, batch_size: int,
           params: int | None, step_ms: float | None, dtype_bytes: int, worker_speeds: tuple | None,
           overlap: float, ssh: SshOptions, seconds: float,
           embeddings: tuple = ()) -> tuple[Cluster, Workload, ProbeResult]:
    """Check the options, probe the hosts (progress on stderr), build the advisor's inputs."""
    from tfdist.advise.probe import default_workers, probe_hosts
    from tfdist.launch.hosts import parse_hosts
    from tfdist.launch.plan import LaunchError

    check_probe_options(ctx, model, hosts)
    try:
        if workers is None:
            workers = default_workers(parse_hosts(hosts), ps)
        found = probe_hosts(hosts, workers, ps, model=model, batch_size=batch_size, options=ssh,
                            seconds=seconds, log=lambda message: click.echo(message, err=True))
    except (AdviseError, LaunchError) as exc:
        raise click.UsageError(str(exc)) from None
    try:
        return build_inputs(found, workers, ps, batch_size, params, step_ms, dtype_bytes, worker_speeds,
                            overlap, embeddings)  # the tables given, else those the probe found
    except AdviseError as exc:
        raise _bad(exc) from None
