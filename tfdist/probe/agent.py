"""What ``tfdist advise --probe`` runs on each host: ``python -m tfdist.probe.agent``.

May import :mod:`tfdist.errors`, :mod:`tfdist.probe.wire`, :mod:`tfdist.probe.host_memory`,
``tfdist.launch.remote_task.bind_address`` (the address a task binds) and
:mod:`tfdist.launch.installed` (whether Horovod is installed), and TensorFlow in the
``compute`` role only: it runs on every probed host, so it stays light.

The prober (:mod:`tfdist.probe.driver`) starts one agent per measurement, over ssh (or directly on
this machine), and writes its specification to the agent's stdin as one JSON line, so the module of
``--model`` is imported in the launcher's working directory with the launcher's environment, as
``tfdist.launch.remote_task`` does for tasks. Roles:

* ``receive``: bind the address the spec's ``host`` resolves to here (port 0), print ``{"port": P}``,
  accept one sender, echo its one-byte pings, then count the bulk bytes until the sender closes.
  The rate is taken between the first byte after ``skip`` seconds of the bulk and the last byte, so
  a token bucket's initial burst does not inflate it. With ``"steady": true`` the receiver ends the
  transfer (a reset) as soon as the rate is steady (:func:`steady`); otherwise it lasts until the
  sender, after its ``seconds``, closes and its queued bytes have arrived;
* ``send``: connect to ``peer``:``port`` (``TCP_NODELAY``), time ``pings`` one-byte round trips
  (latency = median RTT / 2), then send for ``seconds`` and close; with ``"gated": true`` (the
  prober starts every link's agents at once) it prints ``{"ready": true}`` after the pings and sends
  once a ``go`` line comes, so that the transfers run one at a time and no ping queues behind one;
* ``compute``: build ``model`` (``module:build_fn``), train warm-up steps at ``batch_size`` on random
  data shaped like ``model.input_shape``, print ``{"ready": true}`` and wait for a ``go`` line on stdin
  (the prober starts every host's agent at once and lets one host at a time time its steps); then
  report the time per step (the fastest of three timed windows), the parameter count, the bytes per
  parameter, every variable's shape and dtype size (for the memory check), and the rate of
  PowerSGD's own work on the model's kernels (:func:`time_powersgd`, for the advisor's PowerSGD cost).

The receiver also reports its host's memory (:mod:`tfdist.probe.host_memory`: the cgroup limit,
MemTotal, MemAvailable) and whether Horovod's TensorFlow extension is installed there
(:func:`tfdist.launch.installed.horovod_with_tensorflow`): every probed host receives once.

Every answer is one stdout line ``TFDIST_PROBE {json}`` (:mod:`tfdist.probe.wire`; ``{"error": ...}`` on
failure, exit code 2). Every agent exits when its stdin ends (the prober stopped or its ssh session went away) and
after ``timeout`` seconds whatever happens (a compute agent waiting for ``go`` too), so an
interrupted probe leaves nothing running.
Only the ``compute`` role imports TensorFlow.
"""
from __future__ import annotations

import bisect
import os
import signal
import socket
import statistics
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from tfdist.errors import TfdistError, with_fix
from tfdist.probe.wire import (DATA, EXIT_ABANDONED, EXIT_FAILED, GO, PING, ProbeAgentError, answer,
                               decode_spec, parse_answer)

__all__ = ["ProbeAgentError", "answer", "compute", "decode_spec", "embeddings_of", "load_build_fn", "main",
           "parse_answer", "rate_after_skip", "receive", "run", "send", "shapes_of", "steady", "time_powersgd",
           "variables_of"]

CHUNK = 256 * 1024  # bytes per read and per write of the bulk transfer
STEADY_WINDOW = 0.1  # s: a transfer is steady once its rate measured up to now and up to ...
STEADY_WINDOWS = 3  # ... each of the moments this many windows back (now included) ...
STEADY_TOLERANCE = 0.05  # ... agree within this fraction of the largest
STEADY_EVERY = 0.05  # s between two checks of a running transfer

