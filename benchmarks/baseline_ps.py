"""Hand-written ParameterServerStrategy training, as a user would wire it without tfdist.

Every task of the cluster runs this script with its own TF_CONFIG (benchmarks/procs.py starts
them): ps and worker tasks serve until they are killed; the chief builds the strategy from
TFConfigClusterResolver and trains with Model.fit on a DatasetCreator.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras = tf-keras, before TensorFlow loads

import tensorflow as tf  # noqa: E402

import workload  # noqa: E402


def serve(resolver: tf.distribute.cluster_resolver.ClusterResolver) -> None:
    """Run this task's gRPC server forever (it has no shutdown: the launcher kills it)."""
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc",
                                  start=True)
    server.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    workload.add_arguments(parser)
    parser.add_argument("--steps-per-execution", type=int, default=1)
    args = parser.parse_args()

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        serve(resolver)
        return
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    with strategy.scope():
        model = workload.build_model(args.model)
        model.compile(optimizer=tf.keras.optimizers.SGD(workload.LEARNING_RATE), loss=workload.loss(),
                      steps_per_execution=args.steps_per_execution)
    x, y = workload.make_data(workload.PS_EXAMPLES)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        dataset = tf.data.Dataset.from_tensor_slices((x, y))
        dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        return dataset.shuffle(4096).repeat().batch(args.batch_size).prefetch(2)

    timer = workload.EpochTimer(args.warmup_epochs)
    model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn),
              epochs=args.warmup_epochs + args.epochs, steps_per_epoch=args.steps,
              callbacks=[timer], verbose=0)
    workers = len(resolver.cluster_spec().as_dict().get("worker", []))
    workload.report("baseline", "parameter_server", model, args, timer, examples_per_step=args.batch_size,
                    workers=workers, steps_per_execution=args.steps_per_execution)


if __name__ == "__main__":
    main()
