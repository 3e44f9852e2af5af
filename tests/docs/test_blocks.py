"""Every command and Python block the README and the pages of docs/ show is run by a test: here, in
process, when it needs no cluster; otherwise it is listed below with the test that runs it. A new
command or block that is neither fails these tests."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from doc_pages import PAGES, Step, blocks, exported_value, name, steps, text
from support import REPO
from tfdist.cli.main import cli

_README_SCRIPT = ("tests/test_readme.py::"
                  "test_the_three_line_script_and_the_tensorboard_block_run_after_a_plain_import_tfdist")
_TF_CONFIG_API = "tests/docs/test_tf_config.py::test_the_python_api_blocks_run"
# Python blocks, by how they start, and the test that runs their code ("file::test" or a file).
_RUN_HERE = {
    "import tfdist                                   # 1.": _README_SCRIPT,
    "board = tfdist.callbacks.TensorBoardRun(": _README_SCRIPT,
    "from tfdist.cluster import ClusterSpec": _TF_CONFIG_API,
    "import os\nfrom tfdist.cluster import TFConfig": _TF_CONFIG_API,
}
# Blocks that are fragments of a longer script, and the test that runs the code they show.
_COVERED_ELSEWHERE = {
    "import tfdist\nimport tf_keras as keras": "tests/export/test_docs.py",
    "import keras\nimport numpy as np\n\nimport tfdist\n\nkeras.mixed_precision":
        "tests/strategies/test_mixed_precision.py::test_the_pages_python_block_runs",
    # the port prints the learning rate it trains at; every line of the port is a line of the example
    "opt = tf.keras.optimizers.Adam(0.001 * strategy.size)": "tests/examples/test_examples.py",
    "import tfdist  # before tensorflow; replaces": "tests/examples/test_examples.py",
    # shards=2 and min_shard_bytes runs
    'strategy = tfdist.make_strategy("parameter_server", shards=2)':
        "tests/strategies/test_parameter_server.py",
    # shape, limit_cpu, popen, cut, restore
    "from tfdist.testing.netlab import Lab": "tests/multihost/test_lab.py",
    # the loop of examples/custom_loop.py, line for line
    "with strategy.scope():\n    model = build_model(keras)":
        "tests/strategies/test_loop.py::test_the_pages_loop_is_the_examples_line_for_line",
    # Keras 3's fit and evaluate under parameter servers, as tests/scripts/ps_keras3.py runs them
    "with strategy.scope():\n    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32":
        "tests/strategies/test_keras3_parameter_server.py",
    # a loop driving Keras callbacks through strategy.callbacks, as the test's _train does
    "callbacks = strategy.callbacks(":
        "tests/strategies/test_loop_callbacks.py::test_the_loops_figures_reach_its_tensorboard_run",
}

# `tfdist` commands that need a cluster, hosts, TensorFlow or runs: the words they start with, the
# test file that runs them, and what that file contains to do so.
_COMMANDS_COVERED_ELSEWHERE = {
    "tfdist export-check": ("tests/export/test_docs.py", 'invoke(*step.argv)'),
    "tfdist launch --workers 2 --ps 1 --":
        ("tests/example_jobs.py", '"launch", "--workers", "2", "--ps", "1", "--"'),
    "tfdist launch --workers 2 --ps 2 --":
        ("tests/examples/test_recommender.py", '"launch", "--workers", "2", "--ps", "2", "--"'),
    "tfdist launch --workers 2 --ps 2 --evaluator --":
        ("tests/strategies/test_parameter_server.py", '"--workers", "2", "--ps", "2", "--evaluator"'),
    "tfdist launch --backend multi_worker_mirrored --workers 2 --":
        ("tests/example_jobs.py", '"--backend", "multi_worker_mirrored", "--workers", "2", "--"'),
    "tfdist launch --backend multi_worker_mirrored --workers 2 -- python examples/custom_loop.py":
        ("tests/strategies/test_loop.py", 'sys.executable, "examples/custom_loop.py", *args'),
    "tfdist launch --workers 2 --ps 1 -- python examples/custom_loop.py":
        ("tests/strategies/test_loop_parameter_server.py", '"launch", "--workers", "2", "--ps", "1", "--", sys.executable,'),
    "tfdist launch --backend horovod -np 2 --":
        ("tests/cli/test_launch.py", '"--backend", "horovod", "-np", "2", "--"'),
    "tfdist launch --hosts h1:1,h2:1,h3:1 --workers 2 --ps 1 --":
        ("tests/multihost/test_launch_hosts.py", 'options("--hosts h1:1,h2:1,h3:1 --workers 2 --ps 1")'),
    "tfdist launch --backend multi_worker_mirrored --hosts h1:1,h2:1 --workers 2 --":
        ("tests/multihost/test_launch_hosts.py", 'readme_launch_options("--backend multi_worker_mirrored")'),
    "tfdist launch --backend horovod --hosts h1:1,h2:1 --":
        ("tests/multihost/test_horovod_hosts.py", 'readme_launch_options("--backend horovod --hosts")'),
    "tfdist launch --hosts h0:1,h1:1,h2:1 --workers 1 --ps 2 --task-timeout 600 --":
        ("tests/multihost/test_memory.py",
         'LAYOUT = ("--hosts", "h0:1,h1:1,h2:1", "--workers", "1", "--ps", "2", "--task-timeout", "600")'),
    "tfdist launch --backend horovod --elastic --min-np 1 --max-np 2 --hosts h1:1,h2:1 --":
        ("tests/multihost/test_horovod_hosts.py", 'readme_launch_options("--elastic")'),
    "tfdist advise --probe --hosts":
        ("tests/multihost/test_advise_probe.py", '"advise", "--probe", "--hosts"'),
    "tfdist advise --time-step":
        ("tests/cli/test_advise_cli.py", '["advise", "--time-step", "--model", "models:build_model"'),
    "tfdist launch --backend auto --hosts":
        ("tests/multihost/test_advise_probe.py", '"launch", "--backend", "auto", "--hosts"'),
    "tfdist report runs": ("tests/report/test_report.py", 'invoke(cli, ["report", str(runs_dir), "--out"'),
    "tfdist env": ("tests/cli/test_env.py", '"tfdist", "env", "--json"'),
}


def _covering(step: Step) -> str | None:
    """The key of ``_COMMANDS_COVERED_ELSEWHERE`` whose words begin ``step``'s command, if one does."""
    words = ("tfdist", *step.argv)
    keys = [key for key in _COMMANDS_COVERED_ELSEWHERE if words[:len(key.split())] == tuple(key.split())]
    return max(keys, key=len) if keys else None


