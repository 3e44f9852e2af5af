"""The custom-loop API in one process, for tests/strategies/test_loop.py.

    python loop_local.py OUTFILE

For tf-keras and Keras 3, one after the other: examples/custom_loop.py's ``train`` under ``single``
against a plain ``GradientTape`` loop without tfdist on the same batches; under ``mirrored`` over two
logical CPUs (half the batch per replica, the learning rate it scales to) against ``single`` on the
global batch; the tracing counts; a mirrored checkpoint resumed by a mirrored rerun and by ``single``;
the refusals that need two replicas; and what the example prints run as a script. Writes one JSON object per Keras to OUTFILE.
"""
from __future__ import annotations

import tfdist  # noqa: F401  (before tensorflow)

import contextlib
import importlib
import importlib.util
import io
import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

_spec = importlib.util.spec_from_file_location(
    "custom_loop", Path(__file__).resolve().parents[2] / "examples" / "custom_loop.py")
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)
EPOCHS, BATCH, LR = 2, 32, 0.1
DEVICES = ("/cpu:0", "/cpu:1")


def weights(model) -> list[np.ndarray]:
    return [np.asarray(w, dtype="float64") for w in model.get_weights()]


def relative_error(a: list, b: list) -> float:
    return max(float(np.max(np.abs(x - y)) / np.max(np.abs(y))) for x, y in zip(a, b))


def plain_loop(keras, steps: int) -> list[np.ndarray]:
    """The same training without tfdist: batches of BATCH from the repeated stream, the mean loss."""
    model = example.build_model(keras)
    optimizer = keras.optimizers.SGD(LR)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    batches = iter(example.digits().shuffle(2048, seed=0, reshuffle_each_iteration=False).repeat().batch(BATCH, drop_remainder=True))

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    for _ in range(steps):
        step(*next(batches))
    return weights(model)


def refusals(keras, flavour: str) -> dict[str, str]:
    """The messages of what the loop refuses, by case."""
    found = {}

    def refused(case: str, call) -> None:
        try:
            call()
        except tfdist.TfdistError as exc:
            found[case] = f"{type(exc).__name__}: {exc}"
        else:
            found[case] = "not refused"

    mirrored = tfdist.make_strategy("mirrored", devices=DEVICES)
    with mirrored.scope():
        model = example.build_model(keras)
    refused("plain_optimizer", lambda: mirrored.setup(model, keras.optimizers.SGD(0.1)))
    if flavour == "keras_3":
        with mirrored.scope():
            clipping = mirrored.optimizer(keras.optimizers.SGD(0.1, clipnorm=1.0))
        refused("clipnorm", lambda: mirrored.setup(model, clipping))
    outside = example.build_model(keras)
    with mirrored.scope():
        optimizer = mirrored.optimizer(keras.optimizers.SGD(0.1))
    refused("outside_scope", lambda: mirrored.setup(outside, optimizer))
    unbuilt = keras.Sequential([keras.layers.Dense(2)])
    refused("unbuilt", lambda: mirrored.setup(unbuilt, optimizer))
    mirrored.setup(model, optimizer)
    refused("batched_numpy", lambda: mirrored.distribute(np.zeros((8, 2)), batch_size=2))
    refused("too_few", lambda: mirrored.distribute(tf.data.Dataset.range(10), batch_size=8))
    refused("infinite", lambda: mirrored.distribute(tf.data.Dataset.range(10).repeat(), batch_size=2))
    refused("op", lambda: mirrored.reduce("max", [{"loss": 1.0}]))
    return found


def mixed(keras, flavour: str) -> dict:
    """The example under mixed_float16 (a LossScaleOptimizer) on single and, for tf-keras, mirrored: its
    losses, to compare with float32's; and (Keras 3) the refusal over two mirrored replicas."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        found = {}
        for kind, options, batch, lr in (("single", {}, BATCH, LR), ("mirrored", {"devices": DEVICES}, BATCH // 2, LR / 2)):
            strategy = tfdist.make_strategy(kind, **options)
            try:
                model, history, _, _ = example.train(strategy, keras, EPOCHS, batch, lr, log=lambda line: None)
                found[kind] = {"losses": [h["loss"] for h in history],
                               "optimizer": type(strategy._loop_state.optimizer).__name__,
                               "finite": bool(all(np.isfinite(w).all() for w in model.get_weights()))}
            except tfdist.TfdistError as exc:
                found[kind] = f"{type(exc).__name__}: {exc}"
        with tfdist.make_strategy("single").scope():
            plain = example.build_model(keras)
        single = tfdist.make_strategy("single")
        try:
            single.setup(plain, single.optimizer(keras.optimizers.SGD(0.1)))
            found["plain_optimizer"] = "not refused"
        except tfdist.TfdistError as exc:
            found["plain_optimizer"] = f"{type(exc).__name__}: {exc}"
        return found
    finally:
        keras.mixed_precision.set_global_policy("float32")


def run(flavour: str, outdir: Path) -> dict:
    keras = importlib.import_module({"tf_keras": "tf_keras", "keras_3": "keras"}[flavour])
    single = tfdist.make_strategy("single")
    model, history, step, _ = example.train(single, keras, EPOCHS, BATCH, LR, log=lambda line: None)
    steps = EPOCHS * (1797 // BATCH)
    result = {"model_module": type(model).__module__.split(".")[0], "single_vs_plain": relative_error(weights(model), plain_loop(keras, steps)),
              "single_tracing": step.experimental_get_tracing_count(),
              "losses": [h["loss"] for h in history], "accuracy": history[-1]["accuracy"]}
    mirrored = tfdist.make_strategy("mirrored", devices=DEVICES)
    ckpt = outdir / f"ckpt-{flavour}"
    model2, history2, step2, start = example.train(mirrored, keras, EPOCHS, BATCH // 2, LR / 2, str(ckpt),
                                                   log=lambda line: None)
    result.update(replicas=mirrored.num_replicas_in_sync, mirrored_start=start,
                  mirrored_vs_single=relative_error(weights(model2), weights(model)),
                  mirrored_tracing=step2.experimental_get_tracing_count(),
                  mirrored_losses=[h["loss"] for h in history2],
                  checkpoints=sorted(p.name for p in ckpt.glob("ckpt-*.index")))
    rerun = tfdist.make_strategy("mirrored", devices=DEVICES)  # resumes after the last saved epoch
    model3, history3, _, start3 = example.train(rerun, keras, EPOCHS + 1, BATCH // 2, LR / 2, str(ckpt),
                                                log=lambda line: None)
    resumed = tfdist.make_strategy("single")  # another backend reads the same checkpoint
    model4, history4, _, start4 = example.train(resumed, keras, EPOCHS, BATCH, LR, str(ckpt), log=lambda line: None)
    result.update(rerun_start=start3, rerun_epochs=len(history3), single_start=start4, single_epochs=len(history4),
                  single_resumed_vs_saved=relative_error(weights(model4), weights(model3)),
                  refusals=refusals(keras, flavour), mixed=mixed(keras, flavour))
    return result


def as_script() -> list[str]:
    """What ``python examples/custom_loop.py --keras 3`` prints (``main``, with ``make_strategy("auto")``)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        example.main(["--keras", "3", "--epochs", "2"])
    return printed.getvalue().splitlines()


if __name__ == "__main__":
    outfile = Path(sys.argv[1])
    results = {flavour: run(flavour, outfile.parent) for flavour in ("tf_keras", "keras_3")}
    results["script"] = as_script()
    outfile.write_text(json.dumps(results, indent=1))
