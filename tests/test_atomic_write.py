"""tfdist.atomic_write: the one write-whole-or-not-at-all policy and the new-file probe. Pure, no TF."""
from __future__ import annotations

import os
import stat

import pytest

from tfdist.atomic_write import new_file_problem, write_atomically


def test_a_file_is_written_whole_with_the_default_mode_and_no_temporary_left(tmp_path):
    target = tmp_path / "plan.json"
    assert write_atomically(target, "é\n") == str(target)
    assert target.read_bytes() == "é\n".encode()
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600
    assert os.listdir(tmp_path) == ["plan.json"]


def test_a_rewrite_keeps_the_old_mode_unless_one_is_given(tmp_path):
    target = tmp_path / "run.sh"
    target.write_text("old")
    target.chmod(0o600)
    write_atomically(target, b"new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text() == "new"
    write_atomically(target, b"#!/bin/sh\n", mode=0o755)
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "report.html"
    target.write_text("old")

    def full_disk(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(target, "new")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["report.html"]


def test_a_missing_folder_is_the_callers_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomically(tmp_path / "nowhere" / "x.json", "{}")


def test_the_probe_tries_a_real_file_and_leaves_nothing(tmp_path):
    assert new_file_problem(tmp_path) is None and os.listdir(tmp_path) == []
    assert new_file_problem(tmp_path / "nowhere") == "No such file or directory"
    assert new_file_problem("/proc") is not None  # os.access says yes to root here
