"""What an export holds: the model's forward pass only, as a ``serving_default`` signature.

Both Kerases write through their own ``ExportArchive`` (tf-keras ``tf_keras.export``, Keras 3
``keras.export``), which saves the variables the serving function reads and nothing else: no
optimizer (so no Horovod ``DistributedOptimizer``), no training function (so no Horovod op), no
distribution wrapper. The signature's inputs are named after the model's inputs, its outputs
``output_0``, ``output_1``, ... (or the keys of a model that returns a dict).

A model whose variables live on parameter servers (sharded or not) is first copied into plain local
variables (``merged_copy``): shards are concatenated back into one variable, so the export (and a
``.keras`` file) reloads anywhere. ``format="keras"`` always saves such a copy, without its optimizer.
"""
from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tfdist import keras_compat, upstream
from tfdist.errors import with_fix
from tfdist.export.errors import ExportArgumentError
from tfdist.export.signature import ENDPOINT



@dataclass(frozen=True)
class Serving:
    """The serving function of a model: its input specs (named, batch dimension ``None``) and the
    function itself (one tensor per spec -> the output dict), which packs them as the model takes them."""

    specs: tuple[tf.TensorSpec, ...]
    function: Callable[..., dict]


def check_model(model: Any) -> None:
    """A built tf-keras or Keras 3 model, else ``ExportArgumentError`` naming the fix."""
    keras_compat.keras_of(model, "model")
    if not keras_compat.is_keras(model, "Model"):
        raise ExportArgumentError(with_fix(f"`model` must be a Keras Model, got {type(model).__name__}",
                                           "export the model, not one of its layers"))
    if not model.built or not model.weights:
        raise ExportArgumentError(with_fix(
            f"`model` {model.name!r} is not built (it has no weights yet), so there is nothing to export",
            "export after fit, or give the model an input shape (keras.Input) or call model.build() first"))


def serving(model: Any, input_signature: Any = None, inputs_of: Any = None) -> Serving:
    """The serving function of ``model``: from ``input_signature`` (a ``tf.TensorSpec`` or a list of
    them, one per model input) when given, else from the inputs of ``inputs_of`` (a model that ``model``
    copies, whose input names the signature keeps) or of ``model``; ``ExportArgumentError`` naming
    ``input_signature=`` when neither says what the model takes."""
    structure = _input_structure(inputs_of or model) if input_signature is None else _given(input_signature)
    flat = tf.nest.flatten(structure)
    specs = tuple(_named(spec, index, flat) for index, spec in enumerate(flat))

    def serve(*tensors: tf.Tensor) -> dict:
        outputs = model(tf.nest.pack_sequence_as(structure, list(tensors)), training=False)
        return output_dict(outputs)

    return Serving(specs, serve)


def output_dict(outputs: Any) -> dict:
    """The signature's outputs: a dict as the model returns it, else ``output_0``, ``output_1``, ..."""
    if isinstance(outputs, dict):
        return {str(key): value for key, value in outputs.items()}
    return {f"output_{index}": value for index, value in enumerate(tf.nest.flatten(outputs))}


def _input_structure(model: Any) -> Any:
    """The model's inputs as a structure of ``tf.TensorSpec`` with an unknown batch size."""
    if upstream.is_graph_network(model):
        try:
            structure = model.input
        except AttributeError:  # a Keras 3 Sequential knows its `inputs` only
            structure = model.inputs[0] if len(model.inputs) == 1 else list(model.inputs)
        return tf.nest.map_structure(_spec_of, structure)
    if keras_compat.flavour_of(model) == keras_compat.TF_KERAS:
        saved = model.save_spec(dynamic_batch=True)
        if saved is not None and saved[0] and not saved[1]:
            args = saved[0]
            return args[0] if len(args) == 1 else list(args)
    else:
        shapes = upstream.keras3_build_shapes(model)
        if shapes and len(shapes) == 1:
            shape = next(iter(shapes.values()))
            if isinstance(shape, (tuple, list)) and all(isinstance(d, (int, type(None))) for d in shape):
                return tf.TensorSpec((None, *shape[1:]), model.input_dtype)
    raise ExportArgumentError(with_fix(
        f"cannot tell what {type(model).__name__} {model.name!r} takes as input (a subclassed model that "
        "was never called, or one whose call takes several arguments)",
        "pass input_signature=[tf.TensorSpec((None, ...), tf.float32)] (one spec per input) to export"))


def _spec_of(tensor: Any) -> tf.TensorSpec:
    shape = tuple(tensor.shape)
    dtype = tf.as_dtype(tensor.dtype if not hasattr(tensor.dtype, "name") else tensor.dtype.name)
    return tf.TensorSpec((None, *shape[1:]) if shape else (), dtype, name=getattr(tensor, "name", None))


