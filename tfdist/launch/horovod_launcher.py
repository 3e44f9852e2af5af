"""``python -m tfdist.launch.horovod_launcher ARGS``: ``horovodrun ARGS`` without its TensorFlow-importing
build check, and with a shutdown handler that a second signal cannot deadlock (``guard_shutdown_signals``).

Before it starts a job, horovodrun's ``run_controller`` (and ``_run_elastic``) asks
``horovod.common.util.gloo_built()`` (``mpi_built()`` without ``--gloo``) whether Horovod was built with
Gloo, even when ``--gloo`` is given. Horovod answers in a forked child that imports ``horovod.tensorflow``,
hence all of TensorFlow, to read one flag compiled into the extension library: about 4 s and 4 CPU-s of
every launch. This entry takes horovodrun's exact argv and runs Horovod's own
``horovod.runner.launch.run_commandline``, with those checks answered from a cache of Horovod's own
answer (``tfdist.upstream.answer_horovod_build_checks`` puts them in place, or leaves Horovod untouched
if its module changed). The cache is keyed by Horovod's version and the extension libraries the check
would load (path, size, ``mtime_ns``): a reinstall or a rebuild is a new key, and the next launch asks
Horovod again. A cached ``False`` gives Horovod's own refusal ("Gloo support has not been built ...").

Where: ``$XDG_CACHE_HOME/tfdist/`` (an absolute ``XDG_CACHE_HOME``), else ``~/.cache/tfdist/``, the
XDG base-directory place for per-user files that may be deleted at any time and are recomputed (pip
keeps its cache there too). Per user, as each user's Horovod may differ; outside the venv and the
project, so a read-only install still gets one and nothing built lands in the repository. One file per
Horovod install (``horovod-build-<hash of its directory>.json``), replaced atomically (temporary file,
then ``os.replace``), so two launches at once never read half a file.

Anything wrong with the cache (unreadable, corrupt, another key, a directory that cannot be written)
means Horovod's own check runs: never a wrong answer, at worst the old cost. With ``--verbose`` in an
elastic job (the only case where horovodrun makes the check verbose) Horovod's check runs too, so its
messages are printed as before.

    python -m tfdist.launch.horovod_launcher -np 2 -H localhost:2 --gloo python train.py
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tfdist.atomic_write import write_atomically

XDG_CACHE_HOME = "XDG_CACHE_HOME"
CACHE_SUBDIR = "tfdist"
#: Each extension Horovod's check tries, in its order (``horovod.common.util.EXTENSIONS``), and the
#: library its package loads (``check_extension(..., __file__, NAME)`` in its ``__init__``).
EXTENSION_LIBRARIES = (("tensorflow", "mpi_lib"), ("torch", "mpi_lib_v2"), ("mxnet", "mpi_lib"))

log = logging.getLogger(__name__)


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/tfdist`` when that is an absolute path (the XDG spec says to ignore a
    relative one), else ``~/.cache/tfdist``."""
    environ = os.environ if environ is None else environ
    base = environ.get(XDG_CACHE_HOME, "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / CACHE_SUBDIR


def build_key(horovod_dir: Path, version: str) -> dict | None:
    """What Horovod's answer depends on: its ``version`` and, for each extension library under
    ``horovod_dir`` that exists (in the order the check tries them), its path, size and ``mtime_ns``.
    ``None`` when there is no library (Horovod's check then finds none either)."""
    from horovod.common.util import get_ext_suffix

    libraries = []
    for package, library in EXTENSION_LIBRARIES:
        path = Path(horovod_dir) / package / (library + get_ext_suffix())
        try:
            stat = path.stat()
        except OSError:
            continue
        libraries.append([str(path), stat.st_size, stat.st_mtime_ns])
    return {"horovod": version, "libraries": libraries} if libraries else None


class BuildCheckCache:
    """Horovod's answers to its build checks (``gloo_built``, ``mpi_built``), stored under ``key``
    (``build_key``) in ``directory``; ``answer`` is what ``tfdist.upstream.answer_horovod_build_checks``
    calls in place of a check."""

    def __init__(self, directory: Path, key: dict | None, horovod_dir: Path) -> None:
        self.directory = Path(directory)
        self.key = key
        where = hashlib.sha256(str(horovod_dir).encode()).hexdigest()[:16]
        self.path = self.directory / f"horovod-build-{where}.json"  # one file per Horovod install

    def answer(self, name: str, original: Callable[..., Any], verbose: bool = False) -> Any:
        """The cached answer of check ``name``; on a miss (or ``verbose``, or no key) Horovod's
        ``original(verbose=verbose)``, stored when it is a bool."""
        if self.key is not None and not verbose:
            answers = self.read()
            if name in answers:
                return answers[name]
        value = original(verbose=verbose)
        if self.key is not None and isinstance(value, bool):
            self.store(name, value)
        return value

    def read(self) -> dict[str, bool]:
        """The stored answers under this key; ``{}`` for a missing, unreadable or corrupt file or
        another key."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            if not isinstance(exc, FileNotFoundError):
                log.debug("ignoring the Horovod build-check cache %s: %s", self.path, exc)
            return {}
        answers = data.get("answers") if isinstance(data, dict) and data.get("key") == self.key else None
        if not isinstance(answers, dict):
            return {}
        return {name: value for name, value in answers.items() if isinstance(value, bool)}

    def store(self, name: str, value: bool) -> None:
        """Add ``name: value`` to the file (temporary file, then ``os.replace``); a directory that cannot
        be written is logged and skipped (the next launch asks Horovod again)."""
        answers = {**self.read(), name: value}
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, json.dumps({"key": self.key, "answers": answers}))
        except OSError as exc:
            log.debug("cannot store the Horovod build-check cache in %s: %s", self.directory, exc)


def install_cache(environ: Mapping[str, str] | None = None) -> Callable[[], None] | None:
    """Answer horovodrun's build checks from the cache in ``cache_dir(environ)``; the undo function,
    or ``None`` when Horovod's module changed and its own checks run."""
    import horovod

    from tfdist import upstream

    horovod_dir = Path(horovod.__file__).parent
    cache = BuildCheckCache(cache_dir(environ), build_key(horovod_dir, horovod.__version__), horovod_dir)
    undo = upstream.answer_horovod_build_checks(cache.answer)
    if undo is None:
        log.debug("horovod.runner.launch has no gloo_built/mpi_built of its own: Horovod's checks run")
    return undo


def guard_shutdown_signals() -> Callable[[], None] | None:
    """Horovod's SIGINT/SIGTERM handler made safe against a second signal arriving inside it
    (``tfdist.upstream.guard_horovod_shutdown_signals`` with ``processes.handler_once``): the launcher's
    parent-death signal can come more than once, and Horovod's bare handler then deadlocked, leaving
    horovodrun and its ranks running after the launcher died. The undo function, or ``None`` (Horovod
    untouched)."""
    from tfdist import upstream
    from tfdist.launch.processes import handler_once

    undo = upstream.guard_horovod_shutdown_signals(handler_once)
    if undo is None:
        log.debug("horovod.runner.gloo_run has no register_shutdown_event of its own: Horovod's handler runs")
    return undo


def main(argv: Sequence[str] | None = None) -> Any:
    """Run ``horovodrun ARGV`` (default: this process's arguments) through Horovod's own
    ``run_commandline``, the build checks answered by ``install_cache``, its shutdown signals guarded by
    ``guard_shutdown_signals``."""
    from horovod.runner.launch import run_commandline

    sys.argv = ["horovodrun", *(sys.argv[1:] if argv is None else argv)]  # horovodrun's usage and errors
    install_cache()
    guard_shutdown_signals()
    return run_commandline()


if __name__ in ("__main__", "__mp_main__"):
    # The ranks get the Keras the user chose, as under the horovodrun script: take back the
    # TF_USE_LEGACY_KERAS that importing tfdist set here. Horovod hands its ranks this process's os.environ,
    # and starts each through a middleman process of the multiprocessing "spawn" context, which imports this
    # module again as __mp_main__ (so tfdist, which sets the variable again) and runs the rank's shell in its
    # own os.environ.
    from tfdist.keras_compat import restore_user_keras_choice

    restore_user_keras_choice()
if __name__ == "__main__":
    sys.exit(main())
