"""What an export holds and what export-check prints, in this process (no job): the serving signature
per Keras, ``input_signature=`` for subclassed models, the verification's comparison, and
``tfdist export-check``'s output and exit codes."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from support import invoke, usage_error

tf = pytest.importorskip("tensorflow")

from tfdist.export import ExportArgumentError, ExportError, saved_model, verify  # noqa: E402


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tf-keras export (verify off: the fresh-process reload is tested on the jobs)."""
    import tf_keras

    import tfdist

    strategy = tfdist.make_strategy("single")
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.Input((4,), name="features"), tf_keras.layers.Dense(3)])
    path = strategy.export(model, tmp_path_factory.mktemp("check") / "model" / "1", verify=False)
    return strategy, model, path


def test_the_signature_is_named_after_the_models_input(exported):
    _, model, path = exported
    serve = tf.saved_model.load(path).signatures["serving_default"]
    assert list(serve.structured_input_signature[1]) == ["features"]
    x = np.arange(8, dtype="float32").reshape(2, 4)
    np.testing.assert_allclose(serve(features=tf.constant(x))["output_0"].numpy(), model(x).numpy(), atol=1e-6)


def _serves_like(path, model, name: str = "x") -> None:
    serve = tf.saved_model.load(path).signatures["serving_default"]
    x = np.ones((2, 3), "float32")
    np.testing.assert_allclose(serve(**{name: tf.constant(x)})["output_0"].numpy(), np.asarray(model(x)), atol=1e-6)


def test_a_subclassed_model_exports_with_input_signature_or_is_refused_naming_it(exported, tmp_path):
    import tf_keras

    strategy = exported[0]

    class Doubler(tf_keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = tf_keras.layers.Dense(2)

        def call(self, inputs):
            return self.dense(inputs) * 2.0

    model = Doubler()
    model.build((None, 3))  # weights, but no call traced: tf-keras knows no input signature
    with pytest.raises(ExportArgumentError, match=r"cannot tell what Doubler 'doubler' takes as input .*; fix: "
                                                  r"pass input_signature=\[tf.TensorSpec"):
        strategy.export(model, tmp_path / "refused", verify=False)
    assert list(tmp_path.iterdir()) == []
    path = strategy.export(model, tmp_path / "given", verify=False,
                           input_signature=[tf.TensorSpec((None, 3), tf.float32, name="x")])
    _serves_like(path, model)
    with pytest.raises(ExportArgumentError, match="`input_signature` must be a tf.TensorSpec or a list of them"):
        strategy.export(model, tmp_path / "bad", input_signature=[(None, 3)])
    called = Doubler()
    called(np.ones((1, 3), "float32"))  # a first call records the signature
    _serves_like(strategy.export(called, tmp_path / "called", verify=False), called, "input_1")


def test_a_keras_3_subclassed_model_exports_from_its_first_call_or_is_refused(exported, tmp_path):
    import keras

    strategy = exported[0]

    class Pair(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, inputs):
            return self.dense(inputs["a"]) + self.dense(inputs["b"])

    class One(Pair):
        def call(self, inputs):
            return self.dense(inputs)

    one = One()
    one(np.ones((1, 3), "float32"))
    _serves_like(strategy.export(one, tmp_path / "one", verify=False), one, "input_0")
    pair = Pair()
    pair({"a": np.ones((1, 3), "float32"), "b": np.ones((1, 3), "float32")})
    with pytest.raises(ExportArgumentError,
                       match=r"cannot tell what Pair 'pair' takes as input .*; fix: pass input_signature="):
        strategy.export(pair, tmp_path / "pair", verify=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one"]


def test_the_comparison_fails_naming_the_path_and_the_difference():
    expected = {"output_0": np.array([[1.0, 2.0]])}
    assert verify.compare("/e", expected, {"output_0": np.array([[1.0, 2.000009]])}).max_abs_diff < 1e-5
    with pytest.raises(ExportError, match=r"verify: '/e' reloaded gives output 'output_0' differing from the "
                                          r"model by max abs diff 2e-05 > 1e-05 \(tolerance for float32\)"):
        verify.compare("/e", expected, {"output_0": np.array([[1.0, 2.00002]])})
    with pytest.raises(ExportError, match="max abs diff nan"):
        verify.compare("/e", expected, {"output_0": np.array([[1.0, np.nan]])})
    # mixed precision: a stated tolerance per dtype, relative to the outputs' size
    assert verify.compare("/e", expected, {"output_0": np.array([[1.0, 2.002]])}, "float16")
    with pytest.raises(ExportError, match=r"> 0.003 \(tolerance for float16\)"):
        verify.compare("/e", expected, {"output_0": np.array([[1.0, 2.01]])}, "float16")
    assert verify.compare("/e", expected, {"output_0": np.array([[1.0, 2.02]])}, "bfloat16")


def test_merged_weights_regroup_shards_and_fail_closed():
    a, b = np.zeros((3, 2)), np.ones((2, 2))
    merged = saved_model._merged_weights([a, b, np.ones(1)], [(5, 2), (1,)])
    assert [m.shape for m in merged] == [(5, 2), (1,)] and merged[0][3:].sum() == 4
    from tfdist.upstream import UpstreamChangedError

    with pytest.raises(UpstreamChangedError, match="do not regroup"):
        saved_model._merged_weights([a, b], [(4, 2)])


def test_export_check_prints_the_signature_and_the_output_shapes(exported):
    path = exported[2]
    result = invoke("export-check", path)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:3] == ["The given SavedModel SignatureDef contains the following input(s):",
                         "  inputs['features'] tensor_info:", "      dtype: DT_FLOAT"]
    assert "      shape: (-1, 4)" in lines and lines[-2] == "Method name is: tensorflow/serving/predict"
    assert lines[-1] == "outputs['output_0']: shape (1, 3) dtype float32"


def test_export_check_runs_a_given_batch_and_fails_with_one_line(exported, tmp_path):
    path = exported[2]
    np.save(tmp_path / "batch.npy", np.ones((5, 4), "float32"))
    result = invoke("export-check", path, "--input", str(tmp_path / "batch.npy"))
    assert result.exit_code == 0 and result.output.splitlines()[-1] == "outputs['output_0']: shape (5, 3) dtype float32"
    np.save(tmp_path / "wrong.npy", np.ones((5, 7), "float32"))
    for argv, message in [
        ((path, "--input", str(tmp_path / "wrong.npy")), "input 'features' has shape (5, 7), the signature takes "
                                                          "(-1, 4) (-1: any); fix: pass a batch of that shape"),
        ((str(tmp_path / "missing"),), "does not exist, so it is not a SavedModel; fix: "),
        ((str(tmp_path),), "has no saved_model.pb, so it is not a SavedModel; fix: "),
    ]:
        result = invoke("export-check", *argv)
        assert result.exit_code == 1, result.output
        errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
        assert len(errors) == 1 and message in errors[0] and "Traceback" not in result.output, result.output
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "saved_model.pb").write_bytes(b"\xff\x00 not a proto")
    result = invoke("export-check", str(tmp_path / "broken"))
    assert result.exit_code == 1 and "is not a readable SavedModel" in result.output
    assert "is neither .npy nor .npz" in usage_error(invoke("export-check", path, "--input", "batch.csv"))
    assert "Missing argument 'PATH'" in usage_error(invoke("export-check"))


