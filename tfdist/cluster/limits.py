"""Limits on what tfdist reads and builds, so hostile or mistaken input ends quickly with an error.

Every limit is checked before the big thing is built (a hostlist is counted before it is expanded,
a file is read at most ``MAX_INPUT_BYTES + 1`` bytes), so memory and time stay bounded. The figures
and why they were chosen are in docs/tf-config.md ("Limits").
"""
from __future__ import annotations

#: Most tasks in one cluster (chief + workers + ps + evaluator), and most hosts a hostlist may name.
#: Linux passes one environment string of at most 128 KiB (MAX_ARG_STRLEN) to a process, which holds a
#: TF_CONFIG of roughly 3,500-7,000 tasks; 10,000 is above anything that can be exported.
MAX_TASKS = 10_000
#: Most tasks whose TF_CONFIGs are written at once (every task's, e.g. ``--format env`` without
#: ``--task``, ``--format dir``, Kubernetes ``plain``). Each TF_CONFIG holds the whole cluster, so
#: writing all of them is quadratic: 10,000 tasks measured 2 GB of JSON, 340 s and 17 GB of memory;
#: 1,000 tasks stay near 20 MB. A bigger cluster is served one task at a time (``--task``, SLURM).
MAX_EVERY_TASK = 1_000
#: Largest TF_CONFIG or cluster file read (bytes); a TF_CONFIG of MAX_TASKS tasks is about 0.4 MiB.
MAX_INPUT_BYTES = 1024 * 1024
#: Deepest nesting of JSON arrays/objects or YAML collections; a TF_CONFIG needs 3.
MAX_DEPTH = 20
#: Most problems listed in one message; a file of 10,000 bad addresses would otherwise print 10,000 lines.
MAX_LISTED = 50
#: Most digits of a number in TF_CONFIG, a port, an index or a count (Python refuses > 4300).
MAX_DIGITS = 18


def limit_text(n: int) -> str:
    """``10000`` -> ``"10,000"``, for messages."""
    return f"{n:,}"
