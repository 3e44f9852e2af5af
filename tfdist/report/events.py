"""Read a runs folder back from its TensorBoard event files, with TensorBoard's own reader.

    runs = load_runs("runs")          # one Run per run folder, sorted by name
    runs[0].series("train", "epoch_loss").values

A run is a folder directly under the runs folder that holds event files in itself or below it
(``train/``, ``validation/``, ``system/<task>/``, ``worker/<i>/`` ...). Scalars written as TF2
tensor summaries and as TF1 ``simple_value`` are both read; the HParams record
(``session_start_info``) gives ``Run.hparams``. Nothing here imports TensorFlow itself; TensorBoard's
reader uses it when installed.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from tfdist.errors import ArgumentValueError, with_fix

#: The part of a file name that marks a TensorBoard event file.
EVENT_FILE_MARK = "tfevents"
#: ``sub`` of the scalars in a run's own folder (HParams record, time-to-target, summaries).
MAIN = "."
_SESSION_START_TAG = "_hparams_/session_start_info"


@dataclass(frozen=True)
class Series:
    """One scalar tag of one folder: values by step, with the wall time each was written at."""

    steps: tuple[int, ...]
    values: tuple[float, ...]
    wall_times: tuple[float, ...]

    @property
    def last(self) -> float:
        """The value at the highest step."""
        return self.values[-1]


@dataclass
class Run:
    """One run folder: its scalars keyed by (sub-folder, tag) and its hparams."""

    name: str
    path: str
    scalars: dict[tuple[str, str], Series] = field(default_factory=dict)
    hparams: dict[str, object] = field(default_factory=dict)

    def series(self, sub: str, tag: str) -> Series | None:
        """The scalars of ``tag`` in ``<run>/<sub>/`` (``MAIN`` for the run's own folder), or None."""
        return self.scalars.get((sub, tag))

    def tags(self, sub: str) -> list[str]:
        """The scalar tags of ``<run>/<sub>/``, sorted."""
        return sorted(tag for s, tag in self.scalars if s == sub)

    def subs(self, prefix: str = "") -> list[str]:
        """The sub-folders with scalars whose path starts with ``prefix``, sorted."""
        return sorted({s for s, _ in self.scalars if s.startswith(prefix)})

    @property
    def first_wall_time(self) -> float | None:
        """The wall time of the run's earliest scalar, the origin of event-time axes."""
        times = [s.wall_times[0] for s in self.scalars.values() if s.wall_times]
        return min(times) if times else None


def _event_files(folder: str) -> Iterator[tuple[str, str]]:
    """``(sub-folder relative to folder, file path)`` of every event file under ``folder``."""
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            if EVENT_FILE_MARK in name:
                sub = os.path.relpath(root, folder).replace(os.sep, "/")
                yield sub, os.path.join(root, name)


def _scalar_of(value) -> float | None:
    """The number a summary value holds, if it is a scalar (TF1 simple_value or a size-1 tensor)."""
    from tensorboard.util import tensor_util

    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind != "tensor" or value.metadata.plugin_data.plugin_name not in ("scalars", ""):
        return None
    try:
        array = tensor_util.make_ndarray(value.tensor)
    except (TypeError, ValueError):
        return None
    if array.size != 1 or array.dtype.kind not in "fiub":
        return None
    return float(array.reshape(-1)[0])


def _hparams_of(value) -> dict[str, object] | None:
    """The hparams of a ``session_start_info`` summary value, else None."""
    from tensorboard.plugins.hparams import metadata

    if value.tag != _SESSION_START_TAG or value.metadata.plugin_data.plugin_name != metadata.PLUGIN_NAME:
        return None
    info = metadata.parse_session_start_info_plugin_data(value.metadata.plugin_data.content)
    hparams: dict[str, object] = {}
    for name, proto in info.hparams.items():
        kind = proto.WhichOneof("kind")
        if kind == "number_value":
            number = proto.number_value
            hparams[name] = int(number) if math.isfinite(number) and number == int(number) else number
        elif kind == "string_value":
            hparams[name] = proto.string_value
        elif kind == "bool_value":
            hparams[name] = proto.bool_value
    return hparams


def load_run(path: str, name: str | None = None) -> Run:
    """Every scalar and the hparams of the run folder ``path``.

    Points of one tag at the same step (a restarted run writes a second file) keep the later one.
    """
    from tensorboard.backend.event_processing import event_file_loader

    run = Run(name=name or os.path.basename(os.path.normpath(path)), path=path)
    points: dict[tuple[str, str], dict[int, tuple[float, float]]] = {}
    for sub, file in _event_files(path):
        for event in event_file_loader.EventFileLoader(file).Load():
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                hparams = _hparams_of(value)
                if hparams is not None:
                    run.hparams.update(hparams)
                    continue
                number = _scalar_of(value)
                if number is None:
                    continue
                tag_points = points.setdefault((sub, value.tag), {})
                previous = tag_points.get(event.step)
                if previous is None or event.wall_time >= previous[0]:
                    tag_points[event.step] = (event.wall_time, number)
    for key in sorted(points):
        steps = sorted(points[key])
        run.scalars[key] = Series(steps=tuple(steps),
                                  values=tuple(points[key][s][1] for s in steps),
                                  wall_times=tuple(points[key][s][0] for s in steps))
    return run


def run_folders(runs_dir: str) -> list[str]:
    """The run folders of ``runs_dir``: its sub-folders holding event files, sorted by name.

    ``runs_dir`` may itself be one run (event files in it or in its ``train/``): then it is the only one.
    """
    if not os.path.isdir(runs_dir):
        raise ArgumentValueError(with_fix(f"`runs_dir` {runs_dir!r} is not a folder",
                                          "pass the --logdir your training wrote to, e.g. runs"))
    own = [sub for sub, _ in _event_files(runs_dir)]
    if any(sub in (MAIN, "train", "validation") for sub in own):
        return [runs_dir]
    folders = []
    for entry in sorted(os.listdir(runs_dir)):
        folder = os.path.join(runs_dir, entry)
        if os.path.isdir(folder) and next(_event_files(folder), None) is not None:
            folders.append(folder)
    return folders


def load_runs(runs_dir: str) -> list[Run]:
    """One :class:`Run` per run folder of ``runs_dir`` (see :func:`run_folders`), sorted by name."""
    folders = run_folders(runs_dir)
    if not folders:
        raise ArgumentValueError(with_fix(
            f"`runs_dir` {runs_dir!r} holds no TensorBoard runs (no '*tfevents*' file in it or its sub-folders)",
            "pass the --logdir your training wrote to (TensorBoardRun's logdir), e.g. runs"))
    return [load_run(folder) for folder in folders]
