"""TensorFlow's log noise in the processes tfdist runs itself, cut without touching the user's own logging.

A user's ``TF_CPP_MIN_LOG_LEVEL`` always wins; what tfdist quiets is only what the user did not ask for:

* ``quiet_tensorflow_import()``: tfdist's command-line process (``tfdist env``, ``tfdist export-check``,
  ...) imports TensorFlow without its start-up lines. TensorFlow prints some of them whatever
  ``TF_CPP_MIN_LOG_LEVEL`` says (``cudart_stub.cc ... Could not find cuda drivers`` and absl's
  ``All log messages before absl::InitializeLog()`` banner come at level 3 too), and on a machine
  without a GPU its ``E... failed call to cuInit ... (303)`` is an ERROR, which level 2 shows. So:
  with the variable unset, TensorFlow is imported at level 3 (the variable is set for the import
  only, never for child processes: TensorFlow reads it once, at import) and the known start-up lines
  are dropped; with the variable set, only the known start-up lines below the user's level are dropped
  (those TensorFlow prints against the user's setting); every other line passes.
* ``cpp_info_quieted()`` / ``quiet_server_logs()``: TensorFlow's C++ INFO lines while tfdist connects a
  coordinator to its servers (each server dumps ``SessionOptions``, 22 lines, per connection), and in a
  ps or worker process that tfdist has turned into a server (it runs no user code any more). Warnings
  and errors stay; a user who set ``TF_CPP_MIN_LOG_LEVEL`` keeps exactly that.
* ``summarise_unrestored_optimizer_state()``: the sidecar evaluator restores each checkpoint's weights
  and not its optimizer state, which evaluating does not use; TensorFlow warns once per checkpoint and
  per optimizer variable ("Value in checkpoint could not be found ... (root).optimizer..."). Those
  lines become one line; any other unrestored value still shows.

This module imports the standard library only (it also runs as the filter process of
``quiet_tensorflow_import``: ``python -I -S tf_noise.py THRESHOLD``).
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import os
import re
import sys
from typing import Any, Callable, Iterator

TF_LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
#: TensorFlow's levels: 0 INFO, 1 WARNING, 2 ERROR, 3 FATAL (and absl's ``LogSeverityAtLeast`` alike)
INFO, WARNING, ERROR, FATAL = 0, 1, 2, 3
_SEVERITY = {"I": INFO, "W": WARNING, "E": ERROR, "F": FATAL}

#: The start-up lines TensorFlow prints on import and on its first device query, by the C++ file that
#: prints them (``I0000 00:00:1796287640.944722   10160 cudart_stub.cc:31] Could not find cuda ...``).
_NOISY_SOURCES = (r"(?:cudart_stub|cpu_feature_guard|cuda_platform|cuda_executor|cuda_diagnostics"
                  r"|cuda_dnn|cuda_fft|cuda_blas)")
_CPP_LINE = re.compile(rf"^([IWEF])\d{{4}} [\d:.]+ +\d+ {_NOISY_SOURCES}\.cc:\d+\] ")
_ABSL_BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
_CPU_GUARD_TAIL = re.compile(r"^To enable the following instructions: .*rebuild TensorFlow with the appropriate "
                             r"compiler flags\.$")


def startup_noise_level(line: str) -> int | None:
    """The severity of ``line`` when it is one of TensorFlow's known start-up lines, else ``None``.

    >>> startup_noise_level("E0000 00:00:1796287644.325825   10160 cuda_platform.cc:52] failed call to cuInit: ...")
    2
    """
    line = line.rstrip("\r\n")
    match = _CPP_LINE.match(line)
    if match:
        return _SEVERITY[match.group(1)]
    if line == _ABSL_BANNER or _CPU_GUARD_TAIL.match(line):
        return INFO  # the banner only comes before an INFO line; the tail continues cpu_feature_guard's
    return None


def user_log_level(environ: dict[str, str] | os._Environ = os.environ) -> int | None:
    """The user's ``TF_CPP_MIN_LOG_LEVEL`` as TensorFlow reads it, ``None`` when it is unset."""
    value = environ.get(TF_LOG_LEVEL_ENV)
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return INFO  # TensorFlow takes what it cannot parse as 0


def drop_threshold(environ: dict[str, str] | os._Environ = os.environ) -> int:
    """Start-up lines below this severity are dropped: all of them (up to FATAL) unless the user set a level."""
    level = user_log_level(environ)
    return FATAL if level is None else level


def keep_line(line: str, threshold: int) -> bool:
    """Whether the start-up filter passes ``line`` (``threshold`` from ``drop_threshold``)."""
    level = startup_noise_level(line)
    return level is None or level >= threshold


# --- tfdist's command-line process: TensorFlow's import ----------------------------------------------
@contextlib.contextmanager
def _env_default(name: str, value: str) -> Iterator[None]:
    """``name=value`` in this process's environment inside the block when it is unset, then unset again."""
    if name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)


@contextlib.contextmanager
def _filtered_stderr(threshold: int) -> Iterator[None]:
    """File descriptor 2 goes through a small filter process (this file run as a script) inside the block.

    A process, not a thread: it forwards each line as it comes even while an import holds the GIL, and
    when this process dies mid-import (a fatal CPU check, say) the filter still prints all it received."""
    import subprocess

    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all: nothing to filter
        yield
        return
    try:
        child = subprocess.Popen([sys.executable, "-I", "-S", __file__, str(threshold)], stdin=subprocess.PIPE,
                                 stdout=saved, stderr=saved)
    except OSError:
        os.close(saved)
        yield
        return
    os.dup2(child.stdin.fileno(), 2)
    child.stdin.close()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last writer goes: the filter reads EOF, prints the rest and ends
        os.close(saved)
        try:
            child.wait(timeout=10)  # its lines come before this process's next ones
        except subprocess.TimeoutExpired:  # something inherited the pipe; the filter ends with it
            pass


