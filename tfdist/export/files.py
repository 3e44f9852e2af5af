"""The files ``tfdist export-check`` reads, checked before it reads them (no TensorFlow imported).

A deployment pipeline runs ``export-check`` on whatever it is handed, so each file is checked for
what it is and how large before its contents are read, and all of it before TensorFlow is imported:

* only regular files are read: ``os.stat`` + ``stat.S_ISREG`` first, then the file is opened
  ``O_NONBLOCK`` and checked again on the descriptor, so a FIFO (whose ``open`` waits for a writer
  that never comes) or a device put there in between is refused, never waited on;
* every entry of an export folder is a directory or a regular file (TensorFlow's loader would wait
  for ever on a FIFO in ``variables/``), and its protobuf files (``saved_model.pb``, ...) fit
  protobuf's 2 GiB limit, above which no SavedModel can be parsed; reading them is bounded by it;
* a ``.npy`` batch, or each array of a ``.npz``, has its header read with ``numpy.lib.format`` and
  checked against the file (elements x item size within the bytes there, and at most
  ``MAX_BATCH_BYTES``) before its data is read.

    files.check_export_folder("exports/classifier/1")   # ExportError naming the entry and the fix
    arrays = files.load_batch("batch.npz")              # {input name: array}
"""
from __future__ import annotations

import math
import os
import stat
import zipfile
import zlib
from typing import Any, BinaryIO, Callable

import numpy as np
from numpy.lib import format as npy_format

from tfdist.errors import with_fix
from tfdist.export.errors import ExportError

#: The largest message protobuf parses (2 GiB - 1): a larger ``saved_model.pb`` cannot be a SavedModel.
PROTO_LIMIT = 2**31 - 1
#: The most ``export-check`` reads as one batch: a few examples are enough to check an export.
MAX_BATCH_BYTES = 2**30
#: The most arrays an ``.npz`` batch may hold (one per input of the signature).
MAX_BATCH_ARRAYS = 1024
#: numpy's own bound on a .npy header (``max_header_size``): larger ones are refused unread.
_MAX_HEADER = 10_000
_CHUNK = 1 << 20
#: numpy's bound on an array's size in bytes (``np.intp``), dimensions of size zero left out.
_MAX_ARRAY = np.iinfo(np.intp).max
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_SAVED_MODEL = "saved_model.pb"
_FIX_BATCH = "save the batch with numpy.save (one input) or numpy.savez (by input name)"
_FIX_EXPORT = "export again, or pass the directory strategy.export wrote"


