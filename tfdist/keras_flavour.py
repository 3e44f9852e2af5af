"""Which Keras an object belongs to, by the package of its class: the one rule both
``tfdist.keras_compat`` and ``tfdist.upstream`` use (below both, so neither imports the other).

Importing this module imports neither TensorFlow nor Keras.
"""
from __future__ import annotations

from typing import Any, Literal

Flavour = Literal["tf_keras", "keras_3"]
TF_KERAS: Flavour = "tf_keras"
KERAS_3: Flavour = "keras_3"
#: The package each flavour's classes live in.
PACKAGES: dict[str, str] = {TF_KERAS: "tf_keras", KERAS_3: "keras"}


def flavour_of(obj: Any) -> Flavour | None:
    """``"tf_keras"`` or ``"keras_3"`` by the top-level package of the first Keras class in
    ``type(obj).__mro__`` (a user's subclass counts as its Keras base); ``None`` for anything else,
    and for tfdist's own classes (its callbacks), which work with both."""
    for cls in type(obj).__mro__:
        package = (cls.__module__ or "").split(".", 1)[0]
        if package == "tfdist":  # tfdist's callbacks work with both
            return None
        if package == "tf_keras":
            return TF_KERAS
        if package == "keras":
            return KERAS_3
    return None
