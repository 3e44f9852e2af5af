"""Kept while the CLI moves to :mod:`tfdist.advise.planner` and :mod:`tfdist.plan` (issue 35)."""
from tfdist.advise.planner import plan_from_advice  # noqa: F401
from tfdist.plan import *  # noqa: F401,F403
from tfdist.plan import PLAN_ENV, PLAN_RESULT_ENV, check_plan_path, default_plan_path  # noqa: F401