def test_export_check_waits_on_no_fifo_in_or_beside_a_real_export(exported, tmp_path):
    """On a real export TensorFlow's loader opened a FIFO put in variables/ and waited for ever, and
    numpy waited on a FIFO given as --input (issue 34): both are refused at once. The command runs in
    a child with a bound only a hang reaches (the child does not import TensorFlow any more)."""
    import os
    import shutil
    import sys

    from support import subprocess_env

    copy = tmp_path / "export"
    shutil.copytree(exported[2], copy)
    index = copy / "variables" / "variables.index"
    os.remove(index)
    os.mkfifo(index)
    os.mkfifo(tmp_path / "batch.npy")
    for argv, code, message in [
        ((str(copy),), 1, f"Error: {str(index)!r} in the export is a FIFO, not a regular file; "),
        ((exported[2], "--input", str(tmp_path / "batch.npy")), 2,
         f"Error: Invalid value for '--input': {str(tmp_path / 'batch.npy')!r} is a FIFO, not a regular file; "),
    ]:
        child = subprocess.run([sys.executable, "-c", "from tfdist.cli.main import main; main()", "export-check",
                                *argv], capture_output=True, text=True, timeout=240, env=subprocess_env())
        assert child.returncode == code and message in child.stderr and "Traceback" not in child.stderr, child.stderr


@pytest.mark.slow
def test_export_check_prints_the_signature_as_saved_model_cli_does(exported):
    from pathlib import Path
    import sys

    path = exported[2]
    cli = Path(sys.executable).parent / "saved_model_cli"
    theirs = subprocess.run([str(cli), "show", "--dir", path, "--tag_set", "serve", "--signature_def",
                             "serving_default"], capture_output=True, text=True, timeout=300).stdout
    ours = invoke("export-check", path).output
    assert theirs.strip() and ours.startswith(theirs.strip() + "\n")