# --- links ------------------------------------------------------------------------------------------
def rate_after_skip(samples: list[tuple[float, int]], skip: float) -> tuple[float, int, float]:
    """``(bits/s, bytes, seconds)`` from ``(time, bytes so far)`` samples of one transfer, between the
    first sample ``skip`` seconds after the first byte and the last; with too short a transfer, the
    whole of it. Pure."""
    if len(samples) < 2:
        raise ProbeAgentError(with_fix("the transfer was too short to time (fewer than two reads)",
                                       "probe for longer (--probe-seconds 2)"))
    start = next((s for s in samples if s[0] - samples[0][0] >= skip), None)
    if start is None or samples[-1][0] - start[0] < 0.1 or start is samples[-1]:
        start = samples[0]
    seconds = samples[-1][0] - start[0]
    moved = samples[-1][1] - start[1]
    if seconds <= 0 or moved <= 0:
        raise ProbeAgentError(with_fix("the transfer was too short to time", "probe for longer "
                                       "(--probe-seconds 2)"))
    return moved * 8 / seconds, moved, seconds


def steady(samples: list[tuple[float, int]], skip: float, window: float = STEADY_WINDOW,
           windows: int = STEADY_WINDOWS, tolerance: float = STEADY_TOLERANCE) -> bool:
    """Whether a transfer's rate has settled, from its ``(time, bytes so far)`` samples: the rate from
    ``skip`` s after the first byte up to now, and up to each of the ``windows - 1`` moments ``window``
    s apart before now, agree within ``tolerance`` of the largest. The bytes between two samples are
    interpolated, so the reads' sizes do not count; each window, and the first after ``skip``, must
    hold two reads or more. A token bucket's link settles once its burst is
    spent (``skip``); a rate still climbing or jumping does not, and its transfer runs its full time. Pure."""
    if len(samples) < 2:
        return False
    first, now = samples[0][0] + skip, samples[-1][0]
    if now - first < windows * window:
        return False
    def reads_by(moment: float) -> int:  # samples at or before ``moment`` (a search: no copy of the samples)
        return bisect.bisect_right(samples, moment, key=lambda sample: sample[0])

    starts = [first] + [now - k * window for k in range(windows, 0, -1)]  # the span's start, each window's
    if any(reads_by(start + window) - reads_by(start) < 2 for start in starts):
        return False  # reads too sparse to tell (a stall, a receiver descheduled): interpolation would guess

    def moved_by(moment: float) -> float:  # bytes received by ``moment``, interpolated between two reads
        after = bisect.bisect_left(samples, moment, key=lambda sample: sample[0])
        if after == 0:
            return float(samples[0][1])
        (t0, b0), (t1, b1) = samples[after - 1], samples[min(after, len(samples) - 1)]
        return b1 if t1 <= t0 else b0 + (b1 - b0) * (moment - t0) / (t1 - t0)

    base = moved_by(first)
    rates = [(moved_by(now - k * window) - base) / (now - k * window - first) for k in range(windows)]
    return min(rates) > 0 and max(rates) - min(rates) <= tolerance * max(rates)


def receive(host: str, seconds: float, skip: float, out: IO[str] = sys.stdout,
            resolve: Callable[[str], str] | None = None, wait: float | None = None,
            stop_when_steady: bool = False, pythonpath: Sequence[str] = ()) -> dict[str, Any]:
    """Listen on ``host``'s address, announce the port, echo pings, time the bulk transfer. ``wait``:
    how long the sender may go quiet (default ``seconds`` + 60; a probe that transfers one link at a
    time gives its whole timeout, since the other links' transfers come first). ``stop_when_steady``:
    once the rate is :func:`steady`, reset the connection (the sender stops at once, its queued bytes
    dropped) and time what came so far; otherwise the transfer runs until the sender closes (after its
    ``seconds``) and its queued bytes have arrived. ``pythonpath``: the launcher's ``PYTHONPATH`` as the
    tasks search it (absolute entries), for where to look for Horovod."""
    from tfdist.launch.remote_task import bind_address

    address = bind_address(host) if resolve is None else bind_address(host, resolve)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind((address, 0))
        server.listen(1)
        server.settimeout(60)
        answer({"port": server.getsockname()[1], "address": address}, out)
        try:
            conn, _ = server.accept()
        except TimeoutError:
            raise ProbeAgentError(with_fix(f"no sender reached {address} within 60 s", "check that the hosts "
                                           "can reach each other on any TCP port (a firewall?)")) from None
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.settimeout(seconds + 60 if wait is None else max(wait, seconds + 60))
        while True:  # the ping phase: echo until the sender says DATA
            byte = conn.recv(1)
            if byte == PING:
                conn.sendall(PING)
            elif byte == DATA:
                break
            else:
                raise ProbeAgentError(with_fix(f"the sender sent {byte!r} instead of a ping",
                                               "use the same tfdist version on every host"))
        samples: list[tuple[float, int]] = []
        total = 0
        buffer = bytearray(CHUNK)
        check = 0.0
        stopped = False
        while True:
            count = conn.recv_into(buffer)
            if not count:
                break
            total += count
            now = time.monotonic()
            samples.append((now, total))
            if stop_when_steady and now >= check:
                check = now + STEADY_EVERY
                if steady(samples, skip):
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    stopped = True
                    break  # closing with a zero linger resets the connection
    bits, moved, timed = rate_after_skip(samples, skip)
    from tfdist.launch.installed import horovod_with_tensorflow
    from tfdist.probe.host_memory import read_host_memory

    return {"rate_bps": bits, "bytes": total, "timed_bytes": moved, "timed_seconds": timed, "steady_stop": stopped,
            "memory": read_host_memory().as_dict(),  # every probed host receives once
            "horovod": horovod_with_tensorflow(pythonpath)}


