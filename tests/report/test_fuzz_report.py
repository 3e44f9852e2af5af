"""Fuzzing ``tfdist report`` with runs folders built valid, partly invalid or wholly invalid.

The oracle never asks tfdist: each runs folder is built from entries whose effect the construction
knows (a copy of a real event file is readable; garbage, an empty file, a FIFO, a dangling link,
``/dev/zero``, a file or folder nobody may read, a real file cut inside its first record are not; a
real file cut or bit-flipped at record k keeps what the records before k hold). The expected exit code
follows: 2 for more runs than the limit, 0 with a page when some run has data, 1 when none has; and
every run built with something wrong is named on stderr. Real event files are written once per
module with TensorBoard's record writer. Drawing is stubbed except in a few cases (the figures have
their own tests), so the fuzzer stays fast; an unreadable entry needs an unprivileged reader, so as
root those cases run the command with the effective uid of ``nobody`` (``os.seteuid``, restored after).
"""
from __future__ import annotations

import contextlib
import faulthandler
import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

from support import examples, invoke

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

NOBODY = 65534
#: A hang guard, far above what a case takes (tens of milliseconds); ends the whole run with tracebacks.
HANG_SECONDS = 120
FUZZ = settings(database=None, deadline=None, max_examples=examples(500),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
#: Entry kinds: readable ones give data; the others give a problem line for their run.
READABLE = ("copy", "link", "cut-last-record", "flip-late", "cut-late")
UNREADABLE = ("garbage", "empty", "text", "fifo", "dangling", "dev-zero", "cut-first-record", "flip-first",
              "version-only", "locked-file", "locked-folder")
NEEDS_NOBODY = ("locked-file", "locked-folder")
#: Entries that read, but whose run gets a warning all the same (a cut inside a later record looks like a
#: writer still writing it: no warning).
WARNED = ("flip-late",)
FILE_NAMES = ("events.out.tfevents.1700000000.host.1.v2", "events.out.tfevents.x y", "a\nb.tfevents",
              "tfevents.\udcff", "z.tfevents.~")
RUN_NAMES = ("run-a", "run b", "ümlaut", "odd\nname", "\udcff\udcfe", "-dash", "x" * 200)


def _can_drop_privileges() -> bool:
    if os.geteuid() != 0:
        return True
    try:
        os.setegid(NOBODY)
        os.seteuid(NOBODY)
    except OSError:
        return False
    os.seteuid(0)
    os.setegid(0)
    return True


CAN_LOCK = _can_drop_privileges()


@contextlib.contextmanager
def _reading_as_nobody(active: bool):
    """Root reads every file: run the command with nobody's effective uid so locked entries are locked."""
    if not active or os.geteuid() != 0:
        yield
        return
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@dataclass(frozen=True)
class Source:
    """A real event file: its bytes, record spans, and the index of its first record holding data."""

    data: bytes
    spans: tuple[tuple[int, int], ...]
    first_data: int


@pytest.fixture(scope="module")
def sources(events, tmp_path_factory) -> dict[str, Source]:
    root = tmp_path_factory.mktemp("sources")
    written = {
        "train": events.write(root / "train", {"epoch_loss": [1.0, 0.6, 0.4, 0.3],
                                                "epoch_examples_per_second": [10.0, 20.0, 21.0, 22.0]}),
        "main": events.write(root / "main", {"mean_examples_per_second": [5.0]}, hparams={"workers": 2}),
        "tf1": events.write(root / "tf1", {"epoch_loss": [2.0, 1.0]}, tf1=True),
        "graph": events.write(root / "graph", {"epoch_loss": [3.0, 2.0]}, blob=6000),
    }
    first_data = {"train": 1, "main": 1, "tf1": 1, "graph": 2}  # after the version (and the graph)
    return {k: Source(p.read_bytes(), tuple(events.offsets(p)), first_data[k]) for k, p in written.items()}


@dataclass(frozen=True)
class Entry:
    kind: str
    sub: str  # "" for the run's own folder
    name: str
    source: str
    at: int  # which record (or byte) a cut or flip hits, drawn freely and folded into range


@dataclass(frozen=True)
class RunPlan:
    name: str
    entries: tuple[Entry, ...]
    extra_garbage: int = 0  # this many more garbage files (huge counts)

    @property
    def readable(self) -> bool:
        return any(e.kind in READABLE for e in self.entries)

    @property
    def warned(self) -> bool:
        """A file without data is not a problem beside files with data (a writer that wrote nothing)."""
        return not self.readable or self.extra_garbage > 0 or any(
            (e.kind in UNREADABLE and e.kind != "version-only") or e.kind in WARNED for e in self.entries)


@dataclass(frozen=True)
class Plan:
    runs: tuple[RunPlan, ...]
    filler_runs: int = 0  # more garbage-only runs (over the run limit)
    draw: bool = False
    nobody: bool = False
    out_kind: str = "html"

    @property
    def run_count(self) -> int:
        return len(self.runs) + self.filler_runs


@st.composite
def entries(draw, allow_locked: bool) -> Entry:
    kinds = READABLE + tuple(k for k in UNREADABLE if allow_locked or k not in NEEDS_NOBODY)
    return Entry(kind=draw(st.sampled_from(kinds)), sub=draw(st.sampled_from(["", "train", "validation",
                                                                              "system/chief", "deep/a/b/c"])),
                 name=draw(st.sampled_from(FILE_NAMES)), source=draw(st.sampled_from(["train", "main", "tf1",
                                                                                     "graph"])),
                 at=draw(st.integers(0, 10 ** 6)))


@st.composite
def plans(draw) -> Plan:
    nobody = CAN_LOCK and draw(st.integers(0, 8)) in (3, 4)
    names = draw(st.lists(st.sampled_from(RUN_NAMES) | st.from_regex(r"[a-z0-9_.-]{1,12}", fullmatch=True)
                          # a run named train/ or validation/ makes RUNS_DIR itself the one run
                          .filter(lambda n: n not in (".", "..", "train", "validation")),
                          min_size=1, max_size=8, unique=True))
    # a few heavy cases (a few % each), away from the ends of the range, which hypothesis favours
    huge = {**dict.fromkeys(range(40, 44), "files"), **dict.fromkeys(range(50, 54), "runs"),
            **dict.fromkeys(range(60, 63), "some-files"), **dict.fromkeys(range(70, 73), "some-runs")}.get(
        draw(st.integers(0, 99)))
    runs = []
    for i, name in enumerate(names):
        items = draw(st.lists(entries(nobody), min_size=1, max_size=4,
                              unique_by=lambda e: (e.sub, e.name)))
        extra = {"files": 1_001, "some-files": 3}.get(huge, 0) if i == 0 else 0
        runs.append(RunPlan(name, tuple(items), extra))
    filler = {"runs": 1_001, "some-runs": 25}.get(huge, 0)
    drawn = not nobody and draw(st.integers(0, 99)) in range(45, 49)  # drawn for real: a few %
    return Plan(tuple(runs), filler, draw=drawn, nobody=nobody,
                out_kind=draw(st.sampled_from(["html", "png"])))


# --- building the folder -----------------------------------------------------------------------------------

def _record(source: Source, at: int, lowest: int = 0) -> int:
    return lowest + at % (len(source.spans) - lowest)


def _write(folder: Path, entry: Entry, sources: dict[str, Source], outside: Path, locked: list[Path]) -> None:
    target_dir = folder / entry.sub if entry.sub else folder
    target_dir.mkdir(parents=True, exist_ok=True)
    path = target_dir / entry.name
    src = sources[entry.source]
    spans, data = src.spans, src.data
    kind = entry.kind
    if kind == "copy":
        path.write_bytes(data)
    elif kind == "link":
        real = outside / f"real-{len(os.listdir(outside))}"
        real.write_bytes(data)
        os.symlink(real, path)
    elif kind == "cut-last-record":  # the writer is in the middle of its last record: no problem
        start, end = spans[-1]
        path.write_bytes(data[:start + 1 + entry.at % (end - start - 1)])
    elif kind == "cut-late":  # cut inside a record after the first data record: the records before are read
        k = _record(src, entry.at, src.first_data + 1)
        start, end = spans[k]
        path.write_bytes(data[:start + 1 + entry.at % (end - start - 1)])
    elif kind == "flip-late":  # a bit of record k > first data record flipped: k and after are lost
        k = _record(src, entry.at, src.first_data + 1)
        start, end = spans[k]
        byte = start + entry.at % (end - start)
        path.write_bytes(data[:byte] + bytes([data[byte] ^ (1 << entry.at % 8)]) + data[byte + 1:])
    elif kind == "flip-first":  # a bit of any record up to the first data record (the version, a graph of
        k = entry.at % (src.first_data + 1)  # 6 KB that holds no scalar, the first scalar): nothing is read
        start, end = spans[k]
        byte = start + entry.at % (end - start)
        path.write_bytes(data[:byte] + bytes([data[byte] ^ (1 << entry.at % 8)]) + data[byte + 1:])
    elif kind == "cut-first-record":
        path.write_bytes(data[:entry.at % spans[0][1]])
    elif kind == "version-only":  # a writer that opened its file and wrote nothing
        path.write_bytes(data[:spans[0][1]])
    elif kind == "garbage":
        path.write_bytes(entry.at.to_bytes(4, "little") * (1 + entry.at % 500))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("step,loss\n" * (1 + entry.at % 50))
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dangling":
        os.symlink(outside / "missing" / str(entry.at), path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "locked-file":
        path.write_bytes(data)
        path.chmod(0)
        locked.append(path)
    elif kind == "locked-folder":  # a folder of its own, so the lock hides only this entry
        hidden = target_dir / f"locked-{entry.at}"
        hidden.mkdir(exist_ok=True)
        (hidden / entry.name).write_bytes(data)
        hidden.chmod(0)
        locked.append(hidden)
    else:
        raise AssertionError(kind)


def _build(plan: Plan, root: Path, sources: dict[str, Source]) -> list[Path]:
    outside = root / "outside"
    outside.mkdir()
    runs = root / "runs"
    runs.mkdir()
    locked: list[Path] = []
    for run in plan.runs:
        folder = runs / run.name
        folder.mkdir()
        for entry in run.entries:
            _write(folder, entry, sources, outside, locked)
        for i in range(run.extra_garbage):
            (folder / f"g{i:05d}.tfevents").write_bytes(b"garbage")
    for i in range(plan.filler_runs):
        (runs / f"filler{i:05d}").mkdir()
        (runs / f"filler{i:05d}" / "events.out.tfevents.0").write_bytes(b"garbage")
    return locked


def _shown(name: str) -> str:
    return name if name.isprintable() else repr(name)[1:-1].replace("\\'", "'")


# --- the oracle ----------------------------------------------------------------------------------------------

def _expected(plan: Plan) -> int:
    if plan.run_count > 1_000:
        return 2
    return 0 if any(run.readable and not _hidden_by_the_file_limit(run) for run in plan.runs) else 1


def _hidden_by_the_file_limit(run: RunPlan) -> bool:
    """1,001 garbage files named g*.tfevents: the walk reads the first 1,000 in walk order (the run's own
    folder's files by name, then its sub-folders); a readable entry listed after them is not read."""
    if run.extra_garbage <= 1_000 - len(run.entries):
        return False
    own = sorted([e.name for e in run.entries if not e.sub and e.kind != "locked-folder"]
                 + [f"g{i:05d}.tfevents" for i in range(run.extra_garbage)])
    first = set(own[:1_000])
    return not any(e.kind in READABLE and not e.sub and e.name in first for e in run.entries)


def _check(result, plan: Plan, out: Path) -> None:
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    expected = _expected(plan)
    lines = result.stderr.splitlines()
    assert result.exit_code == expected, (expected, plan, result.output[-3000:])
    if expected == 2:
        assert lines[-1].startswith("Error: Invalid value for 'RUNS_DIR': ") and "more than 1,000 runs" in lines[-1]
        assert not out.exists()
        return
    warned = sorted(_shown(r.name) for r in plan.runs if r.warned) + [f"filler{i:05d}" for i in range(plan.filler_runs)]
    prefix = "Warning: " if expected == 0 else ""
    named = [line for line in lines if line.startswith(f"{prefix}run '")]
    assert all(" not read: " in line or " read in part: " in line for line in named), named
    assert all("; fix: " in line for line in named), named
    if len(warned) <= 20:
        assert sorted(line[len(prefix) + 5:line.index("' ", len(prefix) + 5)] for line in named) == sorted(warned)
    else:
        assert len(named) == 20 and lines[20].startswith(f"{prefix}... and {len(warned) - 20:,} more runs")
    if expected == 0:
        assert result.stdout == f"{out}\n" and out.is_file() and out.stat().st_size > 0
        if plan.out_kind == "html" and not plan.draw:
            page = out.read_text(encoding="utf-8", errors="replace")
            shown = sum(1 for r in plan.runs if r.readable and not _hidden_by_the_file_limit(r))
            assert f"<p>{shown} runs" in page
    else:
        assert lines[-1].startswith(f"Error: none of the {plan.run_count:,} run(s) of ")
        assert result.stdout == "" and not out.exists()


# --- the fuzzer ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def base():
    """Where each case builds its folder: open to nobody (pytest's tmp_path is private to root), in
    memory when the machine has /dev/shm (thousands of small files a run: a disk is slower)."""
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None
    path = Path(tempfile.mkdtemp(prefix="tfdist-fuzz-report-", dir=shm))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _unlock(paths: list[Path]) -> None:
    for path in paths:
        path.chmod(0o755 if stat.S_ISDIR(os.lstat(path).st_mode) else 0o644)


def _stub_figures():
    return mock.patch.multiple("tfdist.report.figures",
                               panel_pngs=lambda data, failed=None: [("stub", b"\x89PNG stub")],
                               page_png=lambda data, failed=None: b"\x89PNG stub")


def _run_case(plan: Plan, sources, base: Path) -> None:
    root = Path(tempfile.mkdtemp(dir=base))
    root.chmod(0o755)
    locked: list[Path] = []
    try:
        locked = _build(plan, root, sources)
        out_dir = root / "out"
        out_dir.mkdir()
        out_dir.chmod(0o777)
        out = out_dir / f"report.{plan.out_kind}"
        faulthandler.dump_traceback_later(HANG_SECONDS, exit=True, file=sys.__stderr__)  # past pytest's capture
        try:
            with contextlib.ExitStack() as stack:
                if not plan.draw:
                    stack.enter_context(_stub_figures())
                stack.enter_context(_reading_as_nobody(plan.nobody))
                result = invoke("report", str(root / "runs"), "--out", str(out))
        finally:
            faulthandler.cancel_dump_traceback_later()
        _check(result, plan, out)
    finally:
        _unlock(locked)
        shutil.rmtree(root, ignore_errors=True)


def _plan(*runs: tuple[str, tuple[str, ...]], **kwargs) -> Plan:
    return Plan(tuple(RunPlan(name, tuple(Entry(kind, "train", FILE_NAMES[0], "train", 7) for kind in kinds))
                      for name, kinds in runs), **kwargs)


@FUZZ
@given(plan=plans())
@example(plan=_plan(("garbage", ("garbage",)))).via("garbage only: exit 1, before exit 0 and an empty page")
@example(plan=_plan(("fifo", ("fifo",)), ("good", ("copy",)))).via("a FIFO beside a good run: before, a hang")
@example(plan=_plan(("zero", ("dev-zero",)))).via("/dev/zero linked as an event file")
@example(plan=_plan(("mixed", ("copy", "flip-late")))).via("a run read in part")
@example(plan=Plan((RunPlan("graph", (Entry("flip-first", "train", FILE_NAMES[0], "graph", 301),)),))).via(
    "a bit of a 6 KB graph record flipped: before issue 34 not checked, and the file read as valid")
@example(plan=_plan(("good", ("copy",)), filler_runs=1_001)).via("more runs than the limit")
@example(plan=_plan(*((f"g{i}", ("garbage",)) for i in range(25)))).via("the lines are capped")
@example(plan=_plan(("good", ("copy",)), ("empty", ("empty",)), draw=True)).via("drawn for real")
@example(plan=_plan(("odd\nname", ("copy",)), ("\udcff\udcfe", ("copy",)), ("x" * 200, ("copy",)), draw=True)).via(
    "odd run names drawn for real: undecodable bytes once crashed matplotlib")
def test_report_on_constructed_runs_folders(plan, sources, base):
    hypothesis.event(f"drawn={plan.draw} nobody={plan.nobody} filler runs={plan.filler_runs} "
                     f"garbage files={max(r.extra_garbage for r in plan.runs)}")  # --hypothesis-show-statistics
    _run_case(plan, sources, base)


@pytest.mark.skipif(not CAN_LOCK, reason="cannot read as an unprivileged user here")
@pytest.mark.parametrize("kinds, code", [(("locked-file",), 1), (("locked-folder",), 1),
                                         (("locked-file", "copy"), 0)])
def test_locked_entries_are_named(kinds, code, sources, base):
    plan = Plan((RunPlan("r", tuple(Entry(k, "train", f"{i}.tfevents", "train", 3) for i, k in enumerate(kinds))),),
                nobody=True)
    assert _expected(plan) == code
    _run_case(plan, sources, base)
