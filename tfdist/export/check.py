"""``tfdist export-check PATH``: what a deployment pipeline asks of an export before it ships it.

``signature_text`` prints the ``serving_default`` signature as ``saved_model_cli show --dir PATH
--tag_set serve --signature_def serving_default`` does (read from ``saved_model.pb``, nothing
loaded); ``run_batch`` loads the SavedModel and runs one batch through the signature: zeros (every
unknown dimension 1) or the arrays of a ``.npy`` (one input) / ``.npz`` (keyed by input name) file.
Every failure is an ``ExportError`` with one line naming the path and the fix. What is read is
checked first, without TensorFlow (``files``): regular files only, sizes bounded, ``.npy`` headers
matched against the file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from tfdist.errors import with_fix
from tfdist.export import files
from tfdist.export.errors import ExportError
from tfdist.export.signature import SIGNATURE, TAG


@dataclass(frozen=True)
class TensorInfo:
    """One input or output of a signature: its key, dtype (``DT_FLOAT``), shape (-1 unknown; None:
    unknown rank) and graph tensor name."""

    key: str
    dtype: str
    shape: tuple[int, ...] | None
    name: str


@dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    method: str


def read_signature(path: str, key: str = SIGNATURE) -> Signature:
    """The signature ``key`` of the ``serve`` graph of the SavedModel at ``path``; the folder is checked
    (``files.check_export_folder``) before TensorFlow is imported."""
    data = files.read_saved_model(path)  # kinds and sizes checked first: no FIFO waited on, <= 2 GiB read
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    proto_path = os.path.join(path, "saved_model.pb")
    saved = saved_model_pb2.SavedModel()
    try:
        saved.ParseFromString(data)
    except Exception as exc:  # a truncated or foreign file: protobuf's DecodeError
        raise ExportError(with_fix(f"{proto_path!r} is not a readable SavedModel ({type(exc).__name__})",
                                   "export again; the file is damaged")) from None
    graphs = [g for g in saved.meta_graphs if TAG in g.meta_info_def.tags]
    if not graphs:
        raise ExportError(with_fix(f"{path!r} has no MetaGraph tagged {TAG!r}", "export it with strategy.export"))
    signatures = graphs[0].signature_def
    if key not in signatures:
        raise ExportError(with_fix(f"{path!r} has no {key!r} signature (it has {sorted(signatures)})",
                                   "export it with strategy.export, which writes serving_default"))
    names = {value: name for name, value in types_pb2.DataType.items()}

    def infos(mapping: Any) -> tuple[TensorInfo, ...]:
        found = []
        for name, info in sorted(mapping.items()):
            shape = None if info.tensor_shape.unknown_rank else tuple(d.size for d in info.tensor_shape.dim)
            found.append(TensorInfo(name, names.get(info.dtype, str(info.dtype)), shape, info.name))
        return tuple(found)

    signature = signatures[key]
    return Signature(infos(signature.inputs), infos(signature.outputs), signature.method_name)


def signature_text(signature: Signature) -> str:
    """The lines ``saved_model_cli show ... --signature_def serving_default`` prints."""
    lines = ["The given SavedModel SignatureDef contains the following input(s):"]
    for kind, infos in (("inputs", signature.inputs), ("outputs", signature.outputs)):
        if kind == "outputs":
            lines.append("The given SavedModel SignatureDef contains the following output(s):")
        for info in infos:
            shape = "unknown_rank" if info.shape is None else "(" + ", ".join(map(str, info.shape)) + ")"
            lines += [f"  {kind}['{info.key}'] tensor_info:", f"      dtype: {info.dtype}",
                      f"      shape: {shape}", f"      name: {info.name}"]
    lines.append(f"Method name is: {signature.method}")
    return "\n".join(lines)


def batch_inputs(signature: Signature, input_file: str | None) -> dict[str, Any]:
    """One batch for ``signature``: zeros with every unknown dimension 1, or ``input_file``'s arrays."""
    import numpy as np
    import tensorflow as tf

    if input_file is None:
        zeros = {}
        for info in signature.inputs:
            shape = [1 if d < 0 else d for d in (info.shape if info.shape is not None else (1,))]
            dtype = _dtype(info.dtype)
            zeros[info.key] = (np.full(shape, b"", dtype=object) if dtype == tf.string
                               else np.zeros(shape, dtype.as_numpy_dtype))
        return zeros
    loaded = files.load_batch(input_file)  # a regular file, its headers checked before its data is read
    if isinstance(loaded, np.ndarray):
        if len(signature.inputs) != 1:
            raise ExportError(with_fix(
                f"--input {input_file!r} holds one array and the signature takes {len(signature.inputs)} inputs "
                f"({', '.join(i.key for i in signature.inputs)})",
                "pass an .npz with one array per input name (numpy.savez(file, name=array, ...))"))
        arrays = {signature.inputs[0].key: loaded}
    else:
        arrays = loaded
        wanted = [info.key for info in signature.inputs]
        if sorted(arrays) != sorted(wanted):
            raise ExportError(with_fix(f"--input {input_file!r} has arrays {sorted(arrays)}, the signature "
                                       f"takes {sorted(wanted)}", "name the .npz arrays after the inputs"))
    for info in signature.inputs:
        array = arrays[info.key]
        if info.shape is not None and (len(array.shape) != len(info.shape) or any(
                want >= 0 and want != got for want, got in zip(info.shape, array.shape))):
            raise ExportError(with_fix(f"--input {input_file!r}: input {info.key!r} has shape {array.shape}, the "
                                       f"signature takes {info.shape} (-1: any)", "pass a batch of that shape"))
    return arrays


def _dtype(name: str) -> Any:
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2

    return tf.dtypes.as_dtype(types_pb2.DataType.Value(name))


def run_batch(path: str, signature: Signature, arrays: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Load ``path`` and run ``arrays`` through its ``serving_default``: output key -> (shape, dtype)."""
    import tensorflow as tf

    try:
        function = tf.saved_model.load(path).signatures[SIGNATURE]
        dtypes = {info.key: _dtype(info.dtype) for info in signature.inputs}
        outputs = function(**{key: tf.constant(value, dtype=dtypes[key]) for key, value in arrays.items()})
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ExportError(with_fix(f"{path!r}: running one batch through {SIGNATURE} failed "
                                   f"({type(exc).__name__}: {first})",
                                   "check the batch matches the signature; re-export the model")) from None
    return {key: (tuple(value.shape.as_list()), value.dtype.name) for key, value in sorted(outputs.items())}
