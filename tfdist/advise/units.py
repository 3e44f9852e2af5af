"""Link rates and counts as people write them: ``50mbit``, ``10gbps``, ``1.5GB/s``, ``23.8M``.

Rates are returned in **bytes per second**. The rules:

* bits: ``bit``, ``bits``, ``bit/s``, ``bps``, ``b/s`` after an optional prefix, any case for the
  prefix (``50mbit``, ``1Gbit``, ``10gbps``, ``25 Gb/s``); ``gbps`` is gigabits, as in "10 Gbps
  Ethernet" (note: ``tc`` reads ``gbps`` as gigabytes; tfdist does not);
* bytes: a capital ``B``: ``B/s``, ``Bps``, ``byte/s``, ``bytes/s`` (``1.5GB/s``, ``100MBps``);
* prefixes: ``k m g t`` (powers of 1000) and ``ki mi gi ti`` (powers of 1024), any case;
* a number alone is refused (is ``50`` bits or bytes, per second or per millisecond?), and so are
  ``BPS``-style all-capital units, zero, negative, infinite and absurd rates: below 1 kbit/s
  (``MIN_RATE``: slower than any link worth modelling; ``1e-300bit`` would predict infinite step
  times) or above 100 Tbit/s (``MAX_RATE``).

    >>> parse_rate("1gbit")
    125000000.0
    >>> format_rate(125e6)
    '1 Gbit/s'
"""
from __future__ import annotations

import math
import re

from tfdist.advise.errors import AdviseError
from tfdist.cluster.ascii_input import ascii_problem
from tfdist.errors import with_fix

#: The fastest rate accepted, in bytes/s (100 Tbit/s): above it the input is a typo.
MAX_RATE = 100e12 / 8
#: The slowest rate accepted, in bytes/s (1 kbit/s): below it the input is a typo (a unit off by
#: 10**6) and the predictions leave any useful range (a 1 MB model takes hours per step).
MIN_RATE = 1e3 / 8
#: The largest parameter count accepted (10**13: ten times the largest published models).
MAX_COUNT = 10**13
_MAX_TEXT = 64

_PREFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
             "ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30, "ti": 2.0**40}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_RATE = re.compile(rf"\s*(?P<number>{_NUMBER})\s*(?P<prefix>(?:[kKmMgGtT][iI]?)?)(?P<base>[A-Za-z/]+)\s*",
                   re.ASCII)
_BIT_BASES = {"bit", "bits", "bit/s", "bits/s"}  # compared in lower case
_BIT_EXACT = {"bps", "b/s"}  # a lower-case b: bits
_BYTE_EXACT = {"Bps", "B/s"}  # a capital B: bytes
_BYTE_BASES = {"byte/s", "bytes/s"}  # compared in lower case
_COUNT = re.compile(rf"\s*(?P<number>{_NUMBER})\s*(?P<suffix>[kKmMgGbBtT]?)\s*", re.ASCII)
_COUNT_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9, "t": 10**12}
RATE_EXAMPLES = "50mbit, 1gbit, 25gbit, 10gbps (bits/s) or 1.5GB/s, 100MB/s (bytes/s)"


def _shown(text: object) -> str:
    text = str(text)
    return repr(text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "...")


def _subject(field: str, text: object) -> str:
    """How a message names the value: ``--bandwidth '50'``, or ``'50'`` alone when the caller (click)
    names the option itself."""
    return f"{field} {_shown(text)}" if field else _shown(text)


