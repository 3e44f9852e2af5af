"""Run by tests/export/test_backends.py on every task of a job: train a little, try each bad export
(recording the error and what the export directory holds right after), then export for real.

    python export_job.py BACKEND EXPORTS RESULTS      # BACKEND: horovod, mwms, ps or local

EXPORTS is where exports go (the test made `taken/` and `file.txt` there); RESULTS gets one JSON per
task and, from the chief, each export's sample and the model's predictions on it (<name>.npz).
``local`` runs the single and mirrored backends, then starts an overwrite of its single export that
stops just before its rename (writing RESULTS/paused), for the test to SIGKILL.
"""
from __future__ import annotations

import json
import os
import sys
import time

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np
import tensorflow as tf

BACKEND, EXPORTS, RESULTS = sys.argv[1], sys.argv[2], sys.argv[3]
VOCAB = 100


def listing() -> list[str]:
    found = []
    for root, dirs, files in os.walk(EXPORTS):
        found += [os.path.relpath(os.path.join(root, name), EXPORTS) for name in dirs + files]
    return sorted(found)


def dense_model(keras):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(2)])


def normalized_model(keras):
    """BatchNormalization's moving statistics are sync-on-read under MultiWorkerMirrored: reading them
    is a collective, which every worker must run at the same point of an export."""
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                             keras.layers.BatchNormalization(), keras.layers.Dense(2)])


def sharded_model(keras):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,), dtype="int64"), keras.layers.Embedding(VOCAB, 8, name="embedding"),
                             keras.layers.Flatten(), keras.layers.Dense(2)])


def trained(strategy, keras, build, x, y):
    with strategy.scope():
        model = build(keras)
        model.compile(optimizer=strategy.optimizer(keras.optimizers.Adam(0.01)), loss="mse")
    strategy.fit(model, x, y, batch_size=8, epochs=1, verbose=0)
    return model


def bad_exports(strategy, keras, model) -> list[dict]:
    """Each bad input: the error every task raises, and the export directory right after."""
    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, inputs):
            return self.dense(inputs)

    subclassed = Subclassed()
    subclassed.build((None, 4))  # built, but its call was never traced: no known input signature
    cases = {
        "existing": lambda: strategy.export(model, os.path.join(EXPORTS, "taken")),
        "unwritable": lambda: strategy.export(model, os.path.join(EXPORTS, "file.txt", "model")),
        "format": lambda: strategy.export(model, os.path.join(EXPORTS, "bad-format"), format="onnx"),
        "not_built": lambda: strategy.export(keras.Sequential([keras.layers.Dense(1)]),
                                             os.path.join(EXPORTS, "not-built")),
        "subclassed": lambda: strategy.export(subclassed, os.path.join(EXPORTS, "subclassed")),
    }
    found = []
    for name, call in cases.items():
        try:
            call()
            error = None
        except Exception as exc:  # recorded for the test to check
            error = f"{type(exc).__name__}: {exc}"
        found.append({"case": name, "error": error, "listing": listing()})
    return found


def good_export(strategy, model, name: str, sample: np.ndarray, call: bool = False, **kwargs) -> str:
    """Export ``model`` to EXPORTS/<name>; the chief keeps the sample and the model's predictions
    (``call``: ``model(sample)`` outside any replica, where MultiWorkerMirrored reads BatchNormalization's
    statistics as their mean over the workers, as a checkpoint holds them; ``predict`` would use each
    worker's own)."""
    predictions = np.asarray(model(sample, training=False)) if call else model.predict(sample, verbose=0)
    path = strategy.export(model, os.path.join(EXPORTS, *name.split("/")), **kwargs)
    if strategy.is_chief:
        np.savez(os.path.join(RESULTS, name.replace("/", "_") + ".npz"), sample=sample, predictions=predictions)
    return path


