"""tfdist.cluster.ascii_input: the one check every numeric parser makes first (issue 34: int(), float(),
str.isdigit() and the regex's \\d take any script's digits, so '٢' was read as 2 or written as is)."""
from __future__ import annotations

import doctest
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from support import examples
from tfdist.cluster import ascii_input
from tfdist.cluster.ascii_input import ascii_problem, ascii_spelling


def test_the_module_examples_hold():
    assert doctest.testmod(ascii_input).failed == 0


def test_the_problem_names_the_character_and_gives_the_ascii_spelling():
    problem = ascii_problem("１６Gi", "--memory-per-task", "4Gi")
    assert problem.field == "--memory-per-task"
    assert problem.message == ("holds '１' (U+FF11 FULLWIDTH DIGIT ONE), which is not ASCII; numbers are read in "
                               "ASCII only")
    assert problem.fix == "type it as '16Gi'"
    invisible = ascii_problem("2\u200b")  # a zero-width space: unnamed by the eye, named here
    assert invisible.message.startswith("holds '\\u200b' (U+200B ZERO WIDTH SPACE)")
    assert invisible.fix == "type it with the ASCII digits 0-9"
    assert ascii_problem("10²", example="4Gi").fix == "type it with the ASCII digits 0-9, e.g. 4Gi"
    assert ascii_problem("12 M") is None and ascii_problem("") is None
    assert ascii_problem("٢" * 10**6).fix == "type it with the ASCII digits 0-9"  # hostile input: not spelled


@settings(max_examples=examples(500), deadline=None)
@given(st.text(max_size=12))
def test_a_problem_exactly_when_the_text_is_not_ascii(text):
    problem = ascii_problem(text)
    assert (problem is None) is text.isascii()
    if problem is not None:
        first = next(c for c in text if not c.isascii())
        assert f"(U+{ord(first):04X}" in problem.message and problem.fix
        spelling = ascii_spelling(text)
        assert spelling is None or spelling.isascii()


@settings(max_examples=examples(500), deadline=None)
@given(st.lists(st.characters(categories=["Nd"]), min_size=1, max_size=8))
def test_digits_of_any_script_are_spelled_as_the_same_ascii_digits(digits):
    text = "".join(digits)
    assert ascii_spelling(text) == "".join(str(unicodedata.decimal(c)) for c in digits)
    assert ascii_spelling(text).isdigit() and ascii_spelling(text).isascii()
