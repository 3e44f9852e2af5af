"""Every accessor of tfdist.upstream against the pinned TensorFlow / tf-keras, and failing closed."""
from __future__ import annotations

import types

import pytest

from support import nested_signal
from tfdist import upstream
from tfdist.errors import TfdistError

tf = pytest.importorskip("tensorflow")


def _compiled_model(**compile_kwargs):
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse", **compile_kwargs)
    return model


def test_steps_per_execution_reads_and_sets_a_compiled_model():
    model = _compiled_model(steps_per_execution=3)
    assert upstream.steps_per_execution(model) == 3
    upstream.set_steps_per_execution(model, 7)
    assert upstream.steps_per_execution(model) == 7


def test_steps_per_execution_if_compiled_is_none_for_a_loops_model():
    import tf_keras

    model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
    assert upstream.steps_per_execution_if_compiled(model) is None
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=3)
    assert upstream.steps_per_execution_if_compiled(model) == 3
    with pytest.raises(upstream.UpstreamChangedError, match="_steps_per_execution"):
        upstream.steps_per_execution_if_compiled(object())


def test_has_batch_hooks_tells_epoch_from_batch_callbacks():
    class PerBatch(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass

    assert upstream.has_batch_hooks(PerBatch())
    assert not upstream.has_batch_hooks(tf.keras.callbacks.CSVLogger("/dev/null"))
    # TensorBoard writes batch summaries inside the train function, not from batch hooks
    assert not upstream.has_batch_hooks(tf.keras.callbacks.TensorBoard("/tmp/unused", update_freq="batch"))
    assert upstream.has_batch_hooks(tf.keras.callbacks.ModelCheckpoint("/tmp/unused", save_freq=5))
    assert not upstream.has_batch_hooks(tf.keras.callbacks.ModelCheckpoint("/tmp/unused"))
    assert upstream.has_batch_hooks(tf.keras.callbacks.ProgbarLogger())


def test_parameter_servers_refuse_batch_hooks_unless_they_take_tensor_logs():
    class PerBatch(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass

    assert upstream.refused_by_parameter_servers(PerBatch())
    assert not upstream.refused_by_parameter_servers(tf.keras.callbacks.ProgbarLogger())
    assert not upstream.refused_by_parameter_servers(tf.keras.callbacks.CSVLogger("/dev/null"))


def test_optimizer_is_built_follows_build():
    model = _compiled_model()
    assert upstream.optimizer_is_built(model.optimizer) is False
    model.optimizer.build(model.trainable_variables)
    assert upstream.optimizer_is_built(model.optimizer) is True


def test_raw_learning_rate_keeps_a_schedule():
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    assert upstream.raw_learning_rate(tf.keras.optimizers.SGD(schedule)) is schedule
    assert float(upstream.raw_learning_rate(tf.keras.optimizers.SGD(0.25)).numpy()) == 0.25


def test_optimizer_is_built_follows_build_of_a_keras_3_optimizer():
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.1)
    assert upstream.optimizer_is_built(optimizer) is False
    optimizer.build(model.trainable_variables)
    assert upstream.optimizer_is_built(optimizer) is True


def test_raw_learning_rate_of_a_keras_3_optimizer_before_and_after_build():
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.25)
    before = upstream.raw_learning_rate(optimizer)
    assert isinstance(before, keras.Variable) and float(before.numpy()) == 0.25
    optimizer.build(model.trainable_variables)
    optimizer.learning_rate = 0.5  # the public setter assigns the same variable
    assert upstream.raw_learning_rate(optimizer) is before and float(before.numpy()) == 0.5


def test_raw_learning_rate_keeps_a_keras_3_schedule_through_training():
    keras = pytest.importorskip("keras")
    import numpy as np

    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    optimizer = keras.optimizers.SGD(schedule)
    assert upstream.raw_learning_rate(optimizer) is schedule
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(np.ones((40, 2), "float32"), np.ones((40, 1), "float32"), batch_size=4, verbose=0)  # 10 steps
    assert upstream.optimizer_is_built(optimizer) is True
    assert upstream.raw_learning_rate(optimizer) is schedule
    assert float(optimizer.learning_rate) == pytest.approx(0.05)  # the public property: the decayed value


