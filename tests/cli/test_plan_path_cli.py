"""`advise --save` and `launch --save-plan` check the plan's path while the command line is parsed, before
anything is probed or started (issue 34: /proc/plan.json, /sys/plan.json, a 300-character name and
`paths/sub/` passed and failed after 8-12 s of probing). The option's callback is
tfdist.cli.types.writable_plan_path over tfdist.plan.check_plan_path (its cases:
tests/advise/test_plan_path.py). No TensorFlow, no ssh: the probe and the launchers are replaced."""
from __future__ import annotations

import sys

import click
import pytest
from support import invoke, usage_error

from tfdist.probe import driver as probe
from tfdist.cli import launch as launch_module
from tfdist.cli.advise import advise as advise_command
from tfdist.cli.launch import launch as launch_command

ADVISE = ["--workers", "2", "--params", "669706", "--batch-size", "64", "--step-ms", "10", "--bandwidth", "50mbit"]
LAUNCH = ["--backend", "auto", "--hosts", "w1:1,w2:1,p:1", "--model", "m:f", "--batch-size", "64"]
COMMAND = ["--", sys.executable, "train.py"]
BAD = ["/proc/plan.json", "/sys/plan.json", "{tmp}/" + "p" * 295 + ".json", "{tmp}/paths/sub/",
       "{tmp}/paths/missing/plan.json", "{tmp}/paths"]


@pytest.fixture
def nothing_runs(monkeypatch, tmp_path):
    """Record every probe and launch (there must be none) in a scratch working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "paths").mkdir()
    calls: list = []
    monkeypatch.setattr(probe, "probe_hosts", lambda *args, **kwargs: calls.append(("probe", args)))
    monkeypatch.setattr(launch_module, "_launch_tf_cluster", lambda *args, **_: calls.append(("launch", args)))
    monkeypatch.setattr(launch_module, "_launch_horovod", lambda *args, **_: calls.append(("launch", args)))
    return calls


def _path(template: str, tmp_path) -> str:
    return template.format(tmp=tmp_path)


@pytest.mark.parametrize("template", BAD)
def test_make_context_refuses_the_path_while_parsing(template, tmp_path, nothing_runs):
    """The option's own validation, alone (click's make_context parses and runs the callbacks only)."""
    path = _path(template, tmp_path)
    for command, argv in ((advise_command, [*ADVISE, "--save", path]),
                          (launch_command, [*LAUNCH, "--save-plan", path, *COMMAND])):
        with pytest.raises(click.BadParameter) as info:
            command.make_context(command.name or "launch", argv)
        assert info.value.param is not None and info.value.param.name in ("save_path", "save_plan")
        assert "; fix: pass a path in a writable folder" in info.value.format_message()
    assert nothing_runs == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["paths"]  # the probe file is gone


@pytest.mark.parametrize("template", BAD)
def test_advise_probe_save_stops_before_probing(template, tmp_path, nothing_runs):
    path = _path(template, tmp_path)
    text = usage_error(invoke("advise", "--probe", "--hosts", "w1:1,w2:1,p:1", "--model", "m:f",
                              "--batch-size", "64", "--save", path))
    assert "Invalid value for '--save'" in text and "; fix: " in text, text
    assert nothing_runs == []


@pytest.mark.parametrize("template", BAD)
def test_launch_auto_save_plan_stops_before_probing(template, tmp_path, nothing_runs):
    path = _path(template, tmp_path)
    text = usage_error(invoke("launch", *LAUNCH, "--save-plan", path, *COMMAND))
    assert "Invalid value for '--save-plan'" in text and "; fix: " in text, text
    assert nothing_runs == []


def test_a_good_path_parses(tmp_path, nothing_runs):
    path = str(tmp_path / "paths" / "plan.json")
    ctx = advise_command.make_context("advise", [*ADVISE, "--save", path])
    assert ctx.params["save_path"] == path
    ctx = launch_command.make_context("launch", [*LAUNCH, "--save-plan", path, *COMMAND])
    assert ctx.params["save_plan"] == path
    assert nothing_runs == [] and list((tmp_path / "paths").iterdir()) == []