def send(peer: str, port: int, seconds: float, pings: int,
         ready: Callable[[], None] | None = None) -> dict[str, Any]:
    """Time ``pings`` one-byte round trips to ``peer``, then send for ``seconds``; RTTs and bytes.
    ``ready`` (a probe that starts every link's agents at once): called between the pings and the
    transfer, it returns when this link's turn comes, so no ping waits behind another link's transfer.
    A receiver that found the rate steady resets the connection: the transfer ends there
    (``"stopped": true``); whether the receiver failed instead is the receiver's answer."""
    try:
        conn = socket.create_connection((peer, port), timeout=30)
    except OSError as exc:
        raise ProbeAgentError(with_fix(f"cannot connect to {peer}:{port} ({exc})", "check that the hosts can "
                                       "reach each other by these names on any TCP port")) from None
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.settimeout(seconds + 60)
        rtts = []
        for _ in range(pings):
            start = time.perf_counter()
            conn.sendall(PING)
            if conn.recv(1) != PING:
                raise ProbeAgentError(with_fix(f"{peer} did not echo a ping", "use the same tfdist version "
                                               "on every host"))
            rtts.append(time.perf_counter() - start)
        if ready is not None:
            ready()
        conn.sendall(DATA)
        block = os.urandom(CHUNK)
        sent = 0
        deadline = time.monotonic() + seconds
        stopped = False
        try:
            while time.monotonic() < deadline:
                conn.sendall(block)
                sent += len(block)
        except (ConnectionResetError, BrokenPipeError):
            stopped = True
        try:
            conn.shutdown(socket.SHUT_WR)
        except OSError:  # reset meanwhile (ENOTCONN): the receiver has ended the transfer
            stopped = True
    median = statistics.median(rtts) if rtts else 0.0
    return {"rtt_s": median, "latency_s": median / 2, "sent_bytes": sent, "stopped": stopped}


# --- compute ----------------------------------------------------------------------------------------
def load_build_fn(model: str) -> Callable[[], Any]:
    """``module:function`` imported; errors name ``--model`` and the fix."""
    import importlib

    module_name, colon, function = model.partition(":")
    if not colon or not module_name or not function:
        raise ProbeAgentError(with_fix(f"--model {model!r} is not module:function",
                                       "give e.g. --model mypackage.models:build_model"))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ProbeAgentError(with_fix(f"--model {model!r}: cannot import {module_name} on "
                                       f"{socket.gethostname()} ({exc})", "run the probe from the "
                                       "directory that holds the module, or put it on PYTHONPATH (on every "
                                       "host)")) from None
    build = getattr(module, function, None)
    if not callable(build):
        raise ProbeAgentError(with_fix(f"--model {model!r}: {module_name} has no function {function!r}",
                                       "name a function that takes no arguments and returns a Keras model"))
    return build


