"""Numbers typed by a user are read in ASCII only: the one check every numeric parser makes first.

Python's ``int()``, ``float()``, ``str.isdigit()`` and the ``re`` module's ``\\d`` and ``\\s`` all accept
any Unicode digit or space: ``int("٢")`` is 2, ``float("１６")`` 16.0, ``"1\\u00a0GiB"`` has a space.
What tfdist writes from such text is refused downstream (Kubernetes reads the quantity ``"٢"`` as
garbage), and a value read as a number while it looks like something else is a wrong success.
So the CLI's options and the library's parsers of quantities, counts, sizes, rates, ports and indices
refuse any character outside ASCII, naming it (it may look like an ASCII one, or be invisible) and
giving the ASCII spelling when there is an obvious one.

>>> print(ascii_problem("١٢M", "--params").detail)
holds '١' (U+0661 ARABIC-INDIC DIGIT ONE), which is not ASCII; numbers are read in ASCII only; fix: type it as '12M'
>>> ascii_problem("12M") is None
True
"""
from __future__ import annotations

import unicodedata

from tfdist.cluster.errors import Problem, shown

#: Longest text whose ASCII spelling a fix gives (a longer one is echoed cut anyway; hostile input can be
#: 1 MiB, and the spelling is built character by character).
_MAX_SPELLED = 200
#: The fullwidth forms of the printable ASCII characters (U+FF01-FF5E, e.g. '１', 'Ｇ'), an ASCII
#: character's code point plus this offset.
_FULLWIDTH_OFFSET = 0xFEE0


def ascii_problem(text: str, field: str = "", example: str = "") -> Problem | None:
    """None when `text` is ASCII; else the :class:`Problem` naming its first other character.

    The problem's message starts with ``holds`` so that a caller puts its own echo of the value (and
    the option) in front; the fix gives the ASCII spelling (decimal digits of any script, fullwidth
    forms and Unicode spaces mapped to ASCII), or else asks for ASCII, e.g. `example`.
    """
    if text.isascii():
        return None
    char = next(c for c in text if not c.isascii())
    name = unicodedata.name(char, "")
    described = f"U+{ord(char):04X} {name}" if name else f"U+{ord(char):04X}"
    message = f"holds {char!r} ({described}), which is not ASCII; numbers are read in ASCII only"
    spelling = ascii_spelling(text) if len(text) <= _MAX_SPELLED else None
    if spelling:
        fix = f"type it as {shown(spelling)}"
    else:
        fix = "type it with the ASCII digits 0-9" + (f", e.g. {example}" if example else "")
    return Problem(field, message, fix)


def ascii_spelling(text: str) -> str | None:
    """`text` with decimal digits of any script, fullwidth forms and Unicode spaces as ASCII, stripped;
    None when another non-ASCII character is left (a superscript, a letter of another script).

    >>> ascii_spelling("１６Gi"), ascii_spelling("٢\\u00a0"), ascii_spelling("10²")
    ('16Gi', '2', None)
    """
    out = []
    for char in text:
        if char.isascii():
            out.append(char)
        elif unicodedata.category(char) == "Nd":
            out.append(str(unicodedata.decimal(char)))
        elif 0xFF01 <= ord(char) <= 0xFF5E:
            out.append(chr(ord(char) - _FULLWIDTH_OFFSET))
        elif unicodedata.category(char) == "Zs" or char.isspace():
            out.append(" ")
        else:
            return None
    return "".join(out).strip()