def test_tensorflow_says_it_uses_legacy_keras():
    assert upstream.tf_uses_legacy_keras(tf) is True  # tfdist set TF_USE_LEGACY_KERAS=1 before import


def test_the_lazy_loader_state_is_read_without_importing():
    loader = types.SimpleNamespace(_tfll_initialized=False, _tfll_keras_version="tf_keras")
    assert upstream.lazy_keras_version(loader) == (True, "tf_keras")
    assert upstream.lazy_keras_version(types.ModuleType("tf_keras")) == (False, None)


@pytest.mark.parametrize("call", [
    lambda: upstream.steps_per_execution(object()),
    lambda: upstream.set_steps_per_execution(object(), 2),
    lambda: upstream.has_batch_hooks(object()),
    lambda: upstream.refused_by_parameter_servers(object()),
    lambda: upstream.optimizer_is_built(types.SimpleNamespace(build=print, _built="yes")),
    lambda: upstream.optimizer_is_built(object()),
    lambda: upstream.raw_learning_rate(object()),
    lambda: upstream.tf_uses_legacy_keras(types.SimpleNamespace(_tf_uses_legacy_keras="1")),
])
def test_every_accessor_fails_closed_naming_the_attribute(call):
    with pytest.raises(upstream.UpstreamChangedError) as info:
        call()
    assert isinstance(info.value, TfdistError)
    assert "has no usable `" in str(info.value) and "fix: install the versions pinned" in str(info.value)


def test_an_optimizer_and_the_one_its_loss_scale_optimizer_wraps_and_failing_closed():
    """One helper for every mark tfdist looks for on an optimizer or inside its loss-scale optimizer; a
    loss-scale optimizer whose wrapped one moved raises where it read as unmarked (PowerSGD would then
    have gone around the loss scaling, on scaled gradients)."""
    import tf_keras

    from tfdist.runtime import allreduce, collective_powersgd

    plain = tf_keras.optimizers.SGD(0.1)
    scaled = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))
    assert upstream.self_and_inner(plain) == [plain]
    assert upstream.self_and_inner(scaled) == [scaled, scaled.inner_optimizer]

    class LossScaleOptimizerMoved:  # its wrapped optimizer no longer at `inner_optimizer`
        pass

    moved = LossScaleOptimizerMoved()
    for call in (upstream.self_and_inner, collective_powersgd.aggregates_through_powersgd,
                 allreduce.averages_over_ranks, allreduce.powersgd_state):
        with pytest.raises(upstream.UpstreamChangedError, match="inner_optimizer"):
            call(moved)
    # every MultiWorkerMirrored fit asks this: it reads a wrapped optimizer only of a Keras 3 one
    assert collective_powersgd.refuse_compiled_keras3_loss_scale(moved) is None


def test_no_private_attribute_is_read_outside_the_door():
    """tfdist's own modules reach TensorFlow/Keras internals only through tfdist.upstream."""
    import pathlib
    import re

    root = pathlib.Path(upstream.__file__).resolve().parents[1]
    private = re.compile(r"[.'\"]_(steps_per_execution|configure_steps_per_execution|tf_uses_legacy_keras|tfll_"
                         r"|built\b|learning_rate\b|supports_tf_logs|implements_|maybe_symbolic_build|symbolic_build)")
    offenders = []
    for path in [*root.joinpath("tfdist").rglob("*.py"), *root.joinpath("callbacks").rglob("*.py")]:
        if path.name == "upstream.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if private.search(line) and not re.match(r"\s*#", line):
                offenders.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert offenders == []


def test_coordinator_workers_fail_closed_when_the_cluster_moved():
    from types import SimpleNamespace

    with pytest.raises(upstream.UpstreamChangedError, match="_cluster"):
        upstream.coordinator_workers(SimpleNamespace())
    worker = SimpleNamespace(worker_index=0, _process_closure=lambda closure: None)
    coordinator = SimpleNamespace(_cluster=SimpleNamespace(workers=[worker]))
    assert upstream.coordinator_workers(coordinator) == [worker]
    coordinator._cluster.workers = [SimpleNamespace(worker_index=0)]
    with pytest.raises(upstream.UpstreamChangedError, match="_process_closure"):
        upstream.coordinator_workers(coordinator)