def _given(input_signature: Any) -> Any:
    specs = input_signature if isinstance(input_signature, (list, tuple)) else [input_signature]
    if not specs or not all(isinstance(spec, tf.TensorSpec) for spec in specs):
        raise ExportArgumentError(with_fix(
            f"`input_signature` must be a tf.TensorSpec or a list of them, got {input_signature!r}",
            "pass e.g. input_signature=[tf.TensorSpec((None, 8), tf.float32)]"))
    return specs[0] if len(specs) == 1 else list(specs)


def _named(spec: Any, index: int, flat: list) -> tf.TensorSpec:
    """A signature input name: the model input's own name made safe, else ``input_<index>``."""
    if not isinstance(spec, tf.TensorSpec):
        raise ExportArgumentError(with_fix(f"input {index} of the model is a {type(spec).__name__}, not a "
                                           "tensor", "pass input_signature= with one tf.TensorSpec per input"))
    name = _safe_name(spec)
    if not name or not name[0].isalpha() or [_safe_name(s) for s in flat].count(name) > 1:
        name = f"input_{index}"
    return tf.TensorSpec(spec.shape, spec.dtype, name=name)


def _safe_name(spec: Any) -> str:
    """A tensor's name as a signature key: its op name, other characters than [A-Za-z0-9_] as "_"."""
    return re.sub(r"[^A-Za-z0-9_]", "_", (getattr(spec, "name", None) or "").split(":")[0]).strip("_")


# --- copies in plain variables ----------------------------------------------------------------------
def check_copyable(model: Any) -> None:
    """Refuse, before anything is written, a model ``merged_copy`` cannot copy."""
    if not upstream.is_graph_network(model):
        raise ExportArgumentError(with_fix(
            f"{type(model).__name__} {model.name!r} is a subclassed model, which tfdist cannot copy out of "
            "the parameter servers or into a .keras file without its optimizer",
            "build it as a Functional or Sequential model, or export format='saved_model' from a "
            "horovod, mirrored or single strategy"))
    if tf.distribute.has_strategy():
        raise ExportArgumentError(with_fix(
            "strategy.export was called inside strategy.scope(), where the copy it writes would be created "
            "under the strategy again", "call strategy.export after the `with strategy.scope():` block"))


def merged_copy(model: Any) -> Any:
    """A copy of a Functional or Sequential ``model`` in plain local variables, without optimizer:
    variables split into shards (a parameter-server model with ``shards=``) are concatenated back."""
    check_copyable(model)
    keras = keras_compat.keras_of(model, "model")
    copy = keras.models.clone_model(model)
    copy.set_weights(_merged_weights(model.get_weights(), [w.shape for w in copy.get_weights()]))
    return copy


def _merged_weights(shards: list[np.ndarray], shapes: list[tuple]) -> list[np.ndarray]:
    """``shards`` (a variable split along its first axis appears as consecutive pieces) regrouped to
    ``shapes``; fails closed when they do not add up."""
    merged, at = [], 0
    for shape in shapes:
        shape = tuple(shape)
        pieces, rows = [], 0
        while at < len(shards) and (not shape or rows < shape[0]):
            piece = shards[at]
            if tuple(piece.shape[1:]) != shape[1:]:
                break
            pieces.append(piece)
            rows += piece.shape[0] if piece.shape else 1
            at += 1
            if not shape:
                break
        value = np.concatenate(pieces, axis=0) if len(pieces) > 1 else (pieces[0] if pieces else None)
        if value is None or tuple(value.shape) != shape:
            raise upstream.UpstreamChangedError(with_fix(
                f"the model's weights ({[tuple(s.shape) for s in shards]}) do not regroup into its "
                f"copy's ({[tuple(s) for s in shapes]})", "report this with the model that was exported"))
        merged.append(value)
    if at != len(shards):
        raise upstream.UpstreamChangedError(with_fix(
            f"{len(shards) - at} weight pieces left over merging shards into {len(shapes)} weights",
            "report this with the model that was exported"))
    return merged


# --- writing ----------------------------------------------------------------------------------------
def write(model: Any, serving_fn: Serving, path: str, format: str) -> None:
    """Write ``model`` to ``path``: a SavedModel with ``serving_default``, or a ``.keras`` file of a
    copy without optimizer. Keras' own messages (the endpoint listing) are kept off stdout."""
    with contextlib.redirect_stdout(io.StringIO()):
        if format == "keras":
            copy = model if not getattr(model, "optimizer", None) else merged_copy(model)
            copy.save(path)
            return
        if keras_compat.flavour_of(model) == keras_compat.TF_KERAS:
            import tf_keras

            archive = tf_keras.export.ExportArchive()
            archive.track(model)
            archive.add_endpoint(ENDPOINT, serving_fn.function, input_signature=list(serving_fn.specs))
            archive.write_out(path)
        else:
            import keras

            archive = keras.export.ExportArchive()
            archive.track(model)
            archive.add_endpoint(ENDPOINT, serving_fn.function, input_signature=list(serving_fn.specs))
            archive.write_out(path, verbose=False)
