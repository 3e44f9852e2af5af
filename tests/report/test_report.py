"""`tfdist report`: the numbers it draws come from the event files, and the files it writes open.

The runs are written here with tf.summary (TF2 tensor scalars, as Keras writes them) and with
TensorBoard's EventFileWriter (TF1 ``simple_value`` scalars at chosen wall times).
"""
from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import pytest
from browser import ink, screenshot
from click.testing import CliRunner

from tfdist.cli.main import cli
from tfdist.report import write_report
from tfdist.report.data import report_data
from tfdist.report.events import load_runs
from tfdist.report.figures import DPI, PANEL_SIZE, draw_loss, page_png, page_size, panel_pngs, panels

# run -> hparams, train scalars by tag (one value per epoch), validation scalars, main-folder scalars
HVD_1W = ({"strategy": "horovod", "workers": 1, "batch_size": 32, "global_batch_size": 32, "lr": 0.01},
          {"epoch_loss": [1.0, 0.6, 0.4], "epoch_accuracy": [0.5, 0.8, 0.9],
           "epoch_examples_per_second": [100.0, 200.0, 220.0], "epoch_wall_time_s": [3.0, 5.0, 7.0],
           "epoch_worker/0/examples_per_second": [100.0, 200.0, 220.0]},
          {"epoch_loss": [0.9, 0.7, 0.5], "epoch_accuracy": [0.6, 0.75, 0.88]},
          {})
HVD_2W = ({"strategy": "horovod", "workers": 2, "batch_size": 32, "global_batch_size": 64, "lr": 0.01},
          {"epoch_loss": [0.9, 0.5, 0.3], "epoch_accuracy": [0.55, 0.85, 0.95],
           "epoch_examples_per_second": [150.0, 360.0, 380.0], "epoch_wall_time_s": [2.0, 3.5, 4.5],
           "epoch_worker/0/examples_per_second": [75.0, 185.0, 195.0],
           "epoch_worker/1/examples_per_second": [75.0, 175.0, 185.0],
           "epoch_worker/0/step_time_ms": [400.0, 170.0, 160.0],
           "epoch_worker/1/step_time_ms": [400.0, 180.0, 170.0],
           "epoch_worker_step_time_spread": [1.0, 1.2, 1.4]},
          {"epoch_loss": [0.8, 0.45, 0.35], "epoch_accuracy": [0.7, 0.92, 0.96]},
          {"time_to_target/val_accuracy>=0.9": 3.5})
PS_2W_HPARAMS = {"strategy": "parameter_server", "workers": 2, "batch_size": 32, "global_batch_size": 64,
                 "lr": 0.01, "time_to_val_accuracy_0.9": 7.5}
PS_T0 = 1_700_000_000.0  # wall time of the ps run's first event
PS_LOSS = [(0, PS_T0 + 4.0, 1.1), (1, PS_T0 + 6.5, 0.7), (2, PS_T0 + 9.0, 0.45)]


def _write_tf2(folder, scalars: dict[str, list[float]]) -> None:
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(folder))
    with writer.as_default():
        for tag, values in scalars.items():
            for step, value in enumerate(values):
                tf.summary.scalar(tag, value, step=step)
    writer.close()


def _write_hparams(folder, hparams) -> None:
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp

    writer = tf.summary.create_file_writer(str(folder))
    with writer.as_default():
        hp.hparams(hparams, trial_id=folder.name)
    writer.close()


