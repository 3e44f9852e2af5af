"""examples/custom_loop.py as a module, and the digits as arrays, for the job scripts that run its loop
next to ``fit`` (ps_loop.py, mwm_keras3.py; run as scripts, this folder is on their path)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_loop.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("custom_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The shipped digits as the example trains on them: 64 features in [0, 1], integer labels."""
    from tfdist.datasets import load_digits

    data = load_digits()
    return (data.images.reshape(len(data.images), 64) / 16.0).astype("float32"), data.target.astype("int32")
