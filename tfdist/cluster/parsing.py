"""Reading untrusted JSON and YAML text: bounded size and depth, no repeated keys, no YAML aliases.

Python's own readers keep the last of two equal keys, recurse until ``RecursionError`` on deep
nesting, refuse integers over 4300 digits with a bare ``ValueError``, and PyYAML expands aliases
without bound ("billion laughs"). These readers turn each of those into a :class:`ClusterConfigError`
naming the problem, quickly:

>>> parse_json('{"task": 1, "task": 2}', "TF_CONFIG")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
tfdist.cluster.errors.ClusterConfigError: TF_CONFIG: key 'task' is given 2 times in one object; ...
"""
from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import yaml
import yaml.reader
from yaml.events import AliasEvent, CollectionStartEvent

from tfdist.cluster.errors import ClusterConfigError, Problem, shown
from tfdist.cluster.limits import MAX_DEPTH, MAX_DIGITS, MAX_INPUT_BYTES, limit_text

#: The byte-order mark, as decoded text (the bytes EF BB BF in UTF-8).
BOM = "\ufeff"
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


def _fail(source: str, message: str, fix: str) -> ClusterConfigError:
    return ClusterConfigError([Problem(source, message, fix)])


def decode(raw: str | bytes | bytearray, source: str) -> str:
    """`raw` as text: at most MAX_INPUT_BYTES, valid UTF-8 (a ``str`` with lone surrogates, as
    ``os.environ`` holds undecodable bytes, is not)."""
    if isinstance(raw, str):
        if len(raw) > MAX_INPUT_BYTES:  # characters: at least as many bytes
            raise _too_large(source)
        try:
            raw.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _fail(source, f"is not UTF-8 text (undecodable byte at character {exc.start})",
                        "write it as UTF-8 text") from None
        return _no_bom(raw, source)
    if len(raw) > MAX_INPUT_BYTES:
        raise _too_large(source)
    try:
        return _no_bom(bytes(raw).decode("utf-8"), source)
    except UnicodeDecodeError as exc:
        raise _fail(source, f"is not UTF-8 text ({exc.reason} at byte {exc.start})",
                    "write it as UTF-8 text") from None


def _no_bom(text: str, source: str) -> str:
    """`text`, unless it starts with a byte-order mark: TensorFlow's resolver refuses one in TF_CONFIG
    (``Unexpected UTF-8 BOM``), so every source refuses it alike, YAML (whose reader skips it) included."""
    if text.startswith(BOM):
        raise _fail(source, "starts with a UTF-8 byte-order mark (BOM), which TensorFlow's TF_CONFIG reader "
                    "refuses", "save it as UTF-8 without a BOM")
    return text


def _too_large(source: str) -> ClusterConfigError:
    return _fail(source, f"is larger than {limit_text(MAX_INPUT_BYTES)} bytes, tfdist's limit for a "
                 "TF_CONFIG or cluster file", "list at most 10,000 tasks; a real TF_CONFIG is far smaller")


