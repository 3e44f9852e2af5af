"""Keep tfdist on the Keras 2 API (tf-keras): ParameterServerStrategy has no Keras 3 support.

TensorFlow decides what ``tf.keras`` means from ``TF_USE_LEGACY_KERAS`` when it is imported,
so the variable must be set before that. ``import tfdist`` calls ``ensure_legacy_keras`` and
raises ``KerasVersionError`` with the fix when it is too late.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, MutableMapping

from tfdist import upstream
from tfdist.errors import ArgumentTypeError, TfdistError

TF_USE_LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
_TRUE_VALUES = ("true", "True", "1")  # what TensorFlow itself accepts

_FIX = ("Fix: `import tfdist` before `import tensorflow`, or start Python with "
        "TF_USE_LEGACY_KERAS=1 in the environment (export TF_USE_LEGACY_KERAS=1).")


class KerasVersionError(TfdistError, ImportError):
    """tf.keras is (or would be) Keras 3, which tfdist cannot drive."""


def ensure_legacy_keras(environ: MutableMapping[str, str] | None = None,
                        modules: dict[str, Any] | None = None) -> None:
    """Make ``tf.keras`` resolve to tf-keras, or raise ``KerasVersionError`` saying how.

    Sets ``TF_USE_LEGACY_KERAS=1`` when TensorFlow is not imported yet and the variable is unset.
    """
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    value = environ.get(TF_USE_LEGACY_KERAS)
    if value is not None and value not in _TRUE_VALUES:
        raise KerasVersionError(
            f"{TF_USE_LEGACY_KERAS}={value!r}, but tfdist needs the Keras 2 API from tf-keras "
            "(Keras 3 has no ParameterServerStrategy support). "
            f"Fix: unset it or set {TF_USE_LEGACY_KERAS}=1.")
    tensorflow = modules.get("tensorflow")
    if tensorflow is None:
        environ.setdefault(TF_USE_LEGACY_KERAS, "1")
        return
    resolved = tf_keras_flavour(tensorflow)
    if resolved == "keras_3" or (resolved is None and upstream.tf_uses_legacy_keras(tensorflow) is False):
        raise KerasVersionError(
            "TensorFlow was imported before tfdist with Keras 3 as tf.keras "
            f"({TF_USE_LEGACY_KERAS} was not set when TensorFlow loaded); tfdist needs the "
            f"Keras 2 API from tf-keras. {_FIX}")


def require_tf_keras() -> None:
    """Raise ``KerasVersionError`` when tf-keras is missing; checked before building a strategy,
    not at import, so ``tfdist tf-config`` works on a host without TensorFlow."""
    if importlib.util.find_spec("tf_keras") is None:
        raise KerasVersionError("tf-keras is not installed; tfdist needs it for the Keras 2 API. "
                                "Fix: pip install 'tf-keras~=2.21.0' (match your TensorFlow).")


def tf_keras_flavour(tensorflow: Any) -> str | None:
    """'tf_keras', 'keras_3' or 'keras_2' once ``tf.keras`` was resolved, else ``None``.

    Reads the lazy loader's state (or, once it replaced itself, the module's name) without
    triggering the resolution.
    """
    loader = vars(tensorflow).get("keras")
    if loader is None:
        return None
    still_lazy, version = upstream.lazy_keras_version(loader)
    if still_lazy:
        return version
    name = vars(loader).get("__name__", "") if hasattr(loader, "__dict__") else ""
    if name.startswith("tf_keras"):
        return "tf_keras"
    if name.startswith("keras"):
        return "keras_3" if name.startswith("keras._tf_keras") or name.startswith("keras.src") else "keras_2"
    return None


def check_keras_object(obj: Any, argument: str) -> None:
    """Raise ``TypeError`` when ``obj`` comes from Keras 3 rather than tf-keras.

    ``argument`` names the parameter in the message, e.g. ``model`` or ``optimizer``.
    """
    module = type(obj).__module__ or ""
    if module == "keras" or module.startswith("keras."):
        raise ArgumentTypeError(
            f"`{argument}` is a Keras 3 object ({type(obj).__module__}.{type(obj).__name__}); "
            "tfdist works with the Keras 2 API of tf-keras. Fix: build it with `tf.keras` after "
            "`import tfdist` (or `import tf_keras`), not with `import keras`.")
