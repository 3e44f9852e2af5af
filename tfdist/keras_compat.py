"""Both Kerases: tf-keras (the Keras 2 API) and Keras 3, told apart per object.

Since TensorFlow 2.16 ``tf.keras`` is Keras 3 unless ``TF_USE_LEGACY_KERAS`` is set when TensorFlow
loads; ``import tf_keras`` and ``import keras`` give either one in the same process, and their
objects do not mix. tfdist therefore never asks what ``tf.keras`` points to: it asks each model,
optimizer and callback which package its class comes from (``flavour_of``).

``import tfdist`` before TensorFlow still routes ``tf.keras`` to tf-keras (``ensure_legacy_keras``)
when ``TF_USE_LEGACY_KERAS`` is unset, so scripts written for the parameter-server backend keep
working; ``import keras`` is Keras 3 either way, and the Horovod, mirrored and single backends take
both. That choice belongs to the process that imports tfdist: this module remembers that it set the
variable (``legacy_keras_origin``), so a process that starts others (``tfdist launch``, its
supervisors, Horovod's launcher) hands them the user's environment as it was (``user_environment``,
``restore_user_keras_choice``), and a script gets the same Keras under ``tfdist launch`` as under
``horovodrun``.

Importing this module imports neither TensorFlow nor Keras.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any, Mapping, MutableMapping

from tfdist import upstream
from tfdist.errors import ArgumentTypeError, TfdistError, with_fix
from tfdist.keras_flavour import KERAS_3, PACKAGES, TF_KERAS, Flavour, flavour_of  # noqa: F401  (re-exported)

TF_USE_LEGACY_KERAS = "TF_USE_LEGACY_KERAS"

#: How the user gets the tf-keras flavour, for error messages.
USE_TF_KERAS = (f"build the model with tf-keras: `import tf_keras` and use `tf_keras.` in place of "
                f"`keras.` (or start Python with {TF_USE_LEGACY_KERAS}=1 and use `tf.keras`)")


class KerasVersionError(TfdistError, ImportError):
    """A Keras that tfdist cannot drive is all there is (tf-keras missing)."""


class KerasFlavourError(ArgumentTypeError):
    """Objects of tf-keras and Keras 3 given together, or a Keras 3 object to a tf-keras-only backend."""


#: Who set ``TF_USE_LEGACY_KERAS`` (``legacy_keras_origin``): the user's environment, or ``import tfdist``.
SET_BY_USER = "your environment"
SET_BY_TFDIST = "import tfdist"

_USER_VALUE = os.environ.get(TF_USE_LEGACY_KERAS)  # this process's, before `import tfdist` could set it
_set_by_tfdist = False  # ensure_legacy_keras put it into os.environ


def ensure_legacy_keras(environ: MutableMapping[str, str] | None = None,
                        modules: dict[str, Any] | None = None) -> None:
    """Set ``TF_USE_LEGACY_KERAS=1`` when TensorFlow is not imported yet and the variable is unset,
    so ``tf.keras`` is tf-keras as in tfdist's first releases. Never refuses anything: a user who set
    the variable, or imported TensorFlow first, gets the ``tf.keras`` TensorFlow chose. When it sets
    the variable in this process's environment (``environ`` not given) it remembers so
    (``legacy_keras_origin``)."""
    global _set_by_tfdist
    target = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if "tensorflow" in modules or TF_USE_LEGACY_KERAS in target:
        return
    target[TF_USE_LEGACY_KERAS] = "1"
    if environ is None:
        _set_by_tfdist = True


def legacy_keras_origin(environ: Mapping[str, str] | None = None) -> str | None:
    """Who set ``TF_USE_LEGACY_KERAS`` in ``environ`` (default: this process's): ``SET_BY_TFDIST`` when
    ``import tfdist`` set it (the user had left it unset), ``SET_BY_USER`` when it came from the
    environment, ``None`` when it is unset.

        legacy_keras_origin()   # 'import tfdist' in `tfdist env` run without the variable
    """
    environ = os.environ if environ is None else environ
    value = environ.get(TF_USE_LEGACY_KERAS)
    if value is None:
        return None
    ours = _set_by_tfdist and _USER_VALUE is None and value == "1"
    return SET_BY_TFDIST if ours else SET_BY_USER


def user_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``environ`` (default: this process's) as the user gave it: without the
    ``TF_USE_LEGACY_KERAS`` that ``import tfdist`` added. What a launcher hands its tasks, so each
    task's Keras is what the user chose (or what its own ``import tfdist`` chooses), never the
    launcher's.

        tasks = plan_local_cluster(command, 2, 1, ports, user_environment())
    """
    environ = os.environ if environ is None else environ
    copy = dict(environ)
    if legacy_keras_origin(environ) == SET_BY_TFDIST:
        del copy[TF_USE_LEGACY_KERAS]
    return copy


def restore_user_keras_choice() -> None:
    """Take back the ``TF_USE_LEGACY_KERAS`` that ``import tfdist`` put into this process's environment.

    For the entry points of processes that start others from ``os.environ`` (Horovod's launcher reads
    it itself; a supervisor's shell inherits it): they import tfdist only to run, and must pass the
    user's Keras choice on unchanged. Never call it after TensorFlow is imported in this process."""
    global _set_by_tfdist
    if legacy_keras_origin() == SET_BY_TFDIST:
        del os.environ[TF_USE_LEGACY_KERAS]
    _set_by_tfdist = False


def require_tf_keras() -> None:
    """Raise ``KerasVersionError`` when tf-keras is missing; checked before building a strategy,
    not at import, so ``tfdist tf-config`` works on a host without TensorFlow."""
    if importlib.util.find_spec("tf_keras") is None:
        raise KerasVersionError("tf-keras is not installed; tfdist's callbacks and the parameter-server "
                                "backend need it. Fix: pip install 'tf-keras~=2.21.0' (match your TensorFlow).")


def keras_module(flavour: Flavour) -> ModuleType:
    """The package of ``flavour``: ``tf_keras`` or ``keras``."""
    return importlib.import_module(PACKAGES[flavour])


def keras_of(obj: Any, argument: str) -> ModuleType:
    """The Keras package ``obj`` belongs to, or an ``ArgumentTypeError`` naming ``argument``."""
    flavour = flavour_of(obj)
    if flavour is None:
        raise ArgumentTypeError(with_fix(
            f"`{argument}` is not a Keras object (got {type(obj).__module__}.{type(obj).__name__})",
            "pass a tf-keras or Keras 3 model/optimizer/callback"))
    return keras_module(flavour)


def loaded_classes(path: str) -> tuple[type, ...]:
    """The class at ``path`` (e.g. ``"callbacks.ModelCheckpoint"``) in every Keras already imported:
    a package nobody imported has no objects to test against, so it is not imported here."""
    found = []
    for package in PACKAGES.values():
        module = sys.modules.get(package)
        if module is None:
            continue
        owner: Any = module
        for part in path.split("."):
            owner = getattr(owner, part, None)
        if isinstance(owner, type):
            found.append(owner)
    return tuple(found)


def is_keras(obj: Any, path: str) -> bool:
    """``isinstance(obj, <path> of tf-keras or Keras 3>)``, e.g. ``is_keras(cb, "callbacks.TensorBoard")``."""
    return isinstance(obj, loaded_classes(path))


def has_class_named(obj: Any, name: str) -> bool:
    """Whether ``obj``'s class, or a base of it, is called ``name``: a class of either Keras (or a
    subclass of one) recognised without importing either."""
    return any(klass.__name__ == name for klass in type(obj).__mro__)


def check_callbacks_flavour(model: Any, callbacks: Any) -> None:
    """``check_same_flavour`` for each callback, named ``callbacks[i]`` (the one inside a ``ChiefOnly``)."""
    check_same_flavour(model, **{f"callbacks[{index}]": getattr(callback, "callback", callback)
                                 for index, callback in enumerate(callbacks or [])})


def check_same_flavour(model: Any, **objects: Any) -> None:
    """Refuse ``objects`` (``optimizer=...``, ``callback=...``) from the other Keras than ``model``'s:
    tf-keras and Keras 3 objects do not mix, and Keras would fail later with a confusing error."""
    expected = flavour_of(model)
    for argument, obj in objects.items():
        flavour = flavour_of(obj)
        if expected is None or flavour is None or flavour == expected:
            continue
        raise KerasFlavourError(with_fix(
            f"`{argument}` is a {_describe(flavour)} object ({type(obj).__module__}.{type(obj).__name__}) "
            f"but the model is {_describe(expected)}; the two do not mix",
            f"build both with the same Keras (`import {PACKAGES[expected]}` for this model)"))


def refuse_keras_3(obj: Any, argument: str, backend: str, reason: str) -> None:
    """Raise ``KerasFlavourError`` when ``obj`` is Keras 3 and ``backend`` cannot run it (``reason``)."""
    if flavour_of(obj) != KERAS_3:
        return
    raise KerasFlavourError(with_fix(
        f"`{argument}` is a Keras 3 object ({type(obj).__module__}.{type(obj).__name__}) and the {backend} "
        f"backend cannot train Keras 3 models: {reason}",
        f"{USE_TF_KERAS}; or train this Keras 3 model with the horovod backend "
        "(make_strategy('horovod') under horovodrun)"))


def _describe(flavour: str) -> str:
    return "tf-keras" if flavour == TF_KERAS else "Keras 3"


def tf_keras_flavour(tensorflow: Any) -> str | None:
    """'tf_keras', 'keras_3' or 'keras_2' once ``tf.keras`` was resolved, else ``None`` (for ``tfdist env``).

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
