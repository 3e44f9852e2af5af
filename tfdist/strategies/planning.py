"""Applying a plan (``TFDIST_PLAN``) in ``make_strategy("auto")``: pure, without TensorFlow.

The environment picks the backend as the auto table says; the plan must name that backend and the
run's cluster (workers, ps tasks, read from the same detectors), and its options must be that
backend's. The script's explicit options win over the plan's, each override reported in one line; an
option that says the same thing another way replaces the plan's (the script's ``min_shard_bytes=``
drops the plan's ``shards=``: ``tfdist.advise.plan.EXCLUSIVE_OPTIONS``).
A named backend (``make_strategy("horovod")``) does not apply a plan: it says so in one line.

    resolved = resolve_plan("horovod", os.environ, {"warmup_epochs": 1}, option_names)
    resolved.options   # {"compression": "fp16", "warmup_epochs": 1}
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from tfdist.advise.plan import PLAN_ENV, Plan, check_options, check_run, load_plan, merge_options
from tfdist.environments import HorovodRunEnvironment, TFConfigEnvironment


@dataclasses.dataclass(frozen=True)
class ResolvedPlan:
    """plan: the plan applied (None without ``TFDIST_PLAN``); options: what to build the backend
    with; notices: lines to print (overrides, a plan not applied); source: the plan's name in errors."""

    plan: Plan | None
    options: dict[str, Any]
    notices: tuple[str, ...] = ()
    source: str = ""


def run_size(kind: str, environ: Mapping[str, str]) -> tuple[int, int]:
    """``(workers, ps)`` of this run as its launcher describes it, in the advisor's terms: Horovod
    ranks; a parameter-server cluster's worker and ps tasks (the chief coordinates and steps none);
    MultiWorkerMirrored's training tasks; 1 elsewhere."""
    if kind == "horovod" and HorovodRunEnvironment.detect(environ):
        return HorovodRunEnvironment(environ).size, 0
    if kind in ("parameter_server", "multi_worker_mirrored") and TFConfigEnvironment.detect(environ):
        found = TFConfigEnvironment(environ)
        cluster = found.cluster
        if kind == "parameter_server":
            return len(cluster.get("worker", [])), len(cluster.get("ps", []))
        return found.size, 0
    return 1, 0


def resolve_plan(kind: str, environ: Mapping[str, str], explicit: Mapping[str, Any],
                 option_names: Mapping[str, Sequence[str]], *, auto: bool = True) -> ResolvedPlan:
    """The options to build backend ``kind`` with, given the plan ``environ`` names (if any).

    ``option_names``: every registered backend's option names. Raises ``PlanError`` for a plan that
    cannot be applied here (its file, the field and the fix in the message).
    """
    value = environ.get(PLAN_ENV)
    if value is None:
        return ResolvedPlan(None, dict(explicit))
    if not auto:
        return ResolvedPlan(None, dict(explicit), (
            f"tfdist plan: {PLAN_ENV} is set but not applied: make_strategy({kind!r}) names its backend, and "
            "plans apply to make_strategy('auto')",))
    plan, source = load_plan(value)
    check_options(plan, source, option_names)
    workers, ps = run_size(kind, environ)
    check_run(plan, source, kind, workers, ps)
    options, overridden = merge_options(plan, explicit)
    notices = [f"tfdist plan: applying {source}: {plan.describe().removeprefix('plan: ')}"]
    if overridden:
        notices.append("tfdist plan: the script's options win over the plan: " + "; ".join(overridden))
    return ResolvedPlan(plan, options, tuple(notices), source)
