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


def test_the_pages_error_messages_are_the_ones_raised(tmp_path, monkeypatch):
    """The page's `text` blocks quote two errors (an export_to path refused before training, a write
    under a file-size limit): they are what the code raises, at the page's path."""
    import errno
    import resource

    from tfdist.export import destination, failures
    from tfdist.export.paths import ExportPathError

    refused, limited = blocks(text(PAGE), "text")
    shown = "/work/exports/classifier/1"
    target = tmp_path / "exports" / "classifier" / "1"
    target.mkdir(parents=True)
    (target / "saved_model.pb").write_text("an export")
    with pytest.raises(ExportPathError) as info:
        destination.check(destination.declare(target))
    assert f"ExportPathError: {info.value}".replace(str(target), shown) == refused.strip()
    monkeypatch.setattr(resource, "getrlimit", lambda which: (4096, resource.RLIM_INFINITY))
    error = failures.limit_error(OSError(errno.EFBIG, "File too large"), str(target))
    assert f"ExportError: {error}".replace(str(target), shown) == limited.strip()
