"""Finding the runs of a runs folder and their event files, without opening anything.

    runs = find_runs("runs")          # [RunFiles(name, path, files, problems)], sorted by name
    file, problem = open_event_file(runs[0].files[0].path)

A run is a folder directly under the runs folder that holds event files (``*tfevents*``) in itself
or below it (``train/``, ``validation/``, ``system/<task>/`` ...); the runs folder is itself the one
run when it holds event files in itself, ``train/`` or ``validation/``. The walk is bounded
(:mod:`tfdist.report.limits`): more than ``MAX_ENTRIES`` entries or ``MAX_RUNS`` runs is a
:class:`RunsDirError`. Folders that cannot be listed are the run's problems, not skipped silently.
Sub-folders that are symbolic links are not followed (a run folder directly under the runs folder is).
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from tfdist.errors import ArgumentValueError, with_fix
from tfdist.report.limits import MAX_ENTRIES, MAX_FILES_PER_RUN, MAX_RUNS

#: The part of a file name that marks a TensorBoard event file.
EVENT_FILE_MARK = "tfevents"
#: ``sub`` of the run's own folder.
MAIN = "."
_RUNS_FIX = "pass the --logdir your training wrote to (TensorBoardRun's logdir), e.g. runs"


class RunsDirError(ArgumentValueError):
    """The runs folder cannot be reported on: missing, empty of runs, or over a limit (a usage error)."""


@dataclass(frozen=True)
class FileProblem:
    """Why (part of) an event file or folder of a run was not read, and what to do."""

    path: str  # relative to the run folder, "/"-separated
    message: str
    fix: str
    partly_read: bool = False  # the file's records before the problem were read

    def __str__(self) -> str:
        return with_fix(f"{self.path}: {self.message}", self.fix)


@dataclass(frozen=True)
class EventFile:
    """An event file of a run: the sub-folder it is in (``MAIN`` for the run's own) and its path."""

    sub: str
    path: str
    relative: str


@dataclass
class RunFiles:
    """A run folder, its event files (at most MAX_FILES_PER_RUN) and the problems found walking it."""

    name: str
    path: str
    files: list[EventFile] = field(default_factory=list)
    problems: list[FileProblem] = field(default_factory=list)


def shown_path(path: str) -> str:
    """``path`` for a one-line message: control characters and undecodable bytes escaped."""
    return path if path.isprintable() else repr(path)[1:-1].replace("\\'", "'")


class _Budget:
    """Entries walked so far, shared by the whole walk of one runs folder."""

    def __init__(self, runs_dir: str):
        self.runs_dir, self.left = runs_dir, MAX_ENTRIES

    def spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise RunsDirError(with_fix(
                f"`runs_dir` {self.runs_dir!r} has more than {MAX_ENTRIES:,} files and folders under it "
                "(tfdist report's limit while looking for runs)",
                "pass the folder your training wrote to (the --logdir), not a parent of it"))


def _walk(folder: str, budget: _Budget, problems: list[FileProblem], root: str) -> Iterator[EventFile]:
    """The event files under ``folder``, depth-first in name order; unlistable folders become problems."""
    stack = [folder]
    while stack:
        current = stack.pop()
        relative = shown_path(os.path.relpath(current, root).replace(os.sep, "/"))
        try:
            with os.scandir(current) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError as exc:
            problems.append(FileProblem(f"{relative}/", f"folder cannot be listed: {exc.strerror or exc}",
                                        "make it readable (chmod a+rx) or run as its owner"))
            continue
        budget.spend(len(entries) + 1)
        folders = []
        for entry in entries:
            if _is_folder(entry):
                folders.append(entry.path)
            elif EVENT_FILE_MARK in entry.name:
                sub = relative
                name = shown_path(entry.name)
                yield EventFile(sub, entry.path, name if sub == MAIN else f"{sub}/{name}")
        stack.extend(reversed(folders))


def _run(name: str, path: str, budget: _Budget) -> RunFiles:
    run = RunFiles(name, path)
    count = 0
    for event_file in _walk(path, budget, run.problems, path):
        count += 1
        if count <= MAX_FILES_PER_RUN:
            run.files.append(event_file)
    if count > MAX_FILES_PER_RUN:
        run.problems.append(FileProblem(
            run.files[-1].relative, f"the run has {count:,} event files; only the first "
            f"{MAX_FILES_PER_RUN:,} (by folder and name, up to this one) were read (tfdist report's limit "
            "per run)",
            "move old or restarted runs' event files out of the run folder", partly_read=True))
    return run


def run_files(path: str, name: str | None = None) -> RunFiles:
    """The event files of the one run folder ``path`` (named ``name``, else after the folder)."""
    return _run(name or os.path.basename(os.path.normpath(path)), path, _Budget(path))


def _is_one_run(runs_dir: str) -> bool:
    """Whether ``runs_dir`` holds event files itself or directly in its ``train/`` or ``validation/``."""
    for folder in (runs_dir, os.path.join(runs_dir, "train"), os.path.join(runs_dir, "validation")):
        try:
            with os.scandir(folder) as scan:
                if any(EVENT_FILE_MARK in e.name and not _is_folder(e) for e in scan):
                    return True
        except OSError:
            continue
    return False


def _is_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def run_folders(runs_dir: str) -> list[str]:
    """The run folders of ``runs_dir``, sorted by name (see :func:`find_runs`)."""
    return [run.path for run in find_runs(runs_dir)]


def find_runs(runs_dir: str) -> list[RunFiles]:
    """The runs of ``runs_dir`` with their event files, sorted by name; nothing is opened.

    A folder directly under ``runs_dir`` is a run when it holds event files, or folders that cannot be
    listed (they may hold some: the run is then reported as not read). Raises :class:`RunsDirError`
    when ``runs_dir`` is not a folder, holds no runs, more than ``MAX_RUNS`` or more than ``MAX_ENTRIES``
    files and folders.
    """
    if not os.path.isdir(runs_dir):
        what = "is not a folder" if os.path.exists(runs_dir) else "does not exist"
        raise RunsDirError(with_fix(f"`runs_dir` {runs_dir!r} {what}", _RUNS_FIX))
    budget = _Budget(runs_dir)
    if _is_one_run(runs_dir):
        return [run_files(runs_dir)]
    try:
        entries = sorted(os.listdir(runs_dir))
    except OSError as exc:
        raise RunsDirError(with_fix(f"`runs_dir` {runs_dir!r} cannot be listed: {exc.strerror or exc}",
                                    "make it readable (chmod a+rx) or run as its owner")) from None
    budget.spend(len(entries))
    runs: list[RunFiles] = []
    for entry in entries:
        folder = os.path.join(runs_dir, entry)
        if not os.path.isdir(folder):
            continue
        run = _run(entry, folder, budget)
        if not run.files and not run.problems:
            continue
        if len(runs) == MAX_RUNS:
            raise RunsDirError(with_fix(
                f"`runs_dir` {runs_dir!r} holds more than {MAX_RUNS:,} runs (tfdist report's limit)",
                "pass a folder with fewer runs, e.g. one experiment's sub-folder, or move old runs aside"))
        runs.append(run)
    if not runs:
        raise RunsDirError(with_fix(
            f"`runs_dir` {runs_dir!r} holds no TensorBoard runs (no '*{EVENT_FILE_MARK}*' file in it or its "
            "sub-folders)", _RUNS_FIX))
    return runs


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_event_file(path: str, relative: str) -> tuple[BinaryIO | None, int, FileProblem | None]:
    """``(file, size, None)`` for a readable regular file, else ``(None, 0, problem)``.

    The kind is checked with ``os.stat`` before anything is opened (a FIFO would block, ``/dev/zero``
    never ends); a symbolic link to a regular file is read, a dangling one is a problem.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            return None, 0, FileProblem(relative, f"is a symbolic link to {target!r}, which does not exist",
                                        "remove the link or restore what it points to")
        return None, 0, FileProblem(relative, "disappeared while the report was made", "run the report again")
    except OSError as exc:
        return None, 0, FileProblem(relative, f"cannot be read: {exc.strerror or exc}",
                                    "make it readable (chmod a+r) or run as its owner")
    if not stat.S_ISREG(info.st_mode):
        return None, 0, FileProblem(relative, f"is {_kind(info.st_mode)}, not an event file; tfdist report "
                                    "never opens one", "remove it or move it out of the runs folder")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        return None, 0, FileProblem(relative, f"cannot be read: {exc.strerror or exc}",
                                    "make it readable (chmod a+r) or run as its owner")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # replaced between stat and open
        os.close(fd)
        return None, 0, FileProblem(relative, f"is {_kind(info.st_mode)}, not an event file",
                                    "remove it or move it out of the runs folder")
    return os.fdopen(fd, "rb"), info.st_size, None
