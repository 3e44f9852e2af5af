"""The memory arithmetic against real Keras (tf-keras and Keras 3, in process, imports TensorFlow): the
variables counted from a model as the probe lists them make ``model.count_params()``, and each optimizer
of OPTIMIZER_SLOTS creates that many slot variables of its variables' shapes."""
from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.slow  # imports TensorFlow

tf = pytest.importorskip("tensorflow")

import tfdist  # noqa: E402,F401  (first: keeps tf.keras on tf-keras)
from tfdist.advise.memory import KERAS3_SLOTS, OPTIMIZER_SLOTS, ModelMemory  # noqa: E402
from tfdist.probe.agent import variables_of  # noqa: E402


def _optimizers(K):
    o = K.optimizers
    return {"sgd": lambda: o.SGD(), "momentum": lambda: o.SGD(momentum=0.9), "adagrad": lambda: o.Adagrad(),
            "rmsprop": lambda: o.RMSprop(), "lion": lambda: o.Lion(), "adam": lambda: o.Adam(),
            "adamw": lambda: o.AdamW(), "adamax": lambda: o.Adamax(), "nadam": lambda: o.Nadam(),
            "ftrl": lambda: o.Ftrl(), "adadelta": lambda: o.Adadelta(), "amsgrad": lambda: o.Adam(amsgrad=True)}


def test_the_counts_and_slots_match_real_models_and_optimizers():
    import keras
    import tf_keras

    for K in (tf_keras, keras):
        inputs = K.Input((3,), dtype="int32")
        x = K.layers.Flatten()(K.layers.Embedding(500, 8)(inputs))
        model = K.Model(inputs, K.layers.Dense(1)(K.layers.Dense(16, activation="relu")(x)))
        listed = ModelMemory.from_shapes(variables_of(model), "adam", 2)
        assert listed.variable_bytes == 4 * model.count_params(), K.__name__
        assert max(v.rows for v in listed.variables) == 500  # the table's rows: what shards split
        assert set(_optimizers(K)) == set(OPTIMIZER_SLOTS)
        found = {}
        for name, make in _optimizers(K).items():
            optimizer = make()
            optimizer.build(model.trainable_variables)
            shaped = [v for v in optimizer.variables if len(v.shape)]  # scalars: iterations, learning rate
            found[name] = sum(math.prod(v.shape) for v in shaped) / model.count_params()
        want = dict(OPTIMIZER_SLOTS, **(KERAS3_SLOTS if K is keras else {}))
        assert found == want, K.__name__


def test_the_probe_feeds_ids_to_a_model_with_tables_and_lists_them():
    """A two-tower model with int64 id inputs: the probe's step feeds ids valid in every table (random
    floats would index below 0) and reports each Embedding layer as rows, width and ids per example."""
    from tfdist.probe.agent import compute

    found = compute("scripts.probe_model:build_two_tower", batch_size=8, steps=2, min_seconds=0.0, warmup=1,
                    windows=1)
    assert found["step_ms"] > 0
    assert found["embeddings"] == [[1000, 8, 1], [500, 8, 1], [600, 8, 3]]
    assert found["params"] == 1000 * 8 + 500 * 8 + 600 * 8 + 16 + 1
    assert found["powersgd_bytes_per_s"] is None  # no kernel PowerSGD would compress: nothing to time


def test_the_probe_times_powersgds_work_on_the_models_own_kernels():
    """The compute agent also times one compressed PowerSGD step of the model's kernels (issue 38: the
    advisor's compute term measured on the real shapes, not assumed)."""
    from tfdist.probe.agent import compute, time_powersgd

    found = compute("scripts.probe_model:build_model", batch_size=8, steps=2, min_seconds=0.0, warmup=1,
                    windows=1)
    rate = found["powersgd_bytes_per_s"]
    assert rate is not None and 1e6 < rate < 1e12, rate
    # a kernel too small to save anything at rank 4 is not timed
    assert time_powersgd([[8, 4], [3]], min_seconds=0.0, windows=1) is None
