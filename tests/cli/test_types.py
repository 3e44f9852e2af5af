"""Option types shared by the commands (tfdist/cli/types.py): bounded, finite, short messages."""
from __future__ import annotations

import math

import click
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from support import examples
from tfdist.cli.types import BoundedInt, FiniteFloat, Parsed
from tfdist.errors import TfdistError


def _command(option_type, default=None):
    @click.command()
    @click.option("--x", type=option_type, default=default)
    def command(x):
        click.echo(repr(x))
    return command


def _run(option_type, value: str):
    return CliRunner().invoke(_command(option_type), ["--x", value])


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e400"])
def test_finite_float_refuses_nan_and_infinity(value):
    """click's FloatRange(min=0) accepts nan (and inf without a max)."""
    result = _run(FiniteFloat(0, 10), value)
    assert result.exit_code == 2
    assert f"Invalid value for '--x': {value!r} is not a finite number; fix: give a finite number from 0 to 10" \
        in result.output


@pytest.mark.parametrize("value, accepted", [("0", True), ("10", True), ("10.0001", False), ("-0.0", True),
                                              ("1e1", True), (" 5 ", True), ("x", False), ("", False)])
def test_finite_float_bounds(value, accepted):
    result = _run(FiniteFloat(0, 10), value)
    assert (result.exit_code == 0) is accepted, result.output


def test_finite_float_open_low_bound_and_long_text():
    assert "is not above 0 to 1; fix: give a positive finite number above 0 to 1" in _run(
        FiniteFloat(0, 1, low_open=True), "0").output
    result = _run(FiniteFloat(0, 1), "1" * 5000)
    assert result.exit_code == 2 and "(5000 characters) is too long for a number" in result.output
    assert len(result.output) < 400


@settings(max_examples=examples(300), deadline=None)
@given(st.text(max_size=50))
def test_finite_float_gives_a_finite_number_in_range_or_exit_2(text):
    result = _run(FiniteFloat(-5, 5), text)
    if result.exit_code == 0:
        value = float(result.output)
        assert math.isfinite(value) and -5 <= value <= 5
    else:
        assert result.exit_code == 2 and "Traceback" not in result.output and "; fix: " in result.output


@pytest.mark.parametrize("value, message", [
    ("0", "0 is not in the range 1<=x<=10000; fix: give 1 to 10,000"),  # the limit is named above only
    ("10001", "10001 is not in the range 1<=x<=10000 (the limit); fix: give 1 to 10,000"),
    ("9" * 5000, "'999999999999999999999999'... (5000 characters) is not in the range 1<=x<=10000 (the limit)"),
    ("1.5", "'1.5' is not a whole number; fix: give one from 1 to 10,000"),
    ("", "'' is not a whole number"),
])
def test_bounded_int_messages_are_short(value, message):
    result = _run(BoundedInt(1, 10_000, limit="the limit"), value)
    assert result.exit_code == 2 and message in result.output and len(result.output) < 400


def test_bounded_int_accepts_its_range_and_signs():
    assert _run(BoundedInt(-3, 3), "-3").output == "-3\n"
    assert _run(BoundedInt(-3, 3), "+3").output == "3\n"
    assert CliRunner().invoke(_command(BoundedInt(1, 3), default=2), []).output == "2\n"


def test_parsed_maps_a_library_error_to_the_option():
    def parse(text: str) -> int:
        if text != "ok":
            raise TfdistError(f"{text!r} is not ok; fix: write ok")
        return 1

    assert _run(Parsed("OK", parse), "ok").output == "1\n"
    result = _run(Parsed("OK", parse), "no")
    assert result.exit_code == 2 and "Invalid value for '--x': 'no' is not ok; fix: write ok" in result.output


def test_task_count_is_a_bounded_int_with_tf_configs_wording():
    """tf-config's --workers/--ps-count: BoundedInt's checks, its own pinned echo and fix wording."""
    from tfdist.cli.types import TaskCount

    assert isinstance(TaskCount(), BoundedInt) and (TaskCount().low, TaskCount().high) == (0, 10_000)
    assert _run(TaskCount(), str(10 ** 30)).output.endswith(
        "Invalid value for '--x': a number of 31 digits is not in the range 0<=x<=10000 (tfdist's limit is "
        "10,000 tasks per cluster); fix: use 0 to 10,000\n")
    assert "'-1' is not" not in _run(TaskCount(), "-1").output
    assert "-1 is not in the range 0<=x<=10000; fix: use 0 to 10,000" in _run(TaskCount(), "-1").output
    assert "'2.5' is not a whole number; fix: give one from 0 to 10,000" in _run(TaskCount(), "2.5").output
    assert _run(TaskCount(), "+7").output == "7\n"
    assert "--x N" in CliRunner().invoke(_command(TaskCount()), ["--help"]).output


# --- issue 34: numbers outside ASCII ----------------------------------------------------------------------------

@pytest.mark.parametrize("option_type, value, message", [
    (BoundedInt(1, 10), "٢", "'٢' holds '٢' (U+0662 ARABIC-INDIC DIGIT TWO), which is not ASCII; numbers are read in "
                             "ASCII only; fix: type it as '2'"),
    (BoundedInt(1, 10), "\u00a02", "holds '\\xa0' (U+00A0 NO-BREAK SPACE), which is not ASCII"),
    (FiniteFloat(0, 100), "١٢.٥", "'١٢.٥' holds '١' (U+0661 ARABIC-INDIC DIGIT ONE), which is not ASCII; numbers are "
                                  "read in ASCII only; fix: type it as '12.5'"),
    (FiniteFloat(0, 100), "５", "holds '５' (U+FF15 FULLWIDTH DIGIT FIVE), which is not ASCII; numbers are read in "
                               "ASCII only; fix: type it as '5'"),
    (FiniteFloat(0, 100), "5\u2003", "fix: type it as '5'"),
    (FiniteFloat(0, 100), "10²", "fix: type it with the ASCII digits 0-9"),
])
def test_numbers_outside_ascii_are_refused_with_their_ascii_spelling(option_type, value, message):
    """float('١٢.٥') is 12.5: FiniteFloat accepted it; BoundedInt refused '٢' as "not a whole number",
    which it is to a reader of Arabic, without naming the character or the ASCII spelling."""
    result = _run(option_type, value)
    assert result.exit_code == 2 and "Invalid value for '--x': " in result.output
    assert message in result.output, result.output


@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from([BoundedInt(-100, 100), FiniteFloat(-100, 100)]),
       st.text(st.one_of(st.sampled_from("0123456789.-+e "), st.characters(categories=["Nd", "Zs", "No"])),
               min_size=1, max_size=6))
def test_any_number_text_is_ascii_or_refused(option_type, text):
    """A fuzzer over digits of every script, Unicode spaces and other number characters: a value comes
    only from ASCII text; anything else is exit 2 naming the character."""
    result = _run(option_type, text)
    if result.exit_code == 0:
        assert text.isascii(), text
        assert float(result.output) == float(text)
    else:
        assert result.exit_code == 2 and "; fix: " in result.output and "Traceback" not in result.output
        assert ("which is not ASCII" in result.output) is not text.isascii()
