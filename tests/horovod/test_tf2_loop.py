"""tfdist.horovod on Horovod's TF2 API (issue 37): DistributedGradientTape, broadcast_variables and the
collectives on tensors, with tf-keras, Keras 3 and plain TensorFlow variables.

The horovodrun jobs (one per Keras) run tests/scripts/hvd_tf2_loop.py, Horovod's custom-loop example
shaped the same, and then, in the same job, examples/custom_loop.py on tfdist's strategy object (the
custom-loop API of tfdist.strategies.loop), with the Keras picked as Horovod users pick it (TF_USE_LEGACY_KERAS). The checks
without horovodrun run in this process on Horovod initialised with size 1 (shut down after the module).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from doc_pages import DOCS, blocks, section
from support import SCRIPTS, horovodrun

FLAVOURS = {"tf_keras": "1", "keras_3": "0"}  # the TF_USE_LEGACY_KERAS each flavour runs with
PACKAGES = {"tf_keras": "tf_keras", "keras_3": "keras"}
DOC_SECTION = "## Custom training loops (Horovod's TF2 API)"


def relative_error(weights: list, reference: list) -> float:
    """max |w - r| / max |r| over all weight arrays."""
    return max(float(np.max(np.abs(np.array(w) - np.array(r))) / np.max(np.abs(np.array(r))))
               for w, r in zip(weights, reference))


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(np.array_equal(np.array(x), np.array(y)) for x, y in zip(a, b))


def _close(grads, expected) -> None:
    """Each gradient equals the plain tape's up to float noise, relative to the largest entry of its array."""
    grads, expected = list(grads), list(expected)
    assert len(grads) == len(expected)
    assert relative_error([np.asarray(g) for g in grads], [np.asarray(e) for e in expected]) <= 1e-5


@pytest.fixture(scope="module", params=list(FLAVOURS))
def job(request, tmp_path_factory) -> tuple[str, list[dict], Path]:
    """``(keras, [rank 0's JSON, rank 1's], outdir)`` of one horovodrun job of hvd_tf2_loop.py per Keras."""
    keras = request.param
    outdir = tmp_path_factory.mktemp(f"hvd-tf2-loop-{keras}")
    result = horovodrun("hvd_tf2_loop.py", str(outdir), np=2, timeout=300, binary=True,  # as Horovod's docs run it
                        env={"TF_USE_LEGACY_KERAS": FLAVOURS[keras]})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return keras, [json.loads((outdir / f"rank{r}.json").read_text()) for r in (0, 1)], outdir


# (a) Horovod's TF2 example under horovodrun -np 2, one job per Keras.

@pytest.mark.horovod
@pytest.mark.no_gpu
def test_the_example_ran_on_the_keras_users_pick_and_ends_with_identical_weights(job):
    keras, (rank0, rank1), outdir = job
    assert [rank0["keras"], rank1["keras"]] == [PACKAGES[keras]] * 2
    assert [rank0["size"], rank1["size"]] == [2, 2]
    assert _same(rank0["weights"], rank1["weights"])
    assert sorted(p.name for p in outdir.glob("checkpoint-*")) == [
        "checkpoint-1.data-00000-of-00001", "checkpoint-1.index"]  # rank 0's, once


@pytest.mark.horovod
@pytest.mark.no_gpu
def test_two_ranks_equal_one_process_on_the_global_batch(job):
    _, (rank0, _), _ = job
    assert relative_error(rank0["weights"], rank0["one_process"]) <= 1e-5


@pytest.mark.horovod
@pytest.mark.no_gpu
def test_the_loss_went_down_and_its_allreduce_in_the_step_is_the_ranks_mean(job):
    _, (rank0, rank1), _ = job
    averaged = np.array(rank0["averaged_losses"])
    assert len(averaged) == 100
    assert averaged[-10:].mean() < 0.25 * averaged[:10].mean()
    assert rank0["losses"] != rank1["losses"], "the ranks must see different halves of each batch"
    np.testing.assert_allclose(averaged, (np.array(rank0["losses"]) + np.array(rank1["losses"])) / 2, rtol=1e-6)
    np.testing.assert_array_equal(rank1["averaged_losses"], averaged)