def test_time_closures_records_every_closure_and_undoes_itself():
    """The real Worker is exercised by tests/strategies/test_parameter_server_metrics.py on a cluster."""
    class Worker:
        worker_index = 1

        def _process_closure(self, closure):
            if closure == "fails":
                raise RuntimeError("closure failed")
            return closure * 2

    worker, recorded = Worker(), []
    undo = upstream.time_closures(worker, recorded.append)
    assert worker._process_closure(21) == 42
    with pytest.raises(RuntimeError):
        worker._process_closure("fails")
    assert len(recorded) == 2 and all(seconds >= 0 for seconds in recorded)
    undo()
    assert worker._process_closure(1) == 2 and len(recorded) == 2


# --- strategy.export's accessors ------------------------------------------------------------------
def test_is_graph_network_tells_functional_and_sequential_from_subclassed_models_of_both_kerases():
    import keras
    import tf_keras

    for package in (tf_keras, keras):
        class Subclassed(package.Model):
            def call(self, inputs):
                return inputs

        sequential = package.Sequential([package.Input((2,)), package.layers.Dense(1)])
        inputs = package.Input((2,))
        functional = package.Model(inputs, package.layers.Dense(1)(inputs))
        assert upstream.is_graph_network(sequential) and upstream.is_graph_network(functional)
        assert not upstream.is_graph_network(Subclassed())
    assert not upstream.is_graph_network(keras.Sequential([keras.layers.Dense(1)]))  # no inputs yet


def test_is_graph_network_fails_closed_when_the_attribute_moved():
    import tf_keras

    model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
    model._is_graph_network = "yes"
    with pytest.raises(upstream.UpstreamChangedError, match="_is_graph_network"):
        upstream.is_graph_network(model)
    with pytest.raises(upstream.UpstreamChangedError, match="_is_graph_network"):
        upstream.is_graph_network(types.SimpleNamespace())


def test_keras3_builds_from_a_local_batch_under_a_strategy_and_fails_closed():
    """Under MultiWorkerMirroredStrategy the replaced build is what lets Keras 3's fit start at all
    (tests/examples: the classifier with Keras 3 on two workers); here it must build and train as Keras'."""
    import keras
    import numpy as np

    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(optimizer="sgd", loss="mse")
    upstream.build_keras3_from_a_local_batch(model)
    assert "_maybe_symbolic_build" in vars(model)
    history = model.fit(np.ones((8, 3), "float32"), np.zeros((8, 2), "float32"), batch_size=4, verbose=0)
    assert model.built and len(history.history["loss"]) == 1
    with pytest.raises(upstream.UpstreamChangedError, match="_maybe_symbolic_build"):
        upstream.build_keras3_from_a_local_batch(types.SimpleNamespace())


def test_keras3_build_shapes_reads_a_first_call_and_fails_closed():
    import keras

    model = keras.Sequential([keras.layers.Dense(1)])
    assert upstream.keras3_build_shapes(model) is None
    model(tf.ones((1, 3)))
    assert list(upstream.keras3_build_shapes(model).values()) == [(1, 3)]
    model._build_shapes_dict = [(1, 3)]
    with pytest.raises(upstream.UpstreamChangedError, match="_build_shapes_dict"):
        upstream.keras3_build_shapes(model)
    with pytest.raises(upstream.UpstreamChangedError, match="_build_shapes_dict"):
        upstream.keras3_build_shapes(types.SimpleNamespace())


def _step_writes_to_the_counter(optimizer, variable) -> set[str]:
    """The ops of a traced ``apply`` that write ``optimizer``'s step counter."""
    counter = upstream.keras3_tf_variable(optimizer._iterations)
    graph = tf.function(lambda: optimizer.apply([tf.ones_like(variable)], [variable])).get_concrete_function().graph
    handle = [capture for value, capture in graph.captures if value is counter.handle]
    return {op.type for op in graph.get_operations()
            if op.type.startswith("Assign") and handle and op.inputs[0] is handle[0]}


