"""Limits on what ``tfdist report`` reads, so a hostile or mistaken runs folder ends with an error.

Every bound is checked while walking or reading, never after: the walk stops at ``MAX_ENTRIES``
entries or ``MAX_RUNS + 1`` runs, a file is read at most ``MAX_FILE_BYTES``, a record longer than
``MAX_RECORD_BYTES`` is skipped without being read. FIFOs, sockets and devices are never opened.
"""
from __future__ import annotations

#: Most runs one report reads. A page of 1,000 runs is already unreadable (1,000 lines per panel, a
#: table of 1,000 rows); more is a parent of the logdir given by mistake, refused as a usage error.
MAX_RUNS = 1_000
#: Most files and folders walked under RUNS_DIR while looking for runs (`/proc/self` or `/` ends here).
#: A logdir of 1,000 runs with train/, validation/ and system/<task>/ folders has about 10,000.
MAX_ENTRIES = 200_000
#: Most event files read per run (a run restarted 1,000 times); the rest are named in a warning.
MAX_FILES_PER_RUN = 1_000
#: Most bytes read of one event file; the rest of a bigger file is left out, with a warning. Scalars
#: read at about 30,000-50,000 events/s on the project's 2-core machine (about 70 bytes each), so a
#: file of nothing but scalars at this limit takes a minute or two; histograms and images, skipped
#: without a checksum, read far faster.
MAX_FILE_BYTES = 256 * 1024 ** 2
#: Longest record read: a scalar event is about 100 bytes, an HParams record a few KiB; a longer
#: record (a graph, merged images) is skipped unread, with a warning.
MAX_RECORD_BYTES = 16 * 1024 ** 2
#: Most bytes read over all the event files of one report; files after it are not read, with a warning.
MAX_TOTAL_BYTES = 1024 ** 3
#: Most runs named one by one on stderr; then ``... and N more``.
MAX_LISTED = 20
#: Most problems listed on the page; then ``... and N more``.
MAX_LISTED_ON_PAGE = 200


def size_text(n: int) -> str:
    """``1073741824`` -> ``"1 GiB"``, ``16777216`` -> ``"16 MiB"``, for messages."""
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:,.3g} {unit}"
    return f"{n:,} bytes"