def kind(mode: int) -> str:
    """What an ``st_mode`` is, in words: ``a FIFO``, ``a directory``, ..."""
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def regular_file_problem(path: str) -> str | None:
    """Why ``path`` is not a regular file this process can read (``"is a FIFO, not a regular file"``),
    else None; reads nothing (``os.stat`` follows symbolic links)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist" if not os.path.lexists(path) else "is a symbolic link to nothing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    if not stat.S_ISREG(mode):
        return f"is {kind(mode)}, not a regular file"
    return None


def open_regular(path: str, what: str, fix: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file, else ``ExportError`` "``what`` PATH is a
    FIFO, ..."; opened ``O_NONBLOCK``, so a FIFO swapped in after a check is refused, not waited on."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        problem = regular_file_problem(path) or f"cannot be read ({exc.strerror or type(exc).__name__})"
        raise ExportError(with_fix(f"{what}{path!r} {problem}", fix)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ExportError(with_fix(f"{what}{path!r} is {kind(mode)}, not a regular file", fix))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: str, limit: int, what: str, fix: str, too_large: str) -> bytes:
    """The bytes of the regular file ``path``, refused unread when larger than ``limit`` (and never
    more than ``limit + 1`` read, should it grow meanwhile); ``too_large`` says why that is wrong."""
    with open_regular(path, what, fix) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise ExportError(with_fix(f"{what}{path!r} is {size:,} bytes, {too_large}", fix))
        chunks, total = [], 0
        while total <= limit:
            chunk = f.read(min(_CHUNK, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise ExportError(with_fix(f"{what}{path!r} grew past {limit:,} bytes while read, {too_large}", fix))
        return b"".join(chunks)


# --- the export folder --------------------------------------------------------------------------------
def check_export_folder(path: str) -> str:
    """Check ``path`` is an export folder export-check can read without waiting or reading too much:
    a directory holding ``saved_model.pb``, every entry a directory or a regular file, and its
    protobuf files within protobuf's 2 GiB limit. Returns the path of ``saved_model.pb``."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ExportError(with_fix(f"{path!r} does not exist, so it is not a SavedModel",
                                   "pass the directory strategy.export wrote")) from None
    except OSError as exc:
        raise ExportError(with_fix(f"{path!r} cannot be read ({exc.strerror}), so it is not checked",
                                   "pass a directory this process can read")) from None
    if not stat.S_ISDIR(mode):
        raise ExportError(with_fix(f"{path!r} is {kind(mode)}, not a SavedModel directory",
                                   "pass the directory strategy.export wrote"))
    proto = os.path.join(path, _SAVED_MODEL)
    if not os.path.lexists(proto):
        raise ExportError(with_fix(f"{path!r} has no saved_model.pb, so it is not a SavedModel",
                                   "pass the directory strategy.export wrote"))

    def unreadable(error: OSError) -> None:
        raise ExportError(with_fix(f"{error.filename!r} in the export cannot be read ({error.strerror})",
                                   "make the export readable by this process"))

    for root, directories, names in os.walk(path, onerror=unreadable):
        for name in sorted(names):
            entry = os.path.join(root, name)
            problem = regular_file_problem(entry)
            if problem is not None:
                raise ExportError(with_fix(f"{entry!r} in the export {problem}; an export holds directories "
                                           "and regular files only (TensorFlow would wait on a FIFO for ever)",
                                           "remove it, or export again"))
            if root == path and name.endswith(".pb"):
                size = os.stat(entry).st_size
                if size > PROTO_LIMIT:
                    raise ExportError(with_fix(
                        f"{entry!r} is {size:,} bytes, over protobuf's 2 GiB limit ({PROTO_LIMIT:,} bytes), "
                        "so it cannot be a valid SavedModel file (it is damaged, or not one)", _FIX_EXPORT))
    return proto


def read_saved_model(path: str) -> bytes:
    """The bytes of ``path``'s ``saved_model.pb``, once the folder passed ``check_export_folder``."""
    proto = check_export_folder(path)
    return read_bounded(proto, PROTO_LIMIT, "", _FIX_EXPORT, "over protobuf's 2 GiB limit, so it cannot be a "
                        "valid SavedModel file (it is damaged, or not one)")


# --- the batch ------------------------------------------------------------------------------------------
def check_batch(path: str) -> None:
    """Check the ``.npy``/``.npz`` batch at ``path`` (headers and sizes) without reading its data."""
    _batch(path, load=False)


def load_batch(path: str) -> np.ndarray | dict[str, np.ndarray]:
    """The batch at ``path``: one array (``.npy``) or ``{name: array}`` (``.npz``), each checked
    against its header and ``MAX_BATCH_BYTES`` before it is read; no pickled objects."""
    return _batch(path, load=True)


def _batch(path: str, load: bool) -> Any:
    what = f"--input {path!r}"
    with open_regular(path, "--input ", _FIX_BATCH) as f:
        if f.read(4) in _ZIP_MAGIC:
            f.seek(0)
            return _npz(f, what, load)
        f.seek(0)
        size = os.fstat(f.fileno()).st_size
        header = _npy_header(f, what)
        _check_data(header, size - f.tell(), what)
        if not load:
            return None
        f.seek(0)
        return _read_array(f, what)