def test_a_keras_3_optimizer_counts_its_steps_with_one_atomic_add_and_fails_closed():
    """Keras 3 counts a step as ``assign(self + 1)``: a read, then a write, which loses the increments
    of steps that run at once (parameter servers). Patched, the step is one AssignAddVariableOp."""
    import keras

    variable = keras.Variable(tf.zeros((2,)))
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build([variable])
    assert _step_writes_to_the_counter(optimizer, variable) == {"AssignVariableOp"}
    upstream.count_keras3_steps_atomically(optimizer)
    assert _step_writes_to_the_counter(optimizer, variable) == {"AssignAddVariableOp"}
    optimizer.apply([tf.ones((2,))], [variable])
    assert int(optimizer.iterations.numpy()) == 1
    with pytest.raises(upstream.UpstreamChangedError, match="_iterations"):
        upstream.count_keras3_steps_atomically(types.SimpleNamespace())


@pytest.mark.parametrize("options, field", [({"op": "adasum"}, "`op`="), ({"groups": -1}, "`groups` must be")])
def test_horovods_tf_keras_wrapper_refuses_what_horovod_refuses_naming_the_field(options, field):
    """The checks horovod.tensorflow.keras.DistributedOptimizer makes, as tfdist errors; Adasum too."""
    hvd = pytest.importorskip("horovod.tensorflow")
    import tf_keras

    options = {"op": hvd.Adasum if options.get("op") == "adasum" else hvd.Average,
               **{k: v for k, v in options.items() if k != "op"}}
    with pytest.raises(ValueError) as info:
        upstream.horovod_tf_keras_optimizer(tf_keras.optimizers.SGD(0.1), **options)
    assert isinstance(info.value, TfdistError) and field in str(info.value) and "; fix: " in str(info.value)


def test_horovods_tf_keras_wrapper_fails_closed_when_its_maker_moved(monkeypatch):
    pytest.importorskip("horovod.tensorflow")
    import horovod._keras
    import tf_keras

    monkeypatch.delattr(horovod._keras, "create_distributed_optimizer")
    with pytest.raises(upstream.UpstreamChangedError, match="create_distributed_optimizer"):
        upstream.horovod_tf_keras_optimizer(tf_keras.optimizers.SGD(0.1), op=None)


@pytest.mark.parametrize("legacy", [False, True])
def test_horovods_tf_keras_wrapper_allreduces_on_every_path_and_fails_closed(legacy):
    """Horovod's wrapper keeps the two privates the custom-loop guard reads (issue 34); the guard holds
    apply_gradients and the aggregation hook a LossScaleOptimizer calls (the legacy one's is private)."""
    hvd = pytest.importorskip("horovod.tensorflow")
    import tf_keras

    optimizers = tf_keras.optimizers.legacy if legacy else tf_keras.optimizers
    options = {"op": hvd.Average, "name": None, "device_dense": "", "device_sparse": "",
               "compression": hvd.Compression.none, "sparse_as_dense": False}
    wrapped = upstream.horovod_tf_keras_optimizer(optimizers.SGD(0.1), **options)
    hook = "_aggregate_gradients" if legacy else "aggregate_gradients"
    assert {"apply_gradients", hook} <= set(vars(wrapped))
    assert getattr(wrapped, upstream.ALLREDUCED_FLAG) is False
    bare = upstream.horovod_tf_keras_optimizer(optimizers.SGD(0.1), **options)
    del bare._aggregated_gradients
    with pytest.raises(upstream.UpstreamChangedError, match="_aggregated_gradients"):
        upstream.allreduce_on_every_path(bare)
    with pytest.raises(upstream.UpstreamChangedError, match="_allreduce"):
        upstream.allreduce_on_every_path(types.SimpleNamespace(_aggregated_gradients=False))


