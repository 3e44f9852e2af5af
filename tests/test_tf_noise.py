"""TensorFlow's log noise in tfdist's own processes (tfdist.tf_noise, issue 34): the command line's
start-up lines, the C++ INFO level of servers and connections, the evaluator's checkpoint warnings.

The pure tests run without TensorFlow (a fake ``tensorflow`` package stands in where an import is
needed); the ``slow`` ones run ``tfdist env`` and TensorFlow itself, with ``TF_CPP_MIN_LOG_LEVEL``
unset as a user outside ``make`` has it (the suite sets it to 2).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import REPO, examples, subprocess_env
from tfdist import lifecycle, tf_noise

# What TensorFlow 2.21 prints on this machine (no GPU), before the fix in every tfdist command that imports it.
CUDART = ("I0000 00:00:1796287640.944722   10160 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
          "GPU will not be used.")
CPU_GUARD = ("I0000 00:00:1796287641.020720   10160 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to "
             "use available CPU instructions in performance-critical operations.")
CPU_GUARD_TAIL = ("To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the "
                  "appropriate compiler flags.")
BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
CUINIT = ("E0000 00:00:1796287644.325825   10160 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
          "Failed call to cuInit: UNKNOWN ERROR (303)")
STARTUP = [BANNER, CUDART, CPU_GUARD, CPU_GUARD_TAIL, CUINIT]
SOURCES = ["cudart_stub", "cpu_feature_guard", "cuda_platform", "cuda_dnn", "cuda_fft", "cuda_blas"]


def _user_env(**extra: str) -> dict[str, str]:
    """A child's environment as a user's shell has it: no TF_CPP_MIN_LOG_LEVEL unless ``extra`` sets it."""
    env = subprocess_env(**extra)
    if "TF_CPP_MIN_LOG_LEVEL" not in extra:
        env.pop("TF_CPP_MIN_LOG_LEVEL")
    return env


# --- which lines are TensorFlow's start-up noise ----------------------------------------------------
def test_tensorflows_start_up_lines_are_recognised_with_their_severity():
    assert [tf_noise.startup_noise_level(line) for line in STARTUP] == [0, 0, 0, 0, 2]
    assert tf_noise.startup_noise_level(CUDART + "\n") == 0


@pytest.mark.parametrize("line", [
    "Epoch 1/3",
    "[tfdist] ps:0 serving; waiting for the chief at 127.0.0.1:2222",
    "I0000 00:00:1796288009.108395   18097 grpc_server_lib.cc:467] Started server with target: grpc://localhost:50865",
    "W0000 00:00:1796287920.577729   15162 dataset.cc:997] Input of GeneratorDatasetOp::Dataset will not be optimized",
    "my own cuInit check: cudart_stub.cc:31] failed",
    "  " + CUDART,
    "To enable the following instructions: AVX2 FMA, in my code",
])
def test_other_lines_are_not_start_up_noise(line):
    assert tf_noise.startup_noise_level(line) is None
    assert tf_noise.keep_line(line, tf_noise.FATAL)


@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r")))
def test_any_line_that_is_no_start_up_line_passes(line):
    if tf_noise.startup_noise_level(line) is None:
        assert all(tf_noise.keep_line(line, threshold) for threshold in range(-1, 5))


@settings(max_examples=examples(300), deadline=None)
@given(severity=st.sampled_from("IWEF"), source=st.sampled_from(SOURCES), line_no=st.integers(0, 99999),
       message=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r")),
       threshold=st.integers(0, 4))
def test_a_start_up_line_is_dropped_exactly_when_below_the_threshold(severity, source, line_no, message, threshold):
    line = f"{severity}0000 00:00:1796287640.944722   10160 {source}.cc:{line_no}] {message}"
    level = "IWEF".index(severity)
    assert tf_noise.startup_noise_level(line) == level
    assert tf_noise.keep_line(line, threshold) == (level >= threshold)


@pytest.mark.parametrize(("value", "threshold"), [(None, 3), ("0", 0), ("1", 1), (" 2 ", 2), ("3", 3), ("x", 0)])
def test_the_users_level_decides_what_is_dropped(value, threshold):
    environ = {} if value is None else {"TF_CPP_MIN_LOG_LEVEL": value}
    assert tf_noise.drop_threshold(environ) == threshold


# --- the filter process and the wrapped import (a fake `tensorflow`, no TensorFlow) --------------------
def test_the_filter_process_passes_all_but_the_start_up_lines():
    text = "\n".join(["user line 1", *STARTUP, "user line 2", CUINIT]) + "\n"
    dropped_all = subprocess.run([sys.executable, "-I", "-S", tf_noise.__file__, "3"], input=text,
                                 capture_output=True, text=True, timeout=60)
    assert dropped_all.stdout.splitlines() == ["user line 1", "user line 2"]
    at_two = subprocess.run([sys.executable, "-I", "-S", tf_noise.__file__, "2"], input=text,
                            capture_output=True, text=True, timeout=60)
    assert at_two.stdout.splitlines() == ["user line 1", CUINIT, "user line 2", CUINIT]


def _run(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=_user_env(PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}", **env),
                          cwd=tmp_path)


def test_filtered_stderr_keeps_what_a_crash_printed_and_the_order_of_lines(tmp_path):
    """A filter process, not a temporary file: what the process printed before dying still shows."""
    crashed = _run(f"""
        import os, sys
        from tfdist.tf_noise import _filtered_stderr
        print("before", file=sys.stderr, flush=True)
        with _filtered_stderr(3):
            os.write(2, {(CUDART + chr(10)).encode()!r} + b"the last words\\n")
            os.abort()
        """, tmp_path)
    assert crashed.returncode != 0
    assert crashed.stderr.splitlines()[:2] == ["before", "the last words"], crashed.stderr
    ordered = _run(f"""
        import os, sys
        from tfdist.tf_noise import _filtered_stderr
        with _filtered_stderr(3):
            os.write(2, {(BANNER + chr(10)).encode()!r} + b"inside\\n")
        print("after", file=sys.stderr, flush=True)
        """, tmp_path)
    assert ordered.returncode == 0, ordered.stderr
    assert ordered.stderr.splitlines() == ["inside", "after"]


FAKE_TENSORFLOW = f"""
import os, sys
LEVEL_AT_IMPORT = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
os.write(2, {(BANNER + chr(10) + CUDART + chr(10) + CUINIT + chr(10)).encode()!r})
os.write(2, b"E0000 00:00:1.0 1 session.cc:1] a real error from TensorFlow\\n")
print("a Python warning while importing", file=sys.stderr, flush=True)
"""

IMPORT_IT = """
    import json, os, subprocess, sys
    from tfdist.tf_noise import quiet_tensorflow_import
    first = quiet_tensorflow_import()
    import tensorflow
    import tensorflow.sub
    child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'))"],
                           capture_output=True, text=True).stdout.strip()
    print(json.dumps({"first": first, "again": quiet_tensorflow_import(), "at_import": tensorflow.LEVEL_AT_IMPORT,
                      "after": os.environ.get("TF_CPP_MIN_LOG_LEVEL"), "child": child,
                      "sub": tensorflow.sub.NAME, "finders": [type(f).__name__ for f in sys.meta_path]}))
    """


@pytest.fixture
def fake_tensorflow(tmp_path: Path) -> Path:
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text(FAKE_TENSORFLOW)
    (tmp_path / "tensorflow" / "sub.py").write_text("NAME = 'sub'\n")
    return tmp_path


def test_the_command_lines_import_of_tensorflow_drops_its_start_up_lines_and_sets_nothing_for_children(
        fake_tensorflow):
    result = _run(IMPORT_IT, fake_tensorflow)
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout)
    assert facts["first"] is True and facts["again"] is False  # TensorFlow was imported by then
    assert facts["at_import"] == "3"  # TensorFlow reads it once, at import: its later cuInit ERROR too
    assert facts["after"] is None and facts["child"] == "None"  # never seen by children (a launched job)
    assert facts["sub"] == "sub" and "_QuietTensorFlowFinder" not in facts["finders"]
    assert result.stderr.splitlines() == ["E0000 00:00:1.0 1 session.cc:1] a real error from TensorFlow",
                                          "a Python warning while importing"]


def test_a_users_tf_cpp_min_log_level_wins(fake_tensorflow):
    result = _run(IMPORT_IT, fake_tensorflow, TF_CPP_MIN_LOG_LEVEL="1")
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout)
    assert facts["at_import"] == "1" and facts["after"] == "1" and facts["child"] == "1"
    # only what TensorFlow prints against the user's level 1 goes: its INFO lines and absl's banner
    assert result.stderr.splitlines() == [CUINIT, "E0000 00:00:1.0 1 session.cc:1] a real error from TensorFlow",
                                          "a Python warning while importing"]
    everything = _run(IMPORT_IT, fake_tensorflow, TF_CPP_MIN_LOG_LEVEL="0")
    assert everything.stderr.splitlines()[:3] == [BANNER, CUDART, CUINIT]


def test_the_tfdist_command_installs_the_quiet_import(monkeypatch):
    from tfdist.cli import main as cli_main

    calls = []
    monkeypatch.setattr(cli_main, "quiet_tensorflow_import", lambda: calls.append("quiet"))
    monkeypatch.setattr(cli_main, "cli", lambda **kwargs: calls.append("cli"))
    cli_main.main()
    assert calls == ["quiet", "cli"]


# --- the C++ level of servers and connections (absl's level faked) ------------------------------------
class _FakeAbsl:
    def __init__(self, level: int) -> None:
        self.level, self.sets = level, []

    def functions(self):
        def set_(level: int) -> None:
            self.sets.append(level)
            self.level = level
        return (lambda: self.level), set_


@pytest.mark.parametrize(("user", "start", "inside", "sets"), [
    (None, 0, 1, [1, 0]),    # unset: INFO left out inside, then back
    (None, 2, 2, []),        # already above WARNING: never lowered
    ("0", 0, 0, []),         # the user asked for everything
])
def test_info_is_quieted_only_where_the_user_did_not_choose(monkeypatch, user, start, inside, sets):
    absl = _FakeAbsl(start)
    monkeypatch.setattr(tf_noise, "_absl_min_log_level", absl.functions)
    if user is None:
        monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    else:
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", user)
    with tf_noise.cpp_info_quieted():
        assert absl.level == inside
    assert absl.level == start and absl.sets == sets


def test_a_server_is_quieted_before_it_starts(monkeypatch):
    absl = _FakeAbsl(0)
    monkeypatch.setattr(tf_noise, "_absl_min_log_level", absl.functions)
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    events = []
    lifecycle.serve_until_chief_leaves("ps:0", lambda: events.append(("started", absl.level)), "c:1", 5, 60,
                                       exit=events.append, wait=lambda *a: True)
    assert events == [("started", tf_noise.WARNING), 0]


def test_without_tensorflow_loaded_nothing_is_touched(monkeypatch):
    monkeypatch.setattr(tf_noise, "_absl_min_log_level", lambda: None)
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    assert tf_noise.quiet_server_logs() is False
    with tf_noise.cpp_info_quieted():
        pass


# --- the evaluator's checkpoint warnings -----------------------------------------------------------
HEADER = ("Detecting that an object or model or tf.train.Checkpoint is being deleted with unrestored values. "
          "See the following logs for the specific values in question. To silence these warnings, use "
          "`status.expect_partial()`.")
VALUE = "Value in checkpoint could not be found in the restored object: "


def test_the_evaluators_optimizer_warnings_become_one_line(caplog):
    logger = logging.getLogger("tfdist-test-tensorflow")
    installed = tf_noise.summarise_unrestored_optimizer_state(logger)
    try:
        assert tf_noise.summarise_unrestored_optimizer_state(logger) is installed  # once
        with caplog.at_level(logging.WARNING):
            for _ in range(2):  # one load status per evaluated checkpoint
                logger.warning(HEADER)
                for name in ("(root).optimizer._variables.1", "(root).optimizer.iter",
                             "(root).optimizer's state 'm' for (root).layer_with_weights-0.kernel"):
                    logger.warning("%s%s", VALUE, name)
            logger.warning("%s%s", VALUE, "(root).layer_with_weights-2.kernel")  # a weight: a real problem
            logger.warning("An attribute in the restored object could not be found in the checkpoint. "
                           "Object: (root).layer-1, attribute: kernel")
    finally:
        logger.removeFilter(installed)
    shown = [(record.name, record.getMessage()) for record in caplog.records]
    assert shown == [("tfdist", tf_noise.SUMMARY),
                     ("tfdist-test-tensorflow", VALUE + "(root).layer_with_weights-2.kernel"),
                     ("tfdist-test-tensorflow", "An attribute in the restored object could not be found in the "
                                                "checkpoint. Object: (root).layer-1, attribute: kernel")]
    assert installed.hidden == 8


# --- the real thing ------------------------------------------------------------------------------------
@pytest.mark.slow  # two child Pythons import TensorFlow
def test_tfdist_env_prints_no_tensorflow_start_up_lines_unless_asked():
    """`tfdist env` printed absl's banner, `cudart_stub ... Could not find cuda drivers` (twice),
    `cpu_feature_guard` and `E... failed call to cuInit ... (303)` to stderr before its report."""
    command = [sys.executable, "-m", "tfdist", "env", "--json"]
    asked = subprocess.run(command, capture_output=True, text=True, timeout=300,
                           env=_user_env(TF_CPP_MIN_LOG_LEVEL="0"))
    assert [line for line in asked.stderr.splitlines() if tf_noise.startup_noise_level(line) is not None], \
        "this machine's TensorFlow prints no start-up lines: the test below would prove nothing"
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=_user_env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "cuInit" not in result.stderr and "absl::InitializeLog" not in result.stderr, result.stderr
    assert [line for line in result.stderr.splitlines() if tf_noise.startup_noise_level(line) is not None] == []
    report = json.loads(result.stdout)
    assert report["tf_keras_resolves_to"] == "tf_keras" and report["gpus"] == []  # TensorFlow was asked
    assert report["variables"] == json.loads(asked.stdout)["variables"]


QUIETED_SERVER = """
    import json, sys
    import tensorflow as tf
    from tfdist import tf_noise
    from tfdist.cluster import free_ports

    ports = free_ports(4)
    spec = tf.train.ClusterSpec({"worker": [f"localhost:{p}" for p in ports[:2]],
                                 "ps": [f"localhost:{p}" for p in ports[2:]]})
    before = tf_noise.cpp_log_level()
    tf.distribute.Server(spec, job_name="worker", task_index=0, protocol="grpc")
    with tf_noise.cpp_info_quieted():
        inside = tf_noise.cpp_log_level()
        tf.distribute.Server(spec, job_name="worker", task_index=1, protocol="grpc")
    after = tf_noise.cpp_log_level()
    print("quieted:", tf_noise.quiet_server_logs(), file=sys.stderr, flush=True)
    tf.distribute.Server(spec, job_name="ps", task_index=0, protocol="grpc")
    print(json.dumps({"ports": ports, "levels": [before, inside, after, tf_noise.cpp_log_level()]}), flush=True)
    """


@pytest.mark.slow  # a child Python imports TensorFlow and starts three gRPC servers
def test_tensorflows_cpp_info_level_is_found_and_quiets_a_server_start(tmp_path):
    """absl's level is found in the pinned TensorFlow (2.21: namespace lts_20250814); inside
    ``cpp_info_quieted`` and after ``quiet_server_logs`` a server starts without its INFO line."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(QUIETED_SERVER)], capture_output=True,
                            text=True, timeout=300, env=_user_env())
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout)
    assert facts["levels"] == [0, 1, 0, 1]
    started = [line for line in result.stderr.splitlines() if "Started server with target" in line]
    assert len(started) == 1 and started[0].endswith(f"localhost:{facts['ports'][0]}"), result.stderr
    assert "quieted: True" in result.stderr