def parse_rate(text: str, field: str = "--bandwidth") -> float:
    """``text`` as a link rate in bytes per second (see the module docstring for the units).

    Raises :class:`AdviseError` naming ``field`` (left out of the message when empty) and the accepted
    units.
    """
    if not isinstance(text, str):
        raise AdviseError(with_fix(f"{field or 'a rate'} must be text such as '1gbit', got "
                                   f"{type(text).__name__}", f"write a rate with its unit: {RATE_EXAMPLES}"),
                          field)
    if len(text) > _MAX_TEXT:
        raise AdviseError(with_fix(f"{_subject(field, text)} is too long for a rate",
                                   f"write a rate with its unit: {RATE_EXAMPLES}"), field)
    refuse_non_ascii(text, field, "1gbit")
    stripped = text.strip()
    if re.fullmatch(_NUMBER, stripped, re.ASCII) or re.fullmatch(r"[+-]" + _NUMBER, stripped, re.ASCII):
        raise AdviseError(with_fix(f"{_subject(field, text)} has no unit",
                                   f"add one: {stripped}mbit (megabits/s), {stripped}gbit (gigabits/s) or "
                                   f"{stripped}MB/s (megabytes/s); accepted: {RATE_EXAMPLES}"), field)
    match = _RATE.fullmatch(text)
    if match is None:
        raise AdviseError(with_fix(f"{_subject(field, text)} is not a rate",
                                   f"write a positive number and a unit: {RATE_EXAMPLES}"), field)
    base = match["base"]
    if base.lower() in _BIT_BASES or base in _BIT_EXACT:
        bits_per_unit = 1.0
    elif base in _BYTE_EXACT or base.lower() in _BYTE_BASES:
        bits_per_unit = 8.0
    elif base.lower() in ("bps", "b/s"):
        raise AdviseError(with_fix(f"{_subject(field, text)}: {base!r} does not say bits or bytes",
                                   f"write {match['number']}{match['prefix'].lower()}bit for bits/s or "
                                   f"{match['number']}{match['prefix'].upper()}B/s for bytes/s"), field)
    else:
        raise AdviseError(with_fix(f"{_subject(field, text)}: unknown unit {base!r}",
                                   f"use one of: {RATE_EXAMPLES}"), field)
    value = float(match["number"]) * _PREFIXES[match["prefix"].lower()] * bits_per_unit / 8
    if not value > 0:
        raise AdviseError(with_fix(f"{_subject(field, text)} is not a positive rate",
                                   "give the link's rate, e.g. 1gbit; a cut link cannot be modelled"), field)
    if not math.isfinite(value) or value > MAX_RATE:
        raise AdviseError(with_fix(f"{_subject(field, text)} is above 100 Tbit/s",
                                   "check the unit: e.g. 100gbit, not 100tbit"), field)
    if value < MIN_RATE:
        raise AdviseError(with_fix(f"{_subject(field, text)} is below 1 kbit/s, the slowest link the "
                                   "advisor models", "check the unit: e.g. 50mbit or 1gbit"), field)
    return value


def parse_count(text: str | int, field: str = "--params", exact: bool = False) -> int:
    """A whole count such as ``669706``, ``5,824,522``, ``23.8M``, ``1.2B`` (k, M, G or B, T: powers
    of 1000), rounded to the nearest integer (``exact``: a fraction is refused instead); must be at
    least 1."""
    if isinstance(text, bool):
        raise AdviseError(with_fix(f"{field or 'a count'} must be a count, got {text!r}", "pass e.g. 23.8M"),
                          field)
    if isinstance(text, int):
        value = float(text)
    else:
        raw = str(text)
        if len(raw) > _MAX_TEXT:
            raise AdviseError(with_fix(f"{_subject(field, raw)} is too long for a count",
                                       "write e.g. 23.8M or 23800000"), field)
        refuse_non_ascii(raw, field, "23.8M")
        cleaned = raw.replace(",", "").replace("_", "")
        match = _COUNT.fullmatch(cleaned)
        if match is None:
            raise AdviseError(with_fix(f"{_subject(field, raw)} is not a count",
                                       "write a number with an optional k, M, G/B or T: 669706, 23.8M, 1.2B"),
                              field)
        value = float(match["number"]) * _COUNT_SUFFIXES[match["suffix"].lower()]
    if not math.isfinite(value) or value > MAX_COUNT:
        raise AdviseError(with_fix(f"{_subject(field, text)} is above {MAX_COUNT:.0e}",
                                   "check the suffix: M is millions, B billions"), field)
    count = round(value)
    if exact and count != value:
        raise AdviseError(with_fix(f"{_subject(field, text)} is not a whole number",
                                   f"give a whole count, e.g. {max(1, count)}"), field)
    if count < 1:
        raise AdviseError(with_fix(f"{_subject(field, text)} is below 1", "give the model's parameter count, "
                                   "e.g. 669706 (model.count_params())"), field)
    return count


#: The largest memory size accepted (1 PiB): above it the input is a typo.
MAX_MEMORY = 2**50
#: The smallest memory of a host accepted (64 MiB): one TensorFlow process needs more (a parameter
#: server's runtime alone is about 240 MiB), so less is a unit left out or mistyped (``512`` for 512 MiB).
MIN_MEMORY = 64 * 2**20
_MEMORY = re.compile(rf"\s*(?P<number>{_NUMBER})\s*(?P<prefix>(?:[kKmMgGtT][iI]?)?)(?P<unit>[bB]?)\s*",
                     re.ASCII)
MEMORY_EXAMPLES = "4GiB, 512M, 1.5G, 16Gi or plain bytes such as 4294967296"


