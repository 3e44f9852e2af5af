"""`tfdist report` draws an advisor plan's predicted examples/s against what the run measured (issue 19 item 4).

The runs carry the scalars the plan callback writes in the run's own folder (``advice/*``) and the plan's
HParams (``plan/backend``, ``plan/variant``, ``plan/<option>``); they are written here with TensorBoard's
record writer as TF2 tensor scalars (the ``events`` fixture of tests/report/conftest.py).
"""
from __future__ import annotations

import base64
import io
import re

import pytest

from support import invoke

PLANNED = {
    "advice/predicted_examples_per_second": [1000.0],
    "advice/predicted_step_ms": [64.0],
    "advice/measured_examples_per_second": [500.0, 800.0, 900.0, 850.0],  # median of epochs 2..: 850
    "advice/measured_step_ms": [128.0, 80.0, 70.0, 75.0],  # median of epochs 2..: 75
    "advice/measured_over_predicted": [0.5, 0.8, 0.9, 0.85],
}
PLANNED_HPARAMS = {"plan/backend": "horovod", "plan/variant": "fp16-allreduce", "plan/fusion_threshold_mb": 64,
                   "workers": 2}
ONE_EPOCH = {"advice/predicted_examples_per_second": [200.0], "advice/measured_examples_per_second": [150.0]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, events):
    root = tmp_path_factory.mktemp("planned")
    writer = events
    writer.write(root / "planned", PLANNED, hparams=PLANNED_HPARAMS)
    writer.write(root / "planned" / "train", {"epoch_loss": [1.0, 0.7, 0.5, 0.4]})
    writer.write(root / "one-epoch", ONE_EPOCH, hparams={"plan/backend": "parameter_server"})
    writer.write(root / "plain" / "train", {"epoch_loss": [1.0, 0.5], "epoch_examples_per_second": [10.0, 20.0]})
    return root


@pytest.fixture(scope="module")
def data(runs):
    from tfdist.report.data import report_data
    from tfdist.report.events import load_runs

    return report_data(load_runs(str(runs)))


def test_load_runs_reads_the_advice_scalars_and_plan_hparams_back(runs):
    from tfdist.report.events import MAIN, load_runs

    planned = {run.name: run for run in load_runs(str(runs))}["planned"]
    for tag, values in PLANNED.items():
        series = planned.series(MAIN, tag)
        assert series.values == pytest.approx(values) and series.steps == tuple(range(len(values))), tag
    assert planned.hparams == PLANNED_HPARAMS


def test_the_prediction_is_the_median_of_epochs_after_the_first_against_the_prediction(data):
    predictions = {p.run: p for p in data.predictions}
    assert sorted(predictions) == ["one-epoch", "planned"]  # "plain" logged no prediction
    planned = predictions["planned"]
    assert planned.predicted_examples_per_second == 1000.0
    assert planned.measured_examples_per_second == 850.0 and planned.ratio == pytest.approx(0.85)
    assert planned.epochs == 4 and planned.predicted_step_ms == 64.0 and planned.measured_step_ms == 75.0
    assert (planned.backend, planned.variant, planned.options) == ("horovod", "fp16-allreduce",
                                                                  (("fusion_threshold_mb", "64"),))
    one = predictions["one-epoch"]
    assert (one.measured_examples_per_second, one.ratio, one.epochs) == (150.0, 0.75, 1)  # the only epoch counts
    assert (one.plan, one.measured_step_ms) == ("parameter_server", None)