def shapes_of(model: Any, name: str) -> tuple[list[tuple[tuple[int, ...], str]], tuple[int, ...]]:
    """The model's inputs (each shape without the batch dimension, and its dtype) and its single output
    shape; errors name ``--model``."""
    try:
        inputs = [(tuple(t.shape), str(getattr(t.dtype, "name", t.dtype))) for t in model.inputs]
        output_shape = model.output_shape
    except (AttributeError, ValueError, RuntimeError, TypeError):
        inputs, output_shape = None, None
    fix = ("give the model an Input, e.g. tf.keras.Sequential([tf.keras.Input((64,)), ...]), so the probe "
           "knows what data to feed it")
    if not inputs or not isinstance(output_shape, tuple):
        raise ProbeAgentError(with_fix(f"--model {name!r} builds a model without known inputs and a single "
                                       f"output shape (output {output_shape!r})", fix))
    for shape in [s for s, _ in inputs] + [output_shape]:
        if any(dim is None for dim in shape[1:]):
            raise ProbeAgentError(with_fix(f"--model {name!r} has inputs {[s for s, _ in inputs]!r} and output "
                                           f"shape {output_shape!r}, with unknown dimensions", fix))
    if not output_shape[1:]:
        raise ProbeAgentError(with_fix(f"--model {name!r} has output shape {output_shape!r}, without a "
                                       "dimension after the batch", "end the model with e.g. Dense(1)"))
    return [(tuple(int(d) for d in s[1:]), dtype) for s, dtype in inputs], tuple(output_shape[1:])


def embeddings_of(model: Any) -> list[list[float]]:
    """The model's ``Embedding`` layers (tf-keras or Keras 3, nested models included) as ``[rows, dim,
    lookups]``: the table's shape and the ids one example looks up in it (the layer input's size)."""
    import math

    found = []
    pending = list(getattr(model, "layers", []))
    while pending:
        layer = pending.pop(0)
        pending.extend(getattr(layer, "layers", []))
        if type(layer).__name__ != "Embedding" or not hasattr(layer, "input_dim"):
            continue
        try:
            shape = tuple(layer.input.shape)[1:]
            lookups = math.prod(int(d) for d in shape) if all(d is not None for d in shape) else 1
        except (AttributeError, ValueError, RuntimeError, TypeError):  # a shared layer: several inputs
            lookups = 1
        found.append([int(layer.input_dim), int(layer.output_dim), max(1, lookups)])
    return found


def compute(model: str, batch_size: int, steps: int, min_seconds: float, warmup: int = 3,
            windows: int = 3, ready: Callable[[], None] | None = None) -> dict[str, Any]:
    """Build the model, train ``warmup`` steps, call ``ready`` (it returns when this host may time its
    steps), then ``windows`` windows of at least ``steps`` steps and ``min_seconds`` each; the mean time
    per step (ms) of the fastest window (another process's burst of load slows one window, not all),
    the parameter count and bytes per parameter."""
    import tfdist  # noqa: F401  (first: keeps tf.keras on tf-keras)

    import numpy as np
    import tensorflow as tf

    net = load_build_fn(model)()
    if not isinstance(net, tf.keras.Model):
        raise ProbeAgentError(with_fix(f"--model {model!r} returned {type(net).__name__}, not a Keras model",
                                       "return a tf.keras model from the function"))
    inputs, outputs = shapes_of(net, model)
    tables = embeddings_of(net)
    vocabulary = min((rows for rows, _, _ in tables), default=2)  # ids valid in every table
    rng = np.random.default_rng(0)

    def feed(shape: tuple[int, ...], dtype: str) -> Any:
        if "int" in dtype:  # ids: for the Embedding layers they feed
            return rng.integers(0, vocabulary, size=(batch_size, *shape)).astype(dtype)
        return rng.standard_normal((batch_size, *shape)).astype("float32")

    x = [feed(*spec) for spec in inputs] if len(inputs) > 1 else feed(*inputs[0])
    if outputs[-1] > 1:
        y = rng.integers(0, outputs[-1], size=(batch_size, *outputs[:-1]))
        loss = "sparse_categorical_crossentropy"
    else:
        y = rng.standard_normal((batch_size, *outputs)).astype("float32")
        loss = "mse"
    net.compile(optimizer="adam", loss=loss)
    for _ in range(warmup):
        net.train_on_batch(x, y)
    if ready is not None:
        ready()
    means, done = [], 0
    for _ in range(windows):
        count, start = 0, time.perf_counter()
        while count < steps or time.perf_counter() - start < min_seconds:
            net.train_on_batch(x, y)
            count += 1
        means.append((time.perf_counter() - start) / count)
        done += count
    weights = net.weights
    counts = [int(np.prod(w.shape)) for w in weights]
    total_bytes = sum(n * w.dtype.size for n, w in zip(counts, weights))
    dtype_bytes = max(1, round(total_bytes / sum(counts))) if sum(counts) else 4
    table_shapes = [[rows, dim] for rows, dim, _ in tables]
    kernels = [list(w.shape) for w in net.trainable_weights if len(w.shape) >= 2]
    for shape in table_shapes:  # an Embedding's table: sparse rows, allgathered whole, never compressed
        if shape in kernels:
            kernels.remove(shape)
    return {"step_ms": min(means) * 1000, "window_ms": [m * 1000 for m in means], "steps": done,
            "params": int(net.count_params()),
            "dtype_bytes": dtype_bytes, "batch_size": batch_size,
            "variables": variables_of(net), "embeddings": tables,
            "powersgd_bytes_per_s": time_powersgd(kernels, min_seconds / 2, windows)}


