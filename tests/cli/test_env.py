"""`tfdist env`: the report a user pastes into a bug report."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tfdist.cli.main import cli
from support import subprocess_env


def _tfdist_env_json(**env: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "tfdist", "env", "--json"], capture_output=True,
                            text=True, env=subprocess_env(**env), timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


@pytest.mark.slow  # a child Python imports TensorFlow
def test_env_json_reports_the_pinned_stack_and_horovod_build():
    report = _tfdist_env_json()
    assert report["packages"]["tensorflow"].startswith("2.21.")
    assert report["packages"]["tf-keras"].startswith("2.21.")
    assert report["packages"]["horovod"] == "0.28.1"
    assert report["packages"]["tensorboard"].startswith("2.21.")
    assert report["python"].startswith("3.")
    assert report["tf_keras_resolves_to"] == "tf_keras"
    assert report["tf_keras_module"].startswith("tf_keras")
    assert report["gpus"] == []  # this machine has none
    build = report["horovod_build"]
    assert build["frameworks"] == {"tensorflow": True, "pytorch": False, "mxnet": False}
    assert build["controllers"]["gloo"] is True
    assert build["tensor_operations"]["gloo"] is True
    assert report["environment"]["name"] == "local"


@pytest.mark.slow  # a child Python imports TensorFlow
def test_env_json_detects_horovodrun_variables():
    report = _tfdist_env_json(HOROVOD_RANK="1", HOROVOD_SIZE="4", HOROVOD_LOCAL_RANK="1")
    assert report["environment"] == {"name": "horovodrun", "rank": 1, "size": 4, "local_rank": 1,
                                     "launcher": "horovodrun"}


def test_env_text_without_tensorflow_is_fast_and_readable():
    result = CliRunner().invoke(cli, ["env", "--no-tensorflow"])
    assert result.exit_code == 0, result.output
    assert "tfdist: " in result.output
    assert "  tensorflow: 2.21." in result.output
    assert "environment:" in result.output


def test_version_and_help():
    runner = CliRunner()
    version = runner.invoke(cli, ["--version"])
    assert version.exit_code == 0 and version.output.startswith("tfdist, version ")
    usage = runner.invoke(cli, ["--help"])
    assert usage.exit_code == 0
    for command in ("env", "tf-config", "launch"):
        assert command in usage.output


def test_a_repeated_flag_is_a_usage_error():
    result = CliRunner().invoke(cli, ["env", "--no-tensorflow", "--no-tensorflow"])
    assert result.exit_code == 2
    expected = "Error: Option '--no-tensorflow' was given 2 times; it is a flag; fix: give it once"
    assert expected in result.output


@pytest.mark.parametrize("value, set_by", [(None, "import tfdist"), ("1", "your environment"),
                                           ("0", "your environment")])
def test_env_says_who_set_tf_use_legacy_keras(value, set_by):
    """`import tfdist` sets TF_USE_LEGACY_KERAS=1 when it is unset; the report says so, and says when the
    value is the user's own (a fresh Python each, without TensorFlow)."""
    env = subprocess_env(**({} if value is None else {"TF_USE_LEGACY_KERAS": value}))
    if value is None:
        env.pop("TF_USE_LEGACY_KERAS", None)
    result = subprocess.run([sys.executable, "-m", "tfdist", "env", "--json", "--no-tensorflow"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["variables"]["TF_USE_LEGACY_KERAS"] == (value or "1")
    assert report["tf_use_legacy_keras_set_by"] == set_by
