"""The TFRecord framing reader of `tfdist report` against files framed by TensorBoard's RecordWriter."""
from __future__ import annotations

import io
import os

import pytest

from tfdist.report.records import DAMAGED, EOF, LIMIT, PARTIAL, RecordReader, crc32c, masked_crc32c


def _framed(*payloads: bytes) -> bytes:
    from tensorboard.summary.writer.record_writer import RecordWriter

    buffer = io.BytesIO()
    writer = RecordWriter(buffer)
    for payload in payloads:
        writer.write(payload)
    return buffer.getvalue()


def _read(data: bytes, max_bytes: int = 1 << 30, max_record: int = 1 << 20) -> tuple[list, RecordReader]:
    reader = RecordReader(io.BytesIO(data), len(data), max_bytes=max_bytes, max_record=max_record)
    return list(reader), reader


def test_crc32c_and_the_mask_match_the_standard_and_tensorboard():
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tensorboards

    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    for data in (b"", b"a", os.urandom(1000)):
        assert masked_crc32c(data) == tensorboards(data)


def test_every_record_is_read_back_intact():
    payloads = [b"first", b"", os.urandom(300)]
    records, reader = _read(_framed(*payloads))
    assert [r.data for r in records] == payloads and all(r.intact() for r in records)
    assert (reader.end, reader.offset) == (EOF, len(_framed(*payloads)))


def test_a_cut_inside_a_record_is_partial_and_keeps_the_records_before():
    data = _framed(b"one", b"two")
    records, reader = _read(data[:-2])
    assert [r.data for r in records] == [b"one"] and reader.end == PARTIAL and reader.offset == 12 + 3 + 4


def test_a_damaged_length_stops_at_its_record():
    data = bytearray(_framed(b"one", b"two", b"three"))
    data[19] ^= 0x04  # the second record's length
    records, reader = _read(bytes(data))
    assert [r.data for r in records] == [b"one"] and (reader.end, reader.offset) == (DAMAGED, 19)


def test_damaged_data_is_found_by_intact():
    data = bytearray(_framed(b"one", b"two"))
    data[12 + 3 + 4 + 12] ^= 0x01  # the second record's first data byte
    records, _ = _read(bytes(data))
    assert [r.intact() for r in records] == [True, False]


def test_garbage_is_damaged_at_byte_0():
    records, reader = _read(b"hello, this is not a record at all")
    assert records == [] and (reader.end, reader.offset) == (DAMAGED, 0)


@pytest.mark.parametrize("max_bytes, count", [(19, 1), (37, 1), (38, 2), (10, 0)])
def test_max_bytes_is_never_passed(max_bytes, count):
    records, reader = _read(_framed(b"one", b"two", b"three"), max_bytes=max_bytes)
    assert len(records) == count and reader.end == LIMIT and reader.read_bytes <= max_bytes


def test_long_records_are_skipped_unread():
    data = _framed(b"a", b"x" * 5000, b"b")
    records, reader = _read(data, max_record=100)
    assert [r.data for r in records] == [b"a", b"b"] and (reader.skipped, reader.skipped_bytes) == (1, 5000)
    assert reader.read_bytes == len(data) - 5000 - 4


def test_the_lane_checksum_of_long_data_is_the_byte_by_byte_one():
    """Long records are checked over numpy lanes (issue 34: every record is checked now, graphs too);
    it must be the CRC-32C of the bytes, at every length around the lane sizes and the switch-over."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tensorboards

    from tfdist.report.records import _crc32c_bytes

    @settings(database=None, deadline=None, max_examples=60)
    @given(data=st.binary(min_size=2000, max_size=70_000))
    def same(data: bytes) -> None:
        assert crc32c(data) == _crc32c_bytes(data) ^ 0xFFFFFFFF

    same()
    for size in (2047, 2048, 2049, 4096, 4097, 65535, 65536, 65537, 1 << 20):
        data = os.urandom(size)
        assert masked_crc32c(data) == tensorboards(data), size