def time_powersgd(kernels: list[list[int]], min_seconds: float, windows: int = 3) -> float | None:
    """The rate of PowerSGD's own work on this host (bytes of compressed float32 matrices per second):
    one compressed step of ``kernels`` (adding the error, the two products, the QR, the new error),
    with the allreduces left out, timed in ``windows`` windows of at least ``min_seconds``; the fastest
    window counts. ``None`` when no kernel is compressed (PowerSGD's defaults decide)."""
    import tensorflow as tf

    from tfdist.runtime.lowrank import PowerSGDSettings, compressed, matrix_shape
    from tfdist.runtime.powersgd import PowerSGD

    settings = PowerSGDSettings(start_iter=0)
    shapes = [tuple(shape) for shape in kernels if compressed(shape, settings)]
    if not shapes:
        return None
    compressor = PowerSGD(shapes, settings)
    grads = [tf.random.stateless_normal(shape, seed=(index, 0)) for index, shape in enumerate(shapes)]
    step = tf.function(lambda: compressor.reduce(grads, list))
    for _ in range(3):  # traced and warm
        step()
    fastest = None
    for _ in range(windows):
        count, start = 0, time.perf_counter()
        while count < 5 or time.perf_counter() - start < min_seconds:
            tf.nest.map_structure(lambda t: t.numpy(), step())
            count += 1
        mean = (time.perf_counter() - start) / count
        fastest = mean if fastest is None else min(fastest, mean)
    held = sum(m * n for m, n in (matrix_shape(shape) for shape in shapes)) * 4
    return held / fastest


def variables_of(model: Any) -> list[list[Any]]:
    """Each of the model's variables as ``[shape, dtype bytes]`` (tf-keras or Keras 3), for the memory
    check (:meth:`tfdist.advise.memory.ModelMemory.from_shapes`)."""
    import numpy as np

    return [[[int(d) for d in w.shape], int(np.dtype(getattr(w.dtype, "as_numpy_dtype", w.dtype)).itemsize)]
            for w in model.weights]


# --- the process ------------------------------------------------------------------------------------
def _enter(spec: Mapping[str, Any]) -> None:
    """The compute role's working directory, environment and import path (the launcher's)."""
    env = spec["env"]
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        raise ProbeAgentError(with_fix("the specification's env must map strings to strings",
                                       "use the same tfdist version on every host"))
    os.environ.update(env)
    try:
        os.chdir(spec["cwd"])
    except (OSError, TypeError) as exc:
        raise ProbeAgentError(with_fix(f"cannot enter the working directory {spec['cwd']!r} ({exc})",
                                       "run the probe from a directory that exists on every host")) from None
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [os.getcwd(), *extra]


