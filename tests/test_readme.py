"""The README, read as a user would: a front door of at most 15 KB whose three-line script runs, and
whose advise commands print a recommendation. The reference moved to docs/, and tests/docs/ runs what
its pages show (every command and Python block of the README included)."""
from __future__ import annotations

import shlex
import subprocess
import sys

import pytest
from click.testing import CliRunner

from doc_pages import DOCS, README, blocks, section, text
from support import subprocess_env
from tfdist.cli.main import cli

#: The README reads in five minutes (accelerate's is 14 KB, Horovod's 15.6 KB); reference goes to docs/.
MAX_README_BYTES = 15_360

# What the README's fragments assume the user already has: a model builder and the digits data.
_PRELUDE = '''
import numpy as np
from tfdist.datasets import load_digits

_digits = load_digits()
_x = (_digits.images[..., None] / 16.0).astype("float32")
x_train, y_train, x_test, y_test = _x[:256], _digits.target[:256], _x[256:384], _digits.target[256:384]
x, y = x_train, y_train


def build_model():
    import tensorflow as tf
    return tf.keras.Sequential([tf.keras.Input((8, 8, 1)), tf.keras.layers.Flatten(),
                                tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(10)])
'''

THREE_LINES = "import tfdist                                   # 1."
TENSORBOARD = "board = tfdist.callbacks.TensorBoardRun("


def _block(source: str, starting_with: str) -> str:
    found = [block for block in blocks(source, "python") if block.startswith(starting_with)]
    assert len(found) == 1, f"{len(found)} python blocks start with {starting_with!r}"
    return found[0]


def test_the_readme_is_a_five_minute_read():
    size = len(README.read_bytes())
    assert size <= MAX_README_BYTES, f"README.md: {size} bytes > {MAX_README_BYTES}; fix: move text to docs/"


@pytest.mark.slow
def test_the_three_line_script_and_the_tensorboard_block_run_after_a_plain_import_tfdist(tmp_path):
    """`tfdist.callbacks.TensorBoardRun` after a plain `import tfdist` raised AttributeError. The
    script is the README's; the TensorBoard block is docs/callbacks.md's."""
    first = _block(text(README), THREE_LINES)
    board = _block(text(DOCS / "callbacks.md"), TENSORBOARD)
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


def test_the_advise_commands_run():
    block = blocks(section(README, "## Which strategy?"), "console")[0]
    commands = [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    assert len(commands) == 2
    for command in commands:
        result = CliRunner().invoke(cli, command[1:])
        assert result.exit_code == 0, result.output
        assert "Recommended: " in result.output or '"recommended"' in result.output
