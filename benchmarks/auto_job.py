"""The script every task of benchmarks/auto_plan.py's tfdist jobs runs: the small MLP of workload.py
under ``make_strategy(--backend)`` (default ``auto``: the plan ``tfdist launch --backend auto`` hands
every task, if any), timed as baseline_horovod.py is, and what the task's own strategy object says it
built.

    tfdist launch --backend auto --hosts w1:1,w2:1,p1:1 --ps 1 --model auto_job:build_model \\
        --batch-size 64 -- python benchmarks/auto_job.py --steps 30 --out run.json
    tfdist launch --hosts w1:1,w2:1,p1:1,c:1 --chief-host c --ps-hosts p1 --workers 2 --ps 1 -- \\
        python benchmarks/auto_job.py --backend parameter_server --steps 30 --out run.json

(``--model auto_job:build_model`` needs benchmarks/ on PYTHONPATH, as auto_plan.py sets it.)

It works under whatever backend the strategy is: Horovod trains ``--steps`` steps per rank and epoch
on its shard of the arrays (2 x 64 examples a step), parameter servers ``--steps`` x workers steps of
64 examples (the workers and ps tasks serve inside make_strategy), so an epoch holds the same examples
either way. One warm-up epoch (tracing, broadcast), then ``--epochs`` timed ones (workload.EpochTimer:
from the end of the warm-up to the end of the last epoch). Rank 0 / the chief writes ``--out``:
examples/s of all workers together, and ``kind``, ``variant`` (the plan's, or None), ``compression``,
``hierarchical_allreduce`` and ``shards`` as the strategy object holds them. With ``--logdir`` the
chief also records the run for TensorBoard and ``tfdist report`` (``TensorBoardRun``); with ``--data
digits`` the job trains on the shipped digits and the result has the held-out digits' accuracy.
With ``--progress`` the chief prints, each with the wall clock (``time.time()``), ``AUTOJOB_STAGE
strategy T`` once ``make_strategy`` returned (parameter servers: the cluster answered),
``AUTOJOB_EPOCH E T`` at each epoch's end, and ``AUTOJOB_STAGE fitted T`` / ``written T`` once ``fit``
returned and the result is written: where a run's time beyond its epochs went.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import tfdist  # before tensorflow: keeps tf.keras on tf-keras

import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload  # noqa: E402

MODEL = "small"  # 669,706 parameters


def build_model() -> tf.keras.Model:
    """The small MLP (for ``tfdist launch --backend auto --model auto_job:build_model``)."""
    return workload.build_model(MODEL)


def strategy_record(strategy) -> dict:
    """What the strategy object says it is: backend, the plan's variant, the options that change the wire."""
    options = strategy.options
    plan = getattr(strategy, "plan", None)
    return {"kind": strategy.kind, "variant": plan.variant if plan is not None else None,
            "compression": getattr(options, "compression", None),
            "hierarchical_allreduce": getattr(options, "hierarchical_allreduce", None),
            "shards": getattr(options, "shards", None),
            "plan": plan.as_dict() if plan is not None else None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="auto", help="make_strategy's kind (default auto)")
    parser.add_argument("--steps", type=int, default=30, help="Horovod steps per rank and epoch (parameter "
                        "servers: x workers)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs, after the warm-up")
    parser.add_argument("--warmup-epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--out", required=True, help="JSON result, written by rank 0 / the chief")
    parser.add_argument("--progress", action="store_true",
                        help="rank 0 / the chief prints AUTOJOB_EPOCH <epoch> at each epoch's end")
    parser.add_argument("--logdir", help="record the run into this TensorBoard runs folder")
    parser.add_argument("--data", choices=("random", "digits"), default="random",
                        help="random inputs and labels (default), or the shipped digits, upscaled to the MLP's "
                        "784 inputs: the result then has the held-out digits' accuracy (val_accuracy)")
    args = parser.parse_args(argv)

    strategy = tfdist.make_strategy(args.backend)  # ps and worker tasks serve here until the chief is done
    progress = args.progress and strategy.is_chief

    def stage(name: str) -> None:
        if progress:
            print(f"AUTOJOB_STAGE {name} {time.time():.2f}", flush=True)

    stage("strategy")
    with strategy.scope():
        model = build_model()
        model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.SGD(workload.LEARNING_RATE)),
                      loss=workload.loss())
    timer = workload.EpochTimer(args.warmup_epochs)
    callbacks = [timer]
    if args.logdir:
        callbacks.append(tfdist.callbacks.TensorBoardRun(args.logdir, strategy=strategy, batch_size=args.batch_size))
    if progress:
        callbacks.append(tf.keras.callbacks.LambdaCallback(
            on_epoch_end=lambda epoch, logs: print(f"AUTOJOB_EPOCH {epoch} {time.time():.2f}", flush=True)))
    epochs = args.warmup_epochs + args.epochs
    make_data = workload.make_digits if args.data == "digits" else workload.make_data
    if strategy.kind == "parameter_server":
        steps = args.steps * strategy.num_workers
        per_step = args.batch_size
        x, y = make_data(workload.PS_EXAMPLES)
        history = strategy.fit(model, x, y, batch_size=args.batch_size, steps_per_epoch=steps, epochs=epochs,
                               callbacks=callbacks, verbose=0)
    else:
        per_step = args.batch_size * strategy.num_workers
        x, y = make_data(args.steps * per_step)
        history = strategy.fit(model, x, y, batch_size=args.batch_size, epochs=epochs, callbacks=callbacks,
                               verbose=0)
    if not strategy.is_chief:
        return
    stage("fitted")
    steps = (timer.steps_per_epoch or args.steps) * timer.timed_epochs  # fewer when resumed by a switch
    seconds = timer.seconds if timer.timed_epochs else None  # none: a run resumed for its last epoch
    result = {**strategy_record(strategy), "workers": strategy.num_workers, "params": model.count_params(),
              "batch_size": args.batch_size, "steps": steps, "examples_per_step": per_step,
              "seconds": seconds, "final_loss": (history.history.get("loss") or [None])[-1],
              "examples_per_second": steps * per_step / seconds if seconds else None,
              "epoch_seconds": timer.epoch_seconds,
              "val_accuracy": workload.digits_accuracy(model.get_weights()) if args.data == "digits" else None,
              "host": os.uname().nodename}
    tmp = Path(f"{args.out}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, args.out)
    print("AUTOJOB " + json.dumps({k: v for k, v in result.items() if k != "plan"}), flush=True)
    stage("written")


if __name__ == "__main__":
    main()