def _read_spec(stdin: IO[bytes]) -> tuple[bytes, Callable[[], bytes], bytes]:
    """The first stdin line, a function reading what follows and the bytes already read past the line.
    A real stdin is read from its file descriptor, never through Python's buffer: the watcher thread
    blocks in that read until the end, and a buffered reader it holds aborts the interpreter's exit."""
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):  # an in-memory stream (tests)
        return stdin.readline(), lambda: stdin.read(4096), b""
    data = b""
    while b"\n" not in data:
        chunk = os.read(fd, 65536)
        if not chunk:
            return data, lambda: b"", b""
        data += chunk
    line, _, rest = data.partition(b"\n")
    return line + b"\n", lambda: os.read(fd, 4096), rest


def _watch_stdin(read: Callable[[], bytes], pending: bytes, on_eof: Callable[[], None],
                 go: threading.Event) -> None:
    """Read stdin after the specification line (``pending``: what was read past it) in a thread: a
    ``go`` line sets ``go``; the end of stdin calls ``on_eof``."""
    def watch() -> None:
        buffer, chunk = b"", pending
        try:
            while True:
                *lines, buffer = (buffer + chunk).split(b"\n")
                buffer = buffer[-64:]  # the prober sends short lines only
                if any(line.strip() == GO for line in lines):
                    go.set()
                chunk = read()
                if not chunk:
                    break
        except (OSError, ValueError):
            pass
        on_eof()

    threading.Thread(target=watch, name="tfdist-probe-stdin", daemon=True).start()


def _gate(go: threading.Event, out: IO[str]) -> Callable[[], None]:
    """What a compute agent calls when it is built and warm (a gated sender: when it has pinged): say
    so, wait for ``go`` (the stdin watcher and the hard timeout end the process meanwhile if the
    prober goes away)."""
    def ready() -> None:
        answer({"ready": True}, out)
        while not go.wait(0.5):
            pass

    return ready


def run(spec: Mapping[str, Any], out: IO[str] = sys.stdout,
        go: threading.Event | None = None) -> dict[str, Any]:
    """Carry out one specification; the result to print. A compute agent given ``go`` says it is ready
    after its warm-up and times its steps once ``go`` is set; without it, at once."""
    role = spec["role"]
    if role == "receive":
        return receive(str(spec["host"]), float(spec["seconds"]), float(spec["skip"]), out,
                       wait=float(spec["timeout"]), stop_when_steady=spec.get("steady") is True,
                       pythonpath=[str(entry) for entry in _listed(spec.get("pythonpath"))])
    if role == "send":
        gated = go is not None and spec.get("gated") is True
        return send(str(spec["peer"]), int(spec["port"]), float(spec["seconds"]), int(spec["pings"]),
                    ready=_gate(go, out) if gated else None)
    _enter(spec)
    return compute(str(spec["model"]), int(spec["batch_size"]), int(spec["steps"]),
                   float(spec["min_seconds"]), ready=None if go is None else _gate(go, out))


def _listed(value: Any) -> list[Any]:
    """A specification's list, or nothing (an older prober's missing field)."""
    return value if isinstance(value, list) else []


def main(stdin: IO[bytes] | None = None, out: IO[str] = sys.stdout) -> int:
    line, read, pending = _read_spec(stdin or sys.stdin.buffer)
    try:
        spec = decode_spec(line)
    except TfdistError as exc:
        answer({"error": str(exc)}, out)
        return EXIT_FAILED

    def abandon(*_: Any) -> None:  # the prober is gone, or the hard timeout passed: leave at once
        os._exit(EXIT_ABANDONED)

    signal.signal(signal.SIGALRM, abandon)
    signal.alarm(max(1, int(spec["timeout"] + 0.999)))
    go = threading.Event()
    _watch_stdin(read, pending, abandon, go)
    try:
        result = run(spec, out, go)
    except TfdistError as exc:
        answer({"error": str(exc)}, out)
        return EXIT_FAILED
    except OSError as exc:
        answer({"error": with_fix(f"{spec['role']} failed on {socket.gethostname()} ({exc})",
                                  "check that the hosts reach each other by name on any TCP port")}, out)
        return EXIT_FAILED
    except Exception as exc:  # noqa: BLE001  (the model's own code: report, never a bare traceback)
        answer({"error": with_fix(f"{spec['role']} failed on {socket.gethostname()}: "
                                  f"{type(exc).__name__}: {exc}", "run the model's function by hand on that "
                                  "host to see why")}, out)
        return EXIT_FAILED
    answer({"result": result}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
