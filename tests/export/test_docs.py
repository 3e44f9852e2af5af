"""docs/export.md: its Python block runs as shown (an export, verified in a fresh process) and its
`tfdist export-check` transcript prints what the page shows, on that export."""
from __future__ import annotations

import pytest

from doc_pages import DOCS, blocks, steps, text
from support import invoke

PAGE = DOCS / "export.md"


@pytest.mark.slow  # the export's verification reloads it in a fresh interpreter importing TensorFlow
def test_the_pages_python_block_and_export_check_transcript_run_as_shown(tmp_path, monkeypatch):
    (code,) = blocks(text(PAGE), "python")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, str(PAGE), "exec"), namespace)  # make_strategy("auto"): single on this CPU
    assert namespace["path"] == str(tmp_path / "exports" / "classifier" / "1")
    assert sorted(p.name for p in (tmp_path / "exports" / "classifier").iterdir()) == ["1"]
    commands = [step for step in steps(PAGE) if not step.export]
    assert [step.argv for step in commands] == [("export-check", "exports/classifier/1")]
    for step in commands:
        result = invoke(*step.argv)
        assert result.exit_code == 0, result.output
        assert tuple(result.output.splitlines()) == step.output
