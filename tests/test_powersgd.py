"""PowerSGD's compressor (tfdist/runtime/powersgd.py, issue 38) against a NumPy reference of the
algorithm (Vogels et al. 2019, as PyTorch's powerSGD_hook runs it), on simulated ranks: each rank a
thread running the real ``PowerSGD.reduce``, the mean-allreduce a barrier between them."""
from __future__ import annotations

import threading

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tfdist.errors import TfdistError  # noqa: E402
from tfdist.runtime.lowrank import PowerSGDSettings, compressed, matrix_shape, wire_numbers  # noqa: E402
from tfdist.runtime.powersgd import PowerSGD  # noqa: E402


def run_ranks(grads_per_rank: list[list[list[np.ndarray]]], settings: PowerSGDSettings,
              shapes: list[tuple[int, ...]], after_step=None,
              scales: list[float] | None = None) -> tuple[list[list[list[np.ndarray]]], list[PowerSGD]]:
    """Each rank (a thread) reduces its gradients of every step with its own ``PowerSGD``; the
    allreduce is the mean over the ranks' lists; ``after_step(rank, step, compressor, allreduce_mean)``
    runs on each rank after each step; ``scales``: each step's loss scale, by which the gradients come
    multiplied (as a loss-scale optimizer hands them over). What each rank got back, per step, and the
    compressors."""
    ranks = len(grads_per_rank)
    barrier = threading.Barrier(ranks)
    posted: list[list | None] = [None] * ranks
    out: list[list] = [[] for _ in range(ranks)]
    compressors = [PowerSGD(shapes, settings) for _ in range(ranks)]
    errors: list[BaseException] = []

    def rank_main(rank: int) -> None:
        def allreduce_mean(tensors: list) -> list:
            posted[rank] = [np.asarray(t) for t in tensors]
            barrier.wait()
            mean = [np.mean([posted[r][i] for r in range(ranks)], axis=0) for i in range(len(tensors))]
            barrier.wait()
            return [tf.constant(m) for m in mean]

        try:
            for step, grads in enumerate(grads_per_rank[rank]):
                scale = None if scales is None else scales[step]
                reduced = compressors[rank].reduce([tf.constant(g if scale is None else g * scale) for g in grads],
                                                   allreduce_mean, scale=scale)
                out[rank].append([np.asarray(r) for r in reduced])
                if after_step is not None:
                    after_step(rank, step, compressors[rank], allreduce_mean)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    return out, compressors


def reference(grads_per_rank, settings: PowerSGDSettings, shapes, first_q: list[np.ndarray]):
    """The algorithm in NumPy (Gram-Schmidt in place of QR: the projection P P^T is the same)."""
    ranks = len(grads_per_rank)
    errors = [[np.zeros(matrix_shape(s)) if compressed(s, settings) else None for s in shapes] for _ in range(ranks)]
    qs = list(first_q)
    out = [[] for _ in range(ranks)]
    for step in range(len(grads_per_rank[0])):
        grads = [grads_per_rank[r][step] for r in range(ranks)]
        if step + 1 <= settings.start_iter:
            for r in range(ranks):
                out[r].append([np.mean([grads[k][i] for k in range(ranks)], axis=0) for i in range(len(shapes))])
            continue
        results = [[None] * len(shapes) for _ in range(ranks)]
        slot = 0
        for i, shape in enumerate(shapes):
            if not compressed(shape, settings):
                mean = np.mean([grads[r][i] for r in range(ranks)], axis=0)
                for r in range(ranks):
                    results[r][i] = mean
                continue
            ms = [grads[r][i].reshape(matrix_shape(shape)) + errors[r][i] for r in range(ranks)]
            p = np.mean([m @ qs[slot] for m in ms], axis=0)
            for j in range(p.shape[1]):  # Gram-Schmidt
                for k in range(j):
                    p[:, j] -= (p[:, k] @ p[:, j]) * p[:, k]
                p[:, j] /= np.linalg.norm(p[:, j])
            q = np.mean([m.T @ p for m in ms], axis=0)
            approx = p @ q.T
            for r in range(ranks):
                errors[r][i] = ms[r] - approx
                results[r][i] = approx.reshape(shape)
            qs[slot] = q
            slot += 1
        for r in range(ranks):
            out[r].append(results[r])
    return out, errors


