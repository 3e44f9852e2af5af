"""tfdist.export.paths without TensorFlow: what is refused before anything is written, the atomic
replacement, and the sweep after a killed export."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tfdist.export import paths
from tfdist.export.paths import ExportPathError


def _export(directory, marker: str = "old") -> None:
    os.makedirs(directory)
    (directory / "saved_model.pb").write_text(marker)


def _listing(tmp_path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))


def test_an_existing_path_is_refused_without_overwrite_and_nothing_is_written(tmp_path):
    _export(tmp_path / "model")
    before = _listing(tmp_path)
    with pytest.raises(ExportPathError) as info:
        paths.check_target(str(tmp_path / "model"), "saved_model", overwrite=False)
    assert str(info.value) == (f"`path` {str(tmp_path / 'model')!r} already exists; fix: pass overwrite=True "
                               "to replace the export there, or another path")
    assert _listing(tmp_path) == before


def test_overwrite_replaces_only_an_export(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep")
    with pytest.raises(ExportPathError, match=r"exists and is not a SavedModel directory .*overwrite=True "
                                              r"replaces an export only; fix: remove it yourself"):
        paths.check_target(str(tmp_path / "notes"), "saved_model", overwrite=True)
    _export(tmp_path / "model")
    assert paths.check_target(str(tmp_path / "model"), "saved_model", overwrite=True) == str(tmp_path / "model")
    (tmp_path / "m.keras").write_text("zip")
    (tmp_path / "dir.keras").mkdir()
    with pytest.raises(ExportPathError, match="is not a .keras file"):
        paths.check_target(str(tmp_path / "dir.keras"), "keras", overwrite=True)
    assert paths.check_target(str(tmp_path / "m.keras"), "keras", overwrite=True) == str(tmp_path / "m.keras")


@pytest.mark.parametrize("path, format, message", [
    ("file.txt/model", "saved_model", "cannot write its parent directory ('{tmp}/file.txt' is not a directory)"),
    ("file.txt/deeper/model", "saved_model", "cannot write its parent directory ('{tmp}/file.txt' is not a "
                                             "directory)"),
    ("model", "onnx", "`format` must be one of ['saved_model', 'keras'], got 'onnx'"),
    ("model", "keras", "must end in .keras with format='keras'"),
])
def test_bad_targets_name_the_path_and_the_fix(tmp_path, path, format, message):
    (tmp_path / "file.txt").write_text("a file, not a directory")
    before = _listing(tmp_path)
    with pytest.raises(ExportPathError) as info:
        paths.check_target(str(tmp_path / path), format, overwrite=False)
    assert message.format(tmp=tmp_path) in str(info.value) and "; fix: " in str(info.value)
    assert _listing(tmp_path) == before


def test_a_missing_parent_is_fine_and_created_only_when_written(tmp_path):
    target = paths.check_target(str(tmp_path / "exports" / "model" / "1"), "saved_model", overwrite=False)
    assert not (tmp_path / "exports").exists()
    with paths.atomic_target(target) as written:
        _export(type(tmp_path)(written), "new")
    assert (tmp_path / "exports" / "model" / "1" / "saved_model.pb").read_text() == "new"
    assert _listing(tmp_path / "exports" / "model") == ["1", "1/saved_model.pb"]


def test_the_write_is_atomic_and_replaces_the_previous_export(tmp_path):
    target = tmp_path / "model"
    _export(target, "old")
    with paths.atomic_target(str(target)) as written:
        assert os.path.dirname(written) != str(tmp_path)  # inside a temporary sibling, not at the path
        assert (target / "saved_model.pb").read_text() == "old"
        _export(type(tmp_path)(written), "new")
        assert len(paths.siblings(str(target))) == 1
    assert (target / "saved_model.pb").read_text() == "new"
    assert _listing(tmp_path) == ["model", "model/saved_model.pb"]


def test_a_failed_write_leaves_the_previous_export_and_no_sibling(tmp_path):
    target = tmp_path / "model"
    _export(target, "old")
    with pytest.raises(RuntimeError, match="disk full"):
        with paths.atomic_target(str(target)) as written:
            os.makedirs(written)
            (type(tmp_path)(written) / "half").write_text("x")
            raise RuntimeError("disk full")
    assert _listing(tmp_path) == ["model", "model/saved_model.pb"]
    assert (target / "saved_model.pb").read_text() == "old"


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_the_sweep_removes_what_a_killed_export_left_and_restores_a_moved_previous_export(tmp_path):
    host, dead = paths._host(), _dead_pid()
    target = tmp_path / "model"
    stale = tmp_path / f".model.tfdist-tmp-{host}-{dead}-00ff"
    _export(stale / "model", "half")
    alive = tmp_path / f".model.tfdist-tmp-{host}-{os.getpid()}-00aa"   # an export under way: kept
    alive.mkdir()
    elsewhere = tmp_path / f".model.tfdist-tmp-otherhost-{dead}-00bb"  # another host's: kept
    elsewhere.mkdir()
    moved = tmp_path / f".model.tfdist-old-{host}-{dead}-0011"          # killed between the two renames
    _export(moved, "previous")
    unrelated = tmp_path / f".other.tfdist-tmp-{host}-{dead}-0022"
    unrelated.mkdir()
    assert sorted(paths.sweep(str(target))) == sorted([str(stale), str(moved)])
    assert (target / "saved_model.pb").read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["model", alive.name, elsewhere.name, unrelated.name])


def test_the_sweep_drops_a_moved_previous_export_once_a_new_one_is_in_place(tmp_path):
    host, dead = paths._host(), _dead_pid()
    _export(tmp_path / "model", "new")
    _export(tmp_path / f".model.tfdist-old-{host}-{dead}-0011", "previous")
    paths.sweep(str(tmp_path / "model"))
    assert _listing(tmp_path) == ["model", "model/saved_model.pb"]
    assert (tmp_path / "model" / "saved_model.pb").read_text() == "new"


def test_a_throwaway_copy_is_written_outside_the_export_directory_and_removed(tmp_path):
    with paths.throwaway_target(str(tmp_path / "model")) as written:
        assert not written.startswith(str(tmp_path))
        os.makedirs(written)
        scratch = os.path.dirname(written)
    assert not os.path.exists(scratch) and _listing(tmp_path) == []