@pytest.mark.slow  # verify=True reloads the export in a fresh interpreter importing TensorFlow
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_a_mixed_precision_export_verifies_at_its_dtypes_tolerance_on_a_given_sample(policy, exported, tmp_path):
    import tf_keras

    strategy = exported[0]
    tf_keras.mixed_precision.set_global_policy(policy)
    try:
        tf_keras.utils.set_random_seed(0)
        model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(8, activation="tanh"),
                                     tf_keras.layers.Dense(2)])
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")
    assert model.dtype_policy.compute_dtype == policy.split("_")[1]
    sample = np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4)
    path = strategy.export(model, tmp_path / "model", sample=sample)
    serve = tf.saved_model.load(path).signatures["serving_default"]
    (name,) = serve.structured_input_signature[1]
    out = serve(**{name: tf.constant(sample)})
    assert out["output_0"].dtype.name == policy.split("_")[1]
    with pytest.raises(ExportArgumentError, match=r"`sample` has shapes \[\(3, 5\)\], the model's inputs are "
                                                  r"\[\(None, 4\)\]; fix: "):
        strategy.export(model, tmp_path / "other", sample=np.zeros((3, 5), "float32"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_failed_verification_keeps_the_previous_export_and_leaves_nothing_else(exported, tmp_path, monkeypatch):
    from tfdist.export import verify as verify_module

    strategy, model, _ = exported
    target = strategy.export(model, tmp_path / "model", verify=False)
    before = sorted(p.name for p in (tmp_path / "model").iterdir())
    stamp = (tmp_path / "model" / "saved_model.pb").read_bytes()

    def mismatch(written, *args, **kwargs):
        assert written != target and (tmp_path / "model").is_dir()  # the candidate is checked before the rename
        return verify_module.compare(written, {"output_0": np.zeros((2, 3))}, {"output_0": np.ones((2, 3))})

    monkeypatch.setattr(verify_module, "verify", mismatch)
    with pytest.raises(ExportError) as info:
        strategy.export(model, tmp_path / "model", overwrite=True)
    assert str(info.value).startswith(f"verify: {target!r} (not kept) reloaded gives output 'output_0' differing "
                                      "from the model by max abs diff 1 > 1e-05")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == before
    assert (tmp_path / "model" / "saved_model.pb").read_bytes() == stamp


def test_a_keras_file_of_a_compiled_subclassed_model_is_refused_before_anything_is_written(exported, tmp_path):
    import tf_keras

    import tfdist

    strategy = exported[0]

    class Subclassed(tf_keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = tf_keras.layers.Dense(1)

        def call(self, inputs):
            return self.dense(inputs)

    model = Subclassed()
    model(np.ones((1, 3), "float32"))
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ExportArgumentError, match=r"Subclassed 'subclassed(_\d+)?' is a subclassed model, which tfdist "
                                                  r"cannot copy .*; fix: build it as a Functional"):
        strategy.export(model, tmp_path / "model.keras", format="keras")
    mirrored = tfdist.make_strategy("mirrored")
    with mirrored.scope():
        inside = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(1)])
        inside.compile(optimizer="sgd", loss="mse")
        with pytest.raises(ExportArgumentError, match=r"inside strategy.scope\(\).*; fix: call strategy.export "
                                                      r"after the `with strategy.scope\(\):` block"):
            mirrored.export(inside, tmp_path / "inside.keras", format="keras")
    assert list(tmp_path.iterdir()) == []


def _failing_after(step: int, problem: str):
    """A Role.agree that reports another task's ``problem`` at its ``step``-th call (1: checks,
    2: writing, 3: committing), as a worker of a real job would."""
    calls = []

    def agree(mine):
        calls.append(mine)
        return mine if mine is not None else (problem if len(calls) == step else None)

    return agree


def test_another_tasks_failed_write_keeps_the_previous_export(exported, tmp_path):
    """The chief has written and verified, a worker's throwaway copy failed: the new export must not
    replace the previous one (the error says nothing was kept)."""
    from tfdist.export import Role, export_model

    strategy, model, _ = exported
    target = strategy.export(model, tmp_path / "model", verify=False)
    stamp = (tmp_path / "model" / "saved_model.pb").read_bytes()
    role = Role(writes=True, agree=_failing_after(2, "OSError: [Errno 28] No space left on device"))
    with pytest.raises(ExportError, match=r"another task failed writing .*No space left.*nothing was kept"):
        export_model(model, target, role, overwrite=True, verify=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary sibling left
    assert (tmp_path / "model" / "saved_model.pb").read_bytes() == stamp


def test_when_the_tasks_cannot_agree_each_raises_its_own_error_first(exported, tmp_path):
    from tfdist.export import Role, export_model

    _, model, _ = exported

    def broken(mine):
        raise RuntimeError("collective aborted")

    with pytest.raises(ExportArgumentError, match=r"`overwrite` must be True or False") as info:
        export_model(model, tmp_path / "m", Role(writes=True, agree=broken), overwrite="yes")
    assert "collective aborted" in str(info.value.__cause__)
    with pytest.raises(ExportError, match=r"the tasks could not agree on the export's checks: RuntimeError: "
                                          r"collective aborted; fix: "):
        export_model(model, tmp_path / "m", Role(writes=True, agree=broken))
    assert not (tmp_path / "m").exists()


def test_a_keras_3_copy_out_of_the_parameter_servers_keeps_the_models_input_name_and_verifies(tmp_path):
    """The copy a parameter-server export writes (``Role.copies``) is a ``clone_model``, whose Keras 3
    input is named anew (``input_layer_1``): the signature keeps the model's own input name, which the
    verification in a fresh process calls it by (it failed: "missing required arguments: input_layer")."""
    import keras

    from tfdist.export import Role, export_model

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    path = export_model(model, tmp_path / "model", Role(writes=True, copies=True))
    _serves_like(path, model, name=model.inputs[0].name)
