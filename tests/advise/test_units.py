"""Rates and counts as people write them (tfdist/advise/units.py)."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

from tfdist.advise.errors import AdviseError
from tfdist.advise.units import (MAX_RATE, MIN_RATE, format_bytes, format_memory, format_rate, parse_bytes,
                                 parse_count, parse_rate)
from tfdist.errors import TfdistError


@pytest.mark.parametrize("text, bytes_per_second", [
    ("50mbit", 50e6 / 8), ("1gbit", 125e6), ("25gbit", 25e9 / 8), ("10gbps", 10e9 / 8),
    ("10Gbps", 10e9 / 8), ("1Gbit/s", 125e6), ("100 Mb/s", 100e6 / 8), ("200mbit", 25e6),
    ("1.5GB/s", 1.5e9), ("100MB/s", 100e6), ("100MBps", 100e6), ("125 bytes/s", 125.0), ("1000bit", 125.0),
    ("1kbit", 125.0), ("1Kibit", 1024 / 8), ("1GiB/s", 2.0**30), ("1e3mbit", 125e6), (".5gbit", 62.5e6),
    ("  1gbit  ", 125e6), ("1GBIT", 125e6), ("3tbit", 3e12 / 8),
])
def test_accepted_rates(text, bytes_per_second):
    assert parse_rate(text) == pytest.approx(bytes_per_second)


@pytest.mark.parametrize("text, words", [
    ("50", ["has no unit", "50mbit", "50MB/s"]),
    ("1.5", ["has no unit", "1.5gbit"]),
    ("10GBPS", ["does not say bits or bytes", "10gbit", "10GB/s"]),
    ("1gbyte", ["unknown unit 'byte'"]),
    ("1 furlong", ["unknown unit"]),
    ("-5mbit", ["is not a rate", "positive"]),
    ("0mbit", ["not a positive rate"]),
    ("0.0gbit", ["not a positive rate"]),
    ("1e400gbit", ["above 100 Tbit/s"]),
    ("200tbit", ["above 100 Tbit/s"]),
    ("1e-300bit", ["below 1 kbit/s", "check the unit"]),  # predicted "0 bit/s" and "inf ms" before
    ("8bit", ["below 1 kbit/s"]),
    ("124 bytes/s", ["below 1 kbit/s"]),
    ("nan", ["is not a rate"]),
    ("inf gbit", ["is not a rate"]),
    ("", ["is not a rate"]),
    ("gbit", ["is not a rate"]),
    ("1 g bit", ["is not a rate"]),
    ("1" * 100, ["too long"]),
])
def test_refused_rates_name_the_field_and_the_fix(text, words):
    with pytest.raises(AdviseError) as info:
        parse_rate(text, field="--bandwidth")
    message = str(info.value)
    assert message.startswith("--bandwidth ")
    assert "; fix: " in message
    for word in words:
        assert word in message
    assert info.value.field == "--bandwidth"
    assert isinstance(info.value, TfdistError) and isinstance(info.value, ValueError)


def test_a_non_string_rate_is_refused():
    with pytest.raises(AdviseError, match="must be text"):
        parse_rate(125e6)  # type: ignore[arg-type]


@settings(max_examples=examples(300), deadline=None)
@given(st.text(max_size=30))
def test_any_text_is_a_positive_finite_rate_or_an_advise_error(text):
    try:
        value = parse_rate(text)
    except AdviseError as exc:
        assert "; fix: " in str(exc)
    else:
        assert math.isfinite(value) and MIN_RATE <= value <= MAX_RATE


@settings(max_examples=examples(300), deadline=None)  # from 1 kbit/s (MIN_RATE) up
@given(st.floats(min_value=1, max_value=1e4), st.sampled_from(["k", "m", "g"]))
def test_bits_and_bytes_agree_and_rates_round_trip(number, prefix):
    bits = parse_rate(f"{number!r}{prefix}bit")
    assert parse_rate(f"{number!r}{prefix.upper()}B/s") == pytest.approx(8 * bits)
    assert parse_rate(f"{number!r}{prefix}bps") == pytest.approx(bits)
    assert parse_rate(format_rate(bits).replace(" ", "").replace("/s", "")) == pytest.approx(bits, rel=5e-3)


@pytest.mark.parametrize("text, count", [
    ("669706", 669_706), ("5,824,522", 5_824_522), ("5_824_522", 5_824_522), ("23.8M", 23_800_000),
    ("138m", 138_000_000), ("1.2B", 1_200_000_000), ("1.2G", 1_200_000_000), ("44.5 M", 44_500_000),
    ("2k", 2000), ("1e6", 1_000_000), (669706, 669_706), ("0.6", 1),
])
def test_accepted_counts(text, count):
    assert parse_count(text) == count


@pytest.mark.parametrize("text, words", [
    ("0", ["below 1"]), ("0.4", ["below 1"]), ("-3", ["not a count"]), ("12 params", ["not a count"]),
    ("1e30", ["above"]), ("x", ["not a count"]), ("", ["not a count"]), (True, ["must be a count"]),
])
def test_refused_counts(text, words):
    with pytest.raises(AdviseError) as info:
        parse_count(text)
    for word in [*words, "; fix: "]:
        assert word in str(info.value)


def test_formatting():
    assert format_rate(125e6) == "1 Gbit/s"
    assert format_rate(50e6 / 8) == "50 Mbit/s"
    assert format_rate(25e9 / 8) == "25 Gbit/s"
    assert format_rate(1) == "8 bit/s"
    assert format_bytes(669_706 * 4) == "2.68 MB"
    assert format_bytes(138e6 * 4) == "552 MB"
    assert format_bytes(999.9) == "1000 B"
    assert format_bytes(12) == "12 B"


@pytest.mark.parametrize("text, value", [("4GiB", 4 * 2**30), ("512M", 512 * 10**6), ("16Gi", 16 * 2**30),
                                         ("1.5GB", 1_500_000_000), ("4294967296", 2**32), ("512m", 512 * 10**6),
                                         (" 2 GiB ", 2 * 2**30), (1024, 1024)])
def test_memory_sizes(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text, words", [("0", "is below 1 byte"), ("-1", "is not a size"),
                                         ("lots", "is not a size"), ("4 GiBs", "is not a size"),
                                         ("nan", "is not a size"), ("2048TiB", "is above 1 PiB")])
def test_bad_memory_sizes_name_the_option_and_the_fix(text, words):
    with pytest.raises(AdviseError) as info:
        parse_bytes(text, field="--worker-memory")
    assert str(info.value).startswith(f"--worker-memory {text!r} {words}") and "; fix: " in str(info.value)
    assert format_memory(4 * 2**30) == "4 GiB" and format_memory(630e6) == "601 MiB"
