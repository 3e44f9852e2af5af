"""Helpers shared by tests (importable as ``support`` through pytest's ``pythonpath``)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python: quiet TensorFlow, tfdist importable, no cluster vars."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "OMPI_", "PMI_", "SLURM_")) and k != "TF_CONFIG"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{SCRIPTS}"
    env.update(extra)
    return env
