"""Reading the README and the pages of docs/ as the tests of tests/docs/ and tests/test_readme.py need
them: fenced blocks, sections, the ``tfdist`` commands of console blocks, and heading anchors.
Importable as ``doc_pages`` through pytest's ``pythonpath``, like ``support``."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from support import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
#: The pages whose commands and Python blocks must be run by a test.
PAGES: tuple[Path, ...] = (README, *sorted(DOCS.glob("*.md")))
#: The pages whose relative links must resolve (the benchmarks' page links into docs/ too).
LINKED_PAGES: tuple[Path, ...] = (*PAGES, REPO / "benchmarks" / "README.md")

_FENCE = re.compile(r"^```([\w+-]*)\n(.*?)^```[ \t]*$", flags=re.S | re.M)
#: A shell prompt: ``$ `` or ``host$ `` at the start of a line.
_PROMPT = re.compile(r"^[\w.-]*\$ ")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SUBSTITUTION = re.compile(r"\$\((tfdist [^()]*)\)")
_CAT = re.compile(r"^\$\(cat ([^()\s]+)\)$")


@lru_cache(maxsize=None)
def text(page: Path) -> str:
    return page.read_text()


def name(page: Path) -> str:
    """``README.md`` or ``docs/advise.md``: how tests and messages name a page."""
    return page.relative_to(REPO).as_posix()


def blocks(source: str, language: str) -> list[str]:
    """The contents of the fenced blocks of ``language`` in ``source``, in order."""
    return [body for lang, body in _FENCE.findall(source) if lang == language]


def section(page: Path, heading: str) -> str:
    """The text under the heading line ``heading`` (e.g. ``"## Porting from Horovod"``) of ``page``, up
    to the next heading of the same or a higher level; fails naming the page if it is not there once."""
    source, prose = text(page), without_code(text(page))
    starts = [match.end() for match in re.finditer(rf"^{re.escape(heading)}\n", prose, flags=re.M)]
    if len(starts) != 1:
        raise AssertionError(f"{name(page)} has {len(starts)} headings {heading!r}")
    level = len(heading.split(" ", 1)[0])
    end = re.compile(rf"^#{{1,{level}}} ", flags=re.M).search(prose, starts[0])
    return source[starts[0]:end.start() if end else len(source)]


def without_code(source: str) -> str:
    """``source`` with the text of its fenced blocks blanked, line breaks kept (so offsets match):
    their ``#`` lines are not headings, their ``[x](y)`` not links."""
    return _FENCE.sub(lambda match: re.sub(r"[^\n]", " ", match.group(0)), source)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of ``page``, with GitHub's ``-1``, ``-2`` for repeated headings."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", without_code(text(page)), flags=re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


@dataclass(frozen=True)
class Step:
    """One command of a console block. ``argv`` is what follows ``tfdist`` (empty for an ``export``),
    ``env`` the assignments before it, ``output`` the lines the page shows it printing (up to a
    ``...`` line), ``line`` the command as the page writes it."""

    page: Path
    line: str
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    output: tuple[str, ...] = ()
    export: tuple[str, str] | None = None


def _commands(block: str) -> list[tuple[str, list[str]]]:
    """(command line, output lines) of a console block. A block with prompts is a transcript: its
    prompted lines are commands and the lines after each its output; a block without is a list of
    commands. A trailing ``\\`` continues a command on the next line."""
    lines = block.splitlines()
    transcript = any(_PROMPT.match(line) for line in lines)
    found: list[tuple[str, list[str]]] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if transcript and not _PROMPT.match(line):
            if found:
                found[-1][1].append(line)
            continue
        command = _PROMPT.sub("", line, count=1)
        while command.endswith("\\") and index < len(lines):
            command = command[:-1] + " " + lines[index].strip()
            index += 1
        if command.strip():
            found.append((command, []))
    return found


def steps(page: Path) -> list[Step]:
    """Every ``tfdist`` command of ``page``'s console blocks, in order, and the ``export``s between
    them. A command counts when it starts its line (after a prompt and ``NAME=value`` assignments)
    or is a ``$(tfdist ...)`` substitution; ``| ...`` and ``> FILE`` are left off; a line that only
    pipes into tfdist (``kubectl ... | tfdist ...``) is not one."""
    found: list[Step] = []
    for block in blocks(text(page), "console"):
        for command, output in _commands(block):
            shown = tuple(output[:output.index("...")] if "..." in output else output)
            for inner in _SUBSTITUTION.findall(command):
                found.append(Step(page, command, argv=tuple(shlex.split(inner)[1:])))
            words = shlex.split(command, comments=True)
            if "|" in words:
                words = words[:words.index("|")]
            while ">" in words:
                at = words.index(">")
                del words[at:at + 2]
            env = []
            while words and _ASSIGNMENT.match(words[0]):
                key, value = words.pop(0).split("=", 1)
                env.append((key, value))
            if words[:1] == ["export"] and len(words) == 2 and _ASSIGNMENT.match(words[1]):
                key, value = words[1].split("=", 1)
                found.append(Step(page, command, export=(key, value)))
            elif words[:1] == ["tfdist"]:
                found.append(Step(page, command, argv=tuple(words[1:]), env=tuple(env), output=shown))
    return found


def exported_value(value: str, cwd: Path) -> str:
    """The value an ``export NAME=VALUE`` of a page gives: ``$(cat FILE)`` reads FILE in ``cwd``."""
    match = _CAT.match(value)
    return (cwd / match.group(1)).read_text().rstrip("\n") if match else value
