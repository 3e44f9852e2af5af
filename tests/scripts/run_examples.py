"""Several example runs in one job, for tests/example_jobs.py: the cases that start the same
kind of job (launcher, backend, Keras) share one instead of paying for its processes once each.

    python run_examples.py OUTDIR CASES_JSON      # CASES_JSON: [[case, examples/X.py, [args...]], ...]

Each case runs as ``python examples/X.py ARGS`` would (``runpy`` as ``__main__``, ``sys.argv`` and
``sys.path[0]`` set), one after the other in the same processes; a case's stdout and stderr (file
descriptors 1 and 2, so TensorFlow's and Horovod's lines too) go to OUTDIR/<case>/task-<T>.out and
.err, and its exit status to OUTDIR/<case>/task-<T>.rc (T: the Horovod rank, the TF_CONFIG task as
``chief0``, ``worker1``, ``ps0``, else 0). A case that fails does not stop the next one: each test
reads its own case's status and output. Under parameter servers only the chief goes from case to
case: the servers serve inside the first case's make_strategy until the chief is gone.
"""
from __future__ import annotations

import json
import os
import runpy
import sys
import traceback

OUTDIR, CASES = sys.argv[1], json.loads(sys.argv[2])


def _task() -> str:
    if "HOROVOD_RANK" in os.environ:
        return os.environ["HOROVOD_RANK"]
    if "TF_CONFIG" in os.environ:
        task = json.loads(os.environ["TF_CONFIG"]).get("task", {})
        return f"{task.get('type', '')}{task.get('index', '')}" or "0"
    return "0"


TASK = _task()


def _status(exit_code: object) -> int:
    """The exit status Python gives ``sys.exit(exit_code)`` (printing a message, as Python does)."""
    if exit_code is None or isinstance(exit_code, int):
        return exit_code or 0
    print(exit_code, file=sys.stderr)
    return 1


def run_case(case: str, path: str, args: list[str]) -> None:
    """``python PATH ARGS`` in this process, its output and status in OUTDIR/<case>/task-<T>.*"""
    where = os.path.join(OUTDIR, case)
    os.makedirs(where, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    out = open(os.path.join(where, f"task-{TASK}.out"), "w")
    err = open(os.path.join(where, f"task-{TASK}.err"), "w")
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    argv, path0 = sys.argv, sys.path[0]
    sys.argv, sys.path[0] = [path, *args], os.path.dirname(os.path.abspath(path))
    status = 0
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        status = _status(exc.code)
    except BaseException:  # noqa: BLE001  (the case failed; the next one still runs)
        traceback.print_exc()
        status = 1
    finally:
        sys.argv, sys.path[0] = argv, path0
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        out.close()
        err.close()
    with open(os.path.join(where, f"task-{TASK}.rc"), "w") as f:
        f.write(str(status))


for case, path, args in CASES:
    run_case(case, path, args)
