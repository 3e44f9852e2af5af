"""Rates and counts as people write them (tfdist/advise/units.py)."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

from tfdist.advise.errors import AdviseError
from tfdist.advise.units import (MAX_RATE, MIN_MEMORY, MIN_RATE, format_bytes, format_memory, format_rate,
                                 parse_bytes, parse_count, parse_rate)
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
                                         ("1.5GB", 1_500_000_000), ("4294967296", 2**32), ("512mi", 512 * 2**20),
                                         (" 2 GiB ", 2 * 2**30), (2**30, 2**30), ("4gb", 4 * 10**9),
                                         ("2gib", 2 * 2**30), ("512MB", 512 * 10**6), ("64Mi", MIN_MEMORY)])
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


# --- issue 34: memory that is ambiguous or absurd, numbers outside ASCII ------------------------------------

@pytest.mark.parametrize("text, fixes", [
    ("512m", ["write 512M for 512 megabytes", "512MiB for 512 mebibytes"]),
    ("512mb", ["write 512MB for 512 megabytes", "512MiB"]),
    ("512mB", ["write 512MB", "512MiB"]),
    ("1.5m", ["write 1.5M", "1.5MiB"]),
    (" 4096 m ", ["write 4096M", "4096MiB"]),
])
def test_a_lower_case_m_is_refused_naming_both_readings(text, fixes):
    """`512m` was taken as 512 MB; Kubernetes reads it as 0.512 bytes (milli). Neither is assumed."""
    with pytest.raises(AdviseError) as info:
        parse_bytes(text, field="--ps-memory")
    message = str(info.value)
    assert message.startswith(f"--ps-memory {text!r} is ambiguous: a lower-case m is milli in Kubernetes "
                              "quantities") and "and mega to many people; fix: " in message
    for fix in fixes:
        assert fix in message
    assert info.value.field == "--ps-memory"


@pytest.mark.parametrize("text, shown_as", [("1KiB", "1 KiB"), ("512", "512 B"), ("1k", "1000 B"),
                                            ("63Mi", "63 MiB"), (str(MIN_MEMORY - 1), "64 MiB"),
                                            ("0.06GiB", "61.4 MiB")])
def test_memory_below_64_mib_is_refused_as_a_unit_gone_wrong(text, shown_as):
    """`1KiB` was accepted as a host's memory; less than one TensorFlow process needs is a typo."""
    with pytest.raises(AdviseError) as info:
        parse_bytes(text, field="--worker-memory")
    assert str(info.value) == (
        f"--worker-memory {text!r} is {shown_as}, below 64 MiB: less than one TensorFlow process needs, so a "
        "unit is missing or wrong; fix: give the host's memory with its unit, e.g. 4GiB or 512MiB (a number "
        "alone is bytes)")
    assert parse_bytes(str(MIN_MEMORY)) == MIN_MEMORY == 64 * 2**20


PARSERS = [(parse_rate, "--bandwidth"), (parse_count, "--params"), (parse_bytes, "--ps-memory")]


@pytest.mark.parametrize("parse, field", PARSERS)
@pytest.mark.parametrize("text, char, spelling", [
    ("١٢M", "'١' (U+0661 ARABIC-INDIC DIGIT ONE)", "'12M'"),
    ("１６Gi", "'１' (U+FF11 FULLWIDTH DIGIT ONE)", "'16Gi'"),
    ("4\u00a0GiB", "'\\xa0' (U+00A0 NO-BREAK SPACE)", "'4 GiB'"),
    ("٢gbit", "'٢' (U+0662 ARABIC-INDIC DIGIT TWO)", "'2gbit'"),
    ("1\u20082G", "'\\u2008' (U+2008 PUNCTUATION SPACE)", "'1 2G'"),
    ("10²G", "'²' (U+00B2 SUPERSCRIPT TWO)", None),
])
def test_digits_and_spaces_outside_ascii_are_refused_with_the_ascii_spelling(parse, field, text, char, spelling):
    """`advise --params '١٢M'` was read as 12M: float() and the regex's \\d take any script's digits."""
    with pytest.raises(AdviseError) as info:
        parse(text, field=field)
    message = str(info.value)
    assert message.startswith(f"{field} {text!r} holds {char}, which is not ASCII; numbers are read in ASCII "
                              "only; fix: "), message
    assert (f"fix: type it as {spelling}" in message) if spelling else "type it with the ASCII digits 0-9" in message
    assert info.value.field == field


NON_ASCII = st.characters(min_codepoint=128, exclude_categories=["Cs"])


@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from(["12M", "1gbit", "4GiB", "23.8M", "100 MB/s", "2Gi", "669706", "1.5G"]), st.data())
def test_any_character_outside_ascii_is_refused_by_every_parser(valid, data):
    """A fuzzer: a valid text with one character replaced by, or joined to, a non-ASCII one (digits of any
    script, Unicode spaces, anything) is an AdviseError naming the option and the character, never a value."""
    digits = st.characters(categories=["Nd"]).filter(lambda c: not c.isascii())
    spaces = st.characters(categories=["Zs"]).filter(lambda c: not c.isascii())
    char = data.draw(st.one_of(digits, spaces, NON_ASCII))
    at = data.draw(st.integers(0, len(valid)))
    text = valid[:at] + char + valid[at + data.draw(st.integers(0, 1)):]
    for parse, field in PARSERS:
        with pytest.raises(AdviseError) as info:
            parse(text, field=field)
        message = str(info.value)
        first = next(c for c in text if not c.isascii())
        assert message.startswith(f"{field} ") and f"(U+{ord(first):04X}" in message
        assert "which is not ASCII" in message and "; fix: " in message


@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from([(parse_count, "--params", ("", "k", "M", "B")), (parse_bytes, "--ps-memory", ("Gi", "GB")),
                        (parse_rate, "--bandwidth", ("mbit", "gbit", "MB/s"))]),
       st.integers(1, 999), st.data())
def test_a_number_in_another_script_is_refused_and_its_ascii_spelling_is_the_value(case, number, data):
    """Each digit of a valid ASCII text swapped for the same digit of another script (Arabic-Indic,
    Persian, Devanagari, Bengali, Thai, fullwidth, mathematical bold): refused naming the option, and the
    spelling the fix gives is the ASCII text, which parses."""
    parse, field, suffixes = case
    ascii_text = f"{number}{data.draw(st.sampled_from(suffixes))}"
    zero = data.draw(st.sampled_from([0x0660, 0x06F0, 0x0966, 0x09E6, 0x0E50, 0xFF10, 0x1D7CE]))
    text = "".join(chr(zero + int(c)) if c.isdigit() else c for c in ascii_text)
    with pytest.raises(AdviseError) as info:
        parse(text, field=field)
    message = str(info.value)
    assert message.startswith(f"{field} {text!r} holds ") and "which is not ASCII" in message
    assert message.endswith(f"; fix: type it as {ascii_text!r}")
    assert parse(ascii_text, field=field) > 0