def runs_in_process(argv: tuple[str, ...]) -> bool:
    """A command this test runs itself: `--help`, `tf-config`, `advise` without `--probe` or `--time-step`, and
    `env --no-tensorflow`."""
    if "--help" in argv or "-h" in argv:
        return True
    return argv[:1] == ("tf-config",) or (argv[:1] == ("advise",) and not {"--probe", "--time-step"} & set(argv)) \
        or argv == ("env", "--no-tensorflow")


def _expected_exit_code(output: tuple[str, ...]) -> int:
    """What the shown output says the exit code is: a usage error (`Error: ...`) 2, an invalid
    TF_CONFIG 1, anything else 0."""
    if any(line.startswith("Error:") for line in output):
        return 2
    return 1 if output and " is invalid" in output[0] else 0


def _page_files(page: Path, into: Path) -> None:
    """The files a page's commands read: each ```yaml block whose first line is `# NAME`."""
    for block in blocks(text(page), "yaml"):
        first = block.splitlines()[0]
        if re.fullmatch(r"# [\w.-]+", first):
            (into / first[2:]).write_text(block)


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_command_of_the_page_runs_or_names_its_test(page, tmp_path, monkeypatch):
    """Each page is a session, in a fresh directory with the page's files: its commands run in order
    (an `export` sets a variable for the next ones), exit as the output shown implies, and print the
    lines shown (up to a `...`; a usage error's last lines)."""
    _page_files(page, tmp_path)
    monkeypatch.chdir(tmp_path)
    exported: dict[str, str] = {}
    for step in steps(page):
        if step.export:
            exported[step.export[0]] = exported_value(step.export[1], tmp_path)
            continue
        if not runs_in_process(step.argv):
            assert _covering(step), (f"{name(page)}: `{step.line}` is run by no test; run it in process here "
                                     "or add the test that runs it to _COMMANDS_COVERED_ELSEWHERE")
            continue
        env = {"TF_CONFIG": None, **exported, **dict(step.env)}
        result = CliRunner().invoke(cli, list(step.argv), env=env)
        where = f"{name(page)}: `{step.line}`"
        assert result.exception is None or isinstance(result.exception, SystemExit), (where, result.exception)
        code = _expected_exit_code(step.output)
        assert result.exit_code == code, (where, result.output)
        printed = result.output.splitlines()
        # click prints a usage error's Usage/Try lines first; pages show the last lines then
        shown = printed[len(printed) - len(step.output):] if code == 2 else printed[:len(step.output)]
        assert tuple(shown) == step.output, (where, result.output)


def test_the_pages_have_the_commands_the_tables_name():
    """No stale entry: each key covers a command of some page, and its test file still runs it."""
    covered = {_covering(step) for page in PAGES for step in steps(page)
               if not step.export and not runs_in_process(step.argv)}
    for key, (path, evidence) in _COMMANDS_COVERED_ELSEWHERE.items():
        assert key in covered, f"no page shows `{key} ...`; drop it from _COMMANDS_COVERED_ELSEWHERE"
        assert evidence in (REPO / path).read_text(), (key, path, evidence)
    in_process = [step for page in PAGES for step in steps(page) if step.argv and runs_in_process(step.argv)]
    assert {step.argv[0] for step in in_process} >= {"tf-config", "advise", "--help"}


def test_an_unrun_command_fails_the_check(tmp_path):
    """The check itself: a launch line no test runs is caught, one the table names is not."""
    page = tmp_path / "page.md"
    page.write_text("```console\ntfdist launch --workers 3 --ps 1 -- python t.py\n"
                    "tfdist launch --workers 2 --ps 1 -- python t.py\n```\n")
    new, known = steps(page)
    assert not runs_in_process(new.argv) and _covering(new) is None
    assert _covering(known) == "tfdist launch --workers 2 --ps 1 --"


def test_every_python_block_compiles_and_is_run_somewhere():
    found = [(page, block) for page in PAGES for block in blocks(text(page), "python")]
    assert len(found) >= 5
    starts = {**_RUN_HERE, **_COVERED_ELSEWHERE}
    for page, block in found:
        compile(block, name(page), "exec")
        matching = [start for start in starts if block.startswith(start)]
        assert len(matching) == 1, f"{name(page)}: a python block no test runs: {block[:80]!r}"
    for start, where in starts.items():
        assert sum(block.startswith(start) for _, block in found) == 1, f"not one block starts {start!r}"
        path, _, test = where.partition("::")
        source = (REPO / path).read_text()
        assert not test or f"def {test}(" in source, where
