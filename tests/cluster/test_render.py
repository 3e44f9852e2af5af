"""Tests of tfdist.cluster.render: JSON, env lines, atomic per-task files (Kubernetes: test_k8s*.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tfdist.cluster import render
from tfdist.cluster.render import render_env, render_json, write_dir
from tfdist.cluster.spec import Address, ClusterSpec
from tfdist.cluster.tf_config import all_tf_configs
from tfdist.cluster.validate import validate_tf_config

SPEC = ClusterSpec(
    chief=[Address("h1", 2222)],
    worker=[Address("h2", 2222), Address("h3", 2222)],
    ps=[Address("h3", 2223)],
    evaluator=[Address("h1", 2223)],
)


def test_render_json_all_and_single():
    configs = all_tf_configs(SPEC)
    assert json.loads(render_json(configs)) == configs
    one = {"ps:0": configs["ps:0"]}
    text = render_json(one, single=True)
    assert json.loads(text) == configs["ps:0"] and text.endswith("}\n")
    with pytest.raises(ValueError, match="exactly one TF_CONFIG, got 5"):
        render_json(configs, single=True)


def test_render_env_exact_text():
    spec = ClusterSpec(worker=[Address("a", 1), Address("::1", 2)])
    assert render_env(all_tf_configs(spec)) == (
        "# worker:0\n"
        'export TF_CONFIG=\'{"cluster":{"worker":["a:1","[::1]:2"]},"task":{"type":"worker","index":0}}\'\n'
        "# worker:1\n"
        'export TF_CONFIG=\'{"cluster":{"worker":["a:1","[::1]:2"]},"task":{"type":"worker","index":1}}\'\n'
    )


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_render_env_is_read_back_exactly_by_a_shell(tmp_path):
    configs = {"worker:1": all_tf_configs(SPEC)["worker:1"]}
    script = tmp_path / "env.sh"
    script.write_text(render_env(configs))
    out = subprocess.run(
        ["sh", "-c", f'. "{script}"; printf %s "$TF_CONFIG"'],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    ).stdout
    assert json.loads(out) == configs["worker:1"]
    assert out == json.dumps(configs["worker:1"], separators=(",", ":"))


def test_write_dir_one_file_per_task(tmp_path):
    out = tmp_path / "new" / "dir"
    paths = write_dir(all_tf_configs(SPEC), out)
    assert [p.name for p in paths] == [
        "chief-0.json",
        "worker-0.json",
        "worker-1.json",
        "ps-0.json",
        "evaluator-0.json",
    ]
    assert sorted(os.listdir(out)) == sorted(p.name for p in paths)  # no temp files left
    worker1 = json.loads((out / "worker-1.json").read_text())
    assert worker1["task"] == {"type": "worker", "index": 1} and validate_tf_config(worker1) == []


def test_write_dir_crash_keeps_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    configs = all_tf_configs(ClusterSpec(worker=[Address("a", 1)]))
    write_dir(configs, tmp_path)
    before = (tmp_path / "worker-0.json").read_text()

    def crash(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(render.os, "replace", crash)
    changed = all_tf_configs(ClusterSpec(worker=[Address("b", 2)]))
    with pytest.raises(OSError, match="disk gone"):
        write_dir(changed, tmp_path)
    assert (tmp_path / "worker-0.json").read_text() == before
    assert os.listdir(tmp_path) == ["worker-0.json"]