@pytest.mark.horovod
@pytest.mark.no_gpu
def test_collectives_on_symbolic_tensors_inside_tf_function(job):
    _, ranks, _ = job
    for rank in ranks:
        assert rank["collectives"] == {"allgather": [1.0, 2.0], "broadcast": [2.0], "allreduce_sum": [3.0]}


# (a') the same jobs then run examples/custom_loop.py's loop on tfdist's strategy object (make_strategy("horovod")).

@pytest.fixture(scope="module")
def loop_ranks(job) -> tuple[str, list[dict], Path]:
    keras, _, outdir = job
    return keras, [json.loads((outdir / f"loop-rank{r}.json").read_text()) for r in (0, 1)], outdir


@pytest.mark.horovod
@pytest.mark.no_gpu
def test_the_strategy_loop_ends_with_identical_ranks_equal_to_one_process_on_the_global_batch(loop_ranks):
    keras, (rank0, rank1), _ = loop_ranks
    assert [rank0["keras"], rank1["keras"]] == [PACKAGES[keras]] * 2
    assert [rank0["kind"], rank0["size"]] == ["horovod", 2]
    assert _same(rank0["weights"], rank1["weights"])
    assert relative_error(rank0["weights"], rank0["one_process"]) <= 1e-5
    np.testing.assert_allclose(rank0["losses"], rank0["one_process_losses"], rtol=1e-5)
    assert rank0["losses"] == rank1["losses"]  # reduce: the job's figures on every rank
    assert rank0["losses"][1] < 0.7 * rank0["losses"][0]


@pytest.mark.horovod
@pytest.mark.no_gpu
def test_the_strategy_loops_callbacks_get_each_ranks_step_and_allreduce_times(loop_ranks):
    """strategy.callbacks with strategy.metrics: WorkerMetrics times the allreduce inside the loop's step,
    in the optimizer's apply (Keras 3) or apply_gradients (tf-keras; it timed only fit's minimize: NaN)."""
    _, ranks, _ = loop_ranks
    for rank in ranks:
        assert len(rank["logged"]) == 2
        for logs in rank["logged"]:
            for index in (0, 1):
                assert logs[f"worker/{index}/step_time_ms"] > 0, logs
                assert 0 < logs[f"worker/{index}/comm_time_ms"] < logs[f"worker/{index}/step_time_ms"], logs
            assert logs["examples_per_second"] > 0