def parse_json(text: str, source: str) -> Any:
    """Parse JSON text; raise ClusterConfigError on bad syntax, depth > MAX_DEPTH, repeated keys or
    numbers of more than MAX_DIGITS digits."""
    text = decode(text, source)
    depth = _json_depth(text)
    if depth > MAX_DEPTH:
        raise _too_deep(source, depth)
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        counts = Counter(key for key, _ in items)
        repeated.extend(f"key {shown(k)} is given {n} times in one object"
                        for k, n in counts.items() if n > 1)
        return dict(items)

    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_int=_bounded_int)
    except json.JSONDecodeError as exc:
        raise _fail(source, f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                    "fix the JSON syntax (keys and strings need double quotes, no trailing commas), or "
                    "generate it with `tfdist tf-config` and check it with `tfdist tf-config validate`"
                    ) from None
    except _TooManyDigits as exc:
        raise _fail(source, f"has a number of {exc.digits} digits; tfdist reads at most {MAX_DIGITS}",
                    "use a small whole number") from None
    except RecursionError:  # the depth scan above makes this unreachable; kept as a last guard
        raise _too_deep(source, depth) from None
    if repeated:
        raise ClusterConfigError([Problem(source, f"{text}; JSON readers keep only the last",
                                          "give each key once") for text in repeated])
    return value


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text like ``yaml.safe_load``; refuse anchors and aliases, repeated keys, depth >
    MAX_DEPTH and integers of more than MAX_DIGITS digits."""
    text = decode(text, source)
    try:
        loader = _StrictLoader(text)  # its reader refuses control characters (NUL, ESC, ...) here
    except yaml.reader.ReaderError as exc:
        raise _unprintable(text, source, exc) from None
    try:
        return loader.get_single_data()
    except _Refused as exc:
        raise _fail(source, exc.text, exc.fix) from None
    except yaml.reader.ReaderError as exc:
        raise _unprintable(text, source, exc) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise _fail(source, f"is not valid YAML: {problem}{where}", "fix the file's syntax") from None
    finally:
        loader.dispose()


def _unprintable(text: str, source: str, exc: yaml.reader.ReaderError) -> ClusterConfigError:
    """PyYAML's multi-line ReaderError as one problem naming the character and where it is."""
    position = max(0, min(exc.position, len(text)))
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
    return _fail(source, f"is not valid YAML: it holds the control character U+{code:04X} at line {line} "
                 f"column {column}; YAML files are printable text",
                 "remove the character (a NUL or other control byte often means a binary or damaged file)")


def parse_text(text: str | bytes, source: str, *, yaml_syntax: bool) -> Any:
    """:func:`parse_yaml` when `yaml_syntax`, else :func:`parse_json`."""
    return parse_yaml(text, source) if yaml_syntax else parse_json(text, source)  # type: ignore[arg-type]


class _TooManyDigits(ValueError):
    def __init__(self, digits: int):
        super().__init__(digits)
        self.digits = digits


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise _TooManyDigits(digits)
    return int(text)


def _json_depth(text: str) -> int:
    """Deepest nesting of arrays and objects, brackets inside strings ignored; linear time."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        else:
            depth -= 1
    return deepest


def _too_deep(source: str, depth: int) -> ClusterConfigError:
    return _fail(source, f"nests arrays/objects more than {MAX_DEPTH} levels deep; tfdist reads at most "
                 f"{MAX_DEPTH}", "a TF_CONFIG nests 3 levels; remove the extra nesting")


class _Refused(yaml.YAMLError):
    def __init__(self, text: str, fix: str):
        super().__init__(text)
        self.text, self.fix = text, fix


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without anchors/aliases, repeated keys, deep nesting or giant integers."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        mark = f"line {event.start_mark.line + 1} column {event.start_mark.column + 1}"
        if isinstance(event, AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused(f"uses a YAML anchor or alias at {mark}; tfdist refuses them (they can expand "
                           "without bound)", "write every value out in full")
        nested = isinstance(event, CollectionStartEvent)
        if nested:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nests collections more than {MAX_DEPTH} levels deep at {mark}; tfdist "
                               f"reads at most {MAX_DEPTH}", "a cluster file nests 2 levels; remove the "
                               "extra nesting")
        try:
            return super().compose_node(parent, index)
        finally:
            if nested:
                self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        if isinstance(node, yaml.MappingNode):
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    repeated = key in seen
                    seen.add(key)
                except TypeError:  # unhashable: the base class reports it
                    continue
                if repeated:
                    mark = key_node.start_mark
                    raise _Refused(f"key {shown(key)} is given more than once in one mapping (again at line "
                                   f"{mark.line + 1} column {mark.column + 1}); YAML readers keep only the "
                                   "last", "give each key once")
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: Any) -> int:
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_DIGITS:
            raise _Refused(f"has a number of {digits} digits; tfdist reads at most {MAX_DIGITS} (line "
                           f"{node.start_mark.line + 1})", "use a small whole number")
        return super().construct_yaml_int(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
