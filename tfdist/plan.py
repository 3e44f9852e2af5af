"""The plan: what ``tfdist advise`` recommends, as a file a run applies and records itself against.

Ground level: it imports only tfdist.errors, tfdist.atomic_write and tfdist.cluster's bounded JSON reader
and echo helpers, so strategies, callbacks and the report read plans without loading the advisor.

A plan names the backend, the ``make_strategy`` options that make the advisor's winning variant
(``horovod_fp16`` -> ``compression="fp16"``), the cluster it was made for (workers, ps tasks) and the
prediction (examples/s of all workers together, and the step time derived from it). It is made from an
advice (:func:`tfdist.advise.planner.plan_from_advice`), written by ``tfdist advise --save`` and by
``tfdist launch --backend auto``, and read where the job runs from the environment variable
``TFDIST_PLAN`` (a path, or the plan's JSON itself): ``make_strategy("auto")`` then builds the planned
backend with the planned options.

    plan = plan_from_advice(advice, cluster, workload)
    save_plan(plan, "plan.json")                     # atomic
    os.environ[PLAN_ENV] = "plan.json"               # on every task, before the script starts
    plan = load_plan(os.environ[PLAN_ENV])           # what make_strategy("auto") does

Every check here is pure Python, without TensorFlow: the file's format and version (read with the
bounded JSON reader of TF_CONFIG, :func:`tfdist.cluster.parsing.parse_json`: size, nesting depth,
repeated keys and giant numbers refused before Python's ``json`` recurses), the options against a
table of each backend's option names (:func:`check_options`), the run's cluster against the planned
one (:func:`check_run`), and the script's explicit options against the plan's
(:func:`merge_options`). Each failure is a :class:`PlanError` naming the file and the field. The
options' values are checked by ``tfdist.strategies.planning`` with the backend's own option checks
(the ones ``make_strategy`` applies to a script's options).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
from typing import Any, Mapping, Sequence

from tfdist.cluster.errors import ClusterConfigError, field_name, shown, shown_path
from tfdist.cluster.parsing import parse_json
from tfdist.atomic_write import new_file_problem, write_atomically
from tfdist.errors import TfdistError, with_fix

#: The environment variable that names the plan a run applies: a path, or the plan's JSON itself.
PLAN_ENV = "TFDIST_PLAN"
#: Set by ``tfdist launch --backend auto``: where the chief writes the measured figures at the end.
PLAN_RESULT_ENV = "TFDIST_PLAN_RESULT"
#: The format this tfdist writes and reads; a plan of a newer format is refused.
PLAN_VERSION = 1
#: Largest plan file read (a plan is about 1 KB).
MAX_PLAN_BYTES = 1 << 20
#: A run below this share of its predicted examples/s logs one warning after its first timed epoch.
SLOW_RATIO = 0.75
#: Each variant the advisor weighs: the backend it runs on and the ``make_strategy`` options it stands for.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "horovod": ("horovod", {}),
    "horovod_fp16": ("horovod", {"compression": "fp16"}),
    "horovod_hierarchical": ("horovod", {"hierarchical_allreduce": True}),
    "horovod_powersgd": ("horovod", {"compression": "powersgd"}),
    "multi_worker_mirrored": ("multi_worker_mirrored", {}),
    "multi_worker_mirrored_powersgd": ("multi_worker_mirrored", {"compression": "powersgd"}),
    "parameter_server": ("parameter_server", {}),
}


def backend_of(variant: str) -> str:
    """The backend a variant runs on: ``horovod_fp16`` -> ``horovod``; a backend's name is its own."""
    return VARIANTS[variant][0] if variant in VARIANTS else variant


def variant_options(variant: str) -> dict[str, Any]:
    """The ``make_strategy`` options of ``variant`` (a fresh dict): ``horovod_fp16`` -> compression fp16."""
    return dict(VARIANTS[variant][1])


#: ``make_strategy`` options a running strategy changes without a new cluster (Horovod's compression):
#: an adaptive run switches between variants that differ only in these in-process.
IN_PROCESS_OPTIONS = frozenset({"compression"})
#: Compressions a running job takes in-process: PowerSGD's state (error feedback, factors) starts with
#: the job, so a change to or from it restarts it.
IN_PROCESS_COMPRESSIONS = frozenset({"none", "fp16"})


