"""The Horovod paper's scaling efficiencies, reproduced by the rows' ``tfdist advise`` command lines
(tfdist/advise/paper.py; the table is in docs/advise.md)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from support import REPO

from tfdist.advise import paper
from tfdist.cli.main import cli


def efficiency(row: paper.Row, strategy: str = "horovod") -> float:
    result = CliRunner().invoke(cli, row.args(json=True), prog_name="tfdist")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["strategies"][strategy]["scaling_efficiency"]


@pytest.mark.parametrize("row", [r for r in paper.ROWS if r.paper is not None], ids=lambda r: r.model.name)
def test_paper_rows_within_ten_points(row):
    assert abs(efficiency(row) - row.paper) <= paper.TOLERANCE


def test_the_paper_rows_are_the_three_models_at_128_gpus_on_25gbit():
    rows = [r for r in paper.ROWS if r.paper is not None]
    assert [(r.model.name, r.gpus, r.bandwidth, r.paper) for r in rows] == [
        ("Inception V3", 128, "25gbit", 0.88), ("ResNet-101", 128, "25gbit", 0.88),
        ("VGG-16", 128, "25gbit", 0.68)]


def test_extensions_fall_with_slower_links_and_more_gpus():
    for model in paper.MODELS:
        rows = {(r.gpus, r.bandwidth): efficiency(r) for r in paper.ROWS if r.model == model}
        for gpus in (128, 512):
            assert rows[(gpus, "25gbit")] > rows[(gpus, "10gbit")] > rows[(gpus, "1gbit")]
        for rate in ("25gbit", "10gbit", "1gbit"):
            assert rows[(512, rate)] <= rows[(128, rate)]


def test_vgg_scales_worst_and_the_command_lines_are_what_docs_show():
    at_128 = {r.model.name: efficiency(r) for r in paper.ROWS if r.paper is not None}
    assert at_128["VGG-16"] < min(at_128["Inception V3"], at_128["ResNet-101"])
    text = (REPO / "docs" / "advise.md").read_text()
    for row in paper.ROWS:
        assert " ".join(["tfdist", *row.args()]) in text, row
