"""One error family: every error tfdist raises on purpose is a TfdistError, worded `...; fix: ...`."""
from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pathlib
import pkgutil
import subprocess
import sys

import tfdist
from tfdist.errors import TfdistError, with_fix

ROOT = pathlib.Path(tfdist.__file__).resolve().parents[1]
_BUILTIN_ERRORS = {name for name, value in vars(builtins).items()
                   if isinstance(value, type) and issubclass(value, Exception)}
# Raised on purpose and not ours to wrap: a bug marker in unreachable code, and Python's own protocol.
_ALLOWED = {"AssertionError", "NotImplementedError", "StopIteration", "AttributeError", "SystemExit"}


def _sources() -> list[pathlib.Path]:
    return [*ROOT.joinpath("tfdist").rglob("*.py"), *ROOT.joinpath("callbacks").rglob("*.py")]


def test_no_builtin_exception_is_raised_directly():
    offenders = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                func = node.exc.func
                name = func.id if isinstance(func, ast.Name) else None
                if name in _BUILTIN_ERRORS and name not in _ALLOWED:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} raise {name}(...)")
    assert offenders == []


def test_every_exception_class_of_tfdist_is_a_tfdist_error():
    import tfdist.callbacks

    classes = []
    for package in (tfdist, tfdist.callbacks):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.startswith("tfdist.cli") or info.name == "tfdist.__main__":
                continue  # click's own UsageError/BadParameter are the CLI's errors
            module = importlib.import_module(info.name)
            classes += [obj for obj in vars(module).values()
                        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name]
    assert classes, "found no exception classes at all"
    public = [cls for cls in classes if not cls.__name__.startswith("_")]  # private ones never escape
    assert [cls.__qualname__ for cls in public if not issubclass(cls, TfdistError)] == []


def test_the_house_wording():
    assert with_fix("`x` is 0", "pass x=1") == "`x` is 0; fix: pass x=1"


def test_tfdist_error_is_importable_without_tensorflow():
    code = "import sys, tfdist; assert tfdist.TfdistError; assert 'tensorflow' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60).returncode == 0
