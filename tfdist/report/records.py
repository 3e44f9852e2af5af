"""The TFRecord framing of TensorBoard event files, read in pure Python with bounds.

Each record is ``uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)``
(little-endian; the format of TensorFlow's ``tensorflow/core/lib/io/record_writer.cc``).

    with open(path, "rb") as file:
        records = RecordReader(file, size=os.fstat(file.fileno()).st_size)
        for record in records:
            if record.intact():
                ...
        records.end           # why reading stopped: "eof", "partial", "damaged" or "limit"

Why not TensorBoard's reader: with TensorFlow installed it imports TensorFlow, reads a file whole
with no bound, and stops silently at the first damaged record, so a garbage file reads as an empty
run. Here the length's checksum is checked for every record (8 bytes, so a garbage header is found
at once), the data's checksum only when :meth:`Record.intact` is asked (the caller asks for the
first record, every short record and every record it uses; a 1 MiB histogram it skips costs no CRC
in Python).
"""
from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8
#: Bytes of framing around a record's data: the smallest possible record.
RECORD_OVERHEAD = _HEADER.size + _FOOTER.size
#: Why a :class:`RecordReader` stopped.
EOF, PARTIAL, DAMAGED, LIMIT = "eof", "partial", "damaged", "limit"


def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``: ``crc32c(b"123456789") == 0xE3069283``."""
    crc, table = 0xFFFFFFFF, _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The checksum TFRecord stores: CRC-32C rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


@dataclass(frozen=True)
class Record:
    """One record: its byte offset in the file, its data and the data's stored checksum."""

    offset: int
    data: bytes
    crc: int

    def intact(self) -> bool:
        """Whether the data matches its checksum (computed on demand: pure Python, ~10 MB/s)."""
        return masked_crc32c(self.data) == self.crc


class RecordReader:
    """The records of a TFRecord file, in order, reading at most ``max_bytes`` of it.

    Iteration stops at the end of the file (``end == EOF``), at a record cut off by the end (a writer
    still writing or killed: ``PARTIAL``), at a record whose length fails its checksum (``DAMAGED``;
    nothing after it can be framed) or when the next record would pass ``max_bytes`` (``LIMIT``).
    ``offset`` is where it stopped. Records longer than ``max_record`` are skipped unread and counted
    in ``skipped``/``skipped_bytes``.
    """

    def __init__(self, file: BinaryIO, size: int, max_bytes: int, max_record: int):
        self._file, self._size = file, size
        self._max_bytes, self._max_record = max_bytes, max_record
        self.end: str | None = None
        self.offset = 0
        self.read_bytes = 0
        self.skipped = 0
        self.skipped_bytes = 0

    def __iter__(self) -> Iterator[Record]:
        while True:
            record = self._next()
            if record is None:
                return
            yield record

    def stop_damaged(self, record: Record) -> None:
        """End the iteration at ``record``, whose data the caller found not :meth:`~Record.intact`."""
        self.end, self.offset = DAMAGED, record.offset

    def _stop(self, end: str) -> None:
        self.end = end

    def _next(self) -> Record | None:
        while self.end is None:
            start = self.offset
            if start >= self._size:
                return self._stop(EOF)
            if self.read_bytes + _HEADER.size > self._max_bytes:
                return self._stop(LIMIT)
            header = self._file.read(_HEADER.size)
            self.read_bytes += len(header)
            if len(header) < _HEADER.size:
                return self._stop(PARTIAL if header else EOF)
            length, length_crc = _HEADER.unpack(header)
            if masked_crc32c(header[:8]) != length_crc:
                return self._stop(DAMAGED)
            end = start + _HEADER.size + length + _FOOTER.size
            if end > self._size:
                return self._stop(PARTIAL)
            if length > self._max_record:  # never a scalar: skipped unread
                self._file.seek(end)
                self.offset = end
                self.skipped += 1
                self.skipped_bytes += length
                continue
            if self.read_bytes + length + _FOOTER.size > self._max_bytes:
                return self._stop(LIMIT)
            body = self._file.read(length + _FOOTER.size)
            self.read_bytes += len(body)
            if len(body) < length + _FOOTER.size:  # the file shrank while it was read
                return self._stop(PARTIAL)
            self.offset = end
            return Record(start, body[:length], _FOOTER.unpack(body[length:])[0])
        return None
