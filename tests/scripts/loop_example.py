"""examples/custom_loop.py as a module, the digits as arrays, and a refusal's message, for the job scripts
that run its loop next to ``fit`` (ps_loop.py, ps_keras3.py, mwm_keras3.py; run as scripts, this folder is
on their path)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_loop.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("custom_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The shipped digits as the example trains on them: 64 features in [0, 1], integer labels."""
    from tfdist.datasets import load_digits

    data = load_digits()
    return (data.images.reshape(len(data.images), 64) / 16.0).astype("float32"), data.target.astype("int32")


def refused(call) -> str:
    """``call()``'s TfdistError as ``"<class>: <message>"``, or ``"not refused"``."""
    from tfdist.errors import TfdistError

    try:
        call()
    except TfdistError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "not refused"


def logged_loop(strategy, keras, epochs: int, batch_size: int, learning_rate: float, callbacks: list) -> list[dict]:
    """The example's model trained in a loop that drives ``strategy.callbacks(callbacks, ...)``: the logs
    every callback saw at each epoch's end (the figures the others added included)."""
    import tensorflow as tf

    example = load_example()
    with strategy.scope():
        model = example.build_model(keras)
        optimizer = strategy.optimizer(keras.optimizers.SGD(learning_rate))
    strategy.setup(model, optimizer)
    data = strategy.distribute(example.digits().shuffle(2048, seed=0, reshuffle_each_iteration=False), batch_size=batch_size)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    @strategy.function
    def step(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = strategy.average_loss(loss_fn(y, model(x, training=True)))
        strategy.minimize(tape, loss)
        return {"loss": loss}

    seen: list[dict] = []
    recorder = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(
        {key: float(value) for key, value in logs.items()}))
    listed = strategy.callbacks([*callbacks, recorder], data, epochs)
    iterator = iter(data)
    listed.on_train_begin()
    for epoch in range(epochs):
        listed.on_epoch_begin(epoch)
        listed.on_epoch_end(epoch, strategy.reduce("sum", [step(iterator) for _ in range(data.steps_per_epoch)]))
    listed.on_train_end()
    return seen
