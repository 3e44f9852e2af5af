"""TensorFlow's parameter-server tutorial, ported to tfdist: an in-process cluster whose resolver is
passed as ``cluster=`` (tests/strategies/test_parameter_server.py).

    python ps_tutorial.py OUTDIR FORMS        # FORMS: resolver, cluster_spec, dict and/or keras_3, comma-separated

``keras_3`` is the resolver form with ``import keras`` in place of ``tf.keras`` (tf.keras is tf-keras here),
its variables whole on the ps (Keras 3's cannot be sharded).

One in-process cluster; each form in turn (a new make_strategy, model and fit) writes OUTDIR/<form>.json,
with the example ids each worker read from the pipeline ``strategy.fit`` builds for numpy arrays
(``shards``: worker index -> ids, the first 12 batches handed out).
"""
from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import sys
import traceback

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np
import tensorflow as tf

from tfdist.cluster import free_ports

OUTDIR, FORMS = sys.argv[1], sys.argv[2].split(",")


def create_in_process_cluster(num_workers: int, num_ps: int):
    """As in the tutorial: servers for every worker and ps in this process, on localhost."""
    ports = free_ports(num_workers + num_ps)
    cluster_dict = {"worker": [f"localhost:{p}" for p in ports[:num_workers]],
                    "ps": [f"localhost:{p}" for p in ports[num_workers:]]}
    cluster_spec = tf.train.ClusterSpec(cluster_dict)
    worker_config = tf.compat.v1.ConfigProto()
    if multiprocessing.cpu_count() < num_workers + 1:  # the tutorial's guard against starved workers
        worker_config.inter_op_parallelism_threads = num_workers + 1
    for i in range(num_workers):
        tf.distribute.Server(cluster_spec, job_name="worker", task_index=i, config=worker_config, protocol="grpc")
    for i in range(num_ps):
        tf.distribute.Server(cluster_spec, job_name="ps", task_index=i, protocol="grpc")
    return cluster_dict, tf.distribute.cluster_resolver.SimpleClusterResolver(cluster_spec, rpc_layer="grpc")


cluster_dict, cluster_resolver = create_in_process_cluster(num_workers=2, num_ps=2)

def train(form: str) -> dict:
    """make_strategy("parameter_server", cluster=<the cluster in this form>) and a 3-epoch fit."""
    cluster = {"resolver": cluster_resolver, "cluster_spec": cluster_resolver.cluster_spec(),
               "dict": cluster_dict, "keras_3": cluster_resolver}[form]
    keras_3 = form == "keras_3"
    keras = importlib.import_module("keras") if keras_3 else tf.keras
    strategy = tfdist.make_strategy("parameter_server", cluster=cluster, **({} if keras_3 else {"min_shard_bytes": 256}))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(64), keras.layers.Dense(1)])
        model.compile(optimizer=strategy.optimizer(keras.optimizers.SGD(0.05)), loss="mse")
    history = strategy.fit(model, x, y, batch_size=32, epochs=3, verbose=0)
    kernel = model.layers[0].kernel
    return {"shards": {} if keras_3 else shards_read(model.distribute_strategy, strategy.num_workers),
            "is_chief": strategy.is_chief, "num_workers": strategy.num_workers, "num_ps": strategy.num_ps,
            "loss": history.history["loss"], "keras": type(model).__module__.split(".")[0],
            "kernel_devices": sorted({v.device for v in getattr(kernel, "variables", None) or [kernel.value]})}


def shards_read(tf_strategy, workers: int) -> dict[str, list[int]]:
    """The ids 0..63 each worker reads, unshuffled, through the array pipeline of ``strategy.fit``
    (``tfdist.strategies.inputs.array_dataset_creator``), as the coordinator hands out the batches."""
    from tfdist.strategies.inputs import array_dataset_creator

    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(tf_strategy)
    creator = array_dataset_creator((np.arange(64, dtype=np.int64),), 4, False, True, workers)
    iterator = iter(coordinator.create_per_worker_dataset(
        lambda: tf_strategy.distribute_datasets_from_function(creator)))

    @tf.function
    def read(it):
        return tf.distribute.coordinator.experimental_get_current_worker_index(), next(it)

    results = [coordinator.schedule(read, args=(iterator,)) for _ in range(12)]
    coordinator.join()
    seen: dict[str, list[int]] = {}
    for result in results:
        index, (ids,) = result.fetch()
        seen.setdefault(str(int(index)), []).extend(int(i) for i in ids)
    return seen


for form in FORMS:
    try:
        result = train(form)
    except Exception as exc:  # noqa: BLE001  (that form's test reads it; the next form still runs)
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    with open(os.path.join(OUTDIR, f"{form}.json"), "w") as f:
        json.dump(result, f)
sys.stdout.flush()
os._exit(0)  # the in-process gRPC servers have no clean shutdown
