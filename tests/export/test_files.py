"""``tfdist export-check`` on hostile files (issue 34): a FIFO as ``--input`` or inside the export, a
3 GB sparse ``saved_model.pb``, a ``.npy`` whose header claims 10**12 elements, a missing path; each a
one-line error within seconds, before TensorFlow is imported. ``tfdist.export.files`` without
TensorFlow: the kinds, the bounds, the headers."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from numpy.lib import format as npy_format

from support import examples, subprocess_env
from tfdist.export import files
from tfdist.export.errors import ExportError

#: Generous: the child imports numpy and click, not TensorFlow; only a hang (a FIFO waited on) reaches it.
HANG = 120

# Runs export-check on each case in one process and says, after all of them, whether TensorFlow was
# imported; a FIFO waited on hangs it, which the timeout turns into a failure.
_CHILD = r"""
import json, sys
from click.testing import CliRunner
from tfdist.cli.main import cli
results = []
for argv in json.loads(sys.argv[1]):
    result = CliRunner().invoke(cli, argv, prog_name="tfdist")
    results.append({"exit": result.exit_code, "output": result.output,
                    "exception": None if result.exit_code in (0, 1, 2) else repr(result.exception)})
print(json.dumps({"results": results, "tensorflow": "tensorflow" in sys.modules}))
"""


def _npy_header(shape, descr: str = "<f4", version: tuple[int, int] = (1, 0)) -> bytes:
    """A .npy header as numpy writes it (``numpy.lib.format``), declaring ``shape`` of ``descr``."""
    buffer = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": tuple(shape)}
    (npy_format.write_array_header_1_0 if version == (1, 0) else npy_format.write_array_header_2_0)(buffer, header)
    return buffer.getvalue()


def _fake_export(directory) -> None:
    """A folder shaped like an export; its saved_model.pb is not a proto (TensorFlow would say so)."""
    (directory / "variables").mkdir(parents=True)
    (directory / "saved_model.pb").write_bytes(b"not parsed before the checks")
    (directory / "variables" / "variables.index").write_bytes(b"index")


def _sparse(path, size: int) -> None:
    """A file of ``size`` bytes with no block written (``truncate``): nothing of it is on the disk."""
    with open(path, "wb") as f:
        f.truncate(size)


def run_export_check(*cases: tuple[str, ...]) -> tuple[list[dict], bool]:
    """Each ``tfdist export-check ARGV`` of ``cases`` in one child: their results, and whether the child
    imported TensorFlow."""
    child = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([["export-check", *c] for c in cases])],
                           capture_output=True, text=True, timeout=HANG, env=subprocess_env())
    assert child.returncode == 0, child.stderr[-3000:]
    report = json.loads(child.stdout.strip().splitlines()[-1])
    return report["results"], report["tensorflow"]


def _error(result: dict) -> str:
    errors = [line for line in result["output"].splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in result["output"], result
    return errors[0]


def test_hostile_files_fail_in_one_line_without_waiting_and_before_tensorflow_is_imported(tmp_path):
    """The issue's inputs: before the fix the FIFO ones hang (or fail after loading TensorFlow), the
    sparse file is read whole, the huge header is a numpy traceback, and every case imports TensorFlow."""
    export = tmp_path / "export"
    _fake_export(export)
    os.mkfifo(tmp_path / "batch.npy")
    with_fifo = tmp_path / "with-fifo"
    _fake_export(with_fifo)
    os.remove(with_fifo / "variables" / "variables.index")
    os.mkfifo(with_fifo / "variables" / "variables.index")  # TensorFlow's loader would open it and wait
    sparse = tmp_path / "sparse"
    sparse.mkdir()
    _sparse(sparse / "saved_model.pb", 3 * 2**30)
    (tmp_path / "huge.npy").write_bytes(_npy_header((10**12,)) + bytes(64))

    results, tensorflow = run_export_check(
        (str(tmp_path / "missing"),),
        (str(export), "--input", str(tmp_path / "batch.npy")),
        (str(with_fifo),),
        (str(sparse),),
        (str(export), "--input", str(tmp_path / "huge.npy")),
        (str(export), "--input", str(tmp_path / "absent.npy")),
    )
    missing, fifo_input, fifo_inside, big_proto, huge_header, absent_input = results
    assert missing["exit"] == 1 and _error(missing) == (
        f"Error: {str(tmp_path / 'missing')!r} does not exist, so it is not a SavedModel; fix: pass the directory "
        "strategy.export wrote")
    assert fifo_input["exit"] == 2 and _error(fifo_input) == (
        f"Error: Invalid value for '--input': {str(tmp_path / 'batch.npy')!r} is a FIFO, not a regular file; fix: "
        "pass a .npy or .npz file saved with numpy.save or numpy.savez (export-check reads regular files only)")
    assert fifo_inside["exit"] == 1 and _error(fifo_inside).startswith(
        f"Error: {str(with_fifo / 'variables' / 'variables.index')!r} in the export is a FIFO, not a regular file; "
        "an export holds directories and regular files only")
    assert _error(fifo_inside).endswith("; fix: remove it, or export again")
    assert big_proto["exit"] == 1 and _error(big_proto) == (
        f"Error: {str(sparse / 'saved_model.pb')!r} is 3,221,225,472 bytes, over protobuf's 2 GiB limit "
        "(2,147,483,647 bytes), so it cannot be a valid SavedModel file (it is damaged, or not one); fix: export "
        "again, or pass the directory strategy.export wrote")
    assert huge_header["exit"] == 1 and _error(huge_header).startswith(
        f"Error: --input {str(tmp_path / 'huge.npy')!r} declares shape (1000000000000,) of float32 "
        "(4,000,000,000,000 bytes) and holds 64 bytes of data: the header does not match the file; fix: ")
    assert absent_input["exit"] == 2 and f"{str(tmp_path / 'absent.npy')!r} does not exist; fix: " in \
        _error(absent_input)
    assert not tensorflow, "export-check imported TensorFlow before refusing its input"


# --- kinds of files ---------------------------------------------------------------------------------------
def _refused_without_waiting(call, fifo) -> ExportError:
    """``call()``'s ExportError; should it block on ``fifo`` instead, a writer is opened to release it
    (a thread blocked in open() cannot be stopped) and the test fails."""
    outcome: dict = {}

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # reported to the test below
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(HANG)
        pytest.fail(f"waited on the FIFO {fifo}")
    assert isinstance(outcome.get("error"), ExportError), outcome
    return outcome["error"]


def test_a_fifo_put_in_place_after_the_check_is_refused_on_the_descriptor(tmp_path):
    """``load_batch`` and ``read_bounded`` open O_NONBLOCK and check the descriptor, so a FIFO that
    slipped in after the stat check is refused, not waited on."""
    fifo = tmp_path / "batch.npy"
    os.mkfifo(fifo)
    error = _refused_without_waiting(lambda: files.load_batch(str(fifo)), fifo)
    assert str(error).startswith(f"--input {str(fifo)!r} is a FIFO, not a regular file; fix: ")
    error = _refused_without_waiting(lambda: files.read_bounded(str(fifo), 10, "", "fix it", "too large"), fifo)
    assert str(error) == f"{str(fifo)!r} is a FIFO, not a regular file; fix: fix it"


@pytest.mark.parametrize("make, problem", [
    (lambda p: os.mkfifo(p), "is a FIFO, not a regular file"),
    (lambda p: os.symlink("/nowhere/at/all", p), "is a symbolic link to nothing"),
    (lambda p: os.symlink("/dev/zero", p), "is a character device, not a regular file"),
])
def test_every_entry_of_the_export_folder_is_a_directory_or_a_regular_file(tmp_path, make, problem):
    _fake_export(tmp_path / "export")
    (tmp_path / "export" / "assets").mkdir()
    entry = tmp_path / "export" / "assets" / "vocab.txt"
    make(entry)
    with pytest.raises(ExportError) as info:
        files.check_export_folder(str(tmp_path / "export"))
    assert str(info.value).startswith(f"{str(entry)!r} in the export {problem}; ")


def test_the_export_folder_itself(tmp_path):
    _fake_export(tmp_path / "export")
    assert files.check_export_folder(str(tmp_path / "export")) == str(tmp_path / "export" / "saved_model.pb")
    assert files.read_saved_model(str(tmp_path / "export")) == b"not parsed before the checks"
    (tmp_path / "plain").write_text("x")
    with pytest.raises(ExportError, match=r"'.*plain' is a regular file, not a SavedModel directory; fix: "):
        files.check_export_folder(str(tmp_path / "plain"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExportError, match=r"has no saved_model.pb, so it is not a SavedModel; fix: "):
        files.check_export_folder(str(tmp_path / "empty"))
    os.remove(tmp_path / "export" / "saved_model.pb")
    os.mkfifo(tmp_path / "export" / "saved_model.pb")
    with pytest.raises(ExportError, match=r"saved_model.pb' in the export is a FIFO"):
        files.read_saved_model(str(tmp_path / "export"))


def test_reading_is_bounded_even_when_the_size_said_otherwise(tmp_path):
    """A file larger than the bound is refused unread; one that reports no size (procfs) is read up to
    the bound and refused past it."""
    big = tmp_path / "big.pb"
    _sparse(big, 3 * 2**30)
    with pytest.raises(ExportError, match=r"is 3,221,225,472 bytes, too large; fix: f"):
        files.read_bounded(str(big), files.PROTO_LIMIT, "", "f", "too large")
    status = "/proc/self/status"  # st_size 0, some hundred bytes of content
    assert len(files.read_bounded(status, 100_000, "", "f", "too large")) > 10
    with pytest.raises(ExportError, match=r"grew past 10 bytes while read, too large"):
        files.read_bounded(status, 10, "", "f", "too large")


# --- batches ----------------------------------------------------------------------------------------------
def test_batches_load_as_numpy_saved_them(tmp_path):
    array = np.arange(12, dtype="float32").reshape(3, 4)
    np.save(tmp_path / "one.npy", array)
    np.testing.assert_array_equal(files.load_batch(str(tmp_path / "one.npy")), array)
    np.save(tmp_path / "fortran.npy", np.asfortranarray(array))
    np.testing.assert_array_equal(files.load_batch(str(tmp_path / "fortran.npy")), array)
    np.savez(tmp_path / "two.npz", a=array, b=np.array([b"x", b"yz"]))
    np.savez_compressed(tmp_path / "packed.npz", a=array, b=np.zeros((0, 5), "int64"))
    for name in ("two.npz", "packed.npz"):
        loaded = files.load_batch(str(tmp_path / name))
        assert sorted(loaded) == ["a", "b"]
        np.testing.assert_array_equal(loaded["a"], array)
    assert files.load_batch(str(tmp_path / "packed.npz"))["b"].shape == (0, 5)
    assert files.check_batch(str(tmp_path / "two.npz")) is None


def _zip(path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


@pytest.mark.parametrize("name, content, message", [
    ("short.npy", _npy_header((4, 4)) + bytes(60), "declares shape (4, 4) of float32 (64 bytes) and holds 60 bytes"),
    ("v2.npy", _npy_header((10**12,), version=(2, 0)), "declares shape (1000000000000,) of float32"),
    ("objects.npy", _npy_header((2,), "|O") + bytes(16), "holds Python objects (dtype object)"),
    ("negative.npy", _npy_header((-5,)), "declares shape (-5,), which has a negative dimension"),
    ("void.npy", _npy_header((10**15,), "|V0"), "whose elements hold no bytes"),
    ("text.npy", b"just text, no header", "cannot be read as .npy (its header: "),
    ("empty.npy", b"", "cannot be read as .npy (its header: "),
])
def test_a_npy_header_is_checked_against_the_file_before_its_data_is_read(tmp_path, name, content, message):
    (tmp_path / name).write_bytes(content)
    for call in (files.check_batch, files.load_batch):
        with pytest.raises(ExportError) as info:
            call(str(tmp_path / name))
        assert str(info.value).startswith(f"--input {str(tmp_path / name)!r}") and message in str(info.value)
        assert "; fix: " in str(info.value)


def test_a_npz_is_checked_array_by_array_before_its_data_is_read(tmp_path):
    _zip(tmp_path / "lying.npz", {"x.npy": _npy_header((10**12,)) + bytes(8)})
    with pytest.raises(ExportError, match=r"array 'x' declares shape \(1000000000000,\) of float32"):
        files.load_batch(str(tmp_path / "lying.npz"))
    _zip(tmp_path / "foreign.npz", {"x.npy": _npy_header((1,)) + bytes(4), "notes.txt": b"hi"})
    with pytest.raises(ExportError, match=r"holds 'notes.txt', which is not an array numpy.savez wrote"):
        files.check_batch(str(tmp_path / "foreign.npz"))
    (tmp_path / "cut.npz").write_bytes(b"PK\x03\x04" + bytes(40))
    with pytest.raises(ExportError, match=r"cannot be read as .npz"):
        files.load_batch(str(tmp_path / "cut.npz"))
    _zip(tmp_path / "many.npz", {f"x{i}.npy": _npy_header((1,)) + bytes(4) for i in range(files.MAX_BATCH_ARRAYS + 1)})
    with pytest.raises(ExportError, match=r"holds 1,025 files, more than the 1024 arrays a batch may have"):
        files.check_batch(str(tmp_path / "many.npz"))


def test_a_batch_above_the_bound_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "MAX_BATCH_BYTES", 1000)
    np.save(tmp_path / "big.npy", np.zeros(251, "float32"))
    with pytest.raises(ExportError, match=r"is 1,004 bytes of data, more than export-check runs as one batch "
                                          r"\(1,000 bytes\); fix: pass a smaller batch"):
        files.load_batch(str(tmp_path / "big.npy"))
    np.savez(tmp_path / "big.npz", a=np.zeros(200, "float32"), b=np.zeros(200, "float32"))
    with pytest.raises(ExportError, match=r"holds more than 1,000 bytes of arrays"):
        files.load_batch(str(tmp_path / "big.npz"))
    np.save(tmp_path / "fits.npy", np.zeros(250, "float32"))
    assert files.load_batch(str(tmp_path / "fits.npy")).shape == (250,)


_DESCRS = st.sampled_from(["<f4", "<f8", "|u1", "<i8", "|b1", "|S3", "<U2", "<c16", "|O", "|V0", "(2,3)<f4"])
_DIMS = st.one_of(st.integers(0, 8), st.integers(-3, 2**70))


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(_DIMS, max_size=4), descr=_DESCRS, body=st.binary(max_size=256),
       version=st.sampled_from([(1, 0), (2, 0)]), cut=st.integers(0, 300), as_npz=st.booleans())
def test_any_header_either_loads_within_the_file_or_fails_in_one_line(tmp_path, shape, descr, body, version, cut,
                                                                       as_npz):
    """Fuzzed headers (huge, negative, objects, empty items), bodies and truncations: the batch loads
    with no more data than the file holds, or an ExportError names it; never numpy's own error."""
    try:
        data = (_npy_header(shape, descr, version) + body)
    except (ValueError, TypeError, OverflowError):
        return  # numpy itself cannot write that header
    data = data[:len(data) - cut] if 0 < cut < len(data) else data
    path = tmp_path / ("fuzz.npz" if as_npz else "fuzz.npy")
    if as_npz:
        _zip(path, {"x.npy": data})
    else:
        path.write_bytes(data)
    try:
        loaded = files.load_batch(str(path))
    except ExportError as exc:
        assert str(exc).startswith(f"--input {str(path)!r}") and "; fix: " in str(exc)
        return
    array = loaded["x"] if as_npz else loaded
    assert array.nbytes <= len(data) and not array.dtype.hasobject