def test_horovods_tf_keras_allreduce_is_rebuilt_with_another_compression_and_fails_closed(monkeypatch):
    """An adaptive run changes Horovod's compression in-process (issue 36) by giving the wrapper a new
    ``_allreduce_grads``; Horovod's maker of it and an accumulation helper are checked first."""
    hvd = pytest.importorskip("horovod.tensorflow")
    import tf_keras

    options = {"op": hvd.Average, "name": None, "device_dense": "", "device_sparse": "",
               "compression": hvd.Compression.none, "sparse_as_dense": False}
    wrapped = upstream.horovod_tf_keras_optimizer(tf_keras.optimizers.SGD(0.1), **options)
    before = wrapped._allreduce_grads
    rebuild = {"compression": hvd.Compression.fp16, "sparse_as_dense": False, "op": hvd.Average,
               "gradient_predivide_factor": 1.0, "groups": None, "device_dense": "", "device_sparse": "",
               "process_set": None}
    upstream.rebuild_horovod_allreduce(wrapped, **rebuild)
    assert wrapped._allreduce_grads is not before and callable(wrapped._allreduce_grads)
    accumulating = upstream.horovod_tf_keras_optimizer(tf_keras.optimizers.SGD(0.1), backward_passes_per_step=2,
                                                       **options)
    with pytest.raises(upstream.UpstreamChangedError, match="_agg_helper"):
        upstream.rebuild_horovod_allreduce(accumulating, **rebuild)
    monkeypatch.delattr(hvd, "_make_allreduce_grads_fn")
    with pytest.raises(upstream.UpstreamChangedError, match="_make_allreduce_grads_fn"):
        upstream.rebuild_horovod_allreduce(wrapped, **rebuild)


def test_horovodruns_build_checks_are_answered_by_the_given_function_and_undone(monkeypatch):
    """run_controller / _run_elastic call the names horovod.runner.launch imported; those are replaced."""
    launch = pytest.importorskip("horovod.runner.launch")
    import horovod.common.util as util

    monkeypatch.setattr(launch, "gloo_built", launch.gloo_built)  # restored after the test, whatever happens
    monkeypatch.setattr(launch, "mpi_built", launch.mpi_built)
    asked = []
    undo = upstream.answer_horovod_build_checks(lambda name, original, verbose: asked.append(
        (name, original, verbose)) or name == "gloo_built")
    assert undo is not None
    assert launch.gloo_built(verbose=True) is True and launch.mpi_built() is False
    assert asked == [("gloo_built", util.gloo_built, True), ("mpi_built", util.mpi_built, False)]
    undo()
    assert launch.gloo_built is util.gloo_built and launch.mpi_built is util.mpi_built


@pytest.mark.parametrize("change", ["missing", "replaced"])
def test_horovodruns_build_checks_fail_closed_leaving_horovod_untouched(monkeypatch, change):
    """A gloo_built that is gone, or is not horovod.common.util's (another release, another patch):
    Horovod is left as it is and its own checks run."""
    launch = pytest.importorskip("horovod.runner.launch")

    mpi_built = launch.mpi_built
    if change == "missing":
        monkeypatch.delattr(launch, "gloo_built")
    else:
        monkeypatch.setattr(launch, "gloo_built", lambda verbose=False: True)
    gloo_built = getattr(launch, "gloo_built", None)
    assert upstream.answer_horovod_build_checks(lambda *args: pytest.fail("must not be called")) is None
    assert launch.mpi_built is mpi_built and getattr(launch, "gloo_built", None) is gloo_built


def test_horovods_shutdown_handler_comes_through_a_second_signal_once_guarded():
    """Horovod's launcher (tfdist.launch.horovod_launcher) with a second SIGTERM inside its handler's
    Event.set: the Event is set and the process goes on."""
    pytest.importorskip("horovod.runner.gloo_run")
    assert nested_signal("horovod_guarded", "in-handler", deadlock_after=60) == "set"


def test_horovods_own_shutdown_handler_deadlocks_on_a_second_signal_inside_it():
    """Pins the Horovod 0.28.1 bug the guard is for (horovodrun and its ranks outlived a SIGKILLed `tfdist
    launch`, its main thread waiting for its own lock): when this fails, Horovod fixed it."""
    pytest.importorskip("horovod.runner.gloo_run")
    assert nested_signal("horovod", "in-handler", deadlock_after=3) == "deadlocked"


def test_the_shutdown_guard_installs_one_guarded_handler_for_both_signals_and_is_undone(monkeypatch):
    gloo_run = pytest.importorskip("horovod.runner.gloo_run")
    import signal

    original = gloo_run.register_shutdown_event
    monkeypatch.setattr(gloo_run, "register_shutdown_event", original)  # restored whatever happens
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    guarded = []
    undo = upstream.guard_horovod_shutdown_signals(lambda body: guarded.append(body) or body)
    assert undo is not None
    try:
        event = gloo_run.register_shutdown_event()
        assert len(guarded) == 1
        assert signal.getsignal(signal.SIGINT) is signal.getsignal(signal.SIGTERM) is guarded[0]
        guarded[0](signal.SIGTERM, None)
        assert event.is_set()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    undo()
    assert gloo_run.register_shutdown_event is original


