"""`tfdist advise` as a user meets it (issue 34): a short --help, --time-step (the step time of --model on this
machine, for --step-ms without ssh hosts), and Ctrl-C during --probe exiting 130. The advisor's inputs and
--probe's options are tested in tests/advise/."""
from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from ctrl_c import interrupt_during_the_probe
from support import REPO, subprocess_env
from tfdist.cli.advise import advise
from tfdist.cli.main import cli

# The command docs/advise.md shows (its models.py is the page's; tests/docs/test_blocks.py points here).
TIME_STEP = ["advise", "--time-step", "--model", "models:build_model", "--batch-size", "64"]
MODELS_PY = ("import tfdist  # before tensorflow, as the probe's agent does\n"
             "import tensorflow as tf\n\n\n"
             "def build_model():\n"
             "    return tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, activation='relu'),\n"
             "                                tf.keras.layers.Dense(10, activation='softmax')])\n")
PARAMS = 32 * 64 + 64 + 64 * 10 + 10


def test_the_help_is_short_and_every_option_is_documented():
    result = CliRunner().invoke(advise, ["--help"], terminal_width=80)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert len(lines) <= 45, f"{len(lines)} lines"  # 126 before
    assert lines[-1].strip().endswith("docs/advise.md.")
    page = (REPO / "docs" / "advise.md").read_text()
    for param in advise.params:
        if isinstance(param, click.Option):
            assert param.opts[-1] in result.output
            assert any(f"`{opt}" in page for opt in param.opts), f"docs/advise.md does not describe {param.opts}"


@pytest.mark.parametrize("args, message", [
    (["--time-step", "--batch-size", "64"], "Error: --time-step needs --model, the function that builds the Keras "
                                            "model; fix: add e.g. --model models:build_model"),
    (["--time-step", "--model", "m:f", "--batch-size", "64", "--workers", "2", "--bandwidth", "1gbit"],
     "Error: --workers, --bandwidth do(es) not apply to --time-step, which only times --model on this machine; "
     "fix: drop --workers, --bandwidth, then pass the flags it prints to `tfdist advise`"),
    (["--time-step", "--probe", "--model", "m:f", "--batch-size", "64"], "Error: --probe do(es) not apply to "
                                                                         "--time-step"),
    (["--time-step", "--model", "m:f"], "Error: Missing option '--batch-size'"),
    (["--model", "m:f", "--batch-size", "64", "--workers", "2", "--params", "1M", "--step-ms", "5", "--bandwidth",
      "1gbit"], "Error: --model applies only to --probe; fix: add --probe (or --time-step, to time it on this "
                "machine), or drop --model"),
])
def test_time_step_options_are_checked_before_anything_starts(monkeypatch, args, message):
    import tfdist.probe.driver as probe

    monkeypatch.setattr(probe, "time_step_here", lambda *a, **k: pytest.fail("started a measurement"))
    result = CliRunner().invoke(cli, ["advise", *args])
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert line.startswith(message), line


def test_time_step_prints_the_flags_advise_takes(monkeypatch):
    """The agent's answer, as the flags to paste: a step below the advisor's floor is printed at the floor."""
    import tfdist.probe.driver as probe

    answers = iter([{"step_ms": 12.3456, "params": 2762, "dtype_bytes": 4, "embeddings": [[1000, 8, 3]]},
                    {"step_ms": 0.0002, "params": 5, "dtype_bytes": 2, "embeddings": []}])
    monkeypatch.setattr(probe, "time_step_here", lambda model, batch_size, log: next(answers))
    first = CliRunner().invoke(cli, TIME_STEP)
    assert first.exit_code == 0, first.output
    assert first.output.splitlines()[-1] == "--step-ms 12.346 --params 2762 --dtype-bytes 4 --embedding 1000x8:3"
    second = CliRunner().invoke(cli, TIME_STEP)
    assert second.output.splitlines()[-1] == "--step-ms 0.001 --params 5 --dtype-bytes 2"
    flags = second.output.splitlines()[-1].split()
    advised = CliRunner().invoke(cli, ["advise", "--workers", "2", "--bandwidth", "1gbit", "--batch-size", "64", *flags])
    assert advised.exit_code == 0, advised.output


@pytest.mark.slow  # the compute agent imports TensorFlow
def test_the_pages_time_step_command_times_the_model_here_and_advise_takes_its_flags(tmp_path):
    (tmp_path / "models.py").write_text(MODELS_PY)
    env = subprocess_env()
    env.pop("PYTHONPATH")  # models.py is found in the working directory, as the page says
    timed = subprocess.run([sys.executable, "-m", "tfdist", *TIME_STEP], capture_output=True, text=True,
                           cwd=tmp_path, env=env, timeout=300)
    assert timed.returncode == 0, timed.stderr[-3000:]
    assert "timing models:build_model on this machine (batch 64)" in timed.stderr
    flags = timed.stdout.split()
    assert flags[0::2] == ["--step-ms", "--params", "--dtype-bytes"] and flags[3:] == [str(PARAMS), "--dtype-bytes", "4"]
    assert float(flags[1]) > 0
    advised = CliRunner().invoke(cli, ["advise", "--workers", "2", "--bandwidth", "1gbit", "--batch-size", "64",
                                       "--json", *flags])
    assert advised.exit_code == 0, advised.output
    assert json.loads(advised.output)["recommended"]


def test_ctrl_c_during_the_probe_exits_130(tmp_path):
    """It exited 1 with click's `Aborted!`; an interrupted command exits 130, as the launcher's runners do."""
    code, stderr = interrupt_during_the_probe(tmp_path, [
        "advise", "--probe", "--hosts", "h1:1,h2:1,h3:1", "--model", "models:build_model", "--batch-size", "8"])
    assert code == 130, stderr[-2000:]
    assert stderr.rstrip().splitlines()[-1] == "tfdist advise: interrupted", stderr[-2000:]
    assert "Aborted!" not in stderr and "Traceback" not in stderr
