"""The custom-loop API (tfdist.strategies.loop) on single and mirrored, both Kerases.

The ``slow`` checks share one child process (tests/scripts/loop_local.py: mirrored needs two logical
CPUs, set before TensorFlow starts): examples/custom_loop.py's loop under ``single`` equals a plain
``GradientTape`` loop without tfdist; under ``mirrored`` (two replicas, half the batch each) it equals
``single`` on the global batch; each step is traced once; a checkpoint resumes a mirrored rerun and a
``single`` run; what needs two replicas is refused naming the fix. The Horovod loop runs in
tests/horovod/test_tf2_loop.py's jobs; the pure rules are in test_loop_rules.py.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from support import SCRIPTS, subprocess_env

FLAVOURS = ("tf_keras", "keras_3")  # the keys of loop_local.py's result, besides "script"
TOLERANCE = 1e-5  # float32: the summation order of two replicas' gradients only


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory) -> dict:
    outfile = tmp_path_factory.mktemp("loop-local") / "result.json"
    result = subprocess.run([sys.executable, str(SCRIPTS / "loop_local.py"), str(outfile)],
                            capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(outfile.read_text())


@pytest.mark.slow
@pytest.mark.no_gpu
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_single_equals_a_plain_tape_loop_and_mirrored_equals_single_on_the_global_batch(local_runs, flavour):
    run = local_runs[flavour]
    assert run["model_module"] == {"tf_keras": "tf_keras", "keras_3": "keras"}[flavour]
    assert run["replicas"] == 2
    assert run["single_vs_plain"] <= TOLERANCE
    assert run["mirrored_vs_single"] <= TOLERANCE, f"relative error {run['mirrored_vs_single']:.2e}"
    assert run["losses"][1] < 0.7 * run["losses"][0]
    np.testing.assert_allclose(run["mirrored_losses"], run["losses"], rtol=1e-5)  # reduce("sum"): the job's loss


@pytest.mark.slow
@pytest.mark.no_gpu
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_each_step_is_traced_once(local_runs, flavour):
    assert (local_runs[flavour]["single_tracing"], local_runs[flavour]["mirrored_tracing"]) == (1, 1)


@pytest.mark.slow
@pytest.mark.no_gpu
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_checkpoint_resumes_after_the_last_saved_epoch_on_any_backend(local_runs, flavour):
    run = local_runs[flavour]
    assert run["mirrored_start"] == 0 and run["checkpoints"] == ["ckpt-1.index", "ckpt-2.index"]
    assert (run["rerun_start"], run["rerun_epochs"]) == (2, 1)        # mirrored again: epoch 3 only
    assert (run["single_start"], run["single_epochs"]) == (3, 0)      # single reads mirrored's epoch 3
    assert run["single_resumed_vs_saved"] == 0.0


@pytest.mark.slow
@pytest.mark.no_gpu
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_what_the_loop_cannot_use_is_refused_naming_the_argument_and_the_fix(local_runs, flavour):
    refusals = local_runs[flavour]["refusals"]
    expected = {
        "plain_optimizer": r"ArgumentValueError: `optimizer` \(SGD\) did not come from this mirrored strategy's "
                           r"optimizer\(\).*; fix: pass optimizer = strategy.optimizer\(",
        "outside_scope": r"ArgumentValueError: `model` \(\w+\) was built outside strategy.scope\(\).*; fix: build",
        "unbuilt": r"ArgumentValueError: `model` \(\w+\) has no weights yet.*; fix: give the model an input shape",
        "batched_numpy": r"ArgumentTypeError: `data` must be an unbatched tf.data.Dataset.*got ndarray; fix:",
        "too_few": r"ArgumentValueError: the dataset has 10 examples, fewer than one global batch of 16 .*; fix:",
        "infinite": r"ArgumentValueError: .* not known .*; fix: pass steps_per_epoch=N",
        "op": r"ArgumentValueError: `op` must be one of 'sum', 'mean', got 'max'; fix:",
    }
    if flavour == "keras_3":
        expected["clipnorm"] = r"LoopError: `optimizer` clips \(clipnorm\).*; fix: drop the clipping argument"
    assert sorted(refusals) == sorted(expected)
    for case, pattern in expected.items():
        assert re.fullmatch(pattern + ".*", refusals[case]), (case, refusals[case])


@pytest.mark.slow
@pytest.mark.no_gpu
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_mixed_float16_trains_with_loss_scaling_where_the_finite_test_sees_every_replica(local_runs, flavour):
    run = local_runs[flavour]
    mixed = run["mixed"]
    single = mixed["single"]
    assert single["optimizer"].startswith("LossScaleOptimizer") and single["finite"]
    np.testing.assert_allclose(single["losses"], run["losses"], rtol=2e-3)  # float16's precision
    if flavour == "tf_keras":  # its loss-scale optimizer tests all replicas' gradients together
        assert mixed["mirrored"]["optimizer"].startswith("LossScaleOptimizer") and mixed["mirrored"]["finite"]
        np.testing.assert_allclose(mixed["mirrored"]["losses"], single["losses"], rtol=1e-4)
    else:
        assert re.fullmatch(r"LoopError: `optimizer` is a Keras 3 LossScaleOptimizer over 2 replicas: "
                                          r".*; fix: use mixed_bfloat16 .*", mixed["mirrored"])
    assert re.fullmatch(r"ArgumentValueError: the mixed_float16 policy needs loss scaling and "
                                      r"`optimizer` is a plain SGD; fix: wrap it .*", mixed["plain_optimizer"])


@pytest.mark.slow
@pytest.mark.no_gpu  # auto picks single
def test_the_example_as_a_script_trains_keras_3_and_prints_the_chiefs_lines(local_runs):
    lines = local_runs["script"]
    # (the pipeline's order: shuffle(2048, seed=0, reshuffle_each_iteration=False), one order every epoch)
    assert lines[:2] == ["epoch 1/2: loss 1.9632 accuracy 0.4057", "epoch 2/2: loss 1.1281 accuracy 0.8036"]
    assert lines[2:] == ["RESULT strategy=single workers=1 keras=3 start_epoch=0 loss=1.1281 accuracy=0.8036"]


# --- in this process: the single backend's pieces ---------------------------------------------------------

@pytest.fixture
def single():
    import tfdist

    return tfdist.make_strategy("single")


def test_average_loss_is_the_replicas_part_of_the_global_mean(single):
    import tensorflow as tf

    from tfdist.strategies import loop

    per_example = tf.constant([1.0, 2.0, 3.0, 6.0])
    assert float(single.average_loss(per_example)) == pytest.approx(3.0)
    assert float(loop.average_loss(per_example, replicas=2)) == pytest.approx(1.5)  # one of two replicas' parts
    assert float(loop.average_loss(per_example, 2, sample_weight=[1.0, 1.0, 0.0, 0.0],
                                   regularization_losses=[tf.constant(4.0)])) == pytest.approx(3 / 8 + 2)
    assert loop.average_loss(tf.constant([1.0], tf.float16), 1).dtype == tf.float32
    with pytest.raises(ValueError, match=r"`per_example_loss` is a scalar.*; fix: pass one loss per example"):
        single.average_loss(tf.constant(2.0))


def test_reduce_averages_the_steps_and_mean_divides_by_the_replicas(single):
    from tfdist.strategies import loop

    steps = [{"loss": 1.0, "acc": np.array(2.0)}, {"loss": 3.0, "acc": np.array(4.0)}]
    assert single.reduce("sum", steps) == {"loss": 2.0, "acc": 3.0}
    assert loop.reduce_outputs(steps, "mean", replicas=2) == {"loss": 1.0, "acc": 1.5}
    assert single.reduce("sum", {"loss": 5.0}) == {"loss": 5.0}
    with pytest.raises(ValueError, match=r"`value` is an empty list.*; fix:"):
        single.reduce("sum", [])
    with pytest.raises(ValueError, match=r"do not share one structure.*; fix: return the same dict"):
        single.reduce("sum", [{"loss": 1.0}, {"other": 1.0}])


def test_the_checkpoint_refuses_a_directory_it_cannot_write(single, tmp_path):
    import tf_keras

    from tfdist.strategies.checkpoints import CheckpointError

    with single.scope():
        model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
        optimizer = single.optimizer(tf_keras.optimizers.SGD(0.1))
    single.setup(model, optimizer)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(CheckpointError, match=r"cannot write the checkpoint directory .*; fix: pick a directory"):
        single.checkpoint(blocker / "ckpt")
    checkpoint = single.checkpoint(tmp_path / "ckpt")
    with pytest.raises(ValueError, match=r"`epoch` must be an integer >= 0, got -1; fix:"):
        checkpoint.save(-1)
    assert checkpoint.restore() == 0
    assert checkpoint.save(4).endswith("ckpt-4") and checkpoint.restore() == 4


# --- a real multi_worker_mirrored job (two workers on localhost) --------------------------------------------

def _launch_mwm(*args: str) -> subprocess.CompletedProcess:
    """``tfdist launch --backend multi_worker_mirrored --workers 2 -- python examples/custom_loop.py ARGS``, as
    docs/custom-loops.md shows it."""
    from pathlib import Path

    from support import REPO

    tfdist_cli = str(Path(sys.executable).parent / "tfdist")
    return subprocess.run([tfdist_cli, "launch", "--backend", "multi_worker_mirrored", "--workers", "2", "--",
                           sys.executable, "examples/custom_loop.py", *args],
                          capture_output=True, text=True, timeout=300, env=subprocess_env(), cwd=REPO)


@pytest.mark.cluster
@pytest.mark.no_gpu
def test_two_mwm_workers_save_the_weights_of_one_process_on_the_global_batch_and_a_rerun_resumes(tmp_path):
    import importlib.util

    import tf_keras

    import tfdist
    from support import REPO

    checkpoints = tmp_path / "ckpt"
    first = _launch_mwm("--epochs", "2", "--checkpoint-dir", str(checkpoints))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    results = re.findall(r"RESULT strategy=(\S+) workers=(\d) keras=2 start_epoch=(\d)", first.stdout)
    assert results == [("multi_worker_mirrored", "2", "0")], first.stdout[-3000:]  # the chief's line alone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"], "the other worker's throwaway copy is gone"
    assert sorted(p.name for p in checkpoints.glob("*.index")) == ["ckpt-1.index", "ckpt-2.index"]

    spec = importlib.util.spec_from_file_location("custom_loop", REPO / "examples" / "custom_loop.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    reference, _, _, _ = example.train(tfdist.make_strategy("single"), tf_keras, 2, 64, 0.2, log=lambda line: None)
    single = tfdist.make_strategy("single")
    with single.scope():
        model = example.build_model(tf_keras, seed=1)  # other weights, until the restore
        optimizer = single.optimizer(tf_keras.optimizers.SGD(0.1))
    single.setup(model, optimizer)
    assert single.checkpoint(checkpoints).restore() == 2
    errors = [float(np.max(np.abs(w - r)) / np.max(np.abs(r))) for w, r in zip(model.get_weights(), reference.get_weights())]
    assert max(errors) <= TOLERANCE, f"relative error {max(errors):.2e}"

    again = _launch_mwm("--epochs", "3", "--checkpoint-dir", str(checkpoints))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert re.findall(r"epoch (\d)/3", again.stdout) == ["3"] and "start_epoch=2" in again.stdout


def test_the_pages_loop_is_the_examples_line_for_line():
    """docs/custom-loops.md shows the loop that the tests above run: its lines are train()'s, in order."""
    from doc_pages import DOCS, blocks, text
    from support import REPO

    shown = blocks(text(DOCS / "custom-loops.md"), "python")[0]  # the first; the callbacks' block is another
    lines = [line.strip() for line in shown.splitlines() if line.strip()]
    source = (REPO / "examples" / "custom_loop.py").read_text()
    body = iter(line.strip() for line in source.split("def train(", 1)[1].split("\ndef main(")[0].splitlines())
    missing = [line for line in lines if not any(line == candidate for candidate in body)]
    assert missing == [], "lines docs/custom-loops.md shows that train() does not run, in that order"
    assert len(lines) >= 20
