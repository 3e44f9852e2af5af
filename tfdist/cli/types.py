"""Option types shared by the commands: bounded whole numbers, finite floats, and library parsers.

click's own ``IntRange`` / ``FloatRange`` have three gaps for hostile input: ``FloatRange`` lets
``nan`` (and, without a max, ``inf``) through, both read any script's digits (``int("٢")`` is 2), and
both echo the whole value in their message (a 5,000-digit ``--workers`` gives a 5,000-character
error). These types read the text first, refuse non-ASCII text (:mod:`tfdist.cluster.ascii_input`) and
non-finite numbers, and keep every message one short line that names the accepted range and ends
with ``; fix: ...``; click adds ``Invalid value for '--option':`` in front.

    @click.option("--grace", type=FiniteFloat(0, 3600), default=5.0)
    @click.option("--workers", type=BoundedInt(1, MAX_TASKS, limit="tfdist's limit is 10,000 tasks"))
    @click.option("--bandwidth", type=Parsed("RATE", lambda text: parse_rate(text, field="")))
"""
from __future__ import annotations

import math
from typing import Any, Callable

import click

from tfdist.cluster.ascii_input import ascii_problem
from tfdist.cluster.limits import MAX_TASKS, limit_text
from tfdist.errors import ArgumentValueError, TfdistError

#: Longest number text read (a float needs ~25 characters; more is a typo or an attack).
MAX_NUMBER_TEXT = 40
_SHOWN = 24


def shown(text: object) -> str:
    """The value as a message echoes it: ``'12'``, or ``'123456...' (5000 characters)`` when long."""
    text = str(text)
    if len(text) <= _SHOWN:
        return repr(text)
    return f"{text[:_SHOWN]!r}... ({len(text)} characters)"


def _g(number: float) -> str:
    return f"{number:,}" if isinstance(number, int) else f"{number:g}"


class BoundedInt(click.IntRange):
    """A whole number from ``low`` to ``high``, checked as text first (no giant int is built).

    ``limit`` says why ``high`` is the bound (``"tfdist's limit is 10,000 tasks per cluster"``). A
    ``click.IntRange`` for ``--help`` (which shows the range), with its own ``convert``; a subclass
    words the echo of an out-of-range number (``_echo``) and the range's fix (``_range_fix``).
    """

    def __init__(self, low: int, high: int, limit: str | None = None) -> None:
        super().__init__(low, high)
        self.low, self.high, self.limit = low, high, limit

    def _echo(self, text: str, digits: str) -> str:
        """An out-of-range number as its message echoes it."""
        return text if len(text) <= _SHOWN else shown(text)

    def _range_fix(self) -> str:
        return f"give {_g(self.low)} to {_g(self.high)}"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            text = str(value)
        else:
            text = str(value).strip()
        digits = text[1:] if text[:1] in "+-" else text
        self._refuse_non_ascii(str(value), param, ctx)
        if not (digits.isascii() and digits.isdigit()):
            self.fail(f"{shown(value)} is not a whole number; fix: give one from {_g(self.low)} to "
                      f"{_g(self.high)}", param, ctx)
        number = int(text) if len(digits) <= MAX_NUMBER_TEXT else None
        if number is None or not self.low <= number <= self.high:
            why = f" ({self.limit})" if self.limit and (number is None or number > self.high) else ""
            self.fail(f"{self._echo(text, digits)} is not in the range {self.low}<=x<={self.high}{why}; fix: "
                      f"{self._range_fix()}", param, ctx)
        return number

    def _refuse_non_ascii(self, text: str, param: click.Parameter | None, ctx: click.Context | None) -> None:
        """``int()`` reads any script's digits ('٢' is 2): refuse them, naming the character."""
        problem = ascii_problem(text)
        if problem is not None:
            self.fail(f"{shown(text)} {problem.message}; fix: {problem.fix}", param, ctx)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.low}, {self.high})"


class TaskCount(BoundedInt):
    """A number of tasks, 0 to ``MAX_TASKS`` (``tf-config --workers``, ``--ps-count``), shown as ``N``.

    :class:`BoundedInt` with tf-config's wording: a long number is echoed by its count of digits
    (``a number of 31 digits``) and the fix says ``use``.
    """

    name = "N"

    def __init__(self) -> None:
        super().__init__(0, MAX_TASKS, limit=f"tfdist's limit is {limit_text(MAX_TASKS)} tasks per cluster")

    def _echo(self, text: str, digits: str) -> str:
        return text if len(text) <= 20 else f"a number of {len(digits)} digits"

    def _range_fix(self) -> str:
        return f"use {_g(self.low)} to {_g(self.high)}"

    def __repr__(self) -> str:
        return "TaskCount()"


