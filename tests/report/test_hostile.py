"""`tfdist report` on hostile runs folders: every file it cannot read is named with why, nothing hangs,
nothing is a traceback, and a report that shows nothing is exit 1 (issue: report hardening).

Event files are written with TensorBoard's own record writer (``events`` fixture, tests/report/conftest.py).
Cases that need an unprivileged user (root reads every file) run ``python -m tfdist`` as ``nobody``.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from support import REPO, invoke, usage_error

LOSS = {"epoch_loss": [1.0, 0.5, 0.25]}
NOBODY = 65534


def _report(runs: Path, out: Path, *extra: str):
    return invoke("report", str(runs), "--out", str(out), *extra)


def _page(out: Path) -> str:
    return out.read_text(encoding="utf-8")


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line]


def _good(events, root: Path, name: str = "good") -> Path:
    events.write(root / name / "train", LOSS)
    return root / name


def _as(user: int | None) -> list[str]:
    """The command prefix that runs a child as ``user`` (setpriv drops every capability), or nothing."""
    if user is None or os.geteuid() != 0:
        return []
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]


def _cli(*args: str, user: int | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m tfdist ARGS`` in a child (as ``user`` when given), bounded in time."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["PYTHONPATH"] = str(REPO)
    with tempfile.TemporaryDirectory() as home:  # matplotlib's cache: root's home is closed to nobody
        os.chmod(home, 0o777)
        env["MPLCONFIGDIR"] = home
        return subprocess.run([*_as(user), sys.executable, "-m", "tfdist", *args], capture_output=True,
                              text=True, timeout=timeout, env=env, cwd="/")


@pytest.fixture
def shared_tmp():
    """A temporary folder that ``nobody`` can enter (pytest's own are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="tfdist-report-"))
    path.chmod(0o755)
    yield path
    for root, dirs, _ in os.walk(path):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
    shutil.rmtree(path)


@pytest.fixture(scope="session")
def as_nobody() -> None:
    """Skips the test unless a child can run tfdist as nobody and is then refused a mode-000 file."""
    if not _as_nobody_works():
        pytest.skip("cannot run a child as an unprivileged user here (setpriv)")


def _as_nobody_works() -> bool:
    if os.geteuid() != 0:
        return True
    with tempfile.NamedTemporaryFile() as locked:
        os.chmod(locked.name, 0)
        code = f"import tfdist.report\ntry:\n    open({locked.name!r})\nexcept PermissionError:\n    print('refused')"
        try:
            child = subprocess.run([*_as(NOBODY), sys.executable, "-c", code], capture_output=True, text=True,
                                   timeout=60, cwd="/", env={**os.environ, "PYTHONPATH": str(REPO)})
        except (OSError, subprocess.SubprocessError):
            return False
    return child.stdout.strip() == "refused"


# --- never opened: FIFOs, devices; dangling links ------------------------------------------------------------

def test_a_fifo_named_like_an_event_file_is_never_opened(events, tmp_path):
    _good(events, tmp_path)
    (tmp_path / "fifo" / "train").mkdir(parents=True)
    os.mkfifo(tmp_path / "fifo" / "train" / "events.out.tfevents.1.x")
    out = tmp_path / "out.html"
    result = _cli("report", str(tmp_path), "--out", str(out), timeout=120)  # before the fix: blocked for ever
    assert result.returncode == 0, result.stderr
    assert _lines(result.stderr) == [
        "Warning: run 'fifo' not read: train/events.out.tfevents.1.x: is a FIFO (named pipe), not an event "
        "file; tfdist report never opens one; fix: remove it or move it out of the runs folder"]
    assert "Runs not read or read in part (1)" in _page(out) and "is a FIFO (named pipe)" in _page(out)


def test_a_runs_folder_of_only_a_fifo_exits_1(tmp_path):
    os.mkfifo(tmp_path / "events.out.tfevents.1.x")
    result = _cli("report", str(tmp_path), "--out", str(tmp_path / "out.html"), timeout=120)
    assert result.returncode == 1, result.stderr
    assert "is a FIFO (named pipe)" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out.html").exists()


@pytest.mark.parametrize("target, reason", [
    ("/nonexistent/events", "is a symbolic link to '/nonexistent/events', which does not exist; fix: remove "
                            "the link or restore what it points to"),
    ("/dev/zero", "is a character device, not an event file; tfdist report never opens one; fix: remove it"),
    ("/dev/null", "is a character device, not an event file"),
])
def test_links_to_nothing_or_to_devices_are_per_run_problems(events, tmp_path, target, reason):
    _good(events, tmp_path)
    (tmp_path / "linked").mkdir()
    os.symlink(target, tmp_path / "linked" / "events.out.tfevents.1.x")
    result = _report(tmp_path, tmp_path / "out.html")
    assert result.exit_code == 0, result.output
    (line,) = _lines(result.stderr)
    assert line.startswith("Warning: run 'linked' not read: events.out.tfevents.1.x: ") and reason in line


def test_a_link_to_a_regular_event_file_is_read(events, tmp_path):
    real = events.write(tmp_path / "elsewhere", LOSS)
    (tmp_path / "runs" / "linked").mkdir(parents=True)
    os.symlink(real, tmp_path / "runs" / "linked" / real.name)
    result = _report(tmp_path / "runs", tmp_path / "out.html")
    assert result.exit_code == 0 and result.stderr == "", result.output


def test_proc_self_is_a_usage_error_naming_the_limit(tmp_path):
    result = _cli("report", "/proc/self", "--out", str(tmp_path / "out.html"), timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == (
        "Error: Invalid value for 'RUNS_DIR': '/proc/self' has more than 200,000 files and folders under it "
        "(tfdist report's limit while looking for runs); fix: pass the folder your training wrote to (the "
        "--logdir), not a parent of it")


def test_a_file_that_vanishes_before_it_is_opened_is_a_problem(tmp_path):
    from tfdist.report.files import open_event_file

    file, size, problem = open_event_file(str(tmp_path / "gone.tfevents"), "gone.tfevents")
    assert file is None and str(problem) == "gone.tfevents: disappeared while the report was made; fix: run the " \
                                            "report again"


# --- unreadable as an unprivileged user ------------------------------------------------------------------------

def test_unreadable_files_and_folders_are_named_when_run_unprivileged(events, shared_tmp, as_nobody):
    runs = shared_tmp / "runs"
    _good(events, runs)
    locked_file = events.write(runs / "locked-file" / "train", LOSS)
    locked_file.chmod(0o000)
    events.write(runs / "locked-train" / "train", LOSS)
    (runs / "locked-train" / "train").chmod(0o000)
    events.write(runs / "half" / "train", LOSS)
    events.write(runs / "half" / "validation", LOSS)
    (runs / "half" / "validation").chmod(0o000)
    out_dir = shared_tmp / "out"
    out_dir.mkdir(mode=0o777)
    out_dir.chmod(0o777)
    result = _cli("report", str(runs), "--out", str(out_dir / "report.html"), user=NOBODY)
    assert result.returncode == 0, result.stderr
    assert _lines(result.stderr) == [
        "Warning: run 'half' read in part: validation/: folder cannot be listed: Permission denied; fix: make it "
        "readable (chmod a+rx) or run as its owner",
        f"Warning: run 'locked-file' not read: train/{locked_file.name}: cannot be read: Permission denied; fix: "
        "make it readable (chmod a+r) or run as its owner",
        "Warning: run 'locked-train' not read: train/: folder cannot be listed: Permission denied; fix: make it "
        "readable (chmod a+rx) or run as its owner"]
    page = _page(out_dir / "report.html")
    assert "2 runs (3 read in part or not read: listed below)" in page
    only_locked = _cli("report", str(runs / "locked-file"), "--out", str(out_dir / "r2.html"), user=NOBODY)
    assert only_locked.returncode == 1 and "Permission denied" in only_locked.stderr
    assert not (out_dir / "r2.html").exists()


# --- files that are not (whole) event files ---------------------------------------------------------------------

def _corrupt(events, folder: Path, kind: str) -> Path:
    """One file of ``kind`` in ``folder``; all of them show nothing."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "events.out.tfevents.1.x"
    with tempfile.TemporaryDirectory() as source:
        real = events.write(Path(source), LOSS)
        data, spans = real.read_bytes(), events.offsets(real)
    content = {
        "garbage": os.urandom(4096),
        "empty": b"",
        "truncated-header": data[:7],
        "truncated-first-record": data[:spans[0][1] - 3],
        "text": b"loss,accuracy\n0.5,0.9\n",
        "bit-flipped-first-record": data[:5] + bytes([data[5] ^ 0x10]) + data[6:],
        "version-only": data[:spans[0][1]],
    }[kind]
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("kind, reason", [
    ("garbage", "is not a TensorBoard event file: its first record fails its checksum"),
    ("empty", "is empty (0 bytes)"),
    ("truncated-header", "is too short to hold a record (7 bytes): not an event file, or its writer was cut off"),
    ("truncated-first-record", "ends inside its first record ("),
    ("text", "is not a TensorBoard event file: its first record fails its checksum"),
    ("bit-flipped-first-record", "is not a TensorBoard event file: its first record fails its checksum"),
    ("version-only", "its event files: hold no scalars and no HParams"),
])
def test_a_report_of_nothing_readable_exits_1_naming_each_run(events, tmp_path, kind, reason):
    _corrupt(events, tmp_path / "runs" / "bad", kind)
    out = tmp_path / "out.html"
    result = _report(tmp_path / "runs", out)
    assert result.exit_code == 1, result.output  # before: exit 0, "1 runs", nothing on stderr
    lines = _lines(result.stderr)
    assert lines[0].startswith("run 'bad' not read: ") and reason in lines[0] and "; fix: " in lines[0]
    assert lines[1] == (f"Error: none of the 1 run(s) of '{tmp_path / 'runs'}' could be read (each is named above "
                        "with why); fix: fix or remove the files named, or pass the --logdir your training wrote to")
    assert len(lines) == 2 and result.stdout == "" and not out.exists()


def test_dev_zero_linked_as_the_only_event_file_exits_1(tmp_path):
    (tmp_path / "runs" / "zero").mkdir(parents=True)
    os.symlink("/dev/zero", tmp_path / "runs" / "zero" / "events.out.tfevents.1.x")
    result = _report(tmp_path / "runs", tmp_path / "out.html")
    assert result.exit_code == 1 and "is a character device" in result.stderr


def test_a_run_with_readable_and_unreadable_files_is_shown_and_warned(events, tmp_path):
    runs = tmp_path / "runs"
    events.write(runs / "mixed" / "train", LOSS)
    _corrupt(events, runs / "mixed" / "validation", "garbage")
    out = tmp_path / "out.html"
    result = _report(runs, out)
    assert result.exit_code == 0, result.output
    assert _lines(result.stderr) == [
        "Warning: run 'mixed' read in part: validation/events.out.tfevents.1.x: is not a TensorBoard event file: its "
        "first record fails its checksum; fix: remove it or move it out of the runs folder (only TensorBoard's "
        "writers make '*tfevents*' files)"]
    assert "<p>1 runs (1 read in part or not read: listed below)" in _page(out)
    assert result.stdout == f"{out}\n"


def test_a_file_damaged_after_some_records_keeps_the_records_before(events, tmp_path):
    from tfdist.report.events import load_runs

    path = events.write(tmp_path / "runs" / "r" / "train", {"epoch_loss": [1.0, 0.5, 0.25, 0.125]})
    spans = events.offsets(path)
    data = bytearray(path.read_bytes())
    data[spans[3][0] + 14] ^= 0x01  # a bit of the third scalar's data
    path.write_bytes(bytes(data))
    (run,) = load_runs(str(tmp_path / "runs"))
    assert run.series("train", "epoch_loss").values == (1.0, 0.5)
    assert [str(p) for p in run.problems] == [
        f"train/{path.name}: is damaged at byte {spans[3][0]:,} (a record fails its checksum); the 3 events before "
        "it were read; fix: the rest is lost; rerun the run to have it"]


def test_a_bit_flipped_in_a_graph_record_is_found(events, tmp_path):
    """Issue 34: a record over 4 KiB holding no scalar (a graph) had no checksum check, and a file with a
    bit flipped in it was read as valid. Every record's checksum is checked now."""
    from tfdist.report.events import load_runs

    path = events.write(tmp_path / "runs" / "r" / "train", {"epoch_loss": [1.0, 0.5]}, blob=6000)
    start, end = events.offsets(path)[1]  # the graph
    data = bytearray(path.read_bytes())
    data[start + 3000] ^= 0x08
    path.write_bytes(bytes(data))
    (run,) = load_runs(str(tmp_path / "runs"))
    assert [str(p) for p in run.problems] == [
        f"train/{path.name}: is damaged at byte {start:,} (a record fails its checksum); the 1 events before it "
        "were read; fix: the rest is lost; rerun the run to have it"]
    assert not run.has_data
    result = _report(tmp_path / "runs", tmp_path / "out.html")
    assert result.exit_code == 1 and "is damaged at byte" in result.stderr  # before: exit 0, the loss drawn


def test_a_record_still_being_written_is_not_a_problem(events, tmp_path):
    from tfdist.report.events import load_runs

    path = events.write(tmp_path / "r" / "train", LOSS)
    path.write_bytes(path.read_bytes()[:-5])  # the writer is in the middle of the last record
    (run,) = load_runs(str(tmp_path / "r"))
    assert run.series("train", "epoch_loss").values == (1.0, 0.5) and run.problems == []


def test_tf1_scalars_and_hparams_are_read(events, tmp_path):
    from tfdist.report.events import load_runs

    events.write(tmp_path / "r", {"mean_examples_per_second": [5.0]}, hparams={"workers": 2, "lr": 0.5}, tf1=True)
    (run,) = load_runs(str(tmp_path / "r"))
    assert run.hparams == {"workers": 2, "lr": 0.5}
    assert run.series(".", "mean_examples_per_second").values == (5.0,)


# --- bounds: runs, files, bytes, entries --------------------------------------------------------------------------

def _garbage_runs(root: Path, count: int) -> None:
    for i in range(count):
        (root / f"r{i:05d}").mkdir(parents=True)
        (root / f"r{i:05d}" / "events.out.tfevents.1.x").write_bytes(b"not an event file")


def test_more_runs_than_the_limit_is_a_usage_error(tmp_path):
    _garbage_runs(tmp_path / "runs", 10_000)
    result = _report(tmp_path / "runs", tmp_path / "out.html")
    assert usage_error(result) == (f"Error: Invalid value for 'RUNS_DIR': '{tmp_path / 'runs'}' holds more than "
                                   "1,000 runs (tfdist report's limit); fix: pass a folder with fewer runs, e.g. one "
                                   "experiment's sub-folder, or move old runs aside\n")


def test_the_run_limit_itself_is_read_and_the_lines_are_capped(tmp_path):
    _garbage_runs(tmp_path / "runs", 1_000)
    result = _report(tmp_path / "runs", tmp_path / "out.html")
    assert result.exit_code == 1
    lines = _lines(result.stderr)
    assert len(lines) == 22 and lines[0].startswith("run 'r00000' not read: events.out.tfevents.1.x: is not")
    assert lines[20] == "... and 980 more runs not read"
    assert lines[21].startswith("Error: none of the 1,000 run(s) of ")


def test_warnings_are_capped_and_the_page_lists_them(events, tmp_path):
    runs = tmp_path / "runs"
    _good(events, runs)
    _garbage_runs(runs, 25)
    out = tmp_path / "out.html"
    result = _report(runs, out)
    assert result.exit_code == 0
    lines = _lines(result.stderr)
    assert len(lines) == 21 and lines[-1] == "Warning: ... and 5 more runs read in part or not read"
    assert len(re.findall(r"<li>run &#x27;r\d{5}&#x27; not read", _page(out))) == 25


def test_event_files_per_run_are_bounded(events, tmp_path):
    from tfdist.report.events import load_runs

    for i in range(1_001):
        events.write(tmp_path / "r" / "train", {"epoch_loss": [float(i)]}, wall_time=1e9 + i, name=f"a.tfevents.{i:04d}")
    (run,) = load_runs(str(tmp_path / "r"))
    assert run.files == 1_000 and run.series("train", "epoch_loss").values == (999.0,)  # the later file wins
    assert [str(p) for p in run.problems] == [
        "train/a.tfevents.0999: the run has 1,001 event files; only the first 1,000 (by folder and name, up to this "
        "one) were read (tfdist report's limit per run); fix: move old or restarted runs' event files out of the run "
        "folder"]


def test_bytes_per_file_records_and_the_total_are_bounded(events, tmp_path, monkeypatch):
    import tfdist.report.events as events_module
    from tfdist.report.events import load_runs

    path = events.write(tmp_path / "runs" / "a" / "train", {"epoch_loss": [1.0] * 10})
    spans = events.offsets(path)
    monkeypatch.setattr(events_module, "MAX_FILE_BYTES", spans[4][1])  # the version and 4 scalars fit
    (run,) = load_runs(str(tmp_path / "runs"))
    assert run.series("train", "epoch_loss").steps == (0, 1, 2, 3)
    assert str(run.problems[0]).startswith(f"train/{path.name}: only its first {spans[4][1]} bytes were read: it is "
                                           f"larger than {spans[4][1]} bytes (tfdist report's limit per file)")
    monkeypatch.setattr(events_module, "MAX_FILE_BYTES", 1 << 30)
    events.write(tmp_path / "runs" / "a" / "train", {"epoch_loss": [2.0] * 12}, blob=5000)
    monkeypatch.setattr(events_module, "MAX_RECORD_BYTES", 1000)  # the 5,000-byte graph is skipped
    (run,) = load_runs(str(tmp_path / "runs"))
    assert [p.message for p in run.problems] == [
        "1 record(s) of more than 1,000 bytes were skipped unread (a graph or merged images; a scalar is about 100 "
        "bytes)"]
    assert run.series("train", "epoch_loss").values == (2.0,) * 12
    monkeypatch.setattr(events_module, "MAX_RECORD_BYTES", 1 << 20)
    events.write(tmp_path / "runs" / "b" / "train", LOSS)
    monkeypatch.setattr(events_module, "MAX_TOTAL_BYTES", sum(f.stat().st_size for f in path.parent.iterdir()))
    a, b = load_runs(str(tmp_path / "runs"))
    assert a.problems == [] and not b.has_data
    assert str(b.problems[0]).startswith("train/") and "not read: the report already read" in str(b.problems[0])


def test_entries_walked_are_bounded(events, tmp_path, monkeypatch):
    import tfdist.report.files as files

    _good(events, tmp_path / "runs")
    for i in range(50):
        (tmp_path / "runs" / "good" / f"d{i}").mkdir()
    monkeypatch.setattr(files, "MAX_ENTRIES", 40)
    result = _report(tmp_path / "runs", tmp_path / "out.html")
    assert "has more than 40 files and folders under it" in usage_error(result)


def test_odd_names_stay_on_one_line(events, tmp_path):
    runs = tmp_path / "runs"
    _good(events, runs)
    odd = os.fsencode(str(runs)) + b"/odd\nname \xff"
    os.makedirs(odd)
    with open(odd + b"/events.out.tfevents.\x1b[31m", "wb") as file:
        file.write(b"garbage")
    result = _report(runs, tmp_path / "out.html")
    assert result.exit_code == 0, result.output
    (line,) = _lines(result.stderr)
    assert line.startswith("Warning: run 'odd\\nname \\udcff' not read: events.out.tfevents.\\x1b[31m: is too short")


# --- --out -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("out, message", [
    ("/proc/x.html", "'/proc/x.html' cannot be written: nothing can be created in '/proc' (No such file or "
                     "directory); fix: pass a path in a folder you can write to, e.g. runs/report.html"),
    ("/etc/hostname/x.html", "'/etc/hostname/x.html' cannot be written: '/etc/hostname' is a file, not a folder; "
                             "fix: pass a path in a folder you can write to"),
    ("/etc/hostname/a/b/x.png", "'/etc/hostname' is a file, not a folder"),
    ("{tmp}/folder.html", "is a folder; fix: pass the path of a file to (over)write"),
    ("{tmp}/fifo.html", "is not a regular file (a FIFO, socket or device); fix: pass the path of a file"),
])
def test_an_unwritable_out_is_a_usage_error_before_any_event_file_is_read(events, tmp_path, monkeypatch, out,
                                                                          message):
    import tfdist.report.events as events_module

    _good(events, tmp_path / "runs")
    (tmp_path / "folder.html").mkdir()
    os.mkfifo(tmp_path / "fifo.html")
    monkeypatch.setattr(events_module, "_read_file", lambda *a: pytest.fail("an event file was read"))
    result = _report(tmp_path / "runs", Path(out.format(tmp=tmp_path)))
    error = usage_error(result)
    assert error.startswith("Error: Invalid value for '--out': ") and message in error and error.count("\n") == 1
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo.html").st_mode)  # never replaced


