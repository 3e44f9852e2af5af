"""Mixed precision on the tf.distribute backends, for tests/strategies/test_mixed_precision.py.

    python precision_tf_distribute.py MODE OUTFILE

MODE ``local``: mirrored over two logical CPUs (tf-keras and Keras 3) and multi_worker_mirrored
(one worker, tf-keras), each against one plain process on the same global batch. MODE ``ps``:
parameter_server on an in-process cluster (2 workers, 1 ps, as in TensorFlow's tutorial) trains
``mixed_bfloat16`` and refuses ``mixed_float16`` (tf-keras has no loss scaling there). Writes
per run and policy: the optimizer's class, the hidden layer's compute and variable dtypes, the
losses, and (local) the relative distance of the weights to the plain process's.
"""
from __future__ import annotations

import json
import os
import sys

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np
import tensorflow as tf

MODE, OUTFILE = sys.argv[1], sys.argv[2]
POLICIES = ("mixed_float16", "mixed_bfloat16")
if MODE == "local":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


def data(rows: int = 256) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 8)).astype("float32")
    return x, (x @ rng.normal(size=(8, 1)) + 0.1).astype("float32")


def build(K, name: str):
    K.utils.set_random_seed(1)
    return K.Sequential([K.Input((8,)), K.layers.Dense(16, activation="tanh", name=f"{name}_hidden"),
                         K.layers.Dense(1, dtype="float32", name=f"{name}_out")], name=name)


def flat(model) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(w, dtype="float64")) for w in model.get_weights()])


def run(K, kind: str, policy: str, **options) -> dict:
    K.mixed_precision.set_global_policy(policy)
    try:
        strategy = tfdist.make_strategy(kind, **options)
        name = f"{kind}_{policy}"
        with strategy.scope():
            model = build(K, name)
            model.compile(optimizer=strategy.optimizer(K.optimizers.SGD(0.05), scale_lr=False), loss="mse")
        replicas = strategy.num_replicas_in_sync
        x, y = data()
        if kind == "parameter_server":
            history = strategy.fit(model, x, y, batch_size=16, epochs=3, steps_per_epoch=8, verbose=0)
        else:
            history = strategy.fit(model, x, y, batch_size=32 // replicas, epochs=2, shuffle=False, verbose=0)
        hidden = model.get_layer(f"{name}_hidden")
        result = {"optimizer": type(model.optimizer).__name__, "replicas": replicas,
                  "compute_dtype": hidden.compute_dtype, "variable_dtype": hidden.variable_dtype,
                  "loss": [float(v) for v in history.history["loss"]]}
        if kind != "parameter_server":
            reference = build(K, f"{name}_reference")
            reference.compile(optimizer=K.optimizers.SGD(0.05), loss="mse")
            reference.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
            result["relative_error"] = float(np.linalg.norm(flat(model) - flat(reference)) /
                                             np.linalg.norm(flat(reference)))
        return result
    finally:
        K.mixed_precision.set_global_policy("float32")


results: dict = {}
if MODE == "local":
    import keras
    import tf_keras

    for policy in POLICIES:
        results[f"mirrored/tf_keras/{policy}"] = run(tf_keras, "mirrored", policy, devices=("/cpu:0", "/cpu:1"))
        results[f"mirrored/keras_3/{policy}"] = run(keras, "mirrored", policy, devices=("/cpu:0", "/cpu:1"))
        results[f"multi_worker_mirrored/tf_keras/{policy}"] = run(tf_keras, "multi_worker_mirrored", policy)
else:
    import tf_keras
    from tfdist.cluster import free_ports

    ports = free_ports(3)
    cluster = {"worker": [f"localhost:{p}" for p in ports[:2]], "ps": [f"localhost:{ports[2]}"]}
    spec = tf.train.ClusterSpec(cluster)
    worker_config = tf.compat.v1.ConfigProto()
    if os.cpu_count() < 3:  # the tutorial's guard against starved in-process workers
        worker_config.inter_op_parallelism_threads = 3
    for index in range(2):
        tf.distribute.Server(spec, job_name="worker", task_index=index, config=worker_config, protocol="grpc")
    tf.distribute.Server(spec, job_name="ps", task_index=0, protocol="grpc")
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
    results["parameter_server/tf_keras/mixed_bfloat16"] = run(tf_keras, "parameter_server", "mixed_bfloat16",
                                                              cluster=resolver)
    tf_keras.mixed_precision.set_global_policy("mixed_float16")  # loss scaling: refused, naming the fix
    try:
        with tfdist.make_strategy("parameter_server", cluster=resolver).scope():
            results["parameter_server/tf_keras/mixed_float16"] = "trained"
    except Exception as exc:  # noqa: BLE001  (the test reads which error, and its message)
        results["parameter_server/tf_keras/mixed_float16"] = f"{type(exc).__name__}: {exc}"
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")
with open(OUTFILE, "w") as f:
    json.dump(results, f)
sys.stdout.flush()
os._exit(0)  # in-process gRPC servers have no clean shutdown
