"""docs/strategies.md: the message it quotes for an unknown strategy is the real one."""
from __future__ import annotations

import re

import pytest

from doc_pages import DOCS, text


def test_the_quoted_unknown_strategy_message_is_the_real_one():
    import tfdist
    from tfdist.strategies import UnknownStrategyError

    quoted = re.search(r"fails with\n`(unknown strategy 'horovd'.*?)`", text(DOCS / "strategies.md"),
                       flags=re.S).group(1)
    with pytest.raises(UnknownStrategyError) as info:
        tfdist.make_strategy("horovd")
    assert str(info.value) == " ".join(quoted.split())