def _write_tf1(folder, points: list[tuple[str, int, float, float]]) -> None:
    """``(tag, step, wall_time, value)`` as TF1 simple_value events at exactly those wall times."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(folder))
    for tag, step, wall_time, value in points:
        writer.add_event(Event(wall_time=wall_time, step=step,
                               summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)])))
    writer.close()


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for name, (hparams, train, validation, main) in {"hvd-1w": HVD_1W, "hvd-2w": HVD_2W}.items():
        _write_hparams(root / name, hparams)
        _write_tf2(root / name / "train", train)
        _write_tf2(root / name / "validation", validation)
        if main:
            _write_tf2(root / name, {tag: [value] for tag, value in main.items()})
    ps = root / "ps-2w"
    ps.mkdir()
    _write_tf1(ps, [("mean_examples_per_second", 3, PS_T0 + 9.5, 500.0)])
    _write_hparams(ps, PS_2W_HPARAMS)
    _write_tf1(ps / "train", [("epoch_loss", step, wall, value) for step, wall, value in PS_LOSS]
               + [("epoch_examples_per_second", s, PS_T0 + 1 + s, 400.0 + s) for s in range(3)])
    _write_tf1(ps / "validation", [("epoch_loss", 0, PS_T0 + 0.0, 1.3)])  # the run's first event
    _write_tf2(ps / "system" / "chief", {"system/cpu_percent": [50.0, 80.0], "system/rss_mb": [300.0, 310.0]})
    (root / "not-a-run").mkdir()  # no event files: not listed
    return root


@pytest.fixture(scope="module")
def data(runs_dir):
    return report_data(load_runs(str(runs_dir)))


def _by(items, **where):
    found = [i for i in items if all(getattr(i, k) == v for k, v in where.items())]
    assert len(found) == 1, (where, found)
    return found[0]


def test_runs_and_hparams_are_read_back(runs_dir):
    runs = load_runs(str(runs_dir))
    assert [r.name for r in runs] == ["hvd-1w", "hvd-2w", "ps-2w"]
    assert runs[1].hparams == HVD_2W[0]
    assert runs[2].hparams == PS_2W_HPARAMS
    assert runs[1].series("train", "epoch_loss").values == pytest.approx(HVD_2W[1]["epoch_loss"])
    assert runs[2].series("train", "epoch_loss").steps == (0, 1, 2)


def test_loss_and_accuracy_use_epoch_wall_time_when_logged(data):
    for run, (_, train, validation, _) in {"hvd-1w": HVD_1W, "hvd-2w": HVD_2W}.items():
        for sub, scalars in (("train", train), ("validation", validation)):
            loss = _by(data.loss, run=run, sub=sub)
            assert loss.clock == "epoch_wall_time_s"
            assert loss.times == pytest.approx(train["epoch_wall_time_s"])
            assert loss.values == pytest.approx(scalars["epoch_loss"])
            assert _by(data.accuracy, run=run, sub=sub).values == pytest.approx(scalars["epoch_accuracy"])


def test_without_epoch_wall_time_the_clock_is_event_time_since_the_first_event(data):
    loss = _by(data.loss, run="ps-2w", sub="train")
    assert loss.clock == "event time"
    assert loss.times == pytest.approx([wall - PS_T0 for _, wall, _ in PS_LOSS])
    assert loss.values == pytest.approx([value for _, _, value in PS_LOSS])
    assert not [c for c in data.accuracy if c.run == "ps-2w"]


def test_throughput_leaves_the_first_epoch_out_or_takes_the_runs_record(data):
    hvd_1w, hvd_2w, ps = (_by(data.throughput, run=r) for r in ("hvd-1w", "hvd-2w", "ps-2w"))
    assert hvd_1w.examples_per_second == pytest.approx((200 + 220) / 2)
    assert hvd_2w.examples_per_second == pytest.approx((360 + 380) / 2)
    assert ps.examples_per_second == pytest.approx(500.0) and ps.source == "mean_examples_per_second"
    assert dict(hvd_2w.per_worker) == pytest.approx({"0": 190.0, "1": 180.0})
    assert [rank for rank, _ in hvd_2w.per_worker] == ["0", "1"]
    assert dict(hvd_2w.step_time_ms_per_worker) == pytest.approx({"0": 165.0, "1": 175.0})
    assert hvd_2w.spread == pytest.approx(1.3)
    assert ps.per_worker == ()


def test_scaling_compares_runs_that_differ_only_in_workers(data):
    assert [(p.group, p.workers) for p in data.scaling] == [("strategy=horovod", 1), ("strategy=horovod", 2)]
    two = data.scaling[1]
    assert two.baseline_workers == 1 and two.runs == ("hvd-2w",)
    assert two.efficiency == pytest.approx(370 / (2 * 210))
    assert data.scaling[0].efficiency == pytest.approx(1.0)


def test_time_to_target_from_scalars_and_hparams(data):
    assert {(t.run, t.target): t.seconds for t in data.time_to_target} == {
        ("hvd-2w", "val_accuracy>=0.9"): 3.5, ("ps-2w", "val_accuracy_0.9"): 7.5}


def test_system_metrics_and_hparams_table(data):
    cpu = _by(data.system, run="ps-2w", tag="system/cpu_percent")
    assert cpu.sub == "system/chief" and cpu.times == (0.0, 1.0) and cpu.values == pytest.approx((50.0, 80.0))
    assert data.hparam_columns == ("run", "strategy", "workers", "batch_size", "global_batch_size", "lr",
                                   "time_to_val_accuracy_0.9")
    assert data.hparam_rows[2] == ("ps-2w", "parameter_server", "2", "32", "64", "0.01", "7.5")
    assert data.hparam_rows[0][-1] == ""


def test_the_drawn_loss_lines_are_the_event_values(data):
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    draw_loss(ax, data)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert len(lines) == len(data.loss) == 6
    line = lines["hvd-2w (validation)"]
    assert list(line.get_xdata()) == pytest.approx(HVD_2W[1]["epoch_wall_time_s"])
    assert list(line.get_ydata()) == pytest.approx(HVD_2W[2]["epoch_loss"])
    assert line.get_linestyle() == "--"


def _png_size(png: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        image.load()
        return image.size


def test_png_page_and_panels_decode_at_their_sizes(data, tmp_path, runs_dir):
    assert len(panels(data)) == 8  # six panels and, as ps-2w logged them, CPU and memory
    out = write_report(str(runs_dir), str(tmp_path / "report.png"))
    assert _png_size(Path(out).read_bytes()) == page_size(data) == (1400, round((4 * 4.2 + 0.6 + 0.28 * 4) * DPI))
    for _, png in panel_pngs(data):
        assert _png_size(png) == (round(PANEL_SIZE[0] * DPI), round(PANEL_SIZE[1] * DPI))
    assert _png_size(page_png(data)) == page_size(data)


def test_html_embeds_every_panel_and_the_hparams(runs_dir, data, tmp_path):
    out = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", str(runs_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(out)
    page = out.read_text()
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == len(panels(data))
    assert all(_png_size(base64.b64decode(image)) == (700, 420) for image in images)
    assert "<td>parameter_server</td>" in page and "<th>global_batch_size</th>" in page
    assert "http" not in page.replace("http-equiv", "")  # nothing fetched from elsewhere


def test_the_default_output_is_report_html_in_the_runs_dir(runs_dir, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(runs_dir, copy)
    result = CliRunner().invoke(cli, ["report", str(copy)])
    assert result.exit_code == 0, result.output
    assert (copy / "report.html").is_file() and result.output.strip() == str(copy / "report.html")


@pytest.mark.parametrize("args, named, fix", [
    (["{missing}"], "'RUNS_DIR'", "does not exist; fix: pass the --logdir your training wrote to"),
    (["{empty}"], "'RUNS_DIR'", "holds no TensorBoard runs"),
    (["{runs}", "--out", "report.pdf"], "'--out'", "must end in .html or .png, got 'report.pdf'; fix: pass e.g."),
])
def test_bad_arguments_are_usage_errors_naming_the_argument_and_the_fix(runs_dir, tmp_path, args, named, fix):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    paths = {"missing": tmp_path / "missing", "empty": tmp_path / "empty", "runs": runs_dir}
    result = CliRunner().invoke(cli, ["report", *(a.format(**paths) for a in args)])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for {named}" in result.output and fix in result.output
    assert "Traceback" not in result.output


def test_the_page_renders_in_headless_chromium(runs_dir, tmp_path):
    """Check as a person would: the page, opened in a browser, shows the figures (not a blank page)."""
    from PIL import Image

    out = tmp_path / "report.html"
    write_report(str(runs_dir), str(out))
    shot = screenshot(out.as_uri(), tmp_path / "page.png", size=(1400, 2000))
    with Image.open(shot) as image:
        assert image.size == (1400, 2000)
    assert ink(shot) > 0.03
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    assert ink(screenshot(blank.as_uri(), tmp_path / "blank.png", size=(1400, 2000))) < 0.001
