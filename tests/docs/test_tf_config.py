"""docs/tf-config.md as a user reads it: its worked example prints what the page shows, its quoted
usage error is the real one, and its Python API blocks run."""
from __future__ import annotations

import json
import shlex

from click.testing import CliRunner

from doc_pages import DOCS, blocks, text
from tfdist.cli.main import cli

PAGE = DOCS / "tf-config.md"


def test_the_tf_config_transcript_prints_what_the_page_shows():
    transcript = next(block for block in blocks(text(PAGE), "console")
                      if "$ tfdist tf-config --chief node1:2222" in block)
    lines = transcript.splitlines()
    command = shlex.split(lines[0].removeprefix("$ "))[1:]
    shown = [line for line in lines[1:] if not line.startswith(("...", "node3$", "$"))]
    result = CliRunner().invoke(cli, command)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:len(shown)] == shown


def test_the_quoted_usage_error_is_the_real_one():
    block = next(block for block in blocks(text(PAGE), "console") if "node2:70000" in block)
    command_line, quoted = block.splitlines()[:2]
    result = CliRunner().invoke(cli, shlex.split(command_line.removeprefix("$ "))[1:])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == quoted


def test_the_python_api_blocks_run(monkeypatch, capsys):
    """Both blocks of "Python API": the renderer prints the worked example's export lines, and the
    TFConfig block reads a real TF_CONFIG (a worker's, so its `if` body runs)."""
    render, read = [block for block in blocks(text(PAGE), "python") if "from tfdist.cluster import" in block]
    exec(compile(render, str(PAGE), "exec"), {})
    printed = capsys.readouterr().out
    assert printed.count("export TF_CONFIG=") == 4 and "# ps:0" in printed
    tf_config = {"cluster": {"chief": ["node1:2222"], "worker": ["node2:2222", "node3:2222"],
                             "ps": ["node3:2223"]},
                 "task": {"type": "worker", "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    scope: dict = {}
    exec(compile(read, str(PAGE), "exec"), scope)
    config = scope["config"]
    assert (config.is_chief, config.rank, config.num_workers, config.address("ps", 0)) == \
        (False, 2, 2, "node3:2223")
