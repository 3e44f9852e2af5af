"""Applying a plan (``TFDIST_PLAN``) in ``make_strategy("auto")``: pure, without TensorFlow.

The environment picks the backend as the auto table says; the plan must name that backend and the
run's cluster (workers, ps tasks, read from the same detectors), and its options must be that
backend's, each value passing the backend's own option checks (its options dataclass, as
``make_strategy`` checks a script's options), so ``checkpoint_dir: 5`` stops the task before anything
is built. The script's explicit options win over the plan's, each override reported in one line; an
option that says the same thing another way replaces the plan's (the script's ``min_shard_bytes=``
drops the plan's ``shards=``: ``tfdist.plan.EXCLUSIVE_OPTIONS``).
A named backend (``make_strategy("horovod")``) does not apply a plan: it says so in one line.

    option_types = {name: STRATEGIES.get(name).Options for name in STRATEGIES.names()}
    resolved = resolve_plan("horovod", os.environ, {"warmup_epochs": 1}, option_types)
    resolved.options   # {"compression": "fp16", "warmup_epochs": 1}
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from tfdist.plan import PLAN_ENV, Plan, PlanError, check_options, check_run, load_plan, merge_options
from tfdist.environments import ClusterEnvironment, HorovodRunEnvironment, TFConfigEnvironment, detect_environment
from tfdist.errors import with_fix
from tfdist.strategies.options import (CLUSTER_OPTIONS, OptionValueError, StrategyOptions, UnknownOptionError,
                                       build_options, field_names)


@dataclasses.dataclass(frozen=True)
class ResolvedPlan:
    """plan: the plan applied (None without ``TFDIST_PLAN``); options: what to build the backend
    with; notices: lines to print (overrides, a plan not applied); source: the plan's name in errors."""

    plan: Plan | None
    options: dict[str, Any]
    notices: tuple[str, ...] = ()
    source: str = ""


def run_size(kind: str, environment: ClusterEnvironment) -> tuple[int, int]:
    """``(workers, ps)`` of this run as its launcher describes it (``environment``: the one detected),
    in the advisor's terms: Horovod ranks; a parameter-server cluster's worker and ps tasks (the chief
    coordinates and steps none); MultiWorkerMirrored's training tasks; 1 elsewhere."""
    if kind == "horovod" and isinstance(environment, HorovodRunEnvironment):
        return environment.size, 0
    if kind in ("parameter_server", "multi_worker_mirrored"):
        found = TFConfigEnvironment.of(environment)
        if not found.applies():
            return 1, 0
        cluster = found.cluster
        if kind == "parameter_server":
            return len(cluster.get("worker", [])), len(cluster.get("ps", []))
        return found.size, 0
    return 1, 0


def resolve_plan(kind: str, environ: Mapping[str, str], explicit: Mapping[str, Any],
                 option_types: Mapping[str, type[StrategyOptions]], *, auto: bool = True,
                 environment: ClusterEnvironment | None = None) -> ResolvedPlan:
    """The options to build backend ``kind`` with, given the plan ``environ`` names (if any).

    ``option_types``: every registered backend's options dataclass; ``environment``: where this
    process runs, as ``make_strategy`` detected it (detected from ``environ`` when not given). Raises
    ``PlanError`` for a plan that cannot be applied here (its file, the field and the fix in the message).
    """
    value = environ.get(PLAN_ENV)
    if value is None:
        return ResolvedPlan(None, dict(explicit))
    if not auto:
        return ResolvedPlan(None, dict(explicit), (
            f"tfdist plan: {PLAN_ENV} is set but not applied: make_strategy({kind!r}) names its backend, and "
            "plans apply to make_strategy('auto')",))
    plan, source = load_plan(value)
    check_options(plan, source, {name: field_names(options) for name, options in option_types.items()})
    workers, ps = run_size(kind, environment if environment is not None else detect_environment(environ))
    check_run(plan, source, kind, workers, ps)
    check_values(plan, source, option_types)
    options, overridden = merge_options(plan, explicit)
    notices = [f"tfdist plan: applying {source}: {plan.describe().removeprefix('plan: ')}"]
    if overridden:
        notices.append("tfdist plan: the script's options win over the plan: " + "; ".join(overridden))
    return ResolvedPlan(plan, options, tuple(notices), source)


def check_values(plan: Plan, source: str, option_types: Mapping[str, type[StrategyOptions]]) -> None:
    """Refuse a planned option value the backend's own option checks refuse (``OptionValueError``
    from its options dataclass), the plan's file and ``options`` named in front; and the options that
    say which task this process is (``cluster``, ``task_type``, ``task_index``): every task gets the
    same plan, and the cluster is TF_CONFIG's, checked against the plan's workers and ps."""
    for name in sorted(set(plan.options) & CLUSTER_OPTIONS):
        raise PlanError(with_fix(
            f"{source}: `options.{name}` describes one task of the cluster, but every task applies the same "
            "plan and the cluster is TF_CONFIG's", f"remove {name!r} from the plan's options"))
    try:
        build_options(plan.backend, dict(plan.options), option_types)
    except (OptionValueError, UnknownOptionError) as exc:
        raise PlanError(f"{source}: `options`: {exc}") from exc
