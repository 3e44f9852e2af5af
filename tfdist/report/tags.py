"""The names the report reads: the folders and scalar tags tfdist's callbacks and Keras write.

    accuracy_tag(run)     # "epoch_accuracy", or the run's first "epoch_*accuracy" tag of train/

See docs/callbacks.md ("What a run records") for who writes each.
"""
from __future__ import annotations

from tfdist.report.events import Run

TRAIN, VALIDATION = "train", "validation"
WALL_TIME_TAG = "epoch_wall_time_s"
LOSS_TAG = "epoch_loss"
RATE_TAG = "epoch_examples_per_second"
MEAN_RATE_TAG = "mean_examples_per_second"
TIME_TO_TARGET_PREFIX = "time_to_target/"
TIME_TO_HPARAM_PREFIX = "time_to_"
#: hparams that may differ between runs of one scaling group.
SCALING_FREE = ("workers", "global_batch_size")
SYSTEM_PREFIX = "system/"
SYSTEM_TAGS = ("system/cpu_percent", "system/rss_mb", "system/net_sent_mbit_s", "system/net_recv_mbit_s")
PREDICTED_RATE_TAG = "advice/predicted_examples_per_second"
PREDICTED_STEP_TAG = "advice/predicted_step_ms"
MEASURED_RATE_TAG = "advice/measured_examples_per_second"
MEASURED_STEP_TAG = "advice/measured_step_ms"
RATIO_TAG = "advice/measured_over_predicted"
PLAN_PREFIX = "plan/"
EVALUATE_PREFIX = "evaluate/"
TRAIN_TIME_TAG = "train_time_s"


def accuracy_tag(run: Run) -> str | None:
    """``epoch_accuracy`` when logged, else the first ``epoch_*accuracy`` tag of ``train/``, else None."""
    tags = run.tags(TRAIN)
    if "epoch_accuracy" in tags:
        return "epoch_accuracy"
    return next((t for t in tags if t.startswith("epoch_") and t.endswith("accuracy")), None)