@pytest.mark.horovod
@pytest.mark.no_gpu
def test_the_strategy_loop_traces_once_and_rank_0_alone_writes_the_checkpoint_a_rerun_resumes(loop_ranks):
    _, ranks, outdir = loop_ranks
    assert [rank["tracing"] for rank in ranks] == [1, 1]
    assert [rank["start"] for rank in ranks] == [0, 0]
    assert [(rank["rerun_start"], rank["rerun_epochs"]) for rank in ranks] == [(2, 0), (2, 0)]
    assert sorted(p.name for p in (outdir / "loop-ckpt").iterdir()) == [
        "checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]
    assert not list(outdir.glob(".loop-ckpt*")), "no other rank writes anything"


@pytest.mark.horovod
@pytest.mark.no_gpu
def test_the_strategy_loop_scales_the_loss_under_mixed_float16_on_keras_3_and_refuses_tf_keras(loop_ranks):
    keras, (rank0, rank1), _ = loop_ranks
    if keras == "tf_keras":  # its loss-scale optimizer tests each rank's own gradients: ranks could hang
        for rank in (rank0, rank1):
            assert re.fullmatch(r"LoopError: `optimizer` is a tf-keras LossScaleOptimizer \(mixed_float16\), and under "
                                r"horovod .*; fix: build the model with Keras 3 .*", rank["mixed"])
        return
    assert _same(rank0["mixed"]["weights"], rank1["mixed"]["weights"])
    np.testing.assert_allclose(rank0["mixed"]["losses"], rank0["losses"], rtol=2e-3)  # float16's precision


# (b) without horovodrun: Horovod initialised with size 1 in this process.

@pytest.fixture(scope="module")
def hvd():
    """tfdist.horovod, Horovod initialised with size 1 (and shut down after the module if it was not before)."""
    import horovod.tensorflow as horovod_tf

    import tfdist.horovod

    started = not horovod_tf.is_initialized()
    if started:
        horovod_tf.init()
    assert horovod_tf.size() == 1
    yield tfdist.horovod
    if started:
        horovod_tf.shutdown()


def _model(package: str):
    """A built two-layer model of ``package`` (``tf_keras``, ``keras``), or plain ``tf.Variable``s
    (``tf``), and a function of a batch to its loss."""
    import importlib

    import tensorflow as tf

    if package == "tf":
        kernel, bias = tf.Variable(np.linspace(-1, 1, 6, dtype="float32").reshape(3, 2)), tf.Variable([0.5, -0.5])
        return [kernel, bias], lambda x: tf.reduce_sum(tf.square(tf.matmul(x, kernel) + bias))
    keras_module = importlib.import_module(package)
    keras_module.utils.set_random_seed(0)
    model = keras_module.Sequential([keras_module.layers.Dense(2, activation="tanh"), keras_module.layers.Dense(1)])
    model.build((None, 3))
    return model.trainable_variables, lambda x: tf.reduce_sum(tf.square(model(x)))


X = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")


def test_horovods_own_tape_fails_on_keras_3_variables_and_tfdists_averages_them(hvd):
    """horovod#4290, the user's report: Horovod's tape calls .ref() on the sources."""
    import horovod.tensorflow as horovod_tf
    import tensorflow as tf

    variables, loss = _model("keras")
    with tf.GradientTape(persistent=True) as tape:
        value = loss(X)
    expected = tape.gradient(value, variables)
    with pytest.raises(AttributeError, match=r"'Variable' object has no attribute 'ref'"):
        horovod_tf.DistributedGradientTape(tape).gradient(value, variables)  # the pin: Horovod fixed it?
    grads = hvd.DistributedGradientTape(tape).gradient(value, variables)
    assert isinstance(grads, list) and len(grads) == len(variables) == 4
    _close(grads, expected)


@pytest.mark.parametrize("package", ["keras", "tf_keras", "tf"])
def test_the_tape_returns_the_gradients_in_the_structure_of_the_sources(hvd, package):
    import tensorflow as tf

    variables, loss = _model(package)
    with tf.GradientTape(persistent=True) as tape:
        value = loss(X)
    expected = tape.gradient(value, variables)
    distributed = hvd.DistributedGradientTape(tape)
    first, rest = variables[0], variables[1:]
    nested = distributed.gradient(value, {"first": first, "rest": tuple(rest)})
    assert set(nested) == {"first", "rest"} and isinstance(nested["rest"], tuple)
    _close([nested["first"], *nested["rest"]], expected)
    _close([distributed.gradient(value, first)], expected[:1])  # one variable, one gradient

    @tf.function
    def step(x):  # the plain tape's gradients in the same graph: eager ones differ by float noise
        with tf.GradientTape(persistent=True) as inner:
            inner_value = loss(x)
        return hvd.DistributedGradientTape(inner).gradient(inner_value, variables), inner.gradient(inner_value, variables)

    _close(*step(X))


def test_the_tapes_other_methods_take_keras_3_variables(hvd):
    import keras
    import tensorflow as tf

    variables, loss = _model("keras")
    unused = keras.Variable(np.zeros((2,), "float32"))
    with tf.GradientTape(persistent=True) as tape:
        value = loss(X)
    grouped = hvd.DistributedGradientTape(tape, groups=[[variables[0], variables[1]], [variables[2]]])
    _close(grouped.gradient(value, variables), tape.gradient(value, variables))
    distributed = hvd.DistributedGradientTape(tape)
    grads = distributed.gradient(value, [*variables, unused], unconnected_gradients=tf.UnconnectedGradients.ZERO)
    np.testing.assert_array_equal(grads[-1], np.zeros(2))
    assert distributed.gradient(value, [unused]) == [None]
    distributed.register_local_source(variables[0])
    local, averaged = distributed.get_local_and_global_gradients(value, variables)
    assert [source for source, _ in local] == [variables[0]]  # the Keras 3 variables, not their tf.Variables
    assert [source for source, _ in averaged] == variables[1:]


@pytest.mark.parametrize("package", ["keras", "tf_keras"])
def test_broadcast_variables_takes_model_and_optimizer_variables_eagerly_and_in_tf_function(hvd, package):
    import importlib

    import tensorflow as tf

    keras_module = importlib.import_module(package)
    model = keras_module.Sequential([keras_module.layers.Dense(2)])
    model.build((None, 3))
    opt = keras_module.optimizers.SGD(0.1, momentum=0.9)
    opt.build(model.trainable_variables)
    before = [v.numpy() for v in model.variables]
    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(opt.variables, root_rank=0)  # what the docs write, on both Kerases
    if package == "tf_keras":
        hvd.broadcast_variables(opt.variables(), root_rank=0)  # Horovod's example, on tf-keras
    else:
        with pytest.raises(TypeError, match="not callable"):  # what docs/horovod.md says of Keras 3
            opt.variables()

    @tf.function
    def inside():
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)

    inside()
    for value, variable in zip(before, model.variables):
        np.testing.assert_array_equal(value, variable.numpy())


