"""Both Kerases: tfdist tells tf-keras and Keras 3 objects apart per object, and refuses only mixes
and backends that cannot train Keras 3 (tfdist/keras_compat.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import types
from unittest import mock

import pytest

from tfdist import keras_compat
from tfdist.errors import ArgumentTypeError, TfdistError
from tfdist.keras_compat import (KERAS_3, TF_KERAS, KerasFlavourError, check_same_flavour,
                                 ensure_legacy_keras, flavour_of, is_keras, keras_module, keras_of,
                                 loaded_classes, refuse_keras_3)
from support import subprocess_env


def _fake(module: str, name: str = "Adam") -> object:
    """An instance of a class that says it lives in ``module`` (no Keras imported)."""
    return type(name, (), {"__module__": module})()


# --- ensure_legacy_keras: sets the variable before TensorFlow loads, never refuses ----------------------
def test_sets_the_variable_when_tensorflow_is_not_imported():
    environ: dict[str, str] = {}
    ensure_legacy_keras(environ, modules={})
    assert environ == {"TF_USE_LEGACY_KERAS": "1"}


@pytest.mark.parametrize("value", ["0", "false", "1"])
def test_keeps_the_users_setting(value):
    environ = {"TF_USE_LEGACY_KERAS": value}
    ensure_legacy_keras(environ, modules={})
    assert environ == {"TF_USE_LEGACY_KERAS": value}


@pytest.mark.parametrize("legacy", [False, True, None])
def test_tensorflow_already_imported_is_left_alone_without_error(legacy):
    fake_tf = types.ModuleType("tensorflow")
    if legacy is not None:
        fake_tf._tf_uses_legacy_keras = legacy
    environ: dict[str, str] = {}
    ensure_legacy_keras(environ, modules={"tensorflow": fake_tf})  # Keras 3 in tf.keras is no error any more
    assert environ == {}


def test_defaults_to_this_process_environment_and_modules():
    pytest.importorskip("tensorflow")  # now in sys.modules: too late to choose tf.keras
    with mock.patch.dict(os.environ, {}, clear=True):
        ensure_legacy_keras()
        assert "TF_USE_LEGACY_KERAS" not in os.environ
    with mock.patch.dict(os.environ, {}, clear=True), mock.patch.dict(sys.modules):
        del sys.modules["tensorflow"]
        ensure_legacy_keras()
        assert os.environ["TF_USE_LEGACY_KERAS"] == "1"


# --- flavour_of and friends, on look-alike classes (no Keras imported) --------------------------------
@pytest.mark.parametrize("module, flavour", [
    ("tf_keras.src.optimizers.adam", "tf_keras"),
    ("keras.src.optimizers.adam", "keras_3"),
    ("keras", "keras_3"),
    ("tfdist.callbacks.throughput", None),
    ("keras_tuner.engine", None),  # a package whose name starts with "keras" is not Keras
    ("my_project.models", None),
    ("builtins", None),
])
def test_flavour_is_the_top_level_package_of_the_class(module, flavour):
    assert flavour_of(_fake(module)) == flavour


def test_a_subclass_counts_as_its_keras_base_and_tfdist_classes_are_neutral():
    base = type("Model", (), {"__module__": "keras.src.models.model"})
    mine = type("MyModel", (base,), {"__module__": "my_project.models"})
    assert flavour_of(mine()) == KERAS_3
    tf_keras_callback = type("Callback", (), {"__module__": "tf_keras.src.callbacks"})
    tfdist_callback = type("Throughput", (tf_keras_callback,), {"__module__": "tfdist.callbacks.throughput"})
    assert flavour_of(tfdist_callback()) is None  # takes part in either Keras' fit
    user_subclass_of_tfdist = type("Mine", (tfdist_callback,), {"__module__": "my_project"})
    assert flavour_of(user_subclass_of_tfdist()) is None
    assert flavour_of(None) is None and flavour_of("adam") is None and flavour_of(0.1) is None


def test_keras_of_names_the_argument_of_a_non_keras_object():
    with pytest.raises(ArgumentTypeError, match=r"^`model` is not a Keras object \(got builtins\.dict\); "
                                                r"fix: pass a tf-keras or Keras 3 model/optimizer/callback$"):
        keras_of({}, "model")


def test_check_same_flavour_names_the_argument_and_the_fix():
    model_3 = _fake("keras.src.models.sequential", "Sequential")
    tf_keras_sgd = _fake("tf_keras.src.optimizers.sgd", "SGD")
    with pytest.raises(KerasFlavourError) as info:
        check_same_flavour(model_3, optimizer=tf_keras_sgd)
    assert str(info.value) == (
        "`optimizer` is a tf-keras object (tf_keras.src.optimizers.sgd.SGD) but the model is Keras 3; "
        "the two do not mix; fix: build both with the same Keras (`import keras` for this model)")
    assert isinstance(info.value, (TfdistError, TypeError))

    model_2 = _fake("tf_keras.src.engine.sequential", "Sequential")
    with pytest.raises(KerasFlavourError, match=r"^`callbacks\[2\]` is a Keras 3 object "
                                                r"\(keras\.src\.callbacks\.Foo\) but the model is tf-keras;"
                                                r".*`import tf_keras` for this model"):
        check_same_flavour(model_2, **{"callbacks[1]": tf_keras_sgd,
                                       "callbacks[2]": _fake("keras.src.callbacks", "Foo")})


def test_check_same_flavour_lets_matching_and_neutral_objects_through():
    model_3 = _fake("keras.src.models.sequential", "Sequential")
    check_same_flavour(model_3, optimizer=_fake("keras.src.optimizers.sgd"),
                       callback=_fake("tfdist.callbacks.throughput"), other=object())
    # not a Keras model: nothing to match
    check_same_flavour(object(), optimizer=_fake("tf_keras.src.optimizers.sgd"))
    check_same_flavour(model_3)


def test_refuse_keras_3_names_the_backend_the_reason_and_the_fix():
    with pytest.raises(KerasFlavourError) as info:
        refuse_keras_3(_fake("keras.src.models.sequential", "Sequential"), "model", "parameter_server",
                       "it cannot do X")
    message = str(info.value)
    assert message.startswith("`model` is a Keras 3 object (keras.src.models.sequential.Sequential) and the "
                              "parameter_server backend cannot train Keras 3 models: it cannot do X; fix: ")
    fix = message.split("; fix: ", 1)[1]
    assert "`import tf_keras`" in fix and "TF_USE_LEGACY_KERAS=1" in fix
    assert "make_strategy('horovod')" in fix
    for neutral_or_tf_keras in (_fake("tf_keras.src.models"), _fake("tfdist.callbacks"), object(), None):
        assert refuse_keras_3(neutral_or_tf_keras, "model", "parameter_server", "reason") is None


def test_require_tf_keras_says_how_to_install_it():
    keras_compat.require_tf_keras()  # installed in the test environment
    with mock.patch("importlib.util.find_spec", return_value=None):
        with pytest.raises(keras_compat.KerasVersionError,
                           match=r"tf-keras is not installed.*Fix: pip install 'tf-keras"):
            keras_compat.require_tf_keras()


@pytest.mark.parametrize("keras_attribute, expected", [
    (None, None),  # tf.keras never touched
    (types.SimpleNamespace(_tfll_initialized=False, _tfll_keras_version="keras_3"), "keras_3"),
    (types.SimpleNamespace(_tfll_initialized=False, _tfll_keras_version="tf_keras"), "tf_keras"),
    (types.ModuleType("tf_keras.api._v2.keras"), "tf_keras"),
    (types.ModuleType("keras._tf_keras.keras"), "keras_3"),
    (types.ModuleType("keras.api._v2.keras"), "keras_2"),
    (types.ModuleType("something_else"), None),
])
def test_tf_keras_flavour_reads_the_lazy_loader_without_resolving_it(keras_attribute, expected):
    fake_tf = types.ModuleType("tensorflow")
    if keras_attribute is not None:
        fake_tf.keras = keras_attribute
    assert keras_compat.tf_keras_flavour(fake_tf) == expected


# --- real objects of both Kerases ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def kerases() -> tuple[types.ModuleType, types.ModuleType]:
    """``(tf_keras, keras)``, both loaded in this process."""
    return pytest.importorskip("tf_keras"), pytest.importorskip("keras")


def test_flavour_of_real_objects_of_both_kerases(kerases):
    tf_keras, keras = kerases
    for package, flavour in ((tf_keras, TF_KERAS), (keras, KERAS_3)):
        model = package.Sequential([package.Input((2,)), package.layers.Dense(1)])
        objects = [model, model.layers[0], package.optimizers.Adam(0.1),
                   package.callbacks.CSVLogger("/dev/null"),
                   package.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5),
                   package.losses.MeanSquaredError()]
        assert [flavour_of(obj) for obj in objects] == [flavour] * len(objects), package.__name__

        class MyModel(package.Model):  # a user's subclass, defined outside any Keras package
            def call(self, inputs):
                return inputs

        assert MyModel.__module__ == __name__ and flavour_of(MyModel()) == flavour
    import tensorflow as tf

    assert flavour_of(tf.keras.layers.Dense(1)) == TF_KERAS  # tfdist was imported first (conftest)


def test_tfdist_callbacks_are_neutral(kerases):
    tf_keras, keras = kerases
    from tfdist.callbacks import (ChiefOnly, LearningRateWarmup, MetricAverage, TensorBoardRun,
                                  Throughput)

    callbacks = [Throughput(16), LearningRateWarmup(1), MetricAverage(),
                 ChiefOnly(keras.callbacks.CSVLogger("x")),
                 TensorBoardRun("/tmp/unused", run_name="r", is_chief=False)]
    assert [flavour_of(cb) for cb in callbacks] == [None] * len(callbacks)
    assert isinstance(callbacks[0], tf_keras.callbacks.Callback)  # still a tf-keras callback underneath


def test_keras_module_and_keras_of(kerases):
    tf_keras, keras = kerases
    assert keras_module(TF_KERAS) is tf_keras and keras_module(KERAS_3) is keras
    assert keras_of(keras.optimizers.SGD(0.1), "optimizer") is keras
    assert keras_of(tf_keras.optimizers.SGD(0.1), "optimizer") is tf_keras


def test_loaded_classes_and_is_keras(kerases):
    tf_keras, keras = kerases
    assert loaded_classes("callbacks.ModelCheckpoint") == (tf_keras.callbacks.ModelCheckpoint,
                                                           keras.callbacks.ModelCheckpoint)
    assert loaded_classes("callbacks.NoSuchCallback") == ()
    assert loaded_classes("no.such.path") == ()
    for package in kerases:
        checkpoint = package.callbacks.ModelCheckpoint("/tmp/unused.keras")
        assert is_keras(checkpoint, "callbacks.ModelCheckpoint")
        assert not is_keras(checkpoint, "callbacks.TensorBoard")
        assert is_keras(package.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5),
                        "optimizers.schedules.LearningRateSchedule")
    assert not is_keras(0.1, "optimizers.schedules.LearningRateSchedule")


def test_loaded_classes_does_not_import_a_keras_nobody_imported(kerases):
    tf_keras, _ = kerases
    with mock.patch.dict(sys.modules):
        del sys.modules["keras"]
        assert loaded_classes("callbacks.ModelCheckpoint") == (tf_keras.callbacks.ModelCheckpoint,)
        assert "keras" not in sys.modules


def test_check_same_flavour_on_real_objects(kerases):
    tf_keras, keras = kerases
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    check_same_flavour(model, optimizer=keras.optimizers.SGD(0.1), callback=keras.callbacks.CSVLogger("x"))
    with pytest.raises(KerasFlavourError, match=r"^`optimizer` is a tf-keras object "
                                                r"\(tf_keras\.src\.optimizers\.sgd\.SGD\) but the model "
                                                r"is Keras 3"):
        check_same_flavour(model, optimizer=tf_keras.optimizers.SGD(0.1))


# --- the import order, in a fresh Python ---------------------------------------------------------------
def _run(code: str) -> subprocess.CompletedProcess:
    child_env = subprocess_env()
    child_env.pop("TF_USE_LEGACY_KERAS", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env, timeout=180)


_REPORT = ("import os; from tfdist.keras_compat import flavour_of; layer = tf.keras.layers.Dense(1); "
           "print(type(layer).__module__.split('.')[0], flavour_of(layer), "
           "os.environ.get('TF_USE_LEGACY_KERAS'))")


@pytest.mark.slow  # a child Python imports TensorFlow
def test_import_after_tensorflow_with_keras_3_now_works():
    result = _run("import tensorflow as tf; tf.keras.layers.Dense; import tfdist; " + _REPORT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["keras", "keras_3", "None"]


@pytest.mark.slow  # a child Python imports TensorFlow
def test_import_before_tensorflow_routes_tf_keras_to_tf_keras():
    result = _run("import tfdist, tensorflow as tf; " + _REPORT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["tf_keras", "tf_keras", "1"]
