"""The one error family: every error tfdist raises is a ``TfdistError``.

Importing this module imports nothing else, so ``from tfdist import TfdistError`` works on a host
without TensorFlow. Each subclass also derives from the builtin it replaces (``ValueError``,
``TypeError``, ``RuntimeError``, ...), so callers that caught those keep working.

Messages follow one wording: what is wrong, with the offending value echoed, then ``; fix: `` and
what to do, e.g. ``"`batch_size` must be an integer >= 1, got 0; fix: pass batch_size=1 or more"``.

    try:
        strategy = tfdist.make_strategy("horovd")
    except tfdist.TfdistError as exc:
        print(exc)   # unknown strategy 'horovd'; known strategies: ...; fix: ... 'horovod'?
"""
from __future__ import annotations


class TfdistError(Exception):
    """Base of every error tfdist raises on purpose; the message ends with how to fix it."""


def with_fix(problem: str, fix: str) -> str:
    """The house wording: ``"<problem>; fix: <fix>"``."""
    return f"{problem}; fix: {fix}"


class ArgumentTypeError(TfdistError, TypeError):
    """An argument of a kind tfdist cannot use (a Keras 3 model, a string optimizer, ...)."""


class ArgumentValueError(TfdistError, ValueError):
    """An argument whose value tfdist cannot use (an uncompiled model, a twice-scaled optimizer, ...)."""
