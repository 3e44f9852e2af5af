"""tfdist.datasets: the digits the examples train on, shipped in the package (no TensorFlow)."""
from __future__ import annotations

import hashlib

import numpy as np

from tfdist.datasets import load_digits

#: SHA-256 of scikit-learn 1.9.1's ``load_digits()`` arrays (``images`` float64, ``target`` int64), taken
#: when the file was made from them: the shipped copy is the same data, in the same order.
SKLEARN_IMAGES_SHA256 = "20def7f70a702f0af9732fbba4375e147a7d54fe70d8c45569b8e7c1c7010c10"
SKLEARN_TARGET_SHA256 = "a3c91c262eddcf7ba8f0e37507c30284493c9b20412ffe4af30d536401f7ba21"


def test_the_digits_are_scikit_learns_digits():
    digits = load_digits()
    assert digits.images.shape == (1797, 8, 8) and digits.images.dtype == np.float64
    assert digits.target.shape == (1797,) and digits.target.dtype == np.int64
    assert digits.images.min() == 0 and digits.images.max() == 16
    assert np.bincount(digits.target).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert hashlib.sha256(digits.images.tobytes()).hexdigest() == SKLEARN_IMAGES_SHA256
    assert hashlib.sha256(digits.target.tobytes()).hexdigest() == SKLEARN_TARGET_SHA256


def test_each_call_returns_arrays_of_its_own():
    first, second = load_digits(), load_digits()
    first.images[0, 0, 0] = 99
    assert second.images[0, 0, 0] != 99
