"""What ``tfdist env`` reports: the facts a user pastes into a bug report.

``collect_report`` returns a JSON-ready dict; ``format_report`` renders it as text.
Each probe catches its own failure and reports it, so one broken package never hides the rest.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from typing import Any, Callable

from tfdist.cluster.tf_config import TF_CONFIG_ENV
from tfdist.environments import detect_environment
from tfdist.keras_compat import legacy_keras_origin
from tfdist.version import __version__

PACKAGES = ("tensorflow", "tf-keras", "keras", "horovod", "tensorboard", "click")
VARIABLES = ("TF_USE_LEGACY_KERAS", "CUDA_VISIBLE_DEVICES", TF_CONFIG_ENV, "HOROVOD_RANK", "HOROVOD_SIZE")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed distribution versions, ``None`` for a package that is not installed."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _probe(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except Exception as exc:  # a report must survive any broken install
        return {"error": f"{type(exc).__name__}: {exc}"}


def _tensorflow_facts() -> dict[str, Any]:
    import tensorflow as tf

    from tfdist.keras_compat import tf_keras_flavour

    keras_module = tf.keras.__name__ if hasattr(tf.keras, "__name__") else repr(tf.keras)
    return {
        "tf_keras_resolves_to": tf_keras_flavour(tf) or keras_module,
        "tf_keras_module": keras_module,
        "gpus": [device.name for device in tf.config.list_physical_devices("GPU")],
        "built_with_cuda": tf.test.is_built_with_cuda(),
    }


def _extension_built(module: str) -> bool:
    """Whether Horovod's extension for another framework exists, without importing that framework."""
    from pathlib import Path

    import horovod

    package, name = module.rsplit(".", 1)
    folder = Path(horovod.__file__).parent / package.split(".", 1)[1]
    return any(folder.glob(f"{name}*.so"))


def _horovod_build() -> dict[str, Any]:
    import horovod.tensorflow as hvd  # loads Horovod's TensorFlow extension, or raises

    return {
        "frameworks": {"tensorflow": True, "pytorch": _extension_built("horovod.torch.mpi_lib_v2"),
                       "mxnet": _extension_built("horovod.mxnet.mpi_lib")},
        "controllers": {"gloo": bool(hvd.gloo_built()), "mpi": bool(hvd.mpi_built())},
        "tensor_operations": {
            "nccl": bool(hvd.nccl_built()), "ddl": bool(hvd.ddl_built()), "ccl": bool(hvd.ccl_built()),
            "cuda": bool(hvd.cuda_built()), "rocm": bool(hvd.rocm_built()),
            "gloo": bool(hvd.gloo_built()), "mpi": bool(hvd.mpi_built()),
        },
    }


def collect_report(with_tensorflow: bool = True) -> dict[str, Any]:
    """Gather versions, Keras routing, Horovod's build, GPUs and the detected cluster environment;
    ``tf_use_legacy_keras_set_by`` says who set TF_USE_LEGACY_KERAS (``keras_compat.legacy_keras_origin``:
    "your environment", "import tfdist" when it was unset, or None when it is unset)."""
    versions = package_versions()
    report: dict[str, Any] = {
        "tfdist": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": versions,
        "environment": _probe(lambda: detect_environment().describe()),
        "variables": {name: os.environ.get(name) for name in VARIABLES},
        "tf_use_legacy_keras_set_by": legacy_keras_origin(),
    }
    if with_tensorflow and versions["tensorflow"]:
        report.update(_probe(_tensorflow_facts))
    if with_tensorflow and versions["horovod"]:
        report["horovod_build"] = _probe(_horovod_build)
    return report


def format_report(report: dict[str, Any]) -> str:
    """Render the report as indented ``key: value`` lines."""
    lines: list[str] = []

    def emit(key: str, value: Any, depth: int) -> None:
        pad = "  " * depth
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            for sub_key, sub_value in value.items():
                emit(str(sub_key), sub_value, depth + 1)
        elif isinstance(value, list):
            lines.append(f"{pad}{key}: {', '.join(map(str, value)) if value else '(none)'}")
        else:
            lines.append(f"{pad}{key}: {'-' if value is None else value}")

    for key, value in report.items():
        emit(key, value, 0)
    return "\n".join(lines)
