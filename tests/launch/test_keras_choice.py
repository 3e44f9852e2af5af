"""Whose Keras choice a launcher passes on (issue 34): `import tfdist` sets TF_USE_LEGACY_KERAS=1 when it is unset,
and `tfdist launch` used to copy that into every task, so a script ran Keras 3 under horovodrun and tf-keras under
`tfdist launch --backend horovod`. tfdist.keras_compat remembers that it set the variable; launchers build their
tasks' environment from ``user_environment()``. Pure: the module's record is faked, no process is started
(tests/cli/test_launch.py runs real launches, and `tfdist env` says who set it: tests/cli/test_env.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tfdist.keras_compat as keras_compat
from support import examples, subprocess_env
from tfdist.keras_compat import (SET_BY_TFDIST, SET_BY_USER, TF_USE_LEGACY_KERAS, ensure_legacy_keras,
                                 legacy_keras_origin, user_environment)


@pytest.fixture
def started_without_the_variable(monkeypatch):
    """This process as started without TF_USE_LEGACY_KERAS, before `import tfdist` ran."""
    monkeypatch.setattr(keras_compat, "_USER_VALUE", None)
    monkeypatch.setattr(keras_compat, "_set_by_tfdist", False)
    monkeypatch.delenv(TF_USE_LEGACY_KERAS, raising=False)


def test_import_tfdist_records_that_it_set_the_variable(started_without_the_variable, monkeypatch):
    assert legacy_keras_origin() is None
    ensure_legacy_keras(modules={})  # this process's environment, TensorFlow not imported yet
    assert os.environ[TF_USE_LEGACY_KERAS] == "1" and legacy_keras_origin() == SET_BY_TFDIST
    assert TF_USE_LEGACY_KERAS not in user_environment()
    monkeypatch.delenv(TF_USE_LEGACY_KERAS)  # the fixture's teardown restores the rest


def test_a_dictionary_given_to_ensure_legacy_keras_is_not_recorded(started_without_the_variable):
    environ: dict[str, str] = {}
    ensure_legacy_keras(environ, modules={})
    assert environ == {TF_USE_LEGACY_KERAS: "1"} and keras_compat._set_by_tfdist is False


def test_the_users_value_is_theirs_even_when_it_equals_tfdists(monkeypatch):
    monkeypatch.setattr(keras_compat, "_USER_VALUE", "1")
    monkeypatch.setattr(keras_compat, "_set_by_tfdist", True)  # e.g. a test called ensure_legacy_keras again
    assert legacy_keras_origin({TF_USE_LEGACY_KERAS: "1"}) == SET_BY_USER
    assert user_environment({TF_USE_LEGACY_KERAS: "1"}) == {TF_USE_LEGACY_KERAS: "1"}


@settings(max_examples=examples(300), deadline=None)
@given(environ=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=6),
       value=st.one_of(st.none(), st.sampled_from(["0", "1", "true", ""])), set_by_tfdist=st.booleans(),
       user_value=st.one_of(st.none(), st.sampled_from(["0", "1"])))
def test_user_environment_drops_only_what_tfdist_added_and_never_mutates(environ, value, set_by_tfdist, user_value):
    environ = {k: v for k, v in environ.items() if k != TF_USE_LEGACY_KERAS}
    if value is not None:
        environ[TF_USE_LEGACY_KERAS] = value
    before = dict(environ)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keras_compat, "_USER_VALUE", user_value)
        patch.setattr(keras_compat, "_set_by_tfdist", set_by_tfdist)
        result = user_environment(environ)
        origin = legacy_keras_origin(environ)
    assert environ == before
    ours = set_by_tfdist and user_value is None and value == "1"
    assert origin == (None if value is None else SET_BY_TFDIST if ours else SET_BY_USER)
    expected = {k: v for k, v in before.items() if not (ours and k == TF_USE_LEGACY_KERAS)}
    assert result == expected


def test_a_supervisor_hands_its_shell_the_environment_sshd_gave_it(tmp_path):
    """`python -m tfdist.launch.remote_task --shell` (the supervisor of Horovod's ranks on other hosts, and of
    `launch --hosts` tasks) imports tfdist, which set TF_USE_LEGACY_KERAS=1 in its own environment: its command
    saw it. No TensorFlow."""
    env = subprocess_env()
    env.pop(TF_USE_LEGACY_KERAS, None)
    for extra, expected in (({}, "unset"), ({TF_USE_LEGACY_KERAS: "0"}, "0")):
        process = subprocess.Popen([sys.executable, "-m", "tfdist.launch.remote_task", "--shell",
                                    f"echo ${{{TF_USE_LEGACY_KERAS}-unset}} > {tmp_path / 'seen'}"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env={**env, **extra})
        try:
            assert process.wait(timeout=60) == 0, process.stderr.read()  # stdin stays open: it ends by itself
        finally:
            process.kill()
            process.communicate()
        assert (tmp_path / "seen").read_text() == f"{expected}\n"