SHAPES = [(3, 3, 4, 16), (64, 32), (32,), (32, 3)]  # a conv kernel, a dense kernel, a bias, a thin matrix


def gradients(ranks: int, steps: int, seed: int = 1) -> list[list[list[np.ndarray]]]:
    rng = np.random.default_rng(seed)
    return [[[rng.normal(size=s).astype(np.float64) for s in SHAPES] for _ in range(steps)] for _ in range(ranks)]


def test_the_compressor_follows_the_reference_with_error_feedback_and_warm_start():
    settings = PowerSGDSettings(rank=2, start_iter=1, min_compression_rate=2.0)
    grads = gradients(ranks=2, steps=4)
    first_q = [q.numpy().astype(np.float64) for q in PowerSGD(SHAPES, settings).factors]
    got, compressors = run_ranks([[[g.astype(np.float32) for g in step] for step in rank] for rank in grads],
                                 settings, SHAPES)
    want, errors = reference(grads, settings, SHAPES, first_q)
    assert [compressed(s, settings) for s in SHAPES] == [True, True, False, False]
    for r in range(2):
        for step in range(4):
            for i in range(len(SHAPES)):
                np.testing.assert_allclose(got[r][step][i], want[r][step][i], rtol=1e-4, atol=1e-4,
                                           err_msg=f"rank {r} step {step} gradient {i}")
        for slot, i in enumerate(i for i, s in enumerate(SHAPES) if compressed(s, settings)):
            np.testing.assert_allclose(compressors[r].errors[slot].numpy(), errors[r][i], rtol=1e-4, atol=1e-4)
    for step in range(4):  # every rank applies the same gradients
        for i in range(len(SHAPES)):
            np.testing.assert_array_equal(got[0][step][i], got[1][step][i])
    assert int(compressors[0].step.numpy()) == 4
    compressed_step = got[0][1][1]  # low rank, not the mean
    assert np.linalg.matrix_rank(compressed_step, tol=1e-4) == 2


def test_under_loss_scaling_the_errors_keep_the_gradients_units_and_a_non_finite_step_changes_no_state():
    """mixed_float16: each step's gradients come multiplied by that step's loss scale. The result is the
    unscaled run's times the scale, with the same errors, though the scale changes between steps. A step
    with an overflow on one rank gives every rank a non-finite result (the loss-scale optimizer skips it
    on all of them) and leaves the errors and factors as they were: the run goes on as if the step had
    not been taken."""
    settings = PowerSGDSettings(rank=2, start_iter=1, min_compression_rate=2.0)
    grads = [[[g.astype(np.float32) for g in step] for step in rank] for rank in gradients(ranks=2, steps=5)]
    plain, plain_compressors = run_ranks(grads, settings, SHAPES)
    scales = [2.0 ** 15, 2.0 ** 15, 2.0 ** 14, 2.0 ** 16, 2.0 ** 3]
    scaled, scaled_compressors = run_ranks(grads, settings, SHAPES, scales=scales)
    for step, scale in enumerate(scales):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(scaled[0][step][i] / scale, plain[0][step][i], rtol=1e-4, atol=1e-5,
                                       err_msg=f"step {step} gradient {i}")
    for ours, theirs in zip(scaled_compressors[1].errors, plain_compressors[1].errors):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-5)

    overflow = [[list(step) for step in rank] for rank in grads]
    overflow[1].insert(2, [np.full(s, np.inf, np.float32) if i == 1 else grads[1][2][i]
                           for i, s in enumerate(SHAPES)])  # one rank overflows in one matrix
    overflow[0].insert(2, list(grads[0][2]))
    skipped, _ = run_ranks(overflow, settings, SHAPES, scales=[*scales[:2], 2.0 ** 15, *scales[2:]])
    assert all(not np.isfinite(np.concatenate([g.ravel() for g in skipped[r][2]])).all() for r in range(2))
    for step in (3, 4, 5):  # after the skipped step: the run without it (its step count one ahead only)
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(skipped[0][step][i] / scales[step - 1], plain[0][step - 1][i],
                                       rtol=1e-4, atol=1e-5, err_msg=f"step {step} gradient {i}")


