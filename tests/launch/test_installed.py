"""Whether Horovod can launch (tfdist/launch/installed.py): its TensorFlow extension found on disk,
without importing Horovod or TensorFlow, and the verdict over the launcher and the worker hosts."""
from __future__ import annotations

import importlib.machinery
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tfdist.launch.installed import HOROVOD_FIX, HorovodInstall, horovod_with_tensorflow


def _package(tmp_path, *files: str):
    """A ``horovod`` package folder holding ``files`` (paths below it)."""
    root = tmp_path / "horovod"
    for name in ("__init__.py", "tensorflow/__init__.py", *files):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    return lambda name: SimpleNamespace(submodule_search_locations=[str(root)]) if name == "horovod" else None


def test_the_extension_file_decides_not_the_package(tmp_path):
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    assert horovod_with_tensorflow(find_spec=_package(tmp_path / "built", f"tensorflow/mpi_lib{suffix}")) is True
    assert horovod_with_tensorflow(find_spec=_package(tmp_path / "torch_only", f"torch/mpi_lib_v2{suffix}")) is False
    assert horovod_with_tensorflow(find_spec=lambda name: None) is False  # no horovod at all

    def broken(name):
        raise ImportError("a broken install")

    assert horovod_with_tensorflow(find_spec=broken) is False


def test_the_launchers_pythonpath_comes_first_as_it_does_for_the_tasks(tmp_path):
    """The tasks get the launcher's PYTHONPATH: a ``horovod`` there without the TensorFlow extension is
    what they would import, whatever this interpreter has."""
    (tmp_path / "horovod" / "tensorflow").mkdir(parents=True)
    (tmp_path / "horovod" / "__init__.py").write_text("")
    assert horovod_with_tensorflow() is True  # this venv's
    assert horovod_with_tensorflow([str(tmp_path)]) is False


def test_this_venvs_horovod_is_found_without_importing_it():
    """The venv's Horovod (built by scripts/setup.sh) is found, and neither Horovod nor TensorFlow is
    imported to find it (a probe agent starts in a fraction of a second)."""
    code = ("import sys; from tfdist.launch.installed import horovod_with_tensorflow as found; "
            "print(found(), 'horovod' in sys.modules, 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["True", "False", "False"]


@pytest.mark.parametrize("install, why", [
    (HorovodInstall(True), None),
    (HorovodInstall.of(True, [("h1", True), ("h2", None)]), None),  # an agent that did not say: found
    (HorovodInstall.of(True, [("h1", False), ("h2", True), ("h3", False)]),
     f"Horovod with its TensorFlow ops is not installed on h1, h3; fix: {HOROVOD_FIX}"),
    (HorovodInstall.of(False, [("h1", True)]),
     f"horovodrun is neither beside this Python nor on PATH; fix: {HOROVOD_FIX}"),
])
def test_the_verdict_names_the_hosts_and_the_fix(install, why):
    assert install.refusal() == why