def test_collectives_take_symbolic_tensors_and_keep_the_keras_contract(hvd):
    import keras
    import tensorflow as tf

    @tf.function
    def inside(t):
        return (hvd.allreduce(t, name="tf2.allreduce"), hvd.allgather(t), hvd.broadcast(t, 0),
                hvd.reducescatter(t), hvd.allreduce(t, op=hvd.Sum, process_set=hvd.global_process_set))

    for result in inside(tf.constant([1.0, 2.0])):
        np.testing.assert_array_equal(result, [1.0, 2.0])
    eager = hvd.allreduce(np.array([3.0]), name="constant")  # the Keras contract: numpy in, eager tensor out
    assert isinstance(eager, tf.Tensor) and eager.numpy().tolist() == [3.0]
    np.testing.assert_array_equal(hvd.broadcast(keras.Variable([4.0]), 0), [4.0])
    np.testing.assert_array_equal(hvd.allgather(tf.Variable([5.0])), [5.0])


def _refusals(hvd):
    """``(call, error class, message pattern)`` for each refused argument."""
    import keras
    import tensorflow as tf

    from tfdist.errors import ArgumentTypeError, ArgumentValueError

    variables, loss = _model("keras")
    with tf.GradientTape(persistent=True) as tape:
        value = loss(X)
    with keras.StatelessScope(initialize_variables=False):  # a Keras 3 variable that has no value yet
        unbuilt = keras.Variable(initializer="zeros", shape=(2,), dtype="float32")
    wrap = hvd.DistributedGradientTape
    return [
        (lambda: wrap(object()), ArgumentTypeError, r"`gradtape` must be a tf.GradientTape.*; fix: pass the tape of"),
        (lambda: wrap(wrap(tape)), ArgumentValueError, r"already a DistributedGradientTape.*; fix: wrap the plain"),
        (lambda: wrap(tape, op="average"), ArgumentValueError, r"`op` must be one of Horovod's .*; fix: pass op=hvd.Average"),
        (lambda: wrap(tape, op=hvd.Sum, gradient_predivide_factor=2.0), ArgumentValueError,
         r"`gradient_predivide_factor`=2.0 needs op=hvd.Average, got op=hvd.Sum; fix: leave"),
        (lambda: wrap(tape, gradient_predivide_factor=0), ArgumentValueError, r"`gradient_predivide_factor` must be a number > 0"),
        (lambda: wrap(tape, groups=0), ArgumentValueError, r"`groups` must be an integer > 0 .*; fix: pass e.g. groups=2"),
        (lambda: wrap(tape, groups=variables), ArgumentTypeError, r"`groups` as a list must hold lists .*; fix: pass e.g."),
        (lambda: wrap(tape, num_groups=-1), ArgumentValueError, r"`num_groups` must be an integer >= 0"),
        (lambda: wrap(tape, compression="fp16"), ArgumentTypeError,
         r"`compression` must be a Horovod compressor, got 'fp16'; fix: pass compression=hvd.Compression.fp16"),
        (lambda: wrap(tape, process_set=0), ArgumentTypeError, r"`process_set` must be a Horovod ProcessSet"),
        (lambda: wrap(tape).gradient(value, variables, unconnected_gradients="maybe"), ArgumentValueError,
         r"`unconnected_gradients` must be 'none' or 'zero', got 'maybe'; fix:"),
        (lambda: wrap(tape).gradient(value, [unbuilt]), ArgumentValueError,
         r"`sources` holds the Keras 3 variable .* no value yet .*; fix: call the model on a batch"),
        (lambda: hvd.broadcast_variables([unbuilt], root_rank=0), ArgumentValueError, r"`variables` holds the Keras 3"),
        (lambda: hvd.broadcast_variables(42, root_rank=0), ArgumentTypeError,
         r"`variables` must be a list of variables, got builtins.int; fix: pass model.variables"),
        (lambda: hvd.allreduce(tf.constant([1.0]), False), ArgumentTypeError,
         r"`name` must be a string, got False.*; fix: pass the other arguments by keyword"),
    ]


