"""The layers of pyproject.toml's import contracts, as a training task meets them.

``make lint`` runs import-linter on the contracts (scripts/lint_imports.py). These tests check what
the contracts alone cannot show: that the tool sees ``tfdist.callbacks`` (installed from
``callbacks/``), and that a task importing the strategies and callbacks loads none of the advisor,
the probe, the launcher or the deployment renderers at run time.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import REPO, subprocess_env

sys.path.insert(0, str(REPO / "scripts"))
import lint_imports  # noqa: E402

#: What a training task must not load: the tools that run around it, not in it.
NOT_IN_A_TASK = ("tfdist.advise", "tfdist.probe", "tfdist.launch", "tfdist.auto", "tfdist.report",
                 "tfdist.cli", "tfdist.cluster.k8s", "tfdist.cluster.sbatch")


def _lint(root) -> subprocess.CompletedProcess:
    return lint_imports.lint(root, capture_output=True, text=True, timeout=120)


def test_the_contracts_are_kept_and_see_the_callbacks_package(tmp_path):
    lint_imports.assemble(tmp_path)
    kept = _lint(tmp_path)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    # callbacks/ as installed: an import of the strategies from it (inside a function) breaks the layers
    with (tmp_path / "tfdist" / "callbacks" / "progress.py").open("a") as file:
        file.write("\n\ndef _breaks_the_layers():\n    from tfdist.strategies import registry  # noqa\n")
    broken = _lint(tmp_path)
    assert broken.returncode != 0
    assert "tfdist.callbacks is not allowed to import tfdist.strategies" in broken.stdout


@pytest.mark.slow
def test_a_training_task_loads_no_launcher_advisor_or_renderer():
    code = ("import json, sys\nimport tfdist.strategies\nimport tfdist.callbacks\nimport tfdist.horovod\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('tfdist'))))")
    result = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True,
                            text=True, timeout=120, check=True)
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert "tfdist.strategies" in loaded and "tfdist.callbacks.progress" in loaded
    assert [m for m in loaded if m.startswith(NOT_IN_A_TASK)] == []
