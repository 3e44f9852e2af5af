"""check_plan_path (tfdist/plan.py), the early check of `advise --save` and `launch --save-plan`
(issue 34): /proc/plan.json, /sys/plan.json, a 300-character name and `sub/` passed it and failed after the
probe. Now the name is checked against the file system's limits and the folder takes a real temporary file,
as save_plan will write one, and nothing is left behind. Pure: no TensorFlow, no probe."""
from __future__ import annotations

import os
import re

import pytest

from tfdist.plan import PlanError, check_plan_path, load_plan, save_plan


def _refused(path: str) -> str:
    with pytest.raises(PlanError) as info:
        check_plan_path(path)
    message = str(info.value)
    assert "\n" not in message and message.endswith("; fix: pass a path in a writable folder, e.g. plan.json")
    return message


@pytest.mark.parametrize("path, words", [
    ("/proc/plan.json", "cannot be written (its folder '/proc' takes no new file"),
    ("/sys/plan.json", "cannot be written (its folder '/sys' takes no new file"),
    ("/proc/self/plan.json", "cannot be written"),
])
def test_pseudo_file_systems_fail_the_real_probe(path, words):
    """As root, os.access says /proc and /sys are writable: only creating a file tells."""
    assert words in _refused(path)


def test_a_name_over_name_max_is_refused_before_the_probe(tmp_path):
    name = "p" * 295 + ".json"  # 300 characters; NAME_MAX is 255 bytes here
    message = _refused(str(tmp_path / name))
    assert "cannot be written (File name too long): its name is 300 bytes, the file system takes at most 255" \
        in message
    assert "p" * 100 not in message  # the echo is cut
    assert "cannot be written (File name too long)" in _refused(str(tmp_path / ("é" * 128 + ".json")))  # bytes
    check_plan_path(str(tmp_path / ("p" * 250 + ".json")))  # 255: the limit itself is fine


def test_a_path_over_path_max_is_refused(tmp_path):
    message = _refused(str(tmp_path / ("deep/" * 900) / "plan.json"))
    assert "cannot be written (File name too long): the whole path is" in message


@pytest.mark.parametrize("suffix, words", [
    ("sub/", "names a folder, not a file"),
    ("nosuch/", "names a folder, not a file"),  # passed before: abspath drops the "/", and its parent exists
    ("sub/.", "names a folder, not a file"),
    ("sub/..", "names a folder, not a file"),
    ("sub", "is a folder, not a file"),
    ("missing/plan.json", "does not exist"),
    ("file.txt/plan.json", r"file\.txt'( \(\d+ characters\))?\) is not a folder"),  # CI's longer folder is cut
    ("", "names a folder, not a file"),
])
def test_folders_and_missing_folders_are_refused(tmp_path, suffix, words):
    (tmp_path / "sub").mkdir()
    (tmp_path / "file.txt").write_text("")
    assert re.search(words, _refused(str(tmp_path) + "/" + suffix))


def test_a_long_path_keeps_its_end_in_the_message(tmp_path):
    """CI's pytest-115 folder made the echo cut before 'file.txt': a long path is cut in its middle."""
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    (deep / "file.txt").write_text("")
    message = _refused(str(deep / "file.txt" / "plan.json"))
    path, folder = len(str(deep / "file.txt" / "plan.json")), len(str(deep / "file.txt"))
    assert f"/file.txt/plan.json' ({path} characters)" in message
    assert f"/file.txt' ({folder} characters)) is not a folder" in message
    assert "d" * 100 not in message  # still cut


def test_empty_nul_and_non_regular_paths_are_refused(tmp_path):
    assert "the plan path is empty" in _refused("  ")
    assert "holds a NUL character" in _refused(str(tmp_path / "pl\0an.json"))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert "exists and is not a regular file" in _refused(str(fifo))  # never opened: it would block
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere" / "x")
    assert "exists and is not a regular file" in _refused(str(dangling))


def test_a_writable_path_passes_and_nothing_is_left_behind(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    check_plan_path(str(tmp_path / "sub" / "plan.json"))
    monkeypatch.chdir(tmp_path)
    check_plan_path("plan.json")  # relative: the working directory
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_an_existing_plan_passes_untouched_and_the_save_then_replaces_it(tmp_path):
    from tfdist.advise import Cluster, Workload, advise, parse_rate
    from tfdist.advise.planner import plan_from_advice

    path = tmp_path / "plan.json"
    path.write_text("old")
    path.chmod(0o444)  # the save renames a new file over it, so a read-only old plan is no obstacle
    check_plan_path(str(path))
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]
    cluster, workload = Cluster(workers=2, bandwidths=(parse_rate("1gbit"),)), Workload(1000, 8, 1.0)
    plan = plan_from_advice(advise(cluster, workload), cluster, workload)
    assert load_plan(save_plan(plan, str(path)))[0] == plan


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_a_folder_without_write_permission_is_refused(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        assert "takes no new file: Permission denied" in _refused(str(folder / "plan.json"))
    finally:
        folder.chmod(0o755)