def test_the_default_out_is_checked_too(events, tmp_path, monkeypatch):
    _good(events, tmp_path / "runs")
    (tmp_path / "runs" / "report.html").mkdir()
    error = usage_error(invoke("report", str(tmp_path / "runs")))
    assert error.startswith(f"Error: Invalid value for '--out': the default '{tmp_path / 'runs' / 'report.html'}' is "
                            "a folder")


def test_a_failed_write_is_exit_1_and_leaves_the_old_file_whole(events, tmp_path, monkeypatch):
    _good(events, tmp_path / "runs")
    out = tmp_path / "report.html"
    out.write_text("the previous report")

    def no_space(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)
    result = _report(tmp_path / "runs", out)
    monkeypatch.undo()
    assert result.exit_code == 1, result.output
    assert _lines(result.stderr) == [f"Error: cannot write '{out}': No space left on device; fix: pass a path in a "
                                     "folder you can write to, e.g. runs/report.html"]
    assert out.read_text() == "the previous report" and sorted(p.name for p in tmp_path.iterdir()) == [
        "report.html", "runs"]


def test_the_output_is_written_through_a_rename_and_keeps_its_mode(events, tmp_path):
    _good(events, tmp_path / "runs")
    out = tmp_path / "new" / "dir" / "report.png"
    assert _report(tmp_path / "runs", out).exit_code == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and sorted(os.listdir(out.parent)) == ["report.png"]
    out.chmod(0o640)
    link = tmp_path / "link.png"
    link.symlink_to(out)
    assert _report(tmp_path / "runs", link).exit_code == 0
    assert link.is_symlink() and (out.stat().st_mode & 0o777) == 0o640
