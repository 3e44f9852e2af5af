"""``strategy.export``: one verified export of a trained model, written once, from any backend.

    path = strategy.export(model, "exports/classifier/1")          # a SavedModel, verified
    path = strategy.export(model, "model.keras", format="keras")    # a .keras file without optimizer

The steps, the same on every task so that none waits for another that gave up:

1. every task checks the arguments and the model, then the writing task (the chief) checks the path
   (``paths.check_target``); the tasks agree on the outcome (``Role.agree``) and all raise the same
   error if one failed, before anything is written;
   every task also computes the model's outputs on the verification sample here, because reading a
   model's variables may be a collective (MultiWorkerMirrored's sync-on-read BatchNormalization
   statistics) and must run on every task at once;
2. the chief writes into a temporary sibling (``paths.staged_target``) and reloads it in a fresh
   interpreter with ``verify=True`` (``verify``); tasks that must write too (MultiWorkerMirrored
   workers) write a throwaway copy that is removed; the tasks agree;
3. only when every task succeeded does the chief rename the export onto the path (the previous one
   stays until then); the tasks agree once more, and every task returns the path.

A write that hits a full disk, a quota or a file-size limit fails with one ``ExportError`` naming
the path, what happened, that the previous export was kept, and the fix (``failures``).

Module layout: ``paths`` (where, atomically), ``destination`` (a path declared before ``fit``),
``saved_model`` (what: the serving function), ``failures`` (disk limits, told), ``verify`` (the
fresh-process reload), ``check`` and ``files`` (``tfdist export-check``, its inputs checked).

Layering: beside ``tfdist.callbacks``: it may import the ground modules only (``keras_compat``,
``upstream``, ``atomic_write``, ``errors``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
from typing import Any, Callable, Iterator

from tfdist.errors import with_fix
from tfdist.export.errors import ExportArgumentError, ExportError
from tfdist.export.paths import FORMATS, ExportPathError

log = logging.getLogger("tfdist")

__all__ = ["ExportArgumentError", "ExportError", "ExportPathError", "FORMATS", "Role", "export_model"]


@dataclasses.dataclass(frozen=True)
class Role:
    """What this task does in an export, from its strategy's hooks.

    writes: writes the export that is kept (the chief).
    throwaway: writes a copy that is thrown away (workers whose backend needs every task to save).
    agree: this task's problem (or None) -> the job's (the same on every task, or None).
    copies: write a copy of the model in plain local variables (parameter servers: shards merged).
    """

    writes: bool
    throwaway: bool = False
    agree: Callable[[str | None], str | None] = lambda problem: problem
    copies: bool = False


def export_model(model: Any, path: Any, role: Role, *, format: str = "saved_model", overwrite: bool = False,
                 verify: bool = True, input_signature: Any = None, sample: Any = None) -> str:
    """Export ``model`` to ``path`` as ``role`` says; the absolute path, on every task."""
    from tfdist.export import paths, saved_model

    state: dict[str, Any] = {}

    def check() -> None:
        for name, value in (("overwrite", overwrite), ("verify", verify)):
            if not isinstance(value, bool):
                raise ExportArgumentError(with_fix(f"`{name}` must be True or False, got {value!r}",
                                                   f"pass {name}=True or {name}=False"))
        target = paths.absolute_target(path, format)
        saved_model.check_model(model)
        if role.copies or (format == "keras" and getattr(model, "optimizer", None) is not None):
            saved_model.check_copyable(model)
        state["serving"] = saved_model.serving(model, input_signature)  # raises before anything is written
        state["inputs"] = _sample(sample, state["serving"].specs)
        if verify:  # a collective on some backends: every task gets here, or none does (same checks above)
            state["expected"] = _outputs(state["serving"], state["inputs"])
        # last, as the only check that differs between tasks: the writer's path
        state["target"] = paths.check_target(path, format, overwrite) if role.writes else target

    _together(role, check, "the export's checks")
    target = state["target"]

    with contextlib.ExitStack() as staged:
        def write() -> None:
            if not (role.writes or role.throwaway):
                return
            source = saved_model.merged_copy(model) if role.copies else model
            serving = saved_model.serving(source, input_signature, inputs_of=model) if source is not model \
                else state["serving"]  # a copy's inputs may be named otherwise (Keras 3: input_layer_1)
            if not role.writes:
                with _told_limits(target, tempfile.gettempdir()), paths.throwaway_target(target) as written:
                    saved_model.write(source, serving, written, format)
                return
            with _told_limits(target):
                staging = staged.enter_context(paths.staged_target(target))
                saved_model.write(source, serving, staging.written, format)
            if verify:
                _verify(model, state["serving"], state["inputs"], state["expected"], staging.written, target,
                        format)
            state["staging"] = staging

        _together(role, write, f"writing {target!r}")
        _together(role, lambda: state["staging"].commit() if "staging" in state else None,
                  f"putting the export at {target!r}")
    return target


@contextlib.contextmanager
def _told_limits(target: str, scratch: str | None = None) -> Iterator[None]:
    """A write that hits a full disk, a quota or a file-size limit becomes one ``ExportError`` naming
    ``target``, what happened and the fix (``failures``); any other error passes unchanged."""
    from tfdist.export import failures

    try:
        yield
    except Exception as exc:
        error = failures.limit_error(exc, target, scratch)
        if error is None:
            raise
        raise error from None


def _together(role: Role, step: Callable[[], None], what: str) -> None:
    """Run ``step`` here, then agree with the other tasks: every task raises if any failed."""
    error: BaseException | None = None
    try:
        step()
    except Exception as exc:  # any failure: the other tasks must hear of it, or they would wait
        error = exc
    try:
        agreed = role.agree(None if error is None else f"{type(error).__name__}: {error}")
    except Exception as failed:  # the tasks could not even agree: say why this one failed, if it did
        if error is not None:
            raise error from failed
        raise ExportError(with_fix(f"the tasks could not agree on {what}: {type(failed).__name__}: {failed}",
                                   "see the other tasks' errors; every task stopped")) from failed
    if error is not None:
        raise error
    if agreed is not None:
        raise ExportError(with_fix(f"another task failed {what}: {agreed}",
                                   "fix what that task's error says; every task stopped, nothing was kept"))


def _sample(sample: Any, specs: tuple) -> list:
    """The verification batch: ``sample`` (an array, or a list of arrays, one per input) or generated."""
    import numpy as np

    from tfdist.export.verify import sample_inputs

    if sample is None:
        return sample_inputs(specs)
    arrays = [np.asarray(x) for x in (sample if isinstance(sample, (list, tuple)) else [sample])]
    if len(arrays) != len(specs) or any(not spec.shape.is_compatible_with(a.shape) for spec, a in zip(specs, arrays)):
        raise ExportArgumentError(with_fix(
            f"`sample` has shapes {[a.shape for a in arrays]}, the model's inputs are "
            f"{[tuple(spec.shape.as_list()) for spec in specs]}", "pass one array per input, or leave it out"))
    return [a.astype(spec.dtype.as_numpy_dtype) for spec, a in zip(specs, arrays)]


def _outputs(serving: Any, inputs: list) -> dict:
    """The model's own outputs on ``inputs``, through the serving function (``training=False``)."""
    import tensorflow as tf

    return {key: value.numpy() for key, value in serving.function(*[tf.constant(x) for x in inputs]).items()}


def _verify(model: Any, serving: Any, inputs: list, expected: dict, written: str, target: str,
            format: str) -> None:
    from tfdist import keras_compat
    from tfdist.export import verify

    policy = getattr(model, "dtype_policy", None)
    compute = str(getattr(policy, "compute_dtype", "float32"))
    package = "tf_keras" if keras_compat.flavour_of(model) == keras_compat.TF_KERAS else "keras"
    try:
        result = verify.verify(written, format, package, [spec.name for spec in serving.specs], inputs,
                               expected, compute)
    except ExportError as exc:
        raise ExportError(str(exc).replace(repr(written), f"{target!r} (not kept)")) from None
    log.info("tfdist: exported %s; reloaded in a fresh process it matches the model (max abs diff %.3g "
             "<= %.3g)", target, result.max_abs_diff, result.limit)
