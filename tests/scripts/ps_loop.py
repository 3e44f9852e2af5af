"""The custom-loop API on a real parameter-server cluster, for tests/strategies/test_loop_parameter_server.py.

    tfdist launch --workers 2 --ps 1 -- python ps_loop.py OUTDIR

Every task runs this script; the ps and the workers serve inside make_strategy (each records its pid in
OUTDIR/pids/<type>-<index> first). The chief, with every variable split into 2 shards:

1. ``strategy.fit`` of examples/custom_loop.py's model on the digits (the loop's learning rate, batch and
   epochs), as the yardstick of the loop's accuracy;
1b. a short loop of the same model that drives ``strategy.callbacks``: tfdist's figures per worker and a
   TensorBoard run (OUTDIR/runs);
2. examples/custom_loop.py's ``train``, unchanged, with a checkpoint every epoch; after the epoch
   ``KILL_AFTER_EPOCH`` it kills worker-1 with SIGKILL, and the loop goes on: the coordinator runs the
   steps worker-1 took on worker-0;
3. a rerun of ``train`` on a model with other weights, which restores the last checkpoint (no epoch left);
4. what the loop refuses under parameter servers (a Keras 3 model whose variables are sharded, in a loop
   and in fit, a LossScaleOptimizer, a model built outside ``scope()``), by message.

It writes OUTDIR/loop.json and the loop's weights, OUTDIR/loop-weights.npz (the test restores the checkpoint
into a ``single`` model and compares).
"""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import tfdist  # before tensorflow

import numpy as np
import tf_keras

from loop_example import digits_arrays, load_example, logged_loop, refused
from tfdist.callbacks import TensorBoardRun

OUTDIR = Path(sys.argv[1])
EPOCHS, BATCH, LR, KILL_AFTER_EPOCH = 4, 32, 0.1, 2
task = json.loads(os.environ["TF_CONFIG"])["task"]
(OUTDIR / "pids").mkdir(parents=True, exist_ok=True)
(OUTDIR / "pids" / f"{task['type']}-{task['index']}").write_text(str(os.getpid()))

strategy = tfdist.make_strategy("auto", shards=2)  # ps and worker tasks serve here and never return

example = load_example()
X, Y = digits_arrays()


def merged(model) -> list[np.ndarray]:
    """``model``'s weights (Dense layers), each variable's shards put together (split along the first axis;
    tf-keras' ``get_weights`` lists the shards)."""
    return [np.concatenate([np.asarray(s) for s in getattr(v, "variables", [v])], axis=0)
            for layer in model.layers for v in (layer.kernel, layer.bias)]


def accuracy(model) -> float:
    """The digits accuracy of ``model``'s weights, in a plain local copy."""
    local = example.build_model(tf_keras)
    local.set_weights(merged(model))
    return float(np.mean(np.argmax(local.predict(X, batch_size=512, verbose=0), axis=1) == Y))


def kill_worker_1(line: str) -> None:
    """``train``'s per-epoch line (after that epoch's checkpoint): after KILL_AFTER_EPOCH, worker-1 goes."""
    print(line, flush=True)
    if line.startswith(f"epoch {KILL_AFTER_EPOCH}/"):
        pid = int((OUTDIR / "pids" / "worker-1").read_text())
        print("killing worker-1", flush=True)
        os.kill(pid, signal.SIGKILL)


result: dict = {"kind": strategy.kind, "replicas": strategy.num_replicas_in_sync, "workers": strategy.num_workers}

# 1. fit, the yardstick
with strategy.scope():
    fitted = example.build_model(tf_keras)
    fitted.compile(optimizer=strategy.optimizer(tf_keras.optimizers.SGD(LR)),
                   loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
strategy.fit(fitted, X, Y, batch_size=BATCH, epochs=EPOCHS, steps_per_epoch=len(X) // BATCH, verbose=0)
result["fit_accuracy"] = accuracy(fitted)

# 1b. a short loop driving tfdist's figures (per worker too) and a TensorBoard run through strategy.callbacks
result["logged"] = logged_loop(strategy, tf_keras, 2, BATCH, LR, [
    *strategy.metrics(BATCH, show_workers=True), TensorBoardRun(str(OUTDIR / "runs"), strategy=strategy, batch_size=BATCH)])

# 2. the example's loop, worker-1 killed after epoch KILL_AFTER_EPOCH
ckpt = OUTDIR / "ckpt"
model, history, step, start = example.train(strategy, tf_keras, EPOCHS, BATCH, LR, str(ckpt), log=kill_worker_1)
optimizer = strategy._loop_state.optimizer
result.update(start=start, losses=[h["loss"] for h in history], train_accuracy=[h["accuracy"] for h in history],
              loop_accuracy=accuracy(model), iterations=int(optimizer.iterations.numpy()),
              steps_per_epoch=len(X) // BATCH, tracing=step.experimental_get_tracing_count(),
              kernel_shards=len(getattr(model.layers[0].kernel, "variables", [None])),
              checkpoints=sorted(p.name for p in ckpt.glob("ckpt-*.index")))
weights = merged(model)
np.savez(OUTDIR / "loop-weights.npz", *weights)

# 3. a rerun restores the last checkpoint into a model with other weights
example_build = example.build_model
example.build_model = lambda keras, seed=0: example_build(keras, seed=1)
again, history2, _, start2 = example.train(strategy, tf_keras, EPOCHS, BATCH, LR, str(ckpt), log=print)
example.build_model = example_build
result.update(rerun_start=start2, rerun_epochs=len(history2),
              rerun_iterations=int(strategy._loop_state.optimizer.iterations.numpy()),
              rerun_max_abs_diff=max(float(np.max(np.abs(a - b))) for a, b in zip(merged(again), weights)))

# 4. what the loop refuses here
import keras  # noqa: E402  (Keras 3)

with strategy.scope():
    plain = example.build_model(tf_keras)
    sgd = strategy.optimizer(tf_keras.optimizers.SGD(LR))
    sharded_keras_3 = example.build_model(keras)  # every variable in 2 shards, as the strategy says
    keras_3_sgd = strategy.optimizer(keras.optimizers.SGD(LR))
    sharded_keras_3.compile(optimizer=keras_3_sgd, loss="sparse_categorical_crossentropy")
# tf-keras refuses to build a LossScaleOptimizer in a parameter-server scope at all; made outside it
scaled = strategy.optimizer(tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(LR)))
outside = example.build_model(tf_keras)
result["refusals"] = {
    "keras_3_shards": refused(lambda: strategy.setup(sharded_keras_3, keras_3_sgd)),
    "keras_3_fit": refused(lambda: strategy.fit(sharded_keras_3, X, Y, epochs=1, steps_per_epoch=2)),
    "loss_scale": refused(lambda: strategy.setup(plain, scaled)),
    "outside_scope": refused(lambda: strategy.setup(outside, sgd)),
}
(OUTDIR / "loop.json").write_text(json.dumps(result, indent=1))
print("RESULT", json.dumps({k: v for k, v in result.items() if k != "refusals"}), flush=True)
