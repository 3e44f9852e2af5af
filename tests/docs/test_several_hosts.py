"""docs/several-hosts.md: its launch lines are the ones the lab tests run."""
from __future__ import annotations

from doc_pages import DOCS, blocks, text
from support import REPO, readme_launch_options


def test_every_several_hosts_command_is_one_the_lab_tests_run():
    """tests/multihost reads its launch options from the page's Several hosts block: each line
    there must be found by exactly one of their lookups (an edited line fails this first)."""
    used = {"--hosts h1:1,h2:1,h3:1 --workers 2 --ps 1": "test_launch_hosts.py",
            "--backend multi_worker_mirrored": "test_launch_hosts.py",
            "--backend horovod --hosts": "test_horovod_hosts.py", "--elastic": "test_horovod_hosts.py"}
    for containing, module in used.items():
        assert containing in (REPO / "tests" / "multihost" / module).read_text(), (containing, module)
        assert readme_launch_options(containing)
    block = blocks(text(DOCS / "several-hosts.md"), "console")[0]
    lines = [line for line in block.splitlines() if line.startswith("tfdist launch ")]
    assert len(lines) == len(used), lines
