"""Mixed precision and gradient accumulation under horovodrun, for tests/strategies/test_mixed_precision.py
(which holds the accumulation tests of the job too): one job runs every scenario.

    python hvd_precision.py OUTDIR
    python hvd_precision.py ROOT --kerases KERAS [KERAS ...]     (KERAS: tf_keras or keras_3)

Each rank writes OUTDIR/rank<N>.json: per scenario the final weights, the loss scale (if any) and
the optimizer's class; the ranks share out the one-process references (the same model and rates on
the 2-times batch, or the 2·k-times batch for accumulation), added to the scenario on the rank that
trained it. Rank 0 writes the Horovod timeline of the accumulation run to
OUTDIR/accumulation-timeline.json. TFDIST_TEST_KERAS picks ``tf_keras``
(default) or ``keras_3``. ``--kerases`` runs it on ROOT/<KERAS> for each KERAS in turn in the same
job, this script again as its own ``__main__`` with TFDIST_TEST_KERAS set to KERAS.
"""
from __future__ import annotations

import json
import os
import sys

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np
import tensorflow as tf

FLAVOUR = os.environ.get("TFDIST_TEST_KERAS", "tf_keras")
if FLAVOUR == "keras_3":
    import keras as K
else:
    import tf_keras as K

if len(sys.argv) > 2:
    if sys.argv[2] != "--kerases" or len(sys.argv) < 4 or not set(sys.argv[3:]) <= {"tf_keras", "keras_3"}:
        raise SystemExit(f"usage: hvd_precision.py ROOT --kerases KERAS [KERAS ...], got {sys.argv[1:]}")
    import runpy

    root, kerases = sys.argv[1], sys.argv[3:]
    for keras in kerases:
        os.makedirs(os.path.join(root, keras), exist_ok=True)
        os.environ["TFDIST_TEST_KERAS"] = keras
        sys.argv = [os.path.abspath(__file__), os.path.join(root, keras)]
        runpy.run_path(sys.argv[0], run_name="__main__")
    sys.exit(0)
OUTDIR = sys.argv[1]
os.environ["HOROVOD_TIMELINE"] = "DYNAMIC"  # read at hvd.init(): lets hvd.start_timeline record one run
LR, TINY = 0.05, 1e-6  # TINY: gradients below float16's smallest normal (6e-5), as in real fp16 nets
ROWS, BATCH, EPOCHS = 128, 16, 2
OUTLIER_ROW = 5  # odd: rank 1's shard (strided), its first batch; overflows float16 when loss-scaled


def data(outlier: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1)) + 0.1).astype("float32")
    if outlier:
        y[OUTLIER_ROW] = 1e9
    return x, y


def tiny_mse(y_true, y_pred):
    """Mean squared error times TINY: every gradient is about 1e-7, lost in float16 unless scaled."""
    return TINY * tf.reduce_mean(tf.square(tf.cast(y_true, tf.float32) - tf.cast(y_pred, tf.float32)), axis=-1)


def build_model(name: str) -> K.Model:
    """The same weights every time; layers named after ``name``, since Horovod's broadcast names its
    tensors by variable, and rank 0's reference models would otherwise shift the automatic names."""
    K.utils.set_random_seed(1)
    return K.Sequential([K.Input((8,)), K.layers.Dense(16, activation="tanh", name=f"{name}_hidden"),
                         K.layers.Dense(1, dtype="float32", name=f"{name}_out")],  # float32 outputs, as advised
                        name=name)


def weights(model: K.Model) -> list:
    return [np.asarray(w, dtype="float64").tolist() for w in model.get_weights()]


def loss_scale(optimizer) -> float | None:
    for name in ("dynamic_scale", "loss_scale"):  # Keras 3, tf-keras
        value = getattr(optimizer, name, None)
        if value is not None:
            return float(np.asarray(value))
    return None


def loss_scale_optimizer(optimizer):
    return K.mixed_precision.LossScaleOptimizer(optimizer) if FLAVOUR == "tf_keras" else \
        K.optimizers.LossScaleOptimizer(optimizer)


