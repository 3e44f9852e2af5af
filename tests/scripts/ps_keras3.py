"""Keras 3's ``strategy.fit`` and ``evaluate`` on a real parameter-server cluster, next to tf-keras', for
tests/strategies/test_keras3_parameter_server.py.

    tfdist launch --workers 2 --ps 1 -- python ps_keras3.py OUTDIR

The chief trains examples/custom_loop.py's model on the digits with each Keras (4 epochs, batch 32, SGD
0.1, the same seed), with ``validation_data`` and the compiled accuracy, then evaluates it with
``strategy.evaluate`` and with a plain local copy of its weights; then tries what the Keras 3 fit
refuses. It writes OUTDIR/ps_keras3.json.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import tfdist  # before tensorflow

import keras
import numpy as np
import tf_keras

from loop_example import digits_arrays, load_example, refused

OUTDIR = Path(sys.argv[1])
strategy = tfdist.make_strategy("auto")  # the ps and the workers serve here and never return
example = load_example()
X, Y = digits_arrays()


def local_accuracy(model, package) -> float:
    copy = example.build_model(package)
    copy.set_weights([np.asarray(w) for w in model.get_weights()])
    return float(np.mean(np.argmax(copy.predict(X, verbose=0), -1) == Y))


def compiled(package):
    with strategy.scope():
        model = example.build_model(package)
        model.compile(optimizer=strategy.optimizer(package.optimizers.SGD(0.1)),
                      loss=package.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


found = {"kind": strategy.kind, "workers": strategy.num_workers}
for name, package in (("keras_3", keras), ("tf_keras", tf_keras)):
    model = compiled(package)
    epochs = []
    recorder = package.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: epochs.append(epoch))
    saver = [keras.callbacks.ModelCheckpoint(str(OUTDIR / "k3-{epoch}.weights.h5"), save_weights_only=True)] \
        if name == "keras_3" else []  # its batch hooks save every save_freq="epoch": once an epoch
    history = strategy.fit(model, X, Y, batch_size=32, epochs=4, validation_data=(X[:500], Y[:500]),
                           callbacks=[recorder, *saver], verbose=0)
    found[name] = {"history": {k: [float(v) for v in values] for k, values in history.history.items()},
                   "epochs_seen": epochs, "iterations": int(model.optimizer.iterations.numpy()),
                   "evaluate": strategy.evaluate(model, X, Y, batch_size=64, return_dict=True, verbose=0),
                   "local_accuracy": local_accuracy(model, package),
                   "variables_on": sorted({v.value.device if name == "keras_3" else v.device
                                           for v in model.trainable_variables})}


class EveryBatch(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        pass


model = compiled(keras)
found["refusals"] = {
    "batch_hooks": refused(lambda: strategy.fit(model, X, Y, epochs=1, callbacks=[EveryBatch()], verbose=0)),
    "backup": refused(lambda: strategy.fit(model, X, Y, epochs=1, verbose=0, callbacks=[
        keras.callbacks.BackupAndRestore(str(OUTDIR / "backup"))])),
    "lambda_batch_hook": refused(lambda: strategy.fit(model, X, Y, epochs=1, verbose=0, callbacks=[
        keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: None)])),
    "tensorboard": refused(lambda: strategy.fit(model, X, Y, epochs=1, verbose=0, callbacks=[
        keras.callbacks.TensorBoard(str(OUTDIR / "tb"))])),
    "class_weight": refused(lambda: strategy.fit(model, X, Y, epochs=1, class_weight={0: 2.0}, verbose=0)),
    "batched_dataset": refused(lambda: strategy.fit(model, example.digits().batch(32), epochs=1, verbose=0)),
}
found["checkpoints"] = sorted(path.name for path in OUTDIR.glob("k3-*.weights.h5"))
(OUTDIR / "ps_keras3.json").write_text(json.dumps(found, indent=1, default=float))
print("RESULT", json.dumps({k: v for k, v in found.items() if k != "refusals"}, default=float), flush=True)
