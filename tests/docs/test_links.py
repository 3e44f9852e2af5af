"""Every relative link of the README, of the pages of docs/ and of benchmarks/README.md points at a
file that exists, and at a heading of it when it names one."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from doc_pages import LINKED_PAGES, anchors, name, text, without_code
from support import REPO

_LINK = re.compile(r"\]\(([^()\s]+)\)")


def links(source: str) -> list[str]:
    """The targets of the markdown links of ``source``, outside code blocks and code spans."""
    return _LINK.findall(re.sub(r"`[^`\n]*`", "", without_code(source)))


def broken(page: Path, source: str) -> list[str]:
    """The relative links of ``source`` (the text of ``page``) whose file or heading does not exist,
    each with the reason."""
    found = []
    for target in links(source):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if REPO not in file.parents or not file.exists():
            found.append(f"{target}: no file {file}")
        elif anchor and (file.suffix != ".md" or anchor not in anchors(file)):
            found.append(f"{target}: {name(file)} has no heading #{anchor}")
    return found


@pytest.mark.parametrize("page", LINKED_PAGES, ids=name)
def test_every_relative_link_resolves(page):
    assert links(text(page)), f"{name(page)} links nowhere"
    assert broken(page, text(page)) == []


def test_a_broken_link_or_anchor_is_found():
    source = ("[a](advise.md#no-such-heading) [b](nowhere.md) [c](advise.md#probing-a-cluster)\n"
              "`[d](nowhere.md)` [e](../README.md#the-two-commands) [f](#the-tfdist-command)\n")
    assert [reason.split(":")[0] for reason in broken(REPO / "docs" / "cli.md", source)] == \
        ["advise.md#no-such-heading", "nowhere.md"]