@contextlib.contextmanager
def quiet_startup() -> Iterator[None]:
    """TensorFlow's start-up lines left out of this block (see the module docstring); the user's level wins."""
    with _filtered_stderr(drop_threshold()), _env_default(TF_LOG_LEVEL_ENV, str(FATAL)):
        yield


class _QuietLoader(importlib.abc.Loader):
    """Runs the wrapped loader's ``exec_module`` inside ``quiet_startup``; everything else is the wrapped one's."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        with quiet_startup():
            self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _QuietTensorFlowFinder(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` once, through the other finders, with its loader wrapped in ``_QuietLoader``."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "tensorflow":
            return None
        _uninstall()
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


def _uninstall() -> None:
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _QuietTensorFlowFinder)]


def quiet_tensorflow_import() -> bool:
    """For tfdist's own command-line process: the first ``import tensorflow`` (wherever a command does
    it) runs inside ``quiet_startup``. ``False`` when TensorFlow is imported already. Never call this
    in a user's training process: their TensorFlow logging is theirs."""
    if "tensorflow" in sys.modules:
        return False
    _uninstall()
    sys.meta_path.insert(0, _QuietTensorFlowFinder())
    return True


# --- TensorFlow's C++ log level, changed at run time -------------------------------------------------
def _absl_min_log_level() -> tuple[Callable[[], int], Callable[[int], None]] | None:
    """absl's ``MinLogLevel``/``SetMinLogLevel`` in the loaded TensorFlow (``upstream.absl_min_log_level``,
    imported here: the filter process runs this file without tfdist)."""
    from tfdist import upstream

    return upstream.absl_min_log_level()


def cpp_log_level() -> int | None:
    """TensorFlow's C++ minimum log level now, ``None`` when it cannot be read (TensorFlow not loaded)."""
    functions = _absl_min_log_level()
    return None if functions is None else functions[0]()


def _raise_cpp_level(level: int) -> int | None:
    """Raise the C++ minimum level to ``level`` unless the user set one or it is that high already;
    the level before, when it was raised, else ``None``."""
    functions = _absl_min_log_level()
    if functions is None or user_log_level() is not None:
        return None
    get, set_ = functions
    previous = get()
    if previous >= level:
        return None
    set_(level)
    return previous


@contextlib.contextmanager
def cpp_info_quieted() -> Iterator[None]:
    """TensorFlow's C++ INFO lines left out inside the block (warnings and errors stay), unless the user
    set ``TF_CPP_MIN_LOG_LEVEL``."""
    previous = _raise_cpp_level(WARNING)
    try:
        yield
    finally:
        functions = _absl_min_log_level()
        if previous is not None and functions is not None:
            functions[1](previous)


def quiet_server_logs() -> bool:
    """In a process tfdist turns into a ps or worker server: its C++ INFO lines (``Started server``,
    ``Creating sync eager service context`` and a 22-line ``SessionOptions`` per connection) are left
    out from now on, unless the user set ``TF_CPP_MIN_LOG_LEVEL``. ``True`` when the level was raised
    (``False`` also when it was at WARNING or above already)."""
    return _raise_cpp_level(WARNING) is not None


# --- the sidecar evaluator's checkpoint warnings ---------------------------------------------------
_UNRESTORED_HEADER = "Detecting that an object or model or tf.train.Checkpoint is being deleted with unrestored values"
_UNRESTORED_OPTIMIZER = "Value in checkpoint could not be found in the restored object: (root).optimizer"
SUMMARY = ("evaluator: each checkpoint's model weights are restored, not its optimizer state, which "
           "evaluating does not use; TensorFlow's warnings about those unrestored values are left out")


class UnrestoredOptimizerState(logging.Filter):
    """Drops TensorFlow's warnings about optimizer values a checkpoint holds and the evaluator did not
    restore, and says so once on the ``tfdist`` logger. Other unrestored values (a model weight the
    checkpoint has and the model lacks) still show."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = 0

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith((_UNRESTORED_HEADER, _UNRESTORED_OPTIMIZER)):
            return True
        if self.hidden == 0:
            logging.getLogger("tfdist").warning(SUMMARY)
        self.hidden += 1
        return False


def summarise_unrestored_optimizer_state(logger: logging.Logger | None = None) -> UnrestoredOptimizerState:
    """Install ``UnrestoredOptimizerState`` on TensorFlow's logger (once) for the rest of this process."""
    logger = logger or logging.getLogger("tensorflow")
    for existing in logger.filters:
        if isinstance(existing, UnrestoredOptimizerState):
            return existing
    installed = UnrestoredOptimizerState()
    logger.addFilter(installed)
    return installed


def _filter_main(threshold: int) -> None:
    """The filter process: stdin to stdout, line by line, without TensorFlow's start-up lines."""
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    for raw in iter(source.readline, b""):
        if keep_line(raw.decode("utf-8", "replace"), threshold):
            sink.write(raw)
            sink.flush()


if __name__ == "__main__":
    _filter_main(int(sys.argv[1]))
