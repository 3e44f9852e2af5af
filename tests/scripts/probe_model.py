"""An MLP for `tfdist advise --probe --model probe_model:build_model` (tests/multihost/test_advise_probe.py).

PARAMS is its parameter count, so the tests check what the probe reports against it.
"""
from __future__ import annotations

import tfdist  # noqa: F401  (before tensorflow: keeps tf.keras on tf-keras)

import tensorflow as tf

INPUTS, HIDDEN, CLASSES = 256, 1024, 10  # 1.3M parameters: a step is mostly compute
PARAMS = (INPUTS * HIDDEN + HIDDEN) + (HIDDEN * HIDDEN + HIDDEN) + (HIDDEN * CLASSES + CLASSES)


def build_model() -> tf.keras.Model:
    return tf.keras.Sequential([tf.keras.Input((INPUTS,)),
                                tf.keras.layers.Dense(HIDDEN, activation="relu"),
                                tf.keras.layers.Dense(HIDDEN, activation="relu"),
                                tf.keras.layers.Dense(CLASSES, activation="softmax")])


def build_without_input() -> tf.keras.Model:
    return tf.keras.Sequential([tf.keras.layers.Dense(HIDDEN), tf.keras.layers.Dense(CLASSES)])
