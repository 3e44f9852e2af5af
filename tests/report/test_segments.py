"""`tfdist report` draws an adaptive run's plans on its time axis, each with its own predicted and
measured examples/s (issue 36 item 3).

The run is written as one adaptive run's chief writes it (callbacks/tensorboard.py): each plan's
``advice/segment/<variant>`` and prediction at the epochs done when it took over, the measured figures
at each epoch (1-based steps), and ``epoch_wall_time_s`` per epoch (0-based steps, Keras' own), which
the resumed plan continues. The task side is tested by tests/strategies/test_adaptive_resume.py.
"""
from __future__ import annotations

import re

import pytest

from support import invoke

T0 = 1_700_000_000.0
#: Horovod for 3 epochs, then parameter servers (the switch after epoch 3 took ~21 s of the run's clock).
MAIN_POINTS = [
    ("advice/segment/horovod", 0, T0, 1000.0), ("advice/predicted_examples_per_second", 0, T0, 1000.0),
    ("advice/predicted_step_ms", 0, T0, 128.0),
    ("advice/segment/parameter_server", 3, T0 + 40, 4000.0),
    ("advice/predicted_examples_per_second", 3, T0 + 40, 4000.0), ("advice/predicted_step_ms", 3, T0 + 40, 32.0),
    *(("advice/measured_examples_per_second", step, T0 + step, value)
      for step, value in zip(range(1, 7), [800.0, 820.0, 810.0, 3000.0, 3900.0, 4100.0])),
    *(("advice/measured_step_ms", step, T0 + step, value)
      for step, value in zip(range(1, 7), [160.0, 156.0, 158.0, 43.0, 33.0, 31.0])),
]
WALL = [5.0, 9.0, 13.0, 40.0, 42.0, 44.0]  # the end of epochs 1..6 on the run's clock


@pytest.fixture(scope="module")
def runs(tmp_path_factory, events):
    root = tmp_path_factory.mktemp("adaptive")
    events.write_points(root / "adaptive", MAIN_POINTS,
                        hparams={"plan/backend": "parameter_server", "plan/variant": "parameter_server"})
    events.write_points(root / "adaptive" / "train",
                        [("epoch_wall_time_s", step, T0 + step, wall) for step, wall in enumerate(WALL)]
                        + [("epoch_loss", step, T0 + step, 1.0 / (step + 1)) for step in range(6)])
    events.write(root / "fixed", {"advice/segment/horovod": [900.0], "advice/predicted_examples_per_second": [900.0],
                                  "advice/measured_examples_per_second": [700.0, 800.0]},
                 hparams={"plan/backend": "horovod", "plan/variant": "horovod"})
    return root


@pytest.fixture(scope="module")
def data(runs):
    from tfdist.report.data import report_data
    from tfdist.report.events import load_runs

    return report_data(load_runs(str(runs)))


def test_each_plan_is_a_segment_with_its_epochs_span_and_own_measurement(data):
    from tfdist.report.data import Segment

    assert data.segments == (
        Segment("adaptive", "horovod", 0, 3, 0.0, 13.0, 1000.0, 815.0),  # median of epochs 2-3
        Segment("adaptive", "parameter_server", 3, 6, 13.0, 44.0, 4000.0, 4000.0))  # of epochs 5-6
    assert [part.epochs for part in data.segments] == ["epochs 1-3", "epochs 4-6"]


def test_an_adaptive_run_has_one_prediction_row_per_plan_and_a_fixed_run_one(data):
    rows = [(p.run, p.plan, p.predicted_examples_per_second, p.measured_examples_per_second, p.ratio, p.epochs,
             p.predicted_step_ms, p.measured_step_ms) for p in data.predictions]
    assert rows == [
        ("adaptive", "horovod / horovod, epochs 1-3", 1000.0, 815.0, 0.815, 3, 128.0, 157.0),
        ("adaptive", "parameter_server / parameter_server, epochs 4-6", 4000.0, 4000.0, 1.0, 3, 32.0, 32.0),
        ("fixed", "horovod / horovod", 900.0, 800.0, pytest.approx(800 / 900), 2, None, None)]