def test_refused_arguments_name_the_argument_and_the_fix(hvd):
    for index, (call, error, pattern) in enumerate(_refusals(hvd)):
        with pytest.raises(error, match=pattern):
            call()
            pytest.fail(f"refusal {index} ({pattern!r}) did not raise")


def test_the_keras_3_variable_accessor_reads_the_tf_variable_and_fails_closed():
    import types

    import keras
    import tensorflow as tf

    from tfdist import upstream

    variable = keras.Variable(np.ones((2,), "float32"))
    inner = upstream.keras3_tf_variable(variable)
    assert isinstance(inner, tf.Variable) and inner is variable.value  # outside a mixed-precision call
    assert upstream.keras3_tf_variable(types.SimpleNamespace(_value=None)) is None
    for changed in (types.SimpleNamespace(), types.SimpleNamespace(_value=np.ones(2))):
        with pytest.raises(upstream.UpstreamChangedError, match=r"`_value`"):
            upstream.keras3_tf_variable(changed)


# (c) the page shows what the script runs.

def test_the_pages_diff_is_a_subsequence_of_the_script():
    (diff,) = blocks(section(DOCS / "horovod.md", DOC_SECTION), "diff")
    shown = [line[1:].strip() for line in diff.splitlines() if line[:1] in (" ", "+") and line[1:].strip()]
    script = iter(line.strip() for line in (SCRIPTS / "hvd_tf2_loop.py").read_text().splitlines())
    missing = [line for line in shown if not any(line == candidate for candidate in script)]
    assert missing == [], "lines the page shows that hvd_tf2_loop.py does not run, in that order"
    assert re.search(r"^-import horovod\.tensorflow as hvd$", diff, flags=re.M)
