"""An export under a full disk or a file-size limit (issue 34): the previous export is kept and
nothing is half-written (as before), and the error is one ``ExportError`` naming the destination,
what happened, that the previous export was kept, and the fix, instead of TensorFlow's raw
``OutOfRangeError: <temporary file>; File too large [Op:SaveV2]``."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

from support import subprocess_env
from tfdist.export import failures
from tfdist.export.errors import ExportError


def _tf_error(name: str, message: str) -> Exception:
    """An exception of TensorFlow's class ``name`` as the write raised it (tensorflow not imported)."""
    cls = type(name, (Exception,), {"__module__": "tensorflow.python.framework.errors_impl"})
    return cls(message)


@pytest.mark.parametrize("exc, code", [
    (OSError(errno.ENOSPC, "No space left on device"), errno.ENOSPC),
    (OSError(errno.EFBIG, "File too large"), errno.EFBIG),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), errno.EDQUOT),
    (_tf_error("OutOfRangeError", "/x/.m.tfdist-tmp-h-1-ab/m/saved_model.pb.tmp1; File too large"), errno.EFBIG),
    (_tf_error("ResourceExhaustedError", "/x/.m.tfdist-tmp/m/variables/variables.data; No space left on device"),
     errno.ENOSPC),
    # not a disk limit: out of memory, the end of a dataset, other OSErrors, a look-alike outside TensorFlow
    (_tf_error("ResourceExhaustedError", "OOM when allocating tensor with shape[100000,100000]"), None),
    (_tf_error("OutOfRangeError", "End of sequence"), None),
    (OSError(errno.EACCES, "Permission denied"), None),
    (type("OutOfRangeError", (Exception,), {})("File too large"), None),
    (RuntimeError("File too large"), None),
])
def test_only_a_write_that_hit_a_disk_limit_is_told_as_one(exc, code):
    assert failures.limit_of(exc) == code


def test_the_limit_is_found_through_the_chain_of_causes():
    try:
        try:
            raise OSError(errno.EFBIG, "File too large")
        except OSError as inner:
            raise RuntimeError("saving failed") from inner
    except RuntimeError as outer:
        assert failures.limit_of(outer) == errno.EFBIG
    looped = RuntimeError("a")
    looped.__context__ = RuntimeError("b")
    looped.__context__.__context__ = looped
    assert failures.limit_of(looped) is None


def test_the_error_names_the_destination_what_happened_what_was_kept_and_the_fix(tmp_path):
    target = str(tmp_path / "model")
    full = failures.limit_error(OSError(errno.ENOSPC, "No space left on device"), target)
    assert isinstance(full, ExportError) and str(full) == (
        f"could not write the export {target!r}: the disk is full (No space left on device); nothing was written "
        f"there; fix: free space on the disk of {str(tmp_path)!r} (`df -h {tmp_path}`), or export to another "
        "disk; then export again")
    os.mkdir(target)
    quota = failures.limit_error(OSError(errno.EDQUOT, "Disk quota exceeded"), target)
    assert "the disk quota is used up (Disk quota exceeded); the previous export there is kept, unchanged; " \
           "fix: free space in your disk quota" in str(quota)
    copy = failures.limit_error(OSError(errno.ENOSPC, "x"), target, "/scratch")
    assert str(copy).startswith(f"could not write this task's throwaway copy (under '/scratch') of the export "
                                f"{target!r}: the disk is full") and "free space on the disk of '/scratch'" in str(copy)
    assert failures.limit_error(ValueError("no"), target) is None


# In a child: a first export, then RLIMIT_FSIZE below the size of a SavedModel (SIGXFSZ ignored, so
# write() returns EFBIG instead of killing the process), then an overwrite of it and two new exports.
_CHILD = r"""
import json, os, resource, signal, sys
import tf_keras
import tfdist

out = sys.argv[1]
strategy = tfdist.make_strategy("single")
model = tf_keras.Sequential([tf_keras.Input((3,), name="x"), tf_keras.layers.Dense(2)])
strategy.export(model, os.path.join(out, "old"), verify=False)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))  # a SavedModel here is ~16 KB
report = {}
for name, kwargs in (("old", {"overwrite": True}), ("new", {}), ("new.keras", {"format": "keras"})):
    try:
        strategy.export(model, os.path.join(out, name), verify=False, **kwargs)
        report[name] = None
    except Exception as exc:
        report[name] = [type(exc).__name__, str(exc)]
print(json.dumps(report))
"""


@pytest.mark.slow  # a child that imports TensorFlow
def test_an_export_under_a_file_size_limit_fails_in_one_line_and_keeps_the_previous_one(tmp_path):
    out = tmp_path / "exports"
    out.mkdir()
    child = subprocess.run([sys.executable, "-c", _CHILD, str(out)], capture_output=True, text=True, timeout=600,
                           env=subprocess_env())
    assert child.returncode == 0, child.stderr[-3000:]
    report = json.loads(child.stdout.strip().splitlines()[-1])
    fix = ("; fix: raise the file-size limit (`ulimit -f unlimited` in the shell or job script that starts training, "
           "or the job's RLIMIT_FSIZE), or export to a file system that takes larger files; then export again")
    limit = ": this process may write files of at most 4,096 bytes (RLIMIT_FSIZE)"
    assert report["old"] == ["ExportError", f"could not write the export {str(out / 'old')!r}: a file reached the "
                             f"file-size limit (File too large){limit}; the previous export there is kept, unchanged"
                             + fix]
    for name in ("new", "new.keras"):
        assert report[name] == ["ExportError", f"could not write the export {str(out / name)!r}: a file reached "
                                f"the file-size limit (File too large){limit}; nothing was written there" + fix]
    assert "tfdist-tmp" not in child.stdout + child.stderr
    # the outcome, as before: the previous export whole, nothing half-written, no temporary sibling
    assert sorted(p.name for p in out.iterdir()) == ["old"]
    assert (out / "old" / "saved_model.pb").stat().st_size > 4096
