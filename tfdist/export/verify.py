"""``verify=True``: reload an export in a fresh interpreter that imports neither tfdist nor Horovod,
run its ``serving_default`` (or the reloaded ``.keras`` model) on a sample, and compare with the
model's own outputs on the same sample.

Tolerance (max abs diff <= ``atol + rtol * max|expected|``), by the model's compute dtype:
float32/float64 1e-5 absolute; float16 (``mixed_float16``) 1e-3 + 1e-3 relative; bfloat16
(``mixed_bfloat16``) 1e-2 + 1e-2 relative.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfdist.errors import with_fix
from tfdist.export.errors import ExportError
from tfdist.export.signature import SIGNATURE

#: (atol, rtol) by compute dtype.
TOLERANCES: dict[str, tuple[float, float]] = {"float32": (1e-5, 0.0), "float64": (1e-5, 0.0),
                                              "float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2)}
#: Generous bound against a hung reload (TensorFlow's import alone takes seconds on a loaded machine).
TIMEOUT = 600.0
#: Modules the fresh interpreter must not have imported.
FORBIDDEN = ("tfdist", "horovod")

# Run in the fresh interpreter (python -I: no PYTHONPATH, no script directory on sys.path).
_CHILD = r"""
import json, sys
import numpy as np
import tensorflow as tf
path, fmt, package, names_json, inputs_npz, outputs_npz, report, signature, forbidden_json = sys.argv[1:10]
names, forbidden = json.loads(names_json), json.loads(forbidden_json)
with np.load(inputs_npz) as data:
    inputs = [data[f"i{index}"] for index in range(len(names))]
if fmt == "saved_model":
    function = tf.saved_model.load(path).signatures[signature]
    outputs = {k: v.numpy() for k, v in function(**{n: tf.constant(x) for n, x in zip(names, inputs)}).items()}
else:
    import importlib
    keras = importlib.import_module(package)
    model = keras.models.load_model(path, compile=False)
    result = model(inputs[0] if len(inputs) == 1 else inputs, training=False)
    if isinstance(result, dict):
        outputs = {str(k): np.asarray(v) for k, v in result.items()}
    else:
        outputs = {f"output_{i}": np.asarray(v) for i, v in enumerate(tf.nest.flatten(result))}
wide = lambda v: tf.cast(v, tf.float64).numpy() if tf.as_dtype(v.dtype).is_floating else np.asarray(v)
np.savez(outputs_npz, **{k: wide(tf.constant(v)) for k, v in outputs.items()})  # bfloat16 has no .npy form
with open(report, "w") as f:
    json.dump({"modules": sorted(m for m in sys.modules if m.split(".")[0] in forbidden)}, f)
"""


@dataclass(frozen=True)
class Verification:
    """What the fresh interpreter gave: the largest difference per output and the limit it met."""

    max_abs_diff: float
    limit: float
    outputs: dict[str, tuple[int, ...]]


def sample_inputs(specs: Any, batch: int = 2, seed: int = 0) -> list[np.ndarray]:
    """A deterministic batch for ``specs`` (unknown dimensions: ``batch`` first, then 1): floats
    uniform in [0, 1), integers and booleans zero (any id is a valid index), strings empty."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:
        shape = [batch if index == 0 and dim is None else (1 if dim is None else dim)
                 for index, dim in enumerate(spec.shape.as_list())]
        dtype = spec.dtype
        if dtype.is_floating:
            arrays.append(rng.random(shape).astype(dtype.as_numpy_dtype))
        elif dtype.name == "string":
            arrays.append(np.full(shape, b"", dtype=object))
        else:
            arrays.append(np.zeros(shape, dtype=dtype.as_numpy_dtype))
    return arrays


def tolerance(compute_dtype: str) -> tuple[float, float]:
    return TOLERANCES.get(str(compute_dtype), TOLERANCES["float32"])


def verify(path: str, format: str, package: str, names: list[str], inputs: list[np.ndarray],
           expected: dict[str, np.ndarray], compute_dtype: str = "float32") -> Verification:
    """Reload ``path`` in a fresh interpreter and compare its outputs with ``expected``;
    ``ExportError`` naming the path and the difference otherwise."""
    with tempfile.TemporaryDirectory(prefix="tfdist-verify-") as scratch:
        given, got, report = (os.path.join(scratch, name) for name in ("in.npz", "out.npz", "report.json"))
        np.savez(given, **{f"i{index}": array for index, array in enumerate(inputs)})
        # on the CPU: the training process may hold the GPUs' memory; the numbers must match anyway
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
               "CUDA_VISIBLE_DEVICES": ""}
        command = [sys.executable, "-I", "-c", _CHILD, path, format, package, json.dumps(names), given, got, report,
                   SIGNATURE, json.dumps(FORBIDDEN)]
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=env)
        except subprocess.TimeoutExpired:
            raise ExportError(with_fix(f"verify: reloading {path!r} in a fresh process did not finish in "
                                       f"{TIMEOUT:.0f}s", "check the machine's load, or pass verify=False")) from None
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise ExportError(with_fix(f"verify: {path!r} does not reload in a fresh process "
                                       f"(exit {run.returncode}): {last}",
                                       "export with verify=False and run `tfdist export-check` on it to see more"))
        with open(report) as f:
            modules = json.load(f)["modules"]
        if modules:
            raise ExportError(with_fix(f"verify: reloading {path!r} imported {', '.join(modules)}",
                                       "report this: the export must not need tfdist or Horovod"))
        with np.load(got) as data:
            outputs = {key: data[key] for key in data.files}
    return compare(path, expected, outputs, compute_dtype)


def compare(path: str, expected: dict[str, np.ndarray], outputs: dict[str, np.ndarray],
            compute_dtype: str = "float32") -> Verification:
    """The largest difference between ``expected`` and the reloaded ``outputs``, checked against the
    tolerance of ``compute_dtype``."""
    if sorted(expected) != sorted(outputs):
        raise ExportError(with_fix(f"verify: {path!r} serves outputs {sorted(outputs)}, the model gives "
                                   f"{sorted(expected)}", "report this with the model that was exported"))
    atol, rtol = tolerance(compute_dtype)
    worst, limit = 0.0, atol
    for key in sorted(expected):
        want = np.asarray(expected[key], dtype="float64")
        have = np.asarray(outputs[key], dtype="float64")
        if want.shape != have.shape:
            raise ExportError(with_fix(f"verify: {path!r} output {key!r} has shape {have.shape}, the model's "
                                       f"{want.shape}", "report this with the model that was exported"))
        diff = float(np.max(np.abs(want - have))) if want.size else 0.0
        bound = atol + rtol * (float(np.max(np.abs(want))) if want.size else 0.0)
        if not diff <= bound:  # NaN fails too
            raise ExportError(with_fix(
                f"verify: {path!r} reloaded gives output {key!r} differing from the model by max abs diff "
                f"{diff:.3g} > {bound:.3g} (tolerance for {compute_dtype})",
                "the export does not reproduce the model; keep the previous one and report this"))
        worst, limit = max(worst, diff), max(limit, bound)
    return Verification(worst, limit, {key: tuple(np.shape(v)) for key, v in outputs.items()})
