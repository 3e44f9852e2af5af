"""Keras 3 on a real MultiWorkerMirrored job, for tests/strategies/test_keras3_multi_worker.py.

    tfdist launch --backend multi_worker_mirrored --workers 2 -- python mwm_keras3.py OUTDIR

One strategy serves every phase (a second MultiWorkerMirroredStrategy in the same workers clashes):

1. ``strategy.fit`` of examples/custom_loop.py's model with Keras 3 on the digits, 5 epochs, with a
   ``TensorBoardRun``, then ``strategy.evaluate``; then the same fit with Keras 3's ``BackupAndRestore``,
   stopped after epoch 2, and resumed into a model with other weights;
2. the same with tf-keras from the same initial weights: the yardstick of 1.'s accuracy;
3. examples/custom_loop.py's ``train`` with Keras 3 (a loop), 2 epochs;
4. ``strategy.export`` of 1.'s model (the chief writes, every worker takes part).

Every worker writes OUTDIR/worker-<rank>.json and OUTDIR/loop-<rank>.npz (the loop's weights).
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import tfdist  # before tensorflow

import keras
import numpy as np
import tf_keras

from tfdist.callbacks import TensorBoardRun
from loop_example import digits_arrays, load_example

OUTDIR = Path(sys.argv[1])
EPOCHS, BATCH, LR = 5, 32, 0.1
strategy = tfdist.make_strategy("auto")  # TF_CONFIG with workers only: multi_worker_mirrored

example = load_example()
X, Y = digits_arrays()


def accuracy(package, weights) -> float:
    """The digits accuracy of ``weights`` in a plain local model of ``package`` (outside the strategy)."""
    local = example.build_model(package)
    local.set_weights(weights)
    return float(np.mean(np.argmax(local.predict(X, batch_size=512, verbose=0), axis=1) == Y))


def digest(weights) -> str:
    return hashlib.sha256(b"".join(np.asarray(w, "float32").tobytes() for w in weights)).hexdigest()


def fit(package, logdir: Path | None) -> tuple[object, dict, list]:
    with strategy.scope():
        model = example.build_model(package)  # seed 0: the same initial weights in both Kerases
        model.compile(optimizer=strategy.optimizer(package.optimizers.SGD(LR)),
                      loss=package.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    callbacks = []
    if logdir is not None:
        callbacks.append(TensorBoardRun(str(logdir), strategy=strategy, batch_size=BATCH))
    history = strategy.fit(model, X, Y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
                           callbacks=callbacks)
    evaluation = strategy.evaluate(model, X, Y, batch_size=BATCH, verbose=0, return_dict=True)
    return model, history.history, evaluation


result: dict = {"kind": strategy.kind, "rank": strategy.rank, "replicas": strategy.num_replicas_in_sync}

# 1. Keras 3's fit, with tfdist's TensorBoard run (Keras 3's backup refused first)
model3, history3, evaluation3 = fit(keras, OUTDIR / "runs")
weights3 = [np.asarray(w) for w in model3.get_weights()]
result.update(keras_3={"history": history3, "evaluation": {k: float(v) for k, v in evaluation3.items()},
                       "accuracy": accuracy(keras, weights3), "digest": digest(weights3)})


# 1b. Keras 3's BackupAndRestore: a fit stopped after epoch 2 on every worker, and a model with other
# weights resumed from the chief's backup
class StopAfterSecondEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1:
            raise RuntimeError("stopped after epoch 2")


def backed_up_fit(seed: int, stop: bool) -> tuple[object, dict]:
    with strategy.scope():
        model = example.build_model(keras, seed=seed)
        model.compile(optimizer=strategy.optimizer(keras.optimizers.SGD(LR)),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    callbacks = [keras.callbacks.BackupAndRestore(str(OUTDIR / "backup")), *([StopAfterSecondEpoch()] if stop else [])]
    history = strategy.fit(model, X, Y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=callbacks)
    return model, history.history


try:
    backed_up_fit(seed=0, stop=True)
except RuntimeError as stopped:
    result["stopped"] = str(stopped)
result["backup_after_stop"] = sorted(p.name for p in (OUTDIR / "backup").iterdir())
resumed, resumed_history = backed_up_fit(seed=1, stop=False)
result["resumed"] = {"epochs": len(resumed_history["loss"]), "loss": resumed_history["loss"],
                     "max_abs_diff": max(float(np.max(np.abs(np.asarray(a) - b)))
                                         for a, b in zip(resumed.get_weights(), weights3)),
                     "backup_left": (OUTDIR / "backup").exists()}

# 2. tf-keras' fit, the yardstick
model2, history2, evaluation2 = fit(tf_keras, None)
result["tf_keras"] = {"history": history2, "accuracy": accuracy(tf_keras, model2.get_weights())}

# 3. the example's loop with Keras 3
loop_model, loop_history, step, _ = example.train(strategy, keras, 2, BATCH, LR, log=lambda line: None)
np.savez(OUTDIR / f"loop-{strategy.rank}.npz", *[np.asarray(w) for w in loop_model.get_weights()])
result["loop"] = {"history": loop_history, "tracing": step.experimental_get_tracing_count()}

# 4. export of the Keras 3 model
result["export"] = strategy.export(model3, str(OUTDIR / "exports" / "digits" / "1"))

(OUTDIR / f"worker-{strategy.rank}.json").write_text(json.dumps(result, indent=1, default=float))
print("RESULT", json.dumps({"rank": strategy.rank, "keras_3": result["keras_3"]["accuracy"],
                            "tf_keras": result["tf_keras"]["accuracy"]}), flush=True)
