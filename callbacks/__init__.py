"""Keras callbacks that make distributed runs correct and visible (import as ``tfdist.callbacks``).

| callback                | what it does                                                      |
|-------------------------|-------------------------------------------------------------------|
| BroadcastInitialState   | rank 0's weights and optimizer state to every Horovod rank         |
| MetricAverage           | epoch metrics averaged over Horovod ranks, in sorted name order    |
| LearningRateWarmup      | linear warm-up from the single-worker rate to the scaled rate      |
| LearningRateScale       | multiply the rate over a range of epochs (step decay, ...)         |
| ChiefOnly               | run any callback on the chief only                                  |
| Throughput              | examples/s, step time and wall time into the epoch logs             |
| WorkerMetrics           | each worker's step, exchange time, straggler spread (Horovod, MWMS) |
| ParameterServerMetrics  | coordinator step time vs. local compute time (parameter servers)   |
| progress_lines          | Keras' progress line without those two's per-worker figures       |
| SystemMetrics           | CPU, memory, network, GPU of every task into <run>/system/<task>/   |
| TensorBoardRun          | chief-only TensorBoard in <logdir>/<run-name>/ with hparams, targets|
| SafeBackup              | BackupAndRestore with a verified previous copy and clean failures  |

Each works with tf-keras and Keras 3 models, and on every backend, as a no-op where the backend
already does the job; WorkerMetrics (Horovod; MultiWorkerMirrored through strategy.metrics) and
ParameterServerMetrics refuse the other backends
(``strategy.metrics(batch_size)`` picks the right one, on one ``EpochClock`` with ``Throughput``, and
keeps their figures off the progress line). Modules: one per concern (``throughput``,
``worker_metrics``, ``ps_metrics``, ``epoch_clock``, ``progress``, ...).

Layering: it may import :mod:`tfdist.runtime`, :mod:`tfdist.plan`, :mod:`tfdist.cluster` and the
ground modules; never :mod:`tfdist.strategies` (which imports it).
"""
import tfdist  # noqa: F401  (tf.keras routing before TensorFlow loads)

from tfdist.callbacks.backup import BackupError, SafeBackup
from tfdist.callbacks.broadcast import BroadcastInitialState
from tfdist.callbacks.chief_only import ChiefOnly
from tfdist.callbacks.epoch_clock import EpochClock
from tfdist.callbacks.worker_metrics import WorkerMetrics
from tfdist.callbacks.learning_rate import LearningRateScale, LearningRateWarmup, warmup_learning_rate
from tfdist.callbacks.metric_average import MetricAverage
from tfdist.callbacks.progress import progress_lines
from tfdist.callbacks.ps_metrics import ParameterServerMetrics
from tfdist.callbacks.system_metrics import SystemMetrics
from tfdist.callbacks.tensorboard import TensorBoardRun, default_run_name
from tfdist.callbacks.throughput import Throughput

__all__ = [
    "BackupError",
    "BroadcastInitialState",
    "ChiefOnly",
    "EpochClock",
    "LearningRateScale",
    "LearningRateWarmup",
    "MetricAverage",
    "ParameterServerMetrics",
    "SafeBackup",
    "SystemMetrics",
    "TensorBoardRun",
    "Throughput",
    "WorkerMetrics",
    "default_run_name",
    "progress_lines",
    "warmup_learning_rate",
]