def changed_options(a: str, b: str) -> set[str]:
    """The ``make_strategy`` options in which variants ``a`` and ``b`` (of one backend) differ."""
    options_a, options_b = variant_options(a), variant_options(b)
    return {k for k in options_a.keys() | options_b.keys() if options_a.get(k) != options_b.get(k)}


def in_process_change(a: str, b: str, in_process: frozenset[str] = IN_PROCESS_OPTIONS) -> bool:
    """Whether a running job of variant ``a`` can take variant ``b`` without a restart: the same
    backend, only options of ``in_process`` changed, and no change to or from PowerSGD."""
    if backend_of(a) != backend_of(b) or not changed_options(a, b) <= in_process:
        return False
    compressions = {variant_options(v).get("compression", "none") for v in (a, b)}
    return compressions <= IN_PROCESS_COMPRESSIONS

_FIELDS = ("version", "backend", "variant", "options", "workers", "ps", "batch_size",
           "predicted_examples_per_second", "predicted_step_ms", "bottleneck", "explanation", "inputs")


#: The plan's own fields in its HParams record (``plan/<field>``); the other ``plan/`` keys are options.
HPARAM_FIELDS = ("backend", "variant", "workers", "ps", "predicted_examples_per_second")


class PlanError(TfdistError, ValueError):
    """A plan file that cannot be applied: the message names the file and the field, and the fix."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """A recommendation to apply.

    backend: the strategy name (``horovod``, ``parameter_server``, ``multi_worker_mirrored``);
    variant: the advisor's winning variant; options: ``make_strategy`` options for ``backend``;
    workers / ps: the training processes and ps tasks it was made for; batch_size: per worker.
    predicted_examples_per_second: all workers together; predicted_step_ms: the time in which every
    worker does one step, ``1000 * batch_size * workers / examples/s`` (for a synchronous backend the
    step itself; for parameter servers, which step at their own pace, their harmonic mean);
    bottleneck / explanation: what the advisor assumed limits the run; inputs: what it was told.
    """

    backend: str
    variant: str
    options: Mapping[str, Any]
    workers: int
    ps: int
    batch_size: int
    predicted_examples_per_second: float
    predicted_step_ms: float
    bottleneck: str
    explanation: str
    inputs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    version: int = PLAN_VERSION

    def as_dict(self) -> dict[str, Any]:
        """The JSON object of the file, fields in a fixed order."""
        return {name: (dict(value) if isinstance(value := getattr(self, name), Mapping) else value)
                for name in _FIELDS}

    def describe(self) -> str:
        """One line: backend, variant, options and the prediction."""
        options = ", ".join(f"{k}={v!r}" for k, v in sorted(self.options.items())) or "no options"
        variant = f" ({self.variant})" if self.variant != self.backend else ""
        return (f"plan: {self.backend}{variant}, {options}; {self.workers} worker(s)"
                + (f", {self.ps} ps" if self.ps else "")
                + f"; predicted {self.predicted_examples_per_second:,.0f} examples/s, "
                  f"step {self.predicted_step_ms:,.1f} ms")

    def hparams(self) -> dict[str, Any]:
        """The plan as HParams entries: ``plan/<field>`` for each of ``HPARAM_FIELDS``, and
        ``plan/<option>`` for each option (every other ``plan/`` key is an option)."""
        record: dict[str, Any] = {f"plan/{name}": getattr(self, name) for name in HPARAM_FIELDS}
        for name, value in sorted(self.options.items()):
            record[f"plan/{name}"] = value if isinstance(value, (bool, int, float, str)) else repr(value)
        return record

    def step_ms_of(self, examples_per_second: float) -> float:
        """The step time (this plan's definition) at a measured rate."""
        return 1000.0 * self.batch_size * self.workers / examples_per_second


def plan_json(plan: Plan) -> str:
    """The plan as strict JSON (no NaN or infinities)."""
    return json.dumps(plan.as_dict(), indent=2, allow_nan=False) + "\n"


def save_plan(plan: Plan, path: str) -> str:
    """Write ``plan`` to ``path`` whole or not at all (:func:`tfdist.atomic_write.write_atomically`), readable
    by the job's other users (0644); the path."""
    return write_atomically(path, plan_json(plan), mode=0o644)


def _fail(source: str, field: str | None, problem: str, fix: str) -> PlanError:
    where = f"{source}: `{field}`" if field else source
    return PlanError(with_fix(f"{where} {problem}", fix))


def _read(value: str) -> tuple[str, str]:
    """``(source, text)`` of a TFDIST_PLAN value: inline JSON, or a file's text."""
    if value.lstrip().startswith("{"):
        source = f"{PLAN_ENV} (inline JSON)"
        if len(value) > MAX_PLAN_BYTES:
            raise _fail(source, None, f"is over {MAX_PLAN_BYTES:,} characters, not a plan",
                        f"set {PLAN_ENV} to the plan `tfdist advise --save` wrote, or to its JSON")
        return source, value
    source = f"plan file {value!r} ({PLAN_ENV})"
    if not value.strip():
        raise _fail(f"{PLAN_ENV}", None, "is set but empty",
                    f"set {PLAN_ENV} to a plan file (tfdist advise ... --save plan.json), or unset it")
    try:
        mode = os.stat(value).st_mode
        if not stat.S_ISREG(mode):
            raise _fail(source, None, "is not a regular file", f"point {PLAN_ENV} at the plan's JSON file")
        with open(value, "rb") as handle:
            data = handle.read(MAX_PLAN_BYTES + 1)
    except FileNotFoundError:
        raise _fail(source, None, "does not exist",
                    f"write it with `tfdist advise ... --save {value}` on this host, or unset {PLAN_ENV}") from None
    except OSError as exc:
        raise _fail(source, None, f"cannot be read ({exc.strerror})",
                    f"make it readable, or unset {PLAN_ENV}") from None
    if len(data) > MAX_PLAN_BYTES:
        raise _fail(source, None, f"is over {MAX_PLAN_BYTES:,} bytes, not a plan",
                    f"point {PLAN_ENV} at the file `tfdist advise --save` wrote")
    try:
        return source, data.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(source, None, "is not UTF-8 text", "write it again with `tfdist advise ... --save`") from None


_REWRITE = "write the plan again with `tfdist advise ... --save`"
_WRITE_AGAIN = "write it again with `tfdist advise ... --save`"


def _echo(value: Any) -> str:
    """A JSON value as a message shows it, in JSON's spelling (``true``, ``null``, ``1.0``), cut short."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float):
        return repr(value)
    return shown(value)


def _number(source: str, raw: Mapping[str, Any], field: str, *, integer: bool, minimum: float) -> Any:
    value = raw[field]
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value) or value < minimum:
        kind = "a whole number" if integer else "a finite number"
        raise _fail(source, field, f"must be {kind} >= {minimum:g}, got {_echo(value)}", _REWRITE)
    return value


def _json(text: str, source: str) -> Any:
    """The plan's JSON value, read by the bounded reader of TF_CONFIG (``parse_json``), and refused
    when it holds NaN or an infinity (Python's reader takes ``NaN``, ``Infinity`` and ``1e400``)."""
    try:
        raw = parse_json(text, source)
    except ClusterConfigError as exc:  # bad syntax, too deep, a repeated key, a giant number
        raise _fail(source, None, exc.problems[0].message, _WRITE_AGAIN) from None
    found = _non_finite(raw)
    if found is not None:
        where, value = found
        if math.isnan(value):
            what = "NaN"
        else:
            what = f"{'-' if value < 0 else ''}Infinity (or a number beyond 1.8e308)"
        raise _fail(source, where, f"holds {what}, which is not JSON", _WRITE_AGAIN)
    return raw


def _non_finite(raw: Any) -> tuple[str | None, float] | None:
    """``(field, value)`` of the first NaN or infinity in ``raw`` (a parsed JSON value), else None.
    Iterative; ``parse_json`` has bounded the depth already."""
    stack: list[tuple[str | None, Any]] = [(None, raw)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return where, value
        if isinstance(value, dict):
            stack.extend((key if where is None else field_name(where, key), item)
                         for key, item in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((f"{where or ''}[{index}]", item) for index, item in reversed(list(enumerate(value))))
    return None


def _version(source: str, version: Any) -> None:
    """Refuse any version but the whole number ``PLAN_VERSION`` (``true`` and ``1.0`` equal 1 in Python)."""
    whole = isinstance(version, int) and not isinstance(version, bool)
    if whole and version > PLAN_VERSION:
        raise _fail(source, "version", f"is {version}: the plan was written by a newer tfdist (this one reads "
                    f"version {PLAN_VERSION})", "upgrade tfdist on this host, or write the plan with this one")
    if not whole or version != PLAN_VERSION:
        raise _fail(source, "version", f"must be {PLAN_VERSION} (a whole number), got {_echo(version)}", _REWRITE)


def parse_plan(text: str, source: str = "plan") -> Plan:
    """A :class:`Plan` from its JSON text; ``source`` names it in errors."""
    raw = _json(text, source)
    if not isinstance(raw, dict):
        raise _fail(source, None, f"holds a JSON {type(raw).__name__}, not a plan object", _WRITE_AGAIN)
    version = raw.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > PLAN_VERSION:
        _version(source, version)  # a newer format first: its fields may differ
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise _fail(source, unknown[0], f"is not a plan field (fields: {', '.join(_FIELDS)})",
                    f"remove {unknown[0]!r}, or write the plan again with `tfdist advise ... --save`")
    missing = [name for name in _FIELDS if name not in raw and name != "inputs"]
    if missing:
        raise _fail(source, missing[0], "is missing", _REWRITE)
    _version(source, version)
    for name in ("backend", "variant", "bottleneck", "explanation"):
        if not isinstance(raw[name], str) or not raw[name]:
            raise _fail(source, name, f"must be a non-empty string, got {_echo(raw[name])}", _REWRITE)
    variant, backend = raw["variant"], raw["backend"]
    if backend_of(variant) != backend or (variant != backend and variant not in VARIANTS):
        raise _fail(source, "variant", f"{shown(variant)} is not a variant of backend {shown(backend)} "
                    f"(variants: {', '.join(VARIANTS)})", _REWRITE)
    for name in ("options", "inputs"):
        if not isinstance(raw.get(name, {}), dict):
            raise _fail(source, name, f"must be a JSON object, got {_json_kind(raw[name])}", _REWRITE)
    return Plan(backend=backend, variant=variant, options=dict(raw["options"]),
                workers=_number(source, raw, "workers", integer=True, minimum=1),
                ps=_ps(source, raw, backend),
                batch_size=_number(source, raw, "batch_size", integer=True, minimum=1),
                predicted_examples_per_second=float(_number(source, raw, "predicted_examples_per_second",
                                                            integer=False, minimum=1e-12)),
                predicted_step_ms=float(_number(source, raw, "predicted_step_ms", integer=False, minimum=0)),
                bottleneck=raw["bottleneck"], explanation=raw["explanation"], inputs=dict(raw.get("inputs", {})))


def _json_kind(value: Any) -> str:
    """The JSON name of a parsed value's kind: ``array``, ``string``, ``true``, ``null``, ..."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    kinds = {list: "array", str: "string", int: "number", float: "number", dict: "object"}
    return kinds.get(type(value), type(value).__name__)


def _ps(source: str, raw: Mapping[str, Any], backend: str) -> int:
    """The plan's ps tasks: 0 for every backend but parameter servers (a plan that said ``ps: 3`` for a
    single process was applied, and its notice printed "3 ps"); a parameter-server plan's count is
    compared with the run's by :func:`check_run`."""
    ps = _number(source, raw, "ps", integer=True, minimum=0)
    if backend != "parameter_server" and ps != 0:
        raise _fail(source, "ps", f"is {ps}, but a {backend} plan has no ps tasks",
                    'set "ps": 0 in the plan, or write it again with `tfdist advise ... --save`')
    return ps


def load_plan(value: str) -> tuple[Plan, str]:
    """``(plan, source)`` from a ``TFDIST_PLAN`` value: a path, or inline JSON."""
    source, text = _read(value)
    return parse_plan(text, source), source


def check_options(plan: Plan, source: str, option_names: Mapping[str, Sequence[str]]) -> None:
    """Refuse a backend no strategy registered, an unknown option, or another backend's option.

    ``option_names``: every registered backend's option names (``{"horovod": [...], ...}``).
    """
    if plan.backend not in option_names:
        raise _fail(source, "backend", f"is {plan.backend!r}, not a backend (known: "
                    f"{', '.join(sorted(option_names))})", "write the plan again with `tfdist advise ... --save`")
    own = set(option_names[plan.backend])
    for name in sorted(plan.options):
        if name in own:
            continue
        owners = sorted(b for b, names in option_names.items() if name in names)
        what = (f"is an option of {' and '.join(owners)}, not of {plan.backend}" if owners
                else f"is not an option of any backend ({plan.backend}'s: {', '.join(sorted(own))})")
        raise _fail(source, f"options.{name}", what,
                    "remove it from the plan, or write the plan again with `tfdist advise ... --save`")


def check_run(plan: Plan, source: str, kind: str, workers: int, ps: int) -> None:
    """Refuse to apply ``plan`` to a run of backend ``kind`` with ``workers`` training processes and
    ``ps`` ps tasks unless they are the planned ones (a backend without ps tasks runs 0 of them)."""
    if kind != plan.backend:
        raise _fail(source, "backend", f"is {plan.backend!r}, but this task was launched as a {kind} job",
                    f"launch the job as the plan says ({_launch_hint(plan)}), or unset {PLAN_ENV}")
    if workers != plan.workers:
        raise _fail(source, "workers", f"is {plan.workers}, but this run has {workers} worker(s)",
                    f"launch {plan.workers} worker(s) ({_launch_hint(plan)}), or plan for {workers} with "
                    f"`tfdist advise --workers {workers} ... --save`")
    if ps != plan.ps:
        raise _fail(source, "ps", f"is {plan.ps}, but this run has {ps} ps task(s)",
                    f"launch {plan.ps} ps task(s) ({_launch_hint(plan)}), or plan for {ps} with "
                    f"`tfdist advise --ps {ps} ... --save`")


def _launch_hint(plan: Plan) -> str:
    if plan.backend == "horovod":
        return f"horovodrun -np {plan.workers} ..."
    if plan.backend == "parameter_server":
        return f"tfdist launch --workers {plan.workers} --ps {plan.ps} ..."
    return f"tfdist launch --backend {plan.backend} --workers {plan.workers} ..."


#: Options that say the same thing two ways: a script giving one of a group replaces the plan's others
#: (``shards`` and ``min_shard_bytes`` both choose the partitioner; the backend refuses both at once).
EXCLUSIVE_OPTIONS = (frozenset({"shards", "min_shard_bytes"}),)


def merge_options(plan: Plan, explicit: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The options to build: the plan's, with the script's explicit ones winning; and one notice per
    planned option the script overrode (``"compression='none' (the script's) over the plan's 'fp16'"``).
    A script's option of an :data:`EXCLUSIVE_OPTIONS` group replaces the plan's others of that group
    (``"min_shard_bytes=1048576 (the script's) over the plan's shards=2"``)."""
    planned = dict(plan.options)
    notices = []
    for group in EXCLUSIVE_OPTIONS:
        mine = sorted(name for name in group if name in explicit)
        for name in sorted(group - set(mine)) if mine else ():
            if name in planned:
                notices.append(f"{mine[0]}={explicit[mine[0]]!r} (the script's) over the plan's "
                               f"{name}={planned.pop(name)!r}")
    merged = {**planned, **explicit}
    notices += [f"{name}={explicit[name]!r} (the script's) over the plan's {value!r}"
                for name, value in sorted(planned.items()) if name in explicit and explicit[name] != value]
    return merged, notices


def compare(plan: Plan, measured_examples_per_second: float) -> dict[str, float]:
    """The ``advice/`` record of one measurement against the plan."""
    return {"advice/measured_examples_per_second": measured_examples_per_second,
            "advice/measured_step_ms": plan.step_ms_of(measured_examples_per_second),
            "advice/measured_over_predicted": measured_examples_per_second / plan.predicted_examples_per_second}


#: The tag prefix that names the plan of a segment of a run (``advice/segment/<variant>``: its predicted
#: examples/s, at the step of the segment's first epoch): one segment for a fixed plan, one per plan an
#: adaptive run switched to.
SEGMENT_PREFIX = "advice/segment/"


def predicted_record(plan: Plan) -> dict[str, float]:
    """The ``advice/`` scalars of the prediction itself, and the segment the plan runs."""
    return {"advice/predicted_examples_per_second": plan.predicted_examples_per_second,
            "advice/predicted_step_ms": plan.predicted_step_ms,
            f"{SEGMENT_PREFIX}{plan.variant}": plan.predicted_examples_per_second}


_CHECKS = {
    "network": "the links between the worker hosts (rate, and other traffic on them: measure with "
               "`tfdist advise --probe`)",
    "ps link": "the parameter servers' links (rate, and whether more ps tasks or shards spread the load)",
    "slowest worker": "the slowest worker (its load: other jobs, CPU quota, a smaller GPU)",
    "compute": "the workers' compute (other jobs on the hosts, the input pipeline feeding them, CPU quotas)",
}


def slow_warning(plan: Plan, measured_examples_per_second: float) -> str | None:
    """The warning for a run below ``SLOW_RATIO`` of its prediction, naming what the advisor assumed
    limits it and what to check; None when the run is fast enough."""
    ratio = measured_examples_per_second / plan.predicted_examples_per_second
    if ratio >= SLOW_RATIO:
        return None
    check = _CHECKS.get(plan.bottleneck, "the cluster against the plan's inputs")
    return (f"tfdist plan: measured {measured_examples_per_second:,.0f} examples/s, {ratio:.2f}x the "
            f"predicted {plan.predicted_examples_per_second:,.0f}; the advisor assumed the run is limited by "
            f"{plan.explanation}; check {check}")


def plan_environment(plan: Plan, result_path: str | None = None) -> dict[str, str]:
    """The variables a launcher adds to every task: the plan inline (no file needed on the hosts) and,
    optionally, where the chief writes its measured figures."""
    env = {PLAN_ENV: json.dumps(plan.as_dict(), separators=(",", ":"), allow_nan=False)}
    if result_path is not None:
        env[PLAN_RESULT_ENV] = result_path
    return env


def result_summary(plan: Plan, result_path: str) -> str:
    """The launcher's last line: measured against predicted, from the chief's result file."""
    try:
        with open(result_path) as handle:
            measured = json.load(handle)
        rate = float(measured["measured_examples_per_second"])
        step = float(measured["measured_step_ms"])
    except (OSError, ValueError, KeyError, TypeError):
        return (f"tfdist launch: no measured figures came back ({result_path} is missing or unreadable: the "
                "chief writes it at the end of fit, on its own host); predicted "
                f"{plan.predicted_examples_per_second:,.0f} examples/s")
    return (f"tfdist launch: measured {rate:,.0f} examples/s, predicted {plan.predicted_examples_per_second:,.0f} "
            f"({rate / plan.predicted_examples_per_second:.2f}x); step {step:,.1f} ms, predicted "
            f"{plan.predicted_step_ms:,.1f} ms")


#: Where ``tfdist launch --backend auto`` saves its plans, in its working directory.
PLANS_FOLDER = "tfdist-plans"


def default_plan_path(now: float | None = None) -> str:
    """``tfdist-plans/plan-YYYYmmdd-HHMMSS.json`` (the folder is made when missing)."""
    import time

    os.makedirs(PLANS_FOLDER, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return os.path.join(PLANS_FOLDER, f"plan-{stamp}.json")


def measured_path(plan_path: str) -> str:
    """Where the chief writes a run's measured figures for the plan saved at ``plan_path``: beside it,
    ``plan.json`` -> ``plan.measured.json`` (absolute: the tasks may start in another folder)."""
    return os.path.abspath(plan_path.removesuffix(".json") + ".measured.json")


def run_folder_path(plan_path: str) -> str:
    """The folder of an adaptive run of the plan saved at ``plan_path`` (:mod:`tfdist.run_channel`):
    beside it, ``plan.json`` -> ``plan.run`` (absolute: every task reads the same one)."""
    return os.path.abspath(plan_path.removesuffix(".json") + ".run")


def plans_folder_problem(folder: str = PLANS_FOLDER) -> str | None:
    """Why :func:`default_plan_path` could not save a plan in ``folder`` (made in the working directory
    when missing), checked before anything is probed; None when it can. Nothing is left behind."""
    if os.path.lexists(folder) and not os.path.isdir(folder):
        return f"{shown_path(folder)} exists and is not a folder"
    where = folder if os.path.isdir(folder) else os.path.dirname(os.path.abspath(folder))
    problem = new_file_problem(where)
    return None if problem is None else f"{shown_path(where)} takes no new file ({problem})"


def check_plan_path(path: str) -> None:
    """Refuse, before anything is probed or started, a plan path :func:`save_plan` could not write.

    The name must be a file name (not empty, not ending in a separator, not ``.`` or ``..``, within the
    file system's ``NAME_MAX``, the whole path within ``PATH_MAX``), not an existing folder or
    non-regular file; its folder must exist and take a new file, which is tried for real as the save
    does it: a temporary file is created in that folder and removed again. So ``/proc``, ``/sys``, a
    read-only mount or a full quota fail here, whatever ``os.access`` says (it says yes to root).

        check_plan_path("plans/plan.json")   # PlanError naming the problem and the fix, or None
    """
    fix = "pass a path in a writable folder, e.g. plan.json"
    if not path.strip():
        raise PlanError(with_fix("the plan path is empty", fix))
    if "\0" in path:
        raise PlanError(with_fix(f"{shown_path(path)} holds a NUL character, which no file name may", fix))
    if path.endswith((os.sep, "/")) or os.path.basename(path) in (".", ".."):
        raise PlanError(with_fix(f"{shown_path(path)} names a folder, not a file", fix))
    if os.path.isdir(path):
        raise PlanError(with_fix(f"{shown_path(path)} is a folder, not a file", fix))
    folder = os.path.dirname(os.path.abspath(path))
    _check_name_length(path, folder, fix)
    if os.path.lexists(path) and not (os.path.exists(path) and stat.S_ISREG(os.stat(path).st_mode)):
        raise PlanError(with_fix(f"{shown_path(path)} exists and is not a regular file", fix))
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise PlanError(with_fix(f"the folder of {shown_path(path)} ({shown_path(folder)}) {what}", fix))
    problem = new_file_problem(folder)  # the save writes a temporary sibling: try that half for real
    if problem is not None:
        raise PlanError(with_fix(f"{shown_path(path)} cannot be written (its folder {shown_path(folder)} takes no new "
                                 f"file: {problem})", fix))


def _check_name_length(path: str, folder: str, fix: str) -> None:
    """Refuse a file name over the folder's ``NAME_MAX`` or a path over ``PATH_MAX`` (in bytes)."""
    try:
        name = len(os.fsencode(os.path.basename(path)))
        whole = len(os.fsencode(os.path.join(folder, os.path.basename(path))))
    except UnicodeEncodeError:
        raise PlanError(with_fix(f"{shown_path(path)} cannot be written (it holds characters the file system's "
                                 "encoding cannot store)", fix)) from None
    name_max, path_max = _limit(folder, "PC_NAME_MAX", 255), _limit(folder, "PC_PATH_MAX", 4096)
    if name > name_max:
        raise PlanError(with_fix(f"{shown_path(path)} cannot be written (File name too long): its name is {name:,} "
                                 f"bytes, the file system takes at most {name_max}", fix))
    if whole >= path_max:
        raise PlanError(with_fix(f"{shown_path(path)} cannot be written (File name too long): the whole path is "
                                 f"{whole:,} bytes, the limit is {path_max - 1:,}", fix))


def _limit(folder: str, name: str, default: int) -> int:
    """``os.pathconf(folder, name)`` of the nearest existing folder, else ``default``."""
    while folder and not os.path.isdir(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    try:
        value = os.pathconf(folder or ".", name)
    except (OSError, ValueError):
        return default
    return value if value > 0 else default
