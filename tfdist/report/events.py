"""Read a runs folder back from its TensorBoard event files, with bounds and a reason for every file
that could not be read.

    runs = load_runs("runs")          # one Run per run folder, sorted by name
    runs[0].series("train", "epoch_loss").values
    runs[0].problems                  # [FileProblem]: what was not read, and why
    [r.name for r in runs if not r.has_data]   # the runs that show nothing

A run is a folder directly under the runs folder that holds event files in itself or below it
(``train/``, ``validation/``, ``system/<task>/``, ``worker/<i>/`` ...), see
:func:`~tfdist.report.files.find_runs`. The records are framed by :mod:`tfdist.report.records` (no
TensorFlow) and decoded with TensorBoard's protos: scalars written as TF2 tensor summaries and as TF1
``simple_value`` are both read; the HParams record (``session_start_info``) gives ``Run.hparams``.
A file that is not an event file, damaged, empty, unreadable, or a FIFO/socket/device (never opened)
is a :class:`~tfdist.report.files.FileProblem` of its run; nothing it holds can stop the others.
Scalars no run could log (infinite, beyond 1e15, at an absurd step or wall time) are left out and
named as their file's problem (:mod:`tfdist.report.values`).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.plugins.hparams import metadata
from tensorboard.util import tensor_util

from tfdist.errors import with_fix
from tfdist.report.files import (EVENT_FILE_MARK, MAIN, EventFile, FileProblem, RunFiles, RunsDirError,
                                 find_runs, open_event_file, run_files, run_folders, shown_path)
from tfdist.report.limits import MAX_FILE_BYTES, MAX_RECORD_BYTES, MAX_TOTAL_BYTES, size_text
from tfdist.report.records import DAMAGED, LIMIT, PARTIAL, RECORD_OVERHEAD, RecordReader
from tfdist.report.values import NAMED, left_out_note, usable_point

__all__ = ["EVENT_FILE_MARK", "MAIN", "Run", "RunsDirError", "Series", "load_run", "load_runs", "run_folders",
           "run_line"]

_SESSION_START_TAG = "_hparams_/session_start_info"
#: Most magnitude an HParams number is shown as an integer at (beyond, float64 holds no exact integer).
_EXACT_INTEGERS = 2 ** 53
_REMOVE = "remove it or move it out of the runs folder (only TensorBoard's writers make '*tfevents*' files)"
_ABSURD = ("no training run measures such values: look at what logged them (the other values are shown); "
           "remove the file to have no warning")


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
    """One run folder: its scalars keyed by (sub-folder, tag), its hparams, and what was not read."""

    name: str
    path: str
    scalars: dict[tuple[str, str], Series] = field(default_factory=dict)
    hparams: dict[str, object] = field(default_factory=dict)
    problems: list[FileProblem] = field(default_factory=list)
    files: int = 0
    files_read: int = 0

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
        times = [s.wall_times[0] for s in self.scalars.values()
                 if s.wall_times and math.isfinite(s.wall_times[0])]
        return min(times) if times else None

    @property
    def has_data(self) -> bool:
        """Whether anything was read that the report can show (a scalar or an hparam)."""
        return bool(self.scalars or self.hparams)


#: dtype enum -> (layout of tensor_content, field of a one-value tensor), for DT_FLOAT, DT_DOUBLE,
#: DT_INT32 and DT_INT64.
_PLAIN_DTYPES = {1: (struct.Struct("<f"), "float_val"), 2: (struct.Struct("<d"), "double_val"),
                 3: (struct.Struct("<i"), "int_val"), 9: (struct.Struct("<q"), "int64_val")}


def _plain_scalar(tensor) -> float | None:
    """A one-element float/int tensor's value without numpy (what Keras and tf.summary write), else None."""
    plain = _PLAIN_DTYPES.get(tensor.dtype)
    if plain is None or any(d.size != 1 for d in tensor.tensor_shape.dim):
        return None
    layout, field_name = plain
    if tensor.tensor_content:
        content = tensor.tensor_content
        return float(layout.unpack(content)[0]) if len(content) == layout.size else None
    values = getattr(tensor, field_name)
    return float(values[0]) if len(values) == 1 else None