def test_at_full_rank_it_is_the_plain_mean():
    """At a rank of min(m, n) the factors span the mean exactly (min_compression_rate 0 compresses a
    matrix whose factors are not smaller, which a run would not; by default they are left whole)."""
    shapes = [(4, 40), (40, 4), (6, 6)]
    assert not any(compressed(s, PowerSGDSettings(rank=6)) for s in shapes)
    exact = PowerSGDSettings(rank=6, start_iter=0, min_compression_rate=0)
    assert all(compressed(s, exact) for s in shapes)
    rng = np.random.default_rng(3)
    grads = [[[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(3)] for _ in range(2)]
    got, compressors = run_ranks(grads, exact, shapes)
    for step in range(3):
        for i in range(len(shapes)):
            mean = (grads[0][step][i] + grads[1][step][i]) / 2
            np.testing.assert_allclose(got[0][step][i], mean, rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(got[0][step][i], got[1][step][i])
    # each rank keeps its own part of the gradient (its error), and the mean of those is 0: nothing of
    # the mean was lost
    for first, second in zip(compressors[0].errors, compressors[1].errors):
        np.testing.assert_allclose(first.numpy() + second.numpy(), 0, atol=1e-5)


def test_bytes_on_the_wire_and_what_is_compressed():
    settings = PowerSGDSettings(rank=4)
    mlp = [(784, 512), (512,), (512, 512), (512,), (512, 10), (10,)]  # the benchmarks' MLP
    assert [compressed(s, settings) for s in mlp] == [True, False, True, False, True, False]
    # (784 + 512) 4 + (512 + 512) 4 + (512 + 10) 4 and the biases whole: about 60x fewer numbers
    assert wire_numbers(mlp, settings) == (784 + 512) * 4 + (512 + 512) * 4 + (512 + 10) * 4 + 512 + 512 + 10
    assert sum(np.prod(s) for s in mlp) / wire_numbers(mlp, settings) > 50
    assert not compressed((512, 10), PowerSGDSettings(rank=4, min_compression_rate=4))  # 2,088 of 5,120
    assert matrix_shape((3, 3, 4, 16)) == (36, 16) and matrix_shape((7,)) is None


@pytest.mark.parametrize("field, value", [("rank", 0), ("rank", True), ("start_iter", -1),
                                          ("min_compression_rate", -1), ("min_compression_rate", float("nan"))])
def test_bad_settings_are_refused_naming_the_field_and_the_fix(field, value):
    with pytest.raises(TfdistError, match=rf"`{field}` must be .*; fix: "):
        PowerSGDSettings(**{field: value})


def test_making_the_errors_equal_changes_no_later_step():
    """Only the mean of the ranks' errors enters a step: after ``synchronize`` every rank holds the
    same state (what the chief checkpoints), and the next steps are the ones an unsynchronised run takes."""
    settings = PowerSGDSettings(rank=2, start_iter=0)
    grads = [[[g.astype(np.float32) for g in step] for step in rank] for rank in gradients(ranks=2, steps=4, seed=7)]
    plain, _ = run_ranks(grads, settings, SHAPES)
    synced: list = [None, None]

    def synchronize_after_the_second(rank: int, step: int, compressor: PowerSGD, allreduce_mean) -> None:
        if step == 1:
            compressor.synchronize(allreduce_mean)
            synced[rank] = [e.numpy() for e in compressor.errors]

    out, compressors = run_ranks(grads, settings, SHAPES, after_step=synchronize_after_the_second)
    for step in range(4):
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(out[0][step][i], plain[0][step][i], rtol=1e-4, atol=1e-5)
    for first, second in zip(*synced):  # the same state on both ranks, and not all zero
        np.testing.assert_array_equal(first, second)
        assert np.abs(first).max() > 0
    for first, second in zip(compressors[0].errors, compressors[1].errors):
        assert not np.array_equal(first.numpy(), second.numpy())  # apart again after two more steps
