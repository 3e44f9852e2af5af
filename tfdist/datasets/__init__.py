"""Data shipped with tfdist, so that the examples and the demo run without a download.

``load_digits()`` gives the 1,797 8x8 handwritten digits of the UCI "Optical Recognition of Handwritten
Digits" set (E. Alpaydin and C. Kaynak, 1998; CC BY 4.0), its test part, the same images scikit-learn
ships as ``sklearn.datasets.load_digits``. Stored here as ``digits.npz`` (uint8 pixels 0..16, 45 KB).

Layering: a leaf: it imports no other tfdist package.
"""
from __future__ import annotations

from importlib import resources
from typing import NamedTuple

import numpy as np


class Digits(NamedTuple):
    """The digits, under scikit-learn's attribute names."""

    images: np.ndarray  #: (1797, 8, 8) float64, pixels 0..16
    target: np.ndarray  #: (1797,) int64, classes 0..9


def load_digits() -> Digits:
    """The 1,797 handwritten digits, in the order scikit-learn gives them."""
    with resources.files(__name__).joinpath("digits.npz").open("rb") as file, np.load(file) as data:
        return Digits(images=data["images"].astype(np.float64), target=data["labels"].astype(np.int64))