def parse_bytes(text: str | int, field: str = "--ps-memory") -> int:
    """A host's memory in bytes: ``4GiB``, ``512M``, ``16Gi``, ``1.5GB``, ``4294967296``.

    ``k M G T`` are powers of 1000 and ``Ki Mi Gi Ti`` powers of 1024 (as Kubernetes reads them); a
    trailing ``B`` is optional, and case does not matter (``4gb``, ``2gib``) except for one letter: a
    lower-case ``m`` without ``i`` (``512m``, ``512mb``) is refused, since Kubernetes reads it as milli
    (0.512 bytes) and people as mega. Refused too, naming ``field``: text outside ASCII, sizes below
    :data:`MIN_MEMORY` (64 MiB, less than one TensorFlow process needs: ``1KiB`` is a unit gone wrong)
    and above :data:`MAX_MEMORY` (1 PiB).

    >>> parse_bytes("4GiB")
    4294967296
    """
    fix = f"write a size such as {MEMORY_EXAMPLES}"
    if isinstance(text, bool):
        raise AdviseError(with_fix(f"{field or 'a size'} must be a size, got {text!r}", fix), field)
    raw = str(text)
    if len(raw) > _MAX_TEXT:
        raise AdviseError(with_fix(f"{_subject(field, raw)} is too long for a size", fix), field)
    refuse_non_ascii(raw, field, "4GiB")
    match = _MEMORY.fullmatch(raw)
    if match is None:
        raise AdviseError(with_fix(f"{_subject(field, raw)} is not a size", fix), field)
    if match["prefix"] == "m":
        number, unit = match["number"], match["unit"].upper()
        raise AdviseError(with_fix(
            f"{_subject(field, raw)} is ambiguous: a lower-case m is milli in Kubernetes quantities "
            f"({number}m is {number} thousandths of a byte) and mega to many people",
            f"write {number}M{unit} for {number} megabytes (powers of 1000) or {number}Mi{unit or 'B'} for "
            f"{number} mebibytes (powers of 1024)"), field)
    value = float(match["number"]) * _PREFIXES[match["prefix"].lower()]
    if not math.isfinite(value) or value > MAX_MEMORY:
        raise AdviseError(with_fix(f"{_subject(field, raw)} is above 1 PiB",
                                   "check the unit: e.g. 64GiB, not 64TiB"), field)
    if value < 1:
        raise AdviseError(with_fix(f"{_subject(field, raw)} is below 1 byte",
                                   "give the memory of one task's host, e.g. 4GiB"), field)
    if value < MIN_MEMORY:
        raise AdviseError(with_fix(
            f"{_subject(field, raw)} is {format_memory(value)}, below {format_memory(MIN_MEMORY)}: less than "
            "one TensorFlow process needs, so a unit is missing or wrong",
            "give the host's memory with its unit, e.g. 4GiB or 512MiB (a number alone is bytes)"), field)
    return int(value)


def refuse_non_ascii(text: str, field: str, example: str) -> None:
    """``float()`` and ``\\d`` read any script's digits and spaces (``'١٢M'`` would be 12M): refuse
    text outside ASCII, naming the character and the ASCII spelling."""
    problem = ascii_problem(text, field, example)
    if problem is not None:
        raise AdviseError(with_fix(f"{_subject(field, text)} {problem.message}", problem.fix), field)


def format_rate(bytes_per_second: float) -> str:
    """A rate for people, in bits/s with an SI prefix: ``'1 Gbit/s'``, ``'50 Mbit/s'``."""
    bits = bytes_per_second * 8
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if bits >= scale:
            return f"{_number(bits / scale)} {prefix}bit/s"
    return f"{_number(bits)} bit/s"


def format_bytes(count: float) -> str:
    """A size for people, with an SI prefix: ``'2.7 MB'``, ``'552 MB'``."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= scale:
            return f"{_number(count / scale)} {prefix}B"
    return f"{_number(count)} B"


def format_memory(count: float) -> str:
    """A memory size for people, in powers of 1024 as memory is sold: ``'4 GiB'``, ``'630 MiB'``."""
    for prefix, scale in (("Ti", 2.0**40), ("Gi", 2.0**30), ("Mi", 2.0**20), ("Ki", 2.0**10)):
        if count >= scale:
            return f"{_number(count / scale)} {prefix}B"
    return f"{_number(count)} B"


def _number(value: float) -> str:
    """Three significant figures without a trailing ``.0``: 1, 2.5, 23.3, 552."""
    text = f"{value:.3g}"
    if "e" in text:  # 1000 after rounding
        text = f"{value:.0f}"
    return text
