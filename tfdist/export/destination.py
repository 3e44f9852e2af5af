"""Where ``strategy.export`` will write, declared before training so that ``fit`` can refuse a path
the export could not use before its first step, not after the last (no TensorFlow imported).

    strategy.export_to("exports/classifier/1", overwrite=True)   # declared: fit checks it first
    strategy.fit(model, x, y, epochs=3)
    path = strategy.export(model)                                  # writes there

``declare`` checks the arguments (nothing on disk); ``check`` is what ``fit`` runs on the chief (the
checks of ``paths.check_target``: an existing path without ``overwrite=True``, an existing path that
is not an export, a parent that cannot be written); ``resolve`` fills ``export``'s left-out arguments
from the declaration and refuses given ones that contradict it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from tfdist.errors import with_fix
from tfdist.export.errors import ExportArgumentError
from tfdist.export.paths import ExportPathError, absolute_target, check_target

DEFAULT_FORMAT = "saved_model"


@dataclass(frozen=True)
class Destination:
    """An export destination declared with ``strategy.export_to``: absolute path, format, overwrite."""

    path: str
    format: str
    overwrite: bool


def _check_bool(name: str, value: Any, call: str) -> None:
    if not isinstance(value, bool):
        raise ExportArgumentError(with_fix(f"{call}: `{name}` must be True or False, got {value!r}",
                                           f"pass {name}=True or {name}=False"))


def declare(path: Any, format: str = DEFAULT_FORMAT, overwrite: bool = False) -> Destination:
    """The destination ``strategy.export_to(path, format=..., overwrite=...)`` declares; its arguments
    checked (``ExportPathError``/``ExportArgumentError``), nothing read or written on disk."""
    _check_bool("overwrite", overwrite, "strategy.export_to")
    return Destination(absolute_target(path, format), format, overwrite)


def check(destination: Destination | None) -> None:
    """Refuse, before training, a declared destination the export could not use (nothing trained or
    written yet): ``ExportPathError`` naming the path and the fix (``overwrite=True``, ...)."""
    if destination is None:
        return
    try:
        check_target(destination.path, destination.format, destination.overwrite)
    except ExportPathError as exc:
        problem, _, fix = str(exc).partition("; fix: ")
        fix = fix.replace("pass overwrite=True", "pass overwrite=True to strategy.export_to")
        raise ExportPathError(with_fix(f"strategy.export_to: {problem} (checked before training: nothing was "
                                       "trained or written)", fix)) from None


def resolve(declared: Destination | None, path: Any, format: str | None,
            overwrite: bool | None) -> tuple[Any, str, bool]:
    """``export``'s ``(path, format, overwrite)``: what it was given, the left-out ones from the
    declaration (else ``"saved_model"``, ``False``); given values that differ from the declaration
    are refused, since ``fit`` checked the declared ones."""
    if declared is None:
        if path is None:
            raise ExportArgumentError(with_fix(
                "strategy.export needs a `path`, and none was declared with strategy.export_to",
                "pass strategy.export(model, 'exports/model/1'), or declare it before fit with "
                "strategy.export_to('exports/model/1')"))
        return path, DEFAULT_FORMAT if format is None else format, False if overwrite is None else overwrite
    given = {"path": None if path is None else _absolute(path), "format": format, "overwrite": overwrite}
    for name, value in given.items():
        wanted = getattr(declared, name)
        if value is not None and (value != wanted or type(value) is not type(wanted)):
            raise ExportArgumentError(with_fix(
                f"strategy.export was given {name}={value!r}, and strategy.export_to declared "
                f"{name}={wanted!r}, which fit checked before training",
                f"leave `{name}` out of strategy.export, or declare {name}={value!r} with strategy.export_to"))
    return declared.path, declared.format, declared.overwrite


def _absolute(path: Any) -> Any:
    """``path`` made absolute when it is a path (compared with the declared one), else as given."""
    return os.path.abspath(os.fspath(path)) if isinstance(path, (str, os.PathLike)) and os.fspath(path) else path
