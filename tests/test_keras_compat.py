"""tfdist keeps tf.keras on tf-keras, and says how to fix it when it is too late."""
from __future__ import annotations

import subprocess
import sys
import types

import pytest

from tfdist.keras_compat import KerasVersionError, check_keras_object, ensure_legacy_keras
from support import subprocess_env


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    child_env = subprocess_env(**env)
    child_env.pop("TF_USE_LEGACY_KERAS", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env, timeout=180)


def test_sets_the_variable_when_tensorflow_is_not_imported():
    environ: dict[str, str] = {}
    ensure_legacy_keras(environ, modules={})
    assert environ == {"TF_USE_LEGACY_KERAS": "1"}


def test_refuses_an_explicit_keras_3_setting():
    with pytest.raises(KerasVersionError, match=r"TF_USE_LEGACY_KERAS='0'.*Fix: unset it"):
        ensure_legacy_keras({"TF_USE_LEGACY_KERAS": "0"}, modules={})


def test_refuses_tensorflow_already_imported_in_keras_3_mode():
    fake_tf = types.ModuleType("tensorflow")
    fake_tf._tf_uses_legacy_keras = False
    with pytest.raises(KerasVersionError, match="imported before tfdist"):
        ensure_legacy_keras({}, modules={"tensorflow": fake_tf})


def test_accepts_tensorflow_already_imported_in_legacy_mode():
    fake_tf = types.ModuleType("tensorflow")
    fake_tf._tf_uses_legacy_keras = True
    environ = {"TF_USE_LEGACY_KERAS": "1"}
    ensure_legacy_keras(environ, modules={"tensorflow": fake_tf})
    assert environ == {"TF_USE_LEGACY_KERAS": "1"}


@pytest.mark.slow  # a child Python imports TensorFlow
def test_import_after_keras_3_was_loaded_gives_the_fix():
    result = _run("import tensorflow as tf; tf.keras.layers.Dense; import tfdist")
    assert result.returncode != 0
    assert "KerasVersionError" in result.stderr
    assert "TensorFlow was imported before tfdist with Keras 3" in result.stderr
    assert "Fix: `import tfdist` before `import tensorflow`" in result.stderr


@pytest.mark.slow  # a child Python imports TensorFlow
def test_import_before_tensorflow_routes_tf_keras_to_tf_keras():
    result = _run("import tfdist, tensorflow as tf; print(type(tf.keras.layers.Dense(1)).__module__)")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().startswith("tf_keras."), result.stdout


def test_keras_3_objects_are_refused_with_the_fix():
    keras3_like = type("Adam", (), {"__module__": "keras.src.optimizers.adam"})()
    with pytest.raises(TypeError, match=r"`optimizer` is a Keras 3 object .*Fix: build it with `tf.keras`"):
        check_keras_object(keras3_like, "optimizer")
    tf_keras_like = type("Adam", (), {"__module__": "tf_keras.src.optimizers.adam"})()
    check_keras_object(tf_keras_like, "optimizer")
