"""Event files for the report tests, written with TensorBoard's own record writer (no TensorFlow).

``events.write(folder, scalars={"epoch_loss": [1.0, 0.5]}, hparams={...})`` writes one file the way
``EventFileWriter`` does (a ``file_version`` event, then one event per scalar), through TensorBoard's
``RecordWriter`` and its protos, so nothing here uses tfdist's reader. ``events.write_points(folder,
[(tag, step, wall_time, value)])`` writes float64 scalars (a DT_DOUBLE tensor: what ``tf.summary.scalar``
writes for a float64 value, and the only way to hold 1e308) at any step and wall time.
"""
from __future__ import annotations

import itertools
import struct
from pathlib import Path

import pytest

_SERIAL = itertools.count()


class EventWriter:
    """Writes TensorBoard event files; ``offsets(path)`` gives each record's (start, end) byte span."""

    def write(self, folder: Path, scalars: dict[str, list[float]] | None = None,
              hparams: dict[str, object] | None = None, wall_time: float = 1_700_000_000.0,
              tf1: bool = False, name: str | None = None, blob: int = 0) -> Path:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.hparams.summary_v2 import hparams_pb
        from tensorboard.plugins.scalar.summary_v2 import scalar_pb
        from tensorboard.summary.writer.record_writer import RecordWriter

        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (name or f"events.out.tfevents.{int(wall_time)}.test.{next(_SERIAL)}.v2")
        with open(path, "wb") as file:
            writer = RecordWriter(file)
            writer.write(Event(wall_time=wall_time, file_version="brain.Event:2").SerializeToString())
            if blob:  # a graph of `blob` bytes, as Keras' TensorBoard callback writes one
                writer.write(Event(wall_time=wall_time, graph_def=b"g" * blob).SerializeToString())
            if hparams:
                writer.write(Event(wall_time=wall_time, summary=hparams_pb(hparams, trial_id=folder.name))
                             .SerializeToString())
            for tag, values in (scalars or {}).items():
                for step, value in enumerate(values):
                    summary = (Summary(value=[Summary.Value(tag=tag, simple_value=value)]) if tf1
                               else scalar_pb(tag, value))
                    writer.write(Event(wall_time=wall_time + step, step=step, summary=summary).SerializeToString())
        return path

    def write_points(self, folder: Path, points: list[tuple[str, int, float, float]],
                     hparams: dict[str, object] | None = None, name: str | None = None) -> Path:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.plugins.hparams.summary_v2 import hparams_pb
        from tensorboard.plugins.scalar.metadata import create_summary_metadata
        from tensorboard.summary.writer.record_writer import RecordWriter

        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (name or f"events.out.tfevents.1700000000.points.{next(_SERIAL)}.v2")
        with open(path, "wb") as file:
            writer = RecordWriter(file)
            writer.write(Event(wall_time=1_700_000_000.0, file_version="brain.Event:2").SerializeToString())
            if hparams:
                writer.write(Event(wall_time=1_700_000_000.0, summary=hparams_pb(hparams, trial_id=folder.name))
                             .SerializeToString())
            metadata = create_summary_metadata(display_name=None, description=None)
            for tag, step, wall_time, value in points:
                tensor = TensorProto(dtype=2, double_val=[value])  # DT_DOUBLE, shape ()
                summary = Summary(value=[Summary.Value(tag=tag, metadata=metadata, tensor=tensor)])
                writer.write(Event(wall_time=wall_time, step=step, summary=summary).SerializeToString())
        return path

    @staticmethod
    def offsets(path: Path) -> list[tuple[int, int]]:
        """``(start, end)`` of every record, read from the length fields alone (no checksum)."""
        data, spans, at = path.read_bytes(), [], 0
        while at + 12 <= len(data):
            (length,) = struct.unpack_from("<Q", data, at)
            spans.append((at, at + 12 + length + 4))
            at += 12 + length + 4
        return spans


@pytest.fixture(scope="session")
def events() -> EventWriter:
    return EventWriter()
