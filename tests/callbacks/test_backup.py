"""Backups you can trust: a truncated backup falls back to the verified copy; a full disk fails the
save cleanly and keeps the previous one (real files, a child Python per run)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import SCRIPTS, subprocess_env

pytestmark = pytest.mark.slow


def _run(mode: str, outdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / "backup_train.py"), mode, str(outdir)],
                          capture_output=True, text=True, timeout=300, env=subprocess_env())


def _epochs(outdir: Path) -> list[str]:
    return (outdir / "epochs.txt").read_text().split()


def _truncate_newest(outdir: Path) -> Path:
    data = sorted((outdir / "backup" / "chief").glob("ckpt-*.data-*"))[-1]
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    return data


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One run interrupted at epoch 2 (backups of epochs 0 and 1 on disk), shared: each test that
    resumes it works on its own copy (``_interrupted_copy``)."""
    outdir = tmp_path_factory.mktemp("backup-interrupted")
    return _run("interrupt", outdir), outdir


def _interrupted_copy(interrupted, tmp_path: Path) -> subprocess.CompletedProcess:
    """The interrupted run's files copied into ``tmp_path`` (the checkpoint index names its files
    relative to its directory, so the copy is a backup of its own); the run's result."""
    first, outdir = interrupted
    shutil.copytree(outdir, tmp_path, dirs_exist_ok=True)
    return first


def test_a_truncated_backup_falls_back_to_the_verified_copy_and_resumes(interrupted, tmp_path):
    """A truncated backup used to fail every relaunch with `IndexError: Read less bytes than requested`."""
    first = _interrupted_copy(interrupted, tmp_path)
    assert first.returncode != 0 and "interrupted at epoch 2 on purpose" in first.stderr
    assert (tmp_path / "backup" / "chief.previous").is_dir()
    _truncate_newest(tmp_path)
    second = _run("resume", tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "the newest backup in" in second.stderr and "is unreadable" in second.stderr
    assert "the last backup that read back in full" in second.stderr
    assert _epochs(tmp_path) == ["0", "1", "2", "3"]  # resumed after epoch 1: none lost, none repeated
    assert not (tmp_path / "backup" / "chief.previous").exists()  # a finished run leaves no backup


def test_with_no_good_copy_the_error_names_the_directory_and_the_fix(interrupted, tmp_path):
    first = _interrupted_copy(interrupted, tmp_path)
    assert first.returncode != 0
    _truncate_newest(tmp_path)
    previous = tmp_path / "backup" / "chief.previous"
    for data in previous.glob("ckpt-*.data-*"):
        data.write_bytes(b"")
    second = _run("resume", tmp_path)
    assert second.returncode != 0
    last = second.stderr.strip().splitlines()[-1]
    assert last.startswith("tfdist.callbacks.backup.BackupError: the backup in ") and "is unreadable" in last
    assert f"; fix: delete {tmp_path / 'backup'} to start training over" in last


def test_a_full_disk_fails_the_save_cleanly_and_keeps_the_previous_backup(tmp_path):
    starved = _run("disk-full", tmp_path)
    assert starved.returncode != 0
    last = starved.stderr.strip().splitlines()[-1]
    assert last.startswith("tfdist.callbacks.backup.BackupError: writing the backup of epoch 3 to ")
    assert "failed (File too large); the previous backup is kept; fix: free disk space" in last
    assert _epochs(tmp_path) == ["0", "1"]  # the backup runs before the epoch is logged as done
    resumed = _run("resume", tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _epochs(tmp_path) == ["0", "1", "2", "3"]  # from the backup of epoch 2: none lost, none repeated


# The first backup hits a file-size limit (set before training; SIGXFSZ ignored, so the write fails with
# EFBIG instead of killing the process): nothing earlier exists to keep.
_FIRST_SAVE_FAILS = """\
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (512, resource.RLIM_INFINITY))
sys.argv = [sys.argv[1], "resume", sys.argv[2]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_failed_first_backup_leaves_no_temp_checkpoint_and_says_none_exists(tmp_path):
    starved = subprocess.run([sys.executable, "-c", _FIRST_SAVE_FAILS, str(SCRIPTS / "backup_train.py"),
                              str(tmp_path)], capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert starved.returncode != 0
    last = starved.stderr.strip().splitlines()[-1]
    assert last.startswith("tfdist.callbacks.backup.BackupError: writing the backup of epoch 1 to "), last
    assert "failed (File too large); no earlier backup exists; fix: free disk space" in last
    assert "training starts again from the first epoch" in last and "previous backup is kept" not in last
    chief = tmp_path / "backup" / "chief"
    left = sorted(p.name for p in chief.rglob("*")) if chief.exists() else []
    assert not [name for name in left if "_temp" in name or name.startswith("part-")], left
