"""scripts/setup.sh is idempotent, and the Horovod shims forward to TensorFlow's new XLA paths."""
from __future__ import annotations

import importlib.util
import subprocess

import pytest

from support import REPO

_spec = importlib.util.spec_from_file_location("horovod_shims", REPO / "scripts" / "horovod_shims.py")
horovod_shims = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(horovod_shims)


def test_shims_include_the_new_location(tmp_path):
    include = tmp_path / "include"
    for new in horovod_shims.FORWARDS.values():
        (include / new).parent.mkdir(parents=True, exist_ok=True)
        (include / new).write_text("// real header\n")
    written = horovod_shims.write_shims(tmp_path / "shims", include)
    assert len(written) == 3
    shim = (tmp_path / "shims" / "tensorflow/compiler/xla/client/xla_builder.h").read_text()
    assert '#include "xla/hlo/builder/xla_builder.h"' in shim
    assert shim.startswith("#ifndef TFDIST_SHIM_")


def test_shims_refuse_a_tensorflow_without_the_new_headers(tmp_path):
    with pytest.raises(SystemExit, match="xla/hlo/builder/xla_builder.h is missing"):
        horovod_shims.write_shims(tmp_path / "shims", tmp_path / "empty")


def test_shims_point_at_headers_the_installed_tensorflow_has():
    include = horovod_shims.tensorflow_include_dir()
    for new in horovod_shims.FORWARDS.values():
        assert (include / new).is_file(), new


def test_a_second_setup_run_does_nothing():
    result = subprocess.run(["bash", "scripts/setup.sh"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "is up to date" in result.stderr
    assert "installing" not in result.stderr and "building" not in result.stderr


def test_setup_py_lists_every_package_of_tfdist():
    """A package missing from ``packages=`` works in the editable install and is absent from a wheel."""
    import ast

    listed = next(ast.literal_eval(keyword.value) for node in ast.walk(ast.parse((REPO / "setup.py").read_text()))
                  if isinstance(node, ast.Call) for keyword in node.keywords if keyword.arg == "packages")
    found = {".".join(init.parent.relative_to(REPO).parts) for init in (REPO / "tfdist").rglob("__init__.py")
             if "__pycache__" not in init.parts}
    assert found <= set(listed), f"add {sorted(found - set(listed))} to packages= in setup.py"