class FiniteFloat(click.FloatRange):
    """A finite number from ``low`` to ``high`` (``low_open``: strictly above ``low``); ``nan``,
    ``inf`` and over-long text are refused with the range in the message (``click.FloatRange``
    lets ``nan`` through). A ``click.FloatRange`` for ``--help``, with its own ``convert``."""

    def __init__(self, low: float, high: float, low_open: bool = False, unit: str = "") -> None:
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise ArgumentValueError(f"FiniteFloat needs finite low <= high, got {low!r}, {high!r}; fix: "
                                     "declare the option with a finite range")
        super().__init__(low, high, min_open=low_open)
        self.low, self.high, self.low_open, self.unit = low, high, low_open, unit

    def _range(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        above = f"above {_g(self.low)}" if self.low_open else f"from {_g(self.low)}"
        return f"{above} to {_g(self.high)}{unit}"

    def _kind(self) -> str:
        return "positive finite number" if self.low > 0 or (self.low == 0 and self.low_open) else \
            "finite number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, bool):
            self.fail(f"{shown(value)} is not a number; fix: give a {self._kind()} {self._range()}", param,
                      ctx)
        if isinstance(value, (int, float)):
            number = float(value)
        else:
            problem = ascii_problem(str(value))
            if problem is not None:  # float() reads any script's digits and spaces: '١٢' is 12.0
                self.fail(f"{shown(value)} {problem.message}; fix: {problem.fix}", param, ctx)
            text = str(value).strip()
            if len(text) > MAX_NUMBER_TEXT:
                self.fail(f"{shown(value)} is too long for a number; fix: give a {self._kind()} "
                          f"{self._range()}", param, ctx)
            try:
                number = float(text)
            except ValueError:
                self.fail(f"{shown(value)} is not a number; fix: give a {self._kind()} {self._range()}",
                          param, ctx)
        if not math.isfinite(number):
            self.fail(f"{shown(value)} is not a finite number; fix: give a {self._kind()} {self._range()}",
                      param, ctx)
        below = number <= self.low if self.low_open else number < self.low
        if below or number > self.high:
            self.fail(f"{shown(value)} is not {self._range()}; fix: give a {self._kind()} {self._range()}",
                      param, ctx)
        return number

    def __repr__(self) -> str:
        return f"FiniteFloat({self.low}, {self.high})"


class Parsed(click.ParamType):
    """A value a library function parses: ``parse(text)`` returns it or raises a ``TfdistError``
    whose message (naming the value, ending with the fix) becomes the option's error."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self.parse = parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):  # a default already converted, or a value set in code
            return value
        try:
            return self.parse(value)
        except TfdistError as exc:
            self.fail(str(exc), param, ctx)

    def __repr__(self) -> str:
        return f"Parsed({self.name})"


def _optimizer(text: str) -> tuple[str, int]:
    from tfdist.advise.memory import parse_optimizer

    return parse_optimizer(text, field="")


#: ``--optimizer`` of `advise` and `launch --backend auto`: a name (its slots per variable) or a count.
OPTIMIZER = Parsed("NAME", _optimizer)


def _embedding(text: str) -> Any:
    from tfdist.advise.user_inputs import parse_embedding

    return parse_embedding(text, field="")


#: ``--embedding`` of `advise` and `launch --backend auto`: a table with sparse updates, ROWSxDIM[:LOOKUPS].
EMBEDDING = Parsed("ROWSxDIM[:LOOKUPS]", _embedding)


def writable_plan_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: a plan file's path (``advise --save``, ``launch --save-plan``) must be
    writable before anything is probed or started; the option's usage error names the problem."""
    from tfdist.plan import PlanError, check_plan_path

    if value is not None:
        try:
            check_plan_path(value)
        except PlanError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return value


def writable_launch_plan_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """:func:`writable_plan_path` for ``launch --save-plan``: the chief also writes its measured figures
    beside the plan at the end of ``fit`` (:func:`tfdist.plan.measured_path`), so that name must fit too."""
    from tfdist.plan import PlanError, check_plan_path, measured_path

    if writable_plan_path(ctx, param, value) is not None:
        try:
            check_plan_path(measured_path(value))
        except PlanError as exc:
            raise click.BadParameter(f"the chief writes the measured figures beside it, and {exc}", ctx=ctx,
                                     param=param) from None
    return value


def hosts_or_allocation(hosts: str | None, flag: str = "--hosts") -> str | None:
    """``hosts`` as given, else the SLURM allocation's nodes (``SLURM_JOB_NODELIST``, slots from
    ``SLURM_TASKS_PER_NODE``), said on stderr; None outside an allocation. A garbled variable is a
    usage error naming it."""
    if hosts is not None:
        return hosts
    import os

    from tfdist.cluster.errors import ClusterConfigError
    from tfdist.cluster.slurm import allocation_hosts

    try:
        found = allocation_hosts(os.environ)
    except ClusterConfigError as exc:
        raise click.UsageError(f"{flag} was not given and the SLURM allocation cannot stand in: {exc}") from None
    if found is not None:
        click.echo(f"{flag} from the SLURM allocation (SLURM_JOB_NODELIST): {found}", err=True)
    return found
