"""The installed Horovod really runs a 2-rank Gloo job with TensorFlow ops."""
import re

import pytest
from support import horovodrun

pytestmark = pytest.mark.horovod


@pytest.fixture(scope="module")
def job():
    """tests/scripts/hvd_allreduce.py under a real 2-rank ``horovodrun --gloo``, once for the module."""
    result = horovodrun("hvd_allreduce.py", np=2)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_allreduce_sums_over_two_gloo_ranks(job):
    result = job
    lines = re.findall(r"rank=(\d) size=(\d) sum=\[([\d.]+), ([\d.]+)\]", result.stdout)
    assert sorted(rank for rank, *_ in lines) == ["0", "1"], result.stdout
    for _, size, first, second in lines:
        assert size == "2"
        assert float(first) == 1.0 + 2.0  # ranks contribute 1 and 2
        assert float(second) == 20.0


def test_a_tf_keras_rank_wraps_its_optimizers_with_horovods_class_and_never_imports_keras_3(job):
    """``horovod.tensorflow.keras`` imports Keras 3 (``from keras import backend``); tfdist makes
    Horovod's tf-keras wrapper without importing that module (a CPU-second of every rank's start-up)."""
    lines = re.findall(r"rank=(\d) optimizers=(\S+) keras3=(\w+)", job.stdout)
    assert sorted(rank for rank, *_ in lines) == ["0", "1"], job.stdout
    for _, optimizers, keras3 in lines:
        assert optimizers.split(",") == ["horovod._keras.SGD"] * 2, optimizers
        assert keras3 == "False"
