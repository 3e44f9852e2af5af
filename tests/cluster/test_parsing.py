"""Tests of tfdist.cluster.parsing: bounded, strict readers of untrusted JSON and YAML."""

from __future__ import annotations

import time

import pytest

from tfdist.cluster.errors import ClusterConfigError
from tfdist.cluster.limits import MAX_DEPTH, MAX_INPUT_BYTES
from tfdist.cluster.parsing import decode, parse_json, parse_yaml

BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
worker: [*g,*g,*g,*g,*g,*g,*g,*g,*g]
"""


def _message(parse, text):
    with pytest.raises(ClusterConfigError) as info:
        parse(text, "src")
    (problem,) = info.value.problems
    assert problem.field == "src" and problem.fix
    return problem.message


def test_valid_text_parses_as_usual():
    assert parse_json('{"worker": ["a:1"], "n": -3}', "src") == {"worker": ["a:1"], "n": -3}
    assert parse_yaml("worker: [a:1]\nn: 0x10\n", "src") == {"worker": ["a:1"], "n": 16}


def test_repeated_json_keys_are_named_at_every_level():
    with pytest.raises(ClusterConfigError) as info:
        parse_json('{"task": 1, "cluster": {"worker": [], "worker": [], "worker": []}, "task": 2}',
                   "TF_CONFIG")
    assert [p.message for p in info.value.problems] == [
        "key 'worker' is given 3 times in one object; JSON readers keep only the last",
        "key 'task' is given 2 times in one object; JSON readers keep only the last",
    ]


def test_repeated_yaml_keys_are_named_with_their_line():
    message = _message(parse_yaml, "worker: [a:1]\nps: [b:1]\nworker: [c:1]\n")
    assert message == ("key 'worker' is given more than once in one mapping (again at line 3 column 1); "
                       "YAML readers keep only the last")
    assert "key 'x'" in _message(parse_yaml, "cluster:\n  x: 1\n  x: 2\n")


@pytest.mark.parametrize("text", ["a: &x 1\nb: 2\n", "a: &x 1\nb: *x\n", "a: &x [1]\n", BILLION_LAUGHS])
def test_yaml_anchors_and_aliases_are_refused_at_once(text):
    start = time.perf_counter()
    message = _message(parse_yaml, text)
    assert time.perf_counter() - start < 20  # a hang guard only; it takes milliseconds
    assert message.startswith("uses a YAML anchor or alias at line 1 column 4; tfdist refuses them")


@pytest.mark.parametrize("parse, text", [
    (parse_json, "[" * 100_000 + "]" * 100_000),
    (parse_json, '{"a":' * 50_000 + "1" + "}" * 50_000),
    (parse_yaml, "[" * 100_000 + "]" * 100_000),
    (parse_yaml, "".join(" " * i + "- \n" for i in range(0, 60, 2)) + " " * 60 + "- 1\n"),
], ids=["json-arrays", "json-objects", "yaml-flow", "yaml-block"])
def test_deep_nesting_is_refused_without_recursion_error(parse, text):
    assert f"more than {MAX_DEPTH} levels deep" in _message(parse, text)


def test_nesting_at_the_limit_is_read_and_brackets_in_strings_do_not_count():
    assert parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "src") is not None
    assert parse_json('{"a": "' + "[" * 100 + '"}', "src") == {"a": "[" * 100}
    assert parse_json('{"a": "\\"[[[[[[[[[[[[[[[[[[[[[[[[[["}', "src") == {"a": '"' + "[" * 26}


@pytest.mark.parametrize("parse, text", [
    (parse_json, '{"index": ' + "9" * 5000 + "}"),
    (parse_json, "-" + "1" * 19),
    (parse_yaml, "index: " + "9" * 5000),
    (parse_yaml, "index: " + "1_" * 19 + "1"),
], ids=["json-5000", "json-19", "yaml-5000", "yaml-underscores"])
def test_giant_integers_are_refused(parse, text):
    assert "digits; tfdist reads at most 18" in _message(parse, text)


def test_size_limit_and_utf8():
    assert decode("x" * MAX_INPUT_BYTES, "src") == "x" * MAX_INPUT_BYTES
    for raw in ("x" * (MAX_INPUT_BYTES + 1), b"x" * (MAX_INPUT_BYTES + 1)):
        assert _message(decode, raw).startswith("is larger than 1,048,576 bytes")
    assert _message(decode, b'{"a": "\xff"}') == "is not UTF-8 text (invalid start byte at byte 7)"
    assert _message(decode, "ab\udcff") == "is not UTF-8 text (undecodable byte at character 2)"
    assert _message(parse_json, b"\xc3") .startswith("is not UTF-8 text")
    assert _message(parse_yaml, b"\xc3") .startswith("is not UTF-8 text")
