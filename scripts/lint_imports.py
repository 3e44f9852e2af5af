"""`make lint`'s import contracts: run import-linter (``lint-imports``) over tfdist as it is installed.

``setup.py`` installs ``callbacks/`` as ``tfdist.callbacks``, but import-linter's graph builder (grimp)
walks the ``tfdist/`` folder only, so it would not see ``tfdist.callbacks`` at all, and every contract
would be silent about it. So the package is first assembled as pip installs it, in a temporary folder
(``tfdist/`` with ``callbacks/`` copied in as ``tfdist/callbacks/``: the Python files only, a few
hundred KB), and ``lint-imports`` reads that copy with the contracts of ``pyproject.toml``.

    python scripts/lint_imports.py            # exit 0 when every contract is kept, else lint-imports' report
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Where each folder of the repository is installed, as setup.py's packages and package_dir say.
INSTALLED = {"tfdist": "tfdist", "callbacks": "tfdist/callbacks"}


def assemble(root: Path) -> None:
    """Copy the Python files of each folder of :data:`INSTALLED` to where it is installed, under ``root``."""
    for source, target in INSTALLED.items():
        for path in (REPO / source).rglob("*.py"):
            copy = root / target / path.relative_to(REPO / source)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)


def lint(root: Path, **run: object) -> subprocess.CompletedProcess:
    """``lint-imports`` with pyproject.toml's contracts on the package assembled under ``root``."""
    environment = {**os.environ, "PYTHONPATH": str(root)}  # found before the editable install's finder
    command = [str(Path(sys.executable).with_name("lint-imports")), str(REPO / "pyproject.toml"), "--no-cache"]
    return subprocess.run(command, cwd=root, env=environment, check=False, **run)


def main() -> int:
    """One line when every contract is kept; lint-imports' whole report (which import, where) when not."""
    with tempfile.TemporaryDirectory(prefix="tfdist-lint-imports-") as folder:
        assemble(Path(folder))
        result = lint(Path(folder), capture_output=True, text=True)
    if result.returncode == 0:
        kept = [line for line in result.stdout.splitlines() if line.startswith("Contracts:")]
        print(f"import contracts (pyproject.toml): {kept[-1].removeprefix('Contracts: ') if kept else 'kept'}")
    else:
        print(result.stdout + result.stderr, end="")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
