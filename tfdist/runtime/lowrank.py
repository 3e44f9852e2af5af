"""Which gradients PowerSGD compresses and how many numbers a step sends (issue 38), without
TensorFlow: :mod:`tfdist.runtime.powersgd` compresses by these rules, and the advisor
(:mod:`tfdist.advise.cost`) counts the bytes on the wire by them.

A gradient of shape ``(d1, ..., dk)`` with k >= 2 is seen as the matrix ``(d1 ... d(k-1)) x dk`` (a conv
kernel's output channels are its columns); it is compressed when its two rank-r factors hold at most
1 / ``min_compression_rate`` of its numbers. Vectors and scalars never are.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from tfdist.errors import ArgumentValueError, with_fix

#: PyTorch's default: compress only where the factors are at most half of the matrix.
DEFAULT_MIN_COMPRESSION_RATE = 2.0
DEFAULT_RANK = 4
#: Plain allreduce steps before compression starts (PyTorch's default is 1,000 for long runs; tfdist's
#: runs are epochs of hundreds of steps, and the warm-up is an option).
DEFAULT_START_ITER = 10


@dataclasses.dataclass(frozen=True)
class PowerSGDSettings:
    """``rank``: columns of the factors; ``start_iter``: plain allreduce steps first;
    ``min_compression_rate``: compress a matrix only when ``m n >= rate (m + n) rank``; ``seed``: of
    the first ``Q`` (the same on every rank)."""

    rank: int = DEFAULT_RANK
    start_iter: int = DEFAULT_START_ITER
    min_compression_rate: float = DEFAULT_MIN_COMPRESSION_RATE
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ArgumentValueError(with_fix(f"`rank` must be an integer >= 1, got {self.rank!r}",
                                              f"leave it at {DEFAULT_RANK}, or pass e.g. rank=8 (more exact, more bytes)"))
        if isinstance(self.start_iter, bool) or not isinstance(self.start_iter, int) or self.start_iter < 0:
            raise ArgumentValueError(with_fix(f"`start_iter` must be an integer >= 0, got {self.start_iter!r}",
                                              f"leave it at {DEFAULT_START_ITER}, or 0 to compress from the first step"))
        rate = self.min_compression_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0:
            raise ArgumentValueError(with_fix(f"`min_compression_rate` must be a number >= 0, got {rate!r}",
                                              f"leave it at {DEFAULT_MIN_COMPRESSION_RATE:g} (0 compresses every "
                                              "matrix, even where the factors are larger)"))


def matrix_shape(shape: Sequence[int]) -> tuple[int, int] | None:
    """The 2-D view PowerSGD takes of a gradient of ``shape``: ``(prod(shape[:-1]), shape[-1])``; None
    for a scalar or a vector."""
    dims = [int(d) for d in shape]
    if len(dims) < 2:
        return None
    return math.prod(dims[:-1]), dims[-1]


def compressed(shape: Sequence[int], settings: PowerSGDSettings) -> bool:
    """Whether a gradient of ``shape`` goes through the low-rank path: a matrix whose two factors hold at
    most 1 / ``min_compression_rate`` of its numbers."""
    matrix = matrix_shape(shape)
    if matrix is None:
        return False
    m, n = matrix
    return m * n >= settings.min_compression_rate * (m + n) * min(settings.rank, m, n)


def wire_numbers(shapes: Sequence[Sequence[int]], settings: PowerSGDSettings) -> int:
    """Numbers one rank sends through the allreduces of one compressed step: ``(m + n) r`` per compressed
    matrix (P and Q), every number of the rest."""
    total = 0
    for shape in shapes:
        if compressed(shape, settings):
            m, n = matrix_shape(shape)
            total += (m + n) * min(settings.rank, m, n)
        else:
            total += math.prod(int(d) for d in shape)
    return total



__all__ = ["DEFAULT_MIN_COMPRESSION_RATE", "DEFAULT_RANK", "DEFAULT_START_ITER", "PowerSGDSettings", "compressed",
           "matrix_shape", "wire_numbers"]
