"""Every example imports tfdist before TensorFlow and Keras (no TensorFlow imported here).

``import tfdist`` first keeps ``tf.keras`` on tf-keras (the README's rule). test_examples.py runs
several examples one after the other in one process per shared job, where an example that imported
TensorFlow first would inherit an earlier one's tfdist import and pass: this check does not depend on
which example ran first.
"""
from __future__ import annotations

import ast

import pytest
from support import REPO

EXAMPLES = sorted((REPO / "examples").glob("*.py"))
FRAMEWORKS = ("tensorflow", "keras", "tf_keras", "horovod")


def _top_level_imports(path) -> list[str]:
    """The top-level packages the module imports at its top level, in order."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_example_imports_tfdist_before_any_framework(path):
    imports = _top_level_imports(path)
    frameworks = [i for i, name in enumerate(imports) if name in FRAMEWORKS]
    if not frameworks:
        return  # imports no framework at module level
    assert "tfdist" in imports[:frameworks[0]], f"{path.name}: {imports[frameworks[0]]} is imported before tfdist"


def test_the_check_finds_a_framework_imported_first(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import tensorflow as tf\nimport tfdist\n")
    with pytest.raises(AssertionError, match="tensorflow is imported before tfdist"):
        test_the_example_imports_tfdist_before_any_framework(bad)