def test_the_page_draws_the_plans_and_marks_the_switch_on_the_time_axis(runs, data, tmp_path):
    from matplotlib.figure import Figure

    from tfdist.report.figures import draw_loss, draw_segments, panels

    assert "Plans of adaptive runs against wall-clock time" in [title for title, _ in panels(data)]
    ax = Figure().add_subplot()
    draw_segments(ax, data)
    assert [(patch.get_x(), patch.get_width()) for patch in ax.patches] == [(0.0, 13.0), (13.0, 31.0)]
    labels = [t.get_text() for t in ax.texts]
    assert labels == [" horovod, epochs 1-3\n measured 815, predicted 1,000 ex/s",
                      " parameter_server, epochs 4-6\n measured 4,000, predicted 4,000 ex/s"]
    loss = Figure().add_subplot()
    draw_loss(loss, data)
    switches = [line.get_xdata()[0] for line in loss.lines if line.get_linestyle() == ":"]
    assert switches == [13.0] and [t.get_text() for t in loss.texts] == [" \u2192 parameter_server"]

    out = tmp_path / "report.html"
    result = invoke("report", str(runs), "--out", str(out))
    assert result.exit_code == 0 and result.stderr == "", result.output
    page = out.read_text()
    assert 'alt="Plans of adaptive runs against wall-clock time"' in page
    table = page[page.index("<h2>Predicted vs measured</h2>"):page.index("<h2>HParams</h2>")]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row)[:4] for row in re.findall(r"<tr>(.*?)</tr>", table)]
    assert [c for c in cells if c] == [["adaptive", "horovod", "horovod", "epochs 1-3"],
                                       ["adaptive", "parameter_server", "parameter_server", "epochs 4-6"],
                                       ["fixed", "horovod", "horovod", "all"]]


def test_a_run_of_one_plan_has_no_segments_panel(events, tmp_path):
    from tfdist.report.data import report_data
    from tfdist.report.events import load_runs
    from tfdist.report.figures import panels

    events.write(tmp_path / "fixed", {"advice/segment/horovod": [900.0, 900.0],  # a fit run twice on one plan
                                      "advice/predicted_examples_per_second": [900.0]})
    data = report_data(load_runs(str(tmp_path)))
    assert data.segments == () and len(data.predictions) == 1
    assert "Plans of adaptive runs" not in " ".join(title for title, _ in panels(data))


def test_names_that_look_like_mathtext_and_unusable_values_still_give_a_page(events, tmp_path):
    """A variant or run name with ``$`` is the user's text: matplotlib parsed ``$a_{`` as mathtext and
    the page failed as it was rendered, past every panel's guard. A segment without times is not drawn."""
    from tfdist.report.data import report_data
    from tfdist.report.events import load_runs
    from tfdist.report.figures import panels

    events.write_points(tmp_path / "r$x", [("advice/segment/a$b_{", 0, T0, 100.0),
                                           ("advice/segment/$\\frac{1", 2, T0, float("nan")),
                                           ("advice/measured_examples_per_second", 1, T0, 50.0),
                                           ("advice/measured_examples_per_second", 3, T0, 60.0)],
                        hparams={"plan/variant": "$x_{"})
    events.write_points(tmp_path / "r$x" / "train", [("epoch_loss", 0, T0, 1.0), ("epoch_loss", 2, T0, 0.5)])
    data = report_data(load_runs(str(tmp_path)))
    assert [part.variant for part in data.segments] == ["a$b_{", "$\\frac{1"]
    assert "Plans of adaptive runs against wall-clock time" not in [title for title, _ in panels(data)]  # no times
    for out in ("report.png", "report.html"):
        result = invoke("report", str(tmp_path), "--out", str(tmp_path / out))
        assert result.exit_code == 0 and result.stderr == "", result.output
    assert "a$b_{" in (tmp_path / "report.html").read_text()