def test_the_html_shows_the_predicted_figure_and_the_numbers(runs, data, tmp_path):
    from tfdist.report.figures import panels

    out = tmp_path / "report.html"
    result = invoke("report", str(runs), "--out", str(out))
    assert result.exit_code == 0 and result.stderr == "", result.output
    page = out.read_text()
    assert [title for title, _ in panels(data)].count("Predicted against measured examples per second") == 1
    assert 'alt="Predicted against measured examples per second"' in page
    table = page[page.index("<h2>Predicted vs measured</h2>"):page.index("<h2>HParams</h2>")]
    rows = re.findall(r"<tr>(.*?)</tr>", table)
    cells = [c for row in rows if (c := re.findall(r"<td[^>]*>(.*?)</td>", row))]
    assert cells == [
        ["one-epoch", "parameter_server", "", "all", "", "200.0", "150.0", "0.750", "1", "", ""],
        ["planned", "horovod", "fp16-allreduce", "all", "fusion_threshold_mb=64", "1,000.0", "850.0", "0.850", "4",
         "64.0", "75.0"]]


def test_the_png_page_has_the_panel(runs, data, tmp_path):
    from PIL import Image

    from tfdist.report.figures import left_out, page_size, panels

    # loss, examples/s and predicted-vs-measured; the four panels these runs have nothing for are one
    # line each (issue 34: no empty panels); no system metrics
    assert [title for title, _ in panels(data)] == [
        "Loss against wall-clock time", "Examples per second per run", "Predicted against measured examples per second"]
    assert [title for title, _ in left_out(data)] == [
        "Accuracy against wall-clock time", "Examples per second per worker", "Scaling efficiency against workers",
        "Time to target"]
    out = tmp_path / "report.png"
    assert invoke("report", str(runs), "--out", str(out)).exit_code == 0
    with Image.open(out) as image:
        assert image.size == page_size(data) == (1400, round((2 * 4.2 + 0.2 + 0.22 * 4 + 0.6 + 0.28 * 4) * 100))


def test_the_drawn_bars_are_the_predicted_and_measured_values(data):
    from matplotlib.figure import Figure

    from tfdist.report.figures import draw_predictions

    ax = Figure().add_subplot()
    draw_predictions(ax, data)
    widths = sorted(round(patch.get_width(), 3) for patch in ax.patches)
    assert widths == [150.0, 200.0, 850.0, 1000.0]
    texts = sorted(t.get_text().strip() for t in ax.texts)
    assert texts == ["measured/predicted 0.75", "measured/predicted 0.85"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["one-epoch\nparameter_server", "planned\nhorovod / fp16-allreduce"]


def test_runs_without_a_prediction_are_unaffected(events, tmp_path):
    from tfdist.report.data import report_data
    from tfdist.report.events import load_runs
    from tfdist.report.figures import panels

    events.write(tmp_path / "plain" / "train", {"epoch_loss": [1.0, 0.5]})
    data = report_data(load_runs(str(tmp_path)))
    assert data.predictions == () and "Predicted" not in " ".join(title for title, _ in panels(data))
    out = tmp_path / "report.html"
    assert invoke("report", str(tmp_path), "--out", str(out)).exit_code == 0
    assert "Predicted vs measured" not in out.read_text()


def test_a_measured_ratio_alone_gives_the_measured_rate(events, tmp_path):
    from tfdist.report.data import report_data
    from tfdist.report.events import load_runs

    events.write(tmp_path / "r", {"advice/predicted_examples_per_second": [400.0],
                                  "advice/measured_over_predicted": [0.2, 0.5, 0.7]})
    (prediction,) = report_data(load_runs(str(tmp_path))).predictions
    assert prediction.ratio == pytest.approx(0.6) and prediction.measured_examples_per_second == pytest.approx(240.0)


def _png_of(page: str, title: str) -> bytes:
    match = re.search(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="' + re.escape(title), page)
    return base64.b64decode(match.group(1))


def test_the_panel_is_not_blank(runs, tmp_path):
    from PIL import Image

    out = tmp_path / "report.html"
    assert invoke("report", str(runs), "--out", str(out)).exit_code == 0
    with Image.open(io.BytesIO(_png_of(out.read_text(), "Predicted against measured"))) as image:
        histogram = image.convert("L").histogram()
        dark = sum(histogram[:200]) / sum(histogram)
    assert dark > 0.01