def _scalar_of(value) -> float | None:
    """The number a summary value holds, if it is a scalar (TF1 simple_value or a size-1 tensor)."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind != "tensor" or value.metadata.plugin_data.plugin_name not in ("scalars", ""):
        return None
    plain = _plain_scalar(value.tensor)
    if plain is not None:
        return plain
    try:
        array = tensor_util.make_ndarray(value.tensor)
    except (TypeError, ValueError, KeyError):
        return None
    if array.size != 1 or array.dtype.kind not in "fiub":
        return None
    return float(array.reshape(-1)[0])


def _is_hparams(value) -> bool:
    return value.tag == _SESSION_START_TAG and value.metadata.plugin_data.plugin_name == metadata.PLUGIN_NAME


def _hparams_of(value) -> dict[str, object] | None:
    """The hparams of a ``session_start_info`` summary value, else None."""
    if not _is_hparams(value):
        return None
    info = metadata.parse_session_start_info_plugin_data(value.metadata.plugin_data.content)
    hparams: dict[str, object] = {}
    for name, proto in info.hparams.items():
        kind, name = proto.WhichOneof("kind"), shown_path(name)
        if kind == "number_value":
            number = proto.number_value
            exact = math.isfinite(number) and abs(number) <= _EXACT_INTEGERS and number == int(number)
            hparams[name] = int(number) if exact else number
        elif kind == "string_value":
            hparams[name] = shown_path(proto.string_value)
        elif kind == "bool_value":
            hparams[name] = proto.bool_value
    return hparams


class _Budget:
    """Bytes still to be read over all the event files of one report (MAX_TOTAL_BYTES)."""

    def __init__(self) -> None:
        self.left = MAX_TOTAL_BYTES


class _Points:
    """Scalars of one run as they are read: ``(sub, tag) -> step -> (wall_time, value)``; the points
    :func:`~tfdist.report.values.usable_point` refuses go to ``left_out`` of the file being read."""

    def __init__(self) -> None:
        self.by_tag: dict[tuple[str, str], dict[int, tuple[float, float]]] = {}
        self.left_out: list[tuple[str, int, float, float]] = []  # the first NAMED of them
        self.left_out_count = 0

    def add(self, sub: str, event) -> None:
        for value in event.summary.value:
            number = _scalar_of(value)
            if number is None:
                continue
            tag = shown_path(value.tag)
            if not usable_point(number, event.wall_time, event.step):
                self.left_out_count += 1
                if len(self.left_out) < NAMED:
                    self.left_out.append((tag, event.step, number, event.wall_time))
                continue
            tag_points = self.by_tag.setdefault((sub, tag), {})
            previous = tag_points.get(event.step)
            if previous is None or event.wall_time >= previous[0]:
                tag_points[event.step] = (event.wall_time, number)


@dataclass
class _Counts:
    events: int = 0
    not_events: int = 0


def _decode(reader: RecordReader, run: Run, points: _Points, sub: str, counts: _Counts) -> None:
    """Every record of ``reader`` into ``points``/``run.hparams``; stops the reader at a damaged record.

    Every record's checksum is checked, the ones the report does not use too (a graph, a histogram):
    a file with one flipped bit anywhere is damaged, never read as valid."""
    for record in reader:
        if not record.intact():
            reader.stop_damaged(record)
            return
        try:
            event = Event.FromString(record.data)
        except DecodeError:
            event = None
        if event is None:
            counts.not_events += 1
            continue
        counts.events += 1
        if event.HasField("summary"):
            for value in event.summary.value:
                hparams = _hparams_of(value)
                if hparams is not None:
                    run.hparams.update(hparams)
            points.add(sub, event)


def _read_file(run: Run, event_file: EventFile, points: _Points, budget: _Budget) -> None:
    """Read one event file into ``points``/``run.hparams``; what cannot be read becomes a run problem."""
    relative = event_file.relative
    if budget.left <= 0:
        run.problems.append(FileProblem(
            relative, f"not read: the report already read {size_text(MAX_TOTAL_BYTES)} of event files "
            "(tfdist report's limit)", "report on fewer runs at once"))
        return
    file, size, problem = open_event_file(event_file.path, relative)
    if problem is not None:
        run.problems.append(problem)
        return
    limit = min(MAX_FILE_BYTES, budget.left)
    reader = RecordReader(file, size, max_bytes=limit, max_record=MAX_RECORD_BYTES)
    counts = _Counts()
    points.left_out, points.left_out_count = [], 0
    try:
        with file:
            _decode(reader, run, points, event_file.sub, counts)
    except OSError as exc:
        run.problems.append(FileProblem(relative, f"cannot be read at byte {reader.offset:,}: "
                                        f"{exc.strerror or exc}", "check the disk, then run the report again",
                                        partly_read=counts.events > 0))
        return
    except Exception as exc:  # noqa: BLE001 - the reading boundary: a file's content never stops the report
        run.problems.append(FileProblem(relative, f"could not be decoded at byte {reader.offset:,} "
                                        f"({type(exc).__name__}: {str(exc)[:120]})", _REMOVE,
                                        partly_read=counts.events > 0))
        return
    finally:
        budget.left -= reader.read_bytes
    run.files_read += counts.events > 0
    problem = _ending_problem(relative, reader, size, counts.events, limit)
    if problem is not None:
        run.problems.append(problem)
    if reader.skipped:
        run.problems.append(FileProblem(
            relative, f"{reader.skipped:,} record(s) of more than {size_text(MAX_RECORD_BYTES)} were skipped "
            "unread (a graph or merged images; a scalar is about 100 bytes)",
            "log scalars in their own events (tf.summary.scalar) to have them in the report",
            partly_read=True))
    if counts.not_events and counts.events:
        run.problems.append(FileProblem(relative, f"{counts.not_events:,} record(s) are not TensorBoard "
                                        "events and were skipped", _REMOVE, partly_read=True))
    if points.left_out_count:
        run.problems.append(FileProblem(relative, left_out_note(points.left_out, points.left_out_count),
                                        _ABSURD, partly_read=True))


def _ending_problem(relative: str, reader: RecordReader, size: int, events: int,
                    limit: int) -> FileProblem | None:
    """Why a file's reading stopped early, or None when it was read to its end (or to a record still
    being written)."""
    if size == 0:
        return FileProblem(relative, "is empty (0 bytes)", "remove it: a writer that never wrote leaves one")
    if reader.end == DAMAGED:
        if events == 0:
            return FileProblem(relative, "is not a TensorBoard event file: its first record fails its "
                               "checksum", _REMOVE)
        return FileProblem(relative, f"is damaged at byte {reader.offset:,} (a record fails its checksum); "
                           f"the {events:,} events before it were read",
                           "the rest is lost; rerun the run to have it", partly_read=True)
    if reader.end == PARTIAL and events == 0:
        if size < RECORD_OVERHEAD:
            return FileProblem(relative, f"is too short to hold a record ({size:,} bytes): not an event "
                               "file, or its writer was cut off",
                               "remove it, or wait until the run has written more")
        return FileProblem(relative, f"ends inside its first record ({size:,} bytes): the writer was cut off",
                           "remove it, or wait until the run has written more")
    if reader.end == LIMIT:
        why = (f"it is larger than {size_text(MAX_FILE_BYTES)} (tfdist report's limit per file)"
               if limit == MAX_FILE_BYTES else
               f"the report reached its limit of {size_text(MAX_TOTAL_BYTES)} over all event files")
        return FileProblem(relative, f"only its first {size_text(reader.offset)} were read: {why}",
                           "report on fewer runs, or log fewer events per file", partly_read=events > 0)
    if events == 0:
        return FileProblem(relative, "holds no TensorBoard events", _REMOVE)
    return None


def _load(files: RunFiles, budget: _Budget) -> Run:
    run = Run(name=shown_path(files.name), path=files.path, problems=list(files.problems),
              files=len(files.files))
    points = _Points()
    for event_file in files.files:
        _read_file(run, event_file, points, budget)
    for key in sorted(points.by_tag):
        steps = sorted(points.by_tag[key])
        run.scalars[key] = Series(steps=tuple(steps),
                                  values=tuple(points.by_tag[key][s][1] for s in steps),
                                  wall_times=tuple(points.by_tag[key][s][0] for s in steps))
    if not run.has_data and not run.problems:
        run.problems.append(FileProblem(
            "its event files", "hold no scalars and no HParams",
            "log with TensorBoardRun or Keras' TensorBoard callback; a writer that only opened its file "
            "leaves this"))
    return run


def load_run(path: str, name: str | None = None) -> Run:
    """Every scalar and the hparams of the run folder ``path``; ``Run.problems`` says what was not read.

    Points of one tag at the same step (a restarted run writes a second file) keep the later one.
    """
    return _load(run_files(path, name), _Budget())


def load_runs(runs_dir: str) -> list[Run]:
    """One :class:`Run` per run folder of ``runs_dir`` (see :func:`~tfdist.report.files.find_runs`),
    sorted by name, the unreadable ones included (``has_data`` False, ``problems`` say why).

    Raises :class:`RunsDirError` (an ``ArgumentValueError``) when ``runs_dir`` holds no runs or is over
    a limit of :mod:`tfdist.report.limits`.
    """
    budget = _Budget()
    return [_load(files, budget) for files in find_runs(runs_dir)]


def run_line(run: Run) -> str | None:
    """One line saying what of ``run`` was not read and why (None when all was read)."""
    if not run.problems:
        return None
    first = run.problems[0]
    more = f" (and {len(run.problems) - 1} more)" if len(run.problems) > 1 else ""
    lead = f"run '{run.name}' not read" if not run.has_data else f"run '{run.name}' read in part"
    return with_fix(f"{lead}: {first.path}: {first.message}{more}", first.fix)
