"""The old name of :mod:`tfdist.callbacks.worker_metrics` (``WorkerMetrics`` serves MultiWorkerMirrored
too); kept so that ``from tfdist.callbacks.horovod_metrics import WorkerMetrics`` still imports."""
from tfdist.callbacks.worker_metrics import WorkerMetrics, worker_logs

__all__ = ["WorkerMetrics", "worker_logs"]