def scenario(name: str, policy: str, *, lr: float, loss, outlier: bool, user_wrapped: bool = False,
             micro_steps: int = 1, timeline: str | None = None, **options) -> dict | None:
    """Train under ``policy`` with 2 ranks; one of them trains the one-process reference at the end."""
    if ONLY and name not in ONLY.split(","):
        return None
    K.mixed_precision.set_global_policy(policy)
    try:
        own = micro_steps > 1 and FLAVOUR == "keras_3" and not outlier  # Keras 3's own accumulation setting
        strategy = tfdist.make_strategy("horovod", scale_lr=False, backward_passes_per_step=1 if own else micro_steps,
                                        **options)
        x, y = data(outlier)
        with strategy.scope():
            model = build_model(name)
            optimizer = K.optimizers.SGD(lr, **({"gradient_accumulation_steps": micro_steps} if own else {}))
            optimizer = strategy.optimizer(loss_scale_optimizer(optimizer) if user_wrapped else optimizer)
            model.compile(optimizer=optimizer, loss=loss)
        initial = weights(model)  # the same on every rank (one seed)
        if timeline:
            import horovod.tensorflow as hvd

            hvd.start_timeline(timeline)
        strategy.fit(model, x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
        if timeline:
            hvd.stop_timeline()
        result = {"weights": weights(model), "initial": initial, "loss_scale": loss_scale(model.optimizer),
                  "optimizer": type(model.optimizer).__name__,
                  "iterations": int(np.asarray(model.optimizer.iterations))}
        SCENARIOS.append(name)
        if strategy.rank == len(SCENARIOS) % strategy.size:  # the ranks share them; after all distributed
            REFERENCES.append((name, policy, lr, loss, outlier, micro_steps, result))  # runs, so models match
        print(f"hvd_precision: {name} done on rank {strategy.rank}", flush=True)
        return result
    finally:
        K.mixed_precision.set_global_policy("float32")


def reference(name: str, policy: str, lr: float, loss, outlier: bool, micro_steps: int, result: dict) -> None:
    """One process, the same model and rate, the ``2 * micro_steps``-times batch."""
    K.mixed_precision.set_global_policy(policy)
    try:
        model = build_model(f"{name}_reference")
        model.compile(optimizer=K.optimizers.SGD(lr), loss=loss)
        model.fit(*data(outlier), batch_size=2 * micro_steps * BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
        result["reference"] = weights(model)
        result["reference_loss_scale"] = loss_scale(model.optimizer)
    finally:
        K.mixed_precision.set_global_policy("float32")


REFERENCES: list[tuple] = []
SCENARIOS: list[str] = []
rank = int(os.environ.get("HOROVOD_RANK", "0"))
ONLY = os.environ.get("HVD_PRECISION_ONLY")
results = {
    # float16: loss scaling with the allreduce; rank 1 alone overflows in its first batch of each epoch
    "float16": scenario("float16", "mixed_float16", lr=LR / TINY, loss=tiny_mse, outlier=True),
    # the user's own LossScaleOptimizer, and float16 gradients on the wire
    "float16_fp16": scenario("float16_fp16", "mixed_float16", lr=LR / TINY, loss=tiny_mse, outlier=True,
                             user_wrapped=True, compression="fp16"),
    "bfloat16": scenario("bfloat16", "mixed_bfloat16", lr=LR, loss="mse", outlier=False),
    "bfloat16_fp16": scenario("bfloat16_fp16", "mixed_bfloat16", lr=LR, loss="mse", outlier=False,
                              compression="fp16"),
    # accumulation: 2 micro-steps per update, gradients allreduced once per update (Keras 3: the
    # optimizer's own gradient_accumulation_steps=2; tf-keras: Horovod's backward_passes_per_step=2)
    "accumulation": scenario("accumulation", "float32", lr=LR, loss="mse", outlier=False, micro_steps=2,
                             timeline=os.path.join(OUTDIR, "accumulation-timeline.json")),
}
if FLAVOUR == "keras_3":  # Keras 3 only: backward_passes_per_step=2 inside a LossScaleOptimizer
    results["float16_accumulation"] = scenario("float16_accumulation", "mixed_float16", lr=LR, loss="mse",
                                               outlier=True, micro_steps=2)
for args in REFERENCES:
    reference(*args)
with open(os.path.join(OUTDIR, f"rank{rank}.json"), "w") as f:
    json.dump({"keras": FLAVOUR, "scenarios": results}, f)