def record_throwaway_copies(report: dict) -> None:
    """Note in ``report`` each throwaway copy this task wrote (a worker of MultiWorkerMirrored)."""
    import contextlib

    from tfdist.export import paths

    original = paths.throwaway_target

    @contextlib.contextmanager
    def recorded(target: str):
        with original(target) as written:
            yield written
            report.setdefault("throwaway", []).append(
                {"complete": os.path.isfile(os.path.join(written, "saved_model.pb")),
                 "outside": not written.startswith(EXPORTS)})

    paths.throwaway_target = recorded


def main() -> None:
    import tf_keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = (x @ rng.normal(size=(4, 2))).astype("float32")
    sample = rng.normal(size=(5, 4)).astype("float32")
    report: dict = {"backend": BACKEND, "pid": os.getpid()}
    if BACKEND == "ps":
        from tfdist.cluster import free_ports

        ports = free_ports(3)
        cluster = {"worker": [f"localhost:{ports[0]}"], "ps": [f"localhost:{p}" for p in ports[1:]]}
        spec = tf.train.ClusterSpec(cluster)
        tf.distribute.Server(spec, job_name="worker", task_index=0, protocol="grpc")
        for index in range(2):
            tf.distribute.Server(spec, job_name="ps", task_index=index, protocol="grpc")
        strategy = tfdist.make_strategy("parameter_server", cluster=cluster, shards=2)
        ids = rng.integers(0, VOCAB, size=(64, 4))
        model = trained(strategy, tf_keras, sharded_model, ids, y)
        report["sharded"] = type(model.get_layer("embedding").embeddings).__name__
        report["errors"] = bad_exports(strategy, tf_keras, model)
        ids_sample = rng.integers(0, VOCAB, size=(5, 4))
        report["paths"] = [good_export(strategy, model, "ps/1", ids_sample),
                           good_export(strategy, model, "ps.keras", ids_sample, format="keras")]
    elif BACKEND in ("horovod", "mwms"):
        import keras

        strategy = tfdist.make_strategy("horovod" if BACKEND == "horovod" else "multi_worker_mirrored")
        record_throwaway_copies(report)
        model = trained(strategy, tf_keras, dense_model, x, y)
        report["errors"] = bad_exports(strategy, tf_keras, model)
        report["paths"] = [good_export(strategy, model, f"{BACKEND}/1", sample)]
        if BACKEND == "mwms":  # reading its statistics is a collective: every worker must do it together
            normalized = trained(strategy, tf_keras, normalized_model, x, y)
            report["paths"].append(good_export(strategy, normalized, "mwms-bn/1", sample, call=True))
        if BACKEND == "horovod":
            model3 = trained(strategy, keras, dense_model, x, y)
            report["paths"].append(good_export(strategy, model3, "horovod-keras3/1", sample))
    else:
        single = tfdist.make_strategy("single")
        model = trained(single, tf_keras, dense_model, x, y)
        report["errors"] = bad_exports(single, tf_keras, model)
        report["paths"] = [good_export(single, model, "single/1", sample),
                           good_export(single, model, "single.keras", sample, format="keras")]
        mirrored = tfdist.make_strategy("mirrored")
        report["paths"].append(good_export(mirrored, trained(mirrored, tf_keras, dense_model, x, y),
                                           "mirrored/1", sample))
    report["rank"] = strategy.rank if BACKEND != "local" else 0
    report["is_chief"] = strategy.is_chief if BACKEND != "local" else True
    with open(os.path.join(RESULTS, f"{BACKEND}-{report['rank']}.json"), "w") as f:
        json.dump(report, f)
    if BACKEND == "local":
        from tfdist.export import paths

        def paused(written: str, target: str) -> None:  # stop where a kill hurts most: all written, not renamed
            with open(os.path.join(RESULTS, "paused"), "w") as f:
                json.dump({"written": written}, f)
            time.sleep(3600)

        paths.commit = paused
        single.export(model, os.path.join(EXPORTS, "single", "1"), overwrite=True, verify=False)
    sys.stdout.flush()
    if BACKEND == "ps":
        os._exit(0)  # the in-process gRPC servers have no clean shutdown


if __name__ == "__main__":
    main()
