"""PowerSGD: low-rank gradient compression with error feedback (issue 38), on any mean-allreduce.

Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for Distributed
Optimization" (NeurIPS 2019), as PyTorch ships it for DDP (``powerSGD_hook``: error feedback, warm
start, ``start_powerSGD_iter``, ``min_compression_rate``). Per gradient matrix ``G`` (m x n; a conv
kernel seen as ``prod(shape[:-1]) x shape[-1]``), each step on each rank:

1. ``M = G + E``: the rank's gradient plus its error feedback (what compression lost last time);
2. ``P = M Q``, allreduced to its mean (m x r numbers), then orthonormalised (QR);
3. ``Q = M^T P``, allreduced to its mean (n x r numbers): the next step starts from it (warm start);
4. the gradient applied is ``P Q^T``, the same on every rank; ``E = M - P Q^T`` stays on the rank.

So a step moves (m + n) r numbers a matrix instead of m n. Vectors (biases, norms) and matrices where
the factors would not save ``min_compression_rate`` go through the plain mean-allreduce, as do all
gradients for the first ``start_iter`` steps (plain SGD's early steps are the sensitive ones). At a
rank of at least ``min(m, n)`` the result is the plain mean exactly: ``P`` then spans the mean's
columns and ``P P^T`` projects onto them.

Which gradients are compressed, and how many numbers a step sends, is :mod:`tfdist.runtime.lowrank`
(no TensorFlow: the advisor counts the same bytes). The module is written against ``allreduce_mean(list of tensors) -> list``, so Horovod's grouped
allreduce and a test's simulated ranks both drive it; :meth:`PowerSGD.reduce` runs the three
stages above in one step. The state (``E`` and ``Q`` per matrix, the step count) is a ``tf.Module``
of ``tf.Variable``s: attached to the optimizer, ``tf.train.Checkpoint`` and the backups keep it. Each
rank's errors differ, but only their mean matters (:meth:`PowerSGD.synchronize`): made equal before
a checkpoint, the chief's copy is the whole state, and a resumed run continues where it stopped.

Under loss scaling (``mixed_float16``) the gradients come scaled by the loss-scale optimizer's current
scale ``S``, which it removes after the allreduce. ``reduce(..., scale=S)`` compresses ``G / S``, so
the errors are in the gradient's own units whatever the scale of the step that left them, and returns
``S P Q^T``. A step whose result is not finite (an overflow on any rank reaches every rank through the
means) leaves the errors and factors as they were: the loss-scale optimizer skips that step on every
rank and lowers the scale, and the next step starts from the state the last applied one left.
Importing this module imports TensorFlow.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from tfdist.errors import ArgumentValueError, with_fix
from tfdist.runtime.lowrank import PowerSGDSettings, compressed, matrix_shape

class PowerSGD(tf.Module):
    """The compressor and its state for the variables of ``shapes`` (one entry per gradient, in the
    order ``reduce`` gets them). ``errors[i]`` and ``factors[i]`` (``Q``) exist for the compressed ones.

    ``per_worker=True`` makes the state inside a ``tf.distribute`` strategy's scope (one replica per
    worker, as :mod:`tfdist.runtime.collective_powersgd` runs it under MultiWorkerMirroredStrategy):
    every variable is then ``ON_READ`` (a ``SyncOnReadVariable``), so the strategy never makes the
    workers' copies equal, and the compressor reads and writes this worker's own copy. Read across
    the workers (a checkpoint's save), the errors are their MEAN (the one thing later steps depend
    on), the factors and the step count, equal everywhere, the first replica's.
    """

    def __init__(self, shapes: Sequence[Sequence[int]], settings: PowerSGDSettings = PowerSGDSettings(),
                 dtype: Any = tf.float32, name: str = "powersgd", *, per_worker: bool = False) -> None:
        super().__init__(name=name)
        self.settings = settings
        self.shapes = [tuple(int(d) for d in shape) for shape in shapes]
        self.per_worker = per_worker
        self.step = self._variable(tf.constant(0, tf.int64), "step", tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.errors: list[tf.Variable] = []
        self.factors: list[tf.Variable] = []
        #: For each gradient, the index of its state in ``errors``/``factors``, or None (plain allreduce).
        self.slots: list[int | None] = []
        for index, shape in enumerate(self.shapes):
            if not compressed(shape, settings):
                self.slots.append(None)
                continue
            m, n = matrix_shape(shape)
            rank = min(settings.rank, m, n)
            self.slots.append(len(self.errors))
            self.errors.append(self._variable(tf.zeros((m, n), dtype), f"error_{index}",
                                              tf.VariableAggregation.MEAN))
            first_q = tf.random.stateless_normal((n, rank), seed=[settings.seed, index], dtype=dtype)  # every rank's
            self.factors.append(self._variable(first_q, f"q_{index}", tf.VariableAggregation.ONLY_FIRST_REPLICA))

    def _variable(self, initial: tf.Tensor, name: str, aggregation: tf.VariableAggregation) -> tf.Variable:
        if not self.per_worker:
            return tf.Variable(initial, trainable=False, name=name)
        return tf.Variable(initial, trainable=False, name=name, synchronization=tf.VariableSynchronization.ON_READ,
                           aggregation=aggregation)

    def local(self, variable: tf.Variable) -> tf.Variable:
        """The copy of ``variable`` (one of the state's) that this rank reads and writes: itself, or with
        ``per_worker`` this worker's own (its strategy's one local replica)."""
        if not self.per_worker:
            return variable
        copies = tf.distribute.get_strategy().experimental_local_results(variable)
        if len(copies) != 1:
            raise ArgumentValueError(with_fix(
                f"PowerSGD's per-worker state has {len(copies)} copies in this worker (one per local replica), "
                "and it keeps one", "run one replica per worker (one GPU, or the CPU, per worker process)"))
        return copies[0]

    # --- one step, in stages: a test drives them with simulated ranks -----------------------------
    def first(self, grads: Sequence[tf.Tensor], scale: Any = None) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
        """``(M, P)`` of each compressed gradient: the gradient (as a matrix, divided by the loss
        ``scale`` when given) plus its error, and ``M Q``."""
        ms, ps = [], []
        for grad, slot, shape in zip(grads, self.slots, self.shapes):
            if slot is None:
                continue
            error = self.local(self.errors[slot])
            matrix = tf.reshape(tf.cast(grad, error.dtype), matrix_shape(shape))
            m = (matrix if scale is None else matrix / tf.cast(scale, error.dtype)) + error
            ms.append(m)
            ps.append(tf.matmul(m, self.local(self.factors[slot])))
        return ms, ps

    @staticmethod
    def second(ms: Sequence[tf.Tensor], mean_ps: Sequence[tf.Tensor]) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
        """``(P, Q)``: each mean ``P`` orthonormalised, and ``M^T P`` (to be averaged)."""
        ortho = [tf.linalg.qr(p)[0] for p in mean_ps]
        return ortho, [tf.matmul(m, p, transpose_a=True) for m, p in zip(ms, ortho)]

    def last(self, grads: Sequence[tf.Tensor], ms: Sequence[tf.Tensor], ps: Sequence[tf.Tensor],
             mean_qs: Sequence[tf.Tensor], plain: Sequence[tf.Tensor], scale: Any = None) -> list[tf.Tensor]:
        """The gradients to apply: ``P Q^T`` in each compressed one's shape (times the loss ``scale``
        when given), ``plain`` (the mean-allreduced rest, in order) elsewhere. The errors and factors
        are updated for the next step when every result is finite (the same answer on every rank: it
        reads only the means), else kept."""
        approxes = [tf.matmul(p, q, transpose_b=True) for p, q in zip(ps, mean_qs)]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(value)) for value in [*approxes, *plain]])
        out, low_rank, rest = [], iter(zip(ms, approxes, mean_qs)), iter(plain)
        for grad, slot, shape in zip(grads, self.slots, self.shapes):
            if slot is None:
                out.append(next(rest))
                continue
            m, approx, q = next(low_rank)
            error, factor = self.local(self.errors[slot]), self.local(self.factors[slot])
            error.assign(tf.where(finite, m - approx, error))
            factor.assign(tf.where(finite, q, factor))
            value = approx if scale is None else approx * tf.cast(scale, approx.dtype)
            out.append(tf.cast(tf.reshape(value, shape), grad.dtype))
        return out

    def reduce(self, grads: Sequence[tf.Tensor], allreduce_mean: Callable[[list], list],
               scale: Any = None) -> list[tf.Tensor]:
        """The mean of ``grads`` over the ranks, compressed once ``step`` reached ``start_iter`` (plain
        before); ``allreduce_mean`` averages a list of tensors over the ranks; ``scale``: the loss scale
        the gradients carry (see the module docstring), or None. Counts the step."""
        grads = [tf.convert_to_tensor(g) for g in grads]
        if len(grads) != len(self.shapes):
            raise ArgumentValueError(with_fix(
                f"PowerSGD was built for {len(self.shapes)} gradients and got {len(grads)}",
                "build the model before the first step, and train the same variables every step"))
        step = self.local(self.step)
        step.assign_add(1)
        if not self.errors:
            return allreduce_mean(grads)
        return tf.cond(step > self.settings.start_iter, lambda: self._compressed(grads, allreduce_mean, scale),
                       lambda: allreduce_mean(grads))

    def synchronize(self, allreduce_mean: Callable[[list], list]) -> None:
        """Give every rank the mean of the ranks' errors. The steps depend on the errors only through
        their mean (``P``, ``Q`` and the applied gradient are linear in the mean of ``M``), so this
        changes no later step, and afterwards the state is the same on every rank: the chief's
        checkpoint holds all of it, and a run resumed from it continues exactly. It costs one plain
        allreduce of the compressed matrices (``strategy.fit`` does it at each epoch's end)."""
        if self.errors:
            errors = [self.local(e) for e in self.errors]
            for error, mean in zip(errors, allreduce_mean([e.read_value() for e in errors])):
                error.assign(mean)

    def _compressed(self, grads: list[tf.Tensor], allreduce_mean: Callable[[list], list],
                    scale: Any = None) -> list[tf.Tensor]:
        ms, ps = self.first(grads, scale)
        plain = [g for g, slot in zip(grads, self.slots) if slot is None]
        mean_ps = allreduce_mean(list(ps))
        ortho, qs = self.second(ms, mean_ps)
        reduced = allreduce_mean([*qs, *plain])
        return self.last(grads, ms, ortho, reduced[:len(qs)], reduced[len(qs):], scale)


__all__ = ["PowerSGD"]