def _handles_sighup_too():
    import signal
    import threading

    event = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: event.set())
    return event


@pytest.mark.parametrize("change", ["missing", "replaced", "other signals"])
def test_the_shutdown_guard_fails_closed_leaving_horovod_untouched(monkeypatch, change):
    """A register_shutdown_event that is gone, is not gloo_run's own (another patch), or handles other
    signals (another release: its own handler is kept, not narrowed to SIGINT and SIGTERM)."""
    gloo_run = pytest.importorskip("horovod.runner.gloo_run")
    if change == "missing":
        monkeypatch.delattr(gloo_run, "register_shutdown_event")
    elif change == "replaced":
        monkeypatch.setattr(gloo_run, "register_shutdown_event", lambda: None)
    else:
        monkeypatch.setattr(_handles_sighup_too, "__module__", gloo_run.__name__)
        monkeypatch.setattr(gloo_run, "register_shutdown_event", _handles_sighup_too)
    before = getattr(gloo_run, "register_shutdown_event", None)
    assert upstream.guard_horovod_shutdown_signals(lambda body: pytest.fail("must not be called")) is None
    assert getattr(gloo_run, "register_shutdown_event", None) is before


def test_unseeded_shuffles_are_found_along_the_pipeline_and_a_changed_tf_data_is_left_alone():
    import tensorflow as tf

    from tensorflow.python.eager import context

    before = context.global_seed()
    tf.random.set_seed(None)  # an earlier test's global seed would seed every shuffle
    base = tf.data.Dataset.range(8)
    unseeded, other = base.shuffle(8), base.shuffle(4)
    tf.random.set_seed(before)
    assert upstream.unseeded_shuffles(unseeded.map(lambda v: v + 1).batch(2)) == 1
    assert upstream.unseeded_shuffles(base.shuffle(8, seed=3, reshuffle_each_iteration=False)) == 0
    assert upstream.unseeded_shuffles(tf.data.Dataset.zip((unseeded, other))) == 2
    assert upstream.unseeded_shuffles(tf.data.Dataset.zip((unseeded, unseeded.skip(1)))) == 1  # one shuffle
    assert upstream.unseeded_shuffles(base.repeat()) == 0
    assert upstream.unseeded_shuffles(object()) is None  # tf.data changed: no walk, no warning
    moved = type("_ShuffleDataset", (), {"_inputs": lambda self: []})()  # a shuffle whose seeds moved
    assert upstream.unseeded_shuffles(moved) is None


def test_functions_stay_registered_once_kept_and_a_changed_tensorflow_is_left_alone(monkeypatch):
    """A parameter-server coordinator's removal of a function RPCs every task, one at a time, with the
    GIL held (about 40 s on the lab, as fit returned or at the chief's exit): kept, it stays registered."""
    import gc

    import tensorflow as tf
    from tensorflow.python.eager import context

    def traced_and_dropped() -> str:
        function = tf.function(lambda v: v * 2).get_concrete_function(tf.TensorSpec([], tf.float32))
        name = function.function_def.signature.name
        assert context.context().has_function(name)
        del function
        gc.collect()
        return name

    # TensorFlow's own (an in-process parameter-server chief of an earlier test may have kept them), put
    # back as it was after the test
    own = getattr(context.Context.remove_function, "tfdist_original", context.Context.remove_function)
    monkeypatch.setattr(context.Context, "remove_function", own)
    assert not context.context().has_function(traced_and_dropped())  # removed, until kept
    kept = upstream.keep_functions_registered()
    name = traced_and_dropped()
    assert context.context().has_function(name) and name in kept
    assert upstream.keep_functions_registered() is kept  # installed once
    monkeypatch.delattr(context.Context, "remove_function")
    assert upstream.keep_functions_registered() is None  # TensorFlow changed: left as it is
    assert not hasattr(context.Context, "remove_function")
