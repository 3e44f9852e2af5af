"""The installed Horovod really runs a 2-rank Gloo job with TensorFlow ops."""
import re

import pytest

pytestmark = pytest.mark.horovod


def test_allreduce_sums_over_two_gloo_ranks(run_horovod):
    result = run_horovod("hvd_allreduce.py", np=2)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = re.findall(r"rank=(\d) size=(\d) sum=\[([\d.]+), ([\d.]+)\]", result.stdout)
    assert sorted(rank for rank, *_ in lines) == ["0", "1"], result.stdout
    for _, size, first, second in lines:
        assert size == "2"
        assert float(first) == 1.0 + 2.0  # ranks contribute 1 and 2
        assert float(second) == 20.0
