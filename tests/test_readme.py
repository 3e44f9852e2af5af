"""The README's code, run as a user would run it: its Python blocks, its tf-config transcript, and the
messages it quotes. A block that cannot run alone says which test runs its code."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest
from click.testing import CliRunner

from support import REPO, subprocess_env
from tfdist.cli.main import cli

README = (REPO / "README.md").read_text()

# What the README's fragments assume the user already has: a model builder and the digits data.
_PRELUDE = '''
import numpy as np
from sklearn.datasets import load_digits

_digits = load_digits()
_x = (_digits.images[..., None] / 16.0).astype("float32")
x_train, y_train, x_test, y_test = _x[:256], _digits.target[:256], _x[256:384], _digits.target[256:384]
x, y = x_train, y_train


def build_model():
    import tensorflow as tf
    return tf.keras.Sequential([tf.keras.Input((8, 8, 1)), tf.keras.layers.Flatten(),
                                tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(10)])
'''


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.S | re.M)


def _block(starting_with: str) -> str:
    found = [block for block in _blocks("python") if block.startswith(starting_with)]
    assert len(found) == 1, f"README has {len(found)} python blocks starting with {starting_with!r}"
    return found[0]


# Blocks that are fragments of a longer script, and the test that runs the code they show.
_COVERED_ELSEWHERE = {
    "opt = tf.keras.optimizers.Adam(0.001 * strategy.size)": "tests/examples (learning_rate= of the port)",
    "import tfdist  # before tensorflow; replaces": "tests/examples/test_examples.py (every line is in the port)",
    'strategy = tfdist.make_strategy("parameter_server", shards=2)':
        "tests/strategies/test_parameter_server.py (shards=2 and min_shard_bytes runs)",
    "from tfdist.testing.netlab import Lab": "tests/multihost/test_lab.py (shape, limit_cpu, popen, cut, restore)",
}


def test_every_python_block_compiles_and_is_run_somewhere():
    blocks = _blocks("python")
    assert len(blocks) >= 5
    for block in blocks:
        compile(block, "README.md", "exec")
    run_here = ("import tfdist                                   # 1.", "board = tfdist.callbacks.TensorBoardRun(")
    for block in blocks:
        assert block.startswith(run_here) or block.startswith(tuple(_COVERED_ELSEWHERE)), block[:80]


@pytest.mark.slow
def test_the_three_line_script_and_the_tensorboard_block_run_after_a_plain_import_tfdist(tmp_path):
    """`tfdist.callbacks.TensorBoardRun` after a plain `import tfdist` raised AttributeError."""
    first = _block("import tfdist                                   # 1.")
    board = _block("board = tfdist.callbacks.TensorBoardRun(")
    script = tmp_path / "train.py"
    script.write_text(first.replace("import tensorflow as tf\n", "import tensorflow as tf\n" + _PRELUDE, 1)
                      + board + "print('DONE', sorted(history.history))\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path, env=subprocess_env())
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "DONE ['accuracy', 'examples_per_second'" in result.stdout
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("single-1w-b64-")
    assert list((runs[0] / "train").glob("events.out.tfevents.*"))


def test_the_tf_config_transcript_prints_what_the_readme_shows():
    transcript = next(block for block in _blocks("console") if "$ tfdist tf-config --chief node1:2222" in block)
    lines = transcript.splitlines()
    command = shlex.split(lines[0].removeprefix("$ "))[1:]
    shown = [line for line in lines[1:] if not line.startswith(("...", "node3$", "$"))]
    result = CliRunner().invoke(cli, command)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:len(shown)] == shown


def test_the_quoted_usage_error_is_the_real_one():
    block = next(block for block in _blocks("console") if "node2:70000" in block)
    command_line, quoted = block.splitlines()[:2]
    result = CliRunner().invoke(cli, shlex.split(command_line.removeprefix("$ "))[1:])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == quoted


def test_the_quoted_unknown_strategy_message_is_the_real_one():
    import tfdist
    from tfdist.strategies import UnknownStrategyError

    quoted = re.search(r"fails with\n`(unknown strategy 'horovd'.*?)`", README, flags=re.S).group(1)
    with pytest.raises(UnknownStrategyError) as info:
        tfdist.make_strategy("horovd")
    assert str(info.value) == " ".join(quoted.split())


def test_every_several_hosts_command_is_one_the_lab_tests_run():
    """tests/multihost reads its launch options from the README's Several hosts block: each line
    there must be found by exactly one of their lookups (an edited README line fails this first)."""
    from support import readme_launch_options

    used = {"--hosts h1:1,h2:1,h3:1 --workers 2 --ps 1": "test_launch_hosts.py",
            "--backend multi_worker_mirrored": "test_launch_hosts.py",
            "--backend horovod --hosts": "test_horovod_hosts.py", "--elastic": "test_horovod_hosts.py"}
    for containing, module in used.items():
        assert containing in (REPO / "tests" / "multihost" / module).read_text(), (containing, module)
        assert readme_launch_options(containing)
    section = README.split("\n## Several hosts\n", 1)[1]
    block = re.search(r"^```console\n(.*?)^```", section, flags=re.S | re.M).group(1)
    lines = [line for line in block.splitlines() if line.startswith("tfdist launch ")]
    assert len(lines) == len(used), lines


def test_the_advise_commands_run():
    section = README.split("\n## Which strategy? `tfdist advise`\n", 1)[1]
    block = re.search(r"^```console\n(.*?)^```", section, flags=re.S | re.M).group(1)
    commands = [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    assert len(commands) == 2
    for command in commands:
        result = CliRunner().invoke(cli, command[1:])
        assert result.exit_code == 0, result.output
        assert "Recommended: " in result.output or '"recommended"' in result.output