def _npz(f: BinaryIO, what: str, load: bool) -> dict[str, np.ndarray] | None:
    try:
        archive = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ExportError(with_fix(f"{what} cannot be read as .npz ({exc})", _FIX_BATCH)) from None
    with archive:
        members = archive.infolist()
        if len(members) > MAX_BATCH_ARRAYS:
            raise ExportError(with_fix(f"{what} holds {len(members):,} files, more than the {MAX_BATCH_ARRAYS} "
                                       "arrays a batch may have", "save one array per input of the signature"))
        total, arrays = 0, {}
        for member in members:
            if not member.filename.endswith(".npy") or member.is_dir():
                raise ExportError(with_fix(f"{what} holds {member.filename!r}, which is not an array "
                                           "numpy.savez wrote", _FIX_BATCH))
            name = member.filename[:-len(".npy")]
            where = f"{what} array {name!r}"
            header = _zip_read(archive, member, where, lambda m: (_npy_header(m, where), m.tell()))
            total += _check_data(header[0], member.file_size - header[1], where)
            if total > MAX_BATCH_BYTES:
                raise ExportError(with_fix(f"{what} holds more than {MAX_BATCH_BYTES:,} bytes of arrays, more "
                                           "than export-check runs as one batch",
                                           "pass a smaller batch: a few examples are enough to check an export"))
            if load:
                arrays[name] = _zip_read(archive, member, where, lambda m: _read_array(m, where))
    return arrays if load else None


def _zip_read(archive: zipfile.ZipFile, member: zipfile.ZipInfo, where: str, read: Callable[[Any], Any]) -> Any:
    try:
        with archive.open(member) as stream:
            return read(stream)
    except ExportError:
        raise
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError,
            RuntimeError) as exc:
        raise ExportError(with_fix(f"{where} cannot be read ({type(exc).__name__}: {exc})", _FIX_BATCH)) from None


def _npy_header(stream: Any, what: str) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype a .npy header declares, read with ``numpy.lib.format``; nothing else read."""
    try:
        version = npy_format.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = npy_format.read_array_header_1_0(stream, max_header_size=_MAX_HEADER)
        elif version == (2, 0):
            shape, _, dtype = npy_format.read_array_header_2_0(stream, max_header_size=_MAX_HEADER)
        else:
            raise ExportError(with_fix(f"{what} is a .npy file of format version {version[0]}.{version[1]}, "
                                       "which holds structured arrays, not a batch", _FIX_BATCH))
    except ExportError:
        raise
    except (ValueError, OSError, EOFError, SyntaxError, TypeError, OverflowError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ExportError(with_fix(f"{what} cannot be read as .npy (its header: {first})", _FIX_BATCH)) from None
    return tuple(shape), dtype


def _check_data(header: tuple[tuple[int, ...], np.dtype], available: int, what: str) -> int:
    """The bytes of data the header declares, checked against the bytes there and ``MAX_BATCH_BYTES``."""
    shape, dtype = header
    if dtype.hasobject:
        raise ExportError(with_fix(f"{what} holds Python objects (dtype {dtype}), which export-check does not "
                                   "unpickle", "save numbers or bytes, as the signature's inputs take"))
    if dtype.itemsize == 0:
        raise ExportError(with_fix(f"{what} has dtype {dtype.str!r}, whose elements hold no bytes", _FIX_BATCH))
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise ExportError(with_fix(f"{what} declares shape {shape}, which has a negative dimension", _FIX_BATCH))
    if math.prod(d for d in shape if d) * dtype.itemsize > _MAX_ARRAY:  # even with a zero dimension
        raise ExportError(with_fix(f"{what} declares shape {shape} of {dtype}, larger than any array can be",
                                   _FIX_BATCH))
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > available:
        raise ExportError(with_fix(
            f"{what} declares shape {shape} of {dtype} ({nbytes:,} bytes) and holds {max(available, 0):,} bytes "
            "of data: the header does not match the file", f"the file is damaged or was not written by numpy; "
                                                            f"{_FIX_BATCH}"))
    if nbytes > MAX_BATCH_BYTES:
        raise ExportError(with_fix(f"{what} is {nbytes:,} bytes of data, more than export-check runs as one batch "
                                   f"({MAX_BATCH_BYTES:,} bytes)",
                                   "pass a smaller batch: a few examples are enough to check an export"))
    return nbytes


def _read_array(stream: Any, what: str) -> np.ndarray:
    try:
        return npy_format.read_array(stream, allow_pickle=False, max_header_size=_MAX_HEADER)
    except (ValueError, OSError, EOFError, OverflowError) as exc:
        raise ExportError(with_fix(f"{what} cannot be read as .npy ({exc})", _FIX_BATCH)) from None
