"""Helpers shared by tests (importable as ``support`` through pytest's ``pythonpath``)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Set by `make test-fast`: the property-based fuzzers run a fifth of their examples (`make test`: all).
FAST_FUZZ = os.environ.get("TFDIST_FAST_FUZZ") == "1"


def examples(count: int) -> int:
    """Hypothesis' ``max_examples`` for a fuzzer: ``count``, or a fifth of it under `make test-fast`."""
    return max(20, count // 5) if FAST_FUZZ else count
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python: quiet TensorFlow, tfdist importable, no cluster vars."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "OMPI_", "PMI_", "SLURM_")) and k != "TF_CONFIG"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(SCRIPTS)
    env.update(extra)
    return env


def horovodrun(script: str, *args: str, np: int = 2, timeout: float = 240,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``tests/scripts/<script>`` as a real ``horovodrun -np N -H localhost:N --gloo`` job."""
    launcher = shutil.which("horovodrun", path=str(Path(sys.executable).parent)) or shutil.which("horovodrun")
    if launcher is None:
        raise RuntimeError("horovodrun is not installed; run `make setup`")
    command = [launcher, "-np", str(np), "-H", f"localhost:{np}", "--gloo",
               sys.executable, str(SCRIPTS / script), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env=subprocess_env(**(env or {})), cwd=REPO)
