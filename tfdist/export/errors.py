"""The errors of ``strategy.export`` and ``tfdist export-check`` (no TensorFlow imported)."""
from __future__ import annotations

from tfdist.errors import ArgumentValueError, TfdistError


class ExportError(TfdistError, RuntimeError):
    """An export could not be written, or its check failed; the message names the path."""


class ExportArgumentError(ArgumentValueError):
    """An argument of ``strategy.export`` tfdist cannot use (a model not built, no input signature, ...)."""
