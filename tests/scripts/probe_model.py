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


def build_two_tower() -> tf.keras.Model:
    """A two-input retrieval model (user and item ids, int64) with two tables: what the probe must feed
    ids to and list as Embedding layers (1,000 x 8 and 500 x 8, one lookup each) and a bag of 3 ids."""
    user, item = tf.keras.Input((), dtype="int64"), tf.keras.Input((), dtype="int64")
    tags = tf.keras.Input((3,), dtype="int64")
    u = tf.keras.layers.Embedding(1000, 8)(user)
    i = tf.keras.layers.Embedding(500, 8)(item)
    t = tf.keras.layers.GlobalAveragePooling1D()(tf.keras.layers.Embedding(600, 8)(tags))
    score = tf.keras.layers.Dense(1)(tf.keras.layers.Concatenate()([u * i, t]))
    return tf.keras.Model([user, item, tags], score)
