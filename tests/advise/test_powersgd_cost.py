"""The advisor's model of PowerSGD (issue 38): the bytes a step sends, its two allreduce rounds and
its own work, and where it pays (pure, no TensorFlow)."""
from __future__ import annotations

import pytest

from tfdist.advise import cost
from tfdist.advise.errors import AdviseError
from tfdist.advise.model_inputs import Cluster, Workload
from tfdist.runtime.lowrank import PowerSGDSettings

MBIT = 125e3
# the benchmarks' MLP: 784 -> 512 -> 512 -> 10, its kernels as the job reports them
MLP = Workload(params=669_706, batch_size=64, step_ms=10.0, matrices=((784, 512), (512, 512), (512, 10)))


def lab(rate: float, overhead_ms: float = 1.0) -> tuple[Cluster, Workload]:
    return (Cluster(workers=2, ps=1, bandwidths=(rate, rate), ps_bandwidth=rate),
            Workload(**{**MLP.__dict__, "allreduce_overhead_ms": overhead_ms}))


def test_the_wire_carries_the_factors_and_the_rest_whole():
    cluster, workload = lab(50 * MBIT)
    found = cost.horovod_powersgd(cluster, workload)
    factors = (784 + 512) * 4 + (512 + 512) * 4 + (512 + 10) * 4
    rest = 669_706 - 784 * 512 - 512 * 512 - 512 * 10
    assert found.wire_bytes == pytest.approx((factors + rest) * 4)  # one rank's share of a 2-rank ring: half each way
    assert cost.horovod(cluster, workload).wire_bytes / found.wire_bytes > 50


def test_on_slow_links_it_beats_the_plain_ring_past_the_fp16_wall():
    cluster, workload = lab(50 * MBIT)
    plain, fp16 = cost.horovod(cluster, workload), cost.horovod(cluster, workload, compression="fp16")
    low_rank = cost.horovod_powersgd(cluster, workload)
    assert low_rank.examples_per_second > 4 * plain.examples_per_second  # the target at 50 Mbit/s
    assert low_rank.examples_per_second > 2 * fp16.examples_per_second
    # 8 ms on the wire and 5 ms of its own work, against 429 ms of the plain ring's transfer
    assert low_rank.communication_ms < 0.05 * plain.communication_ms


def test_on_unlimited_links_its_own_work_and_second_round_cost_more_than_they_save():
    """The lab's unlimited links, with the ring's fixed cost measured on the job (about 8 ms a round)."""
    cluster, workload = lab(2e9, overhead_ms=8.0)
    assert cost.horovod_powersgd(cluster, workload).examples_per_second < cost.horovod(cluster, workload).examples_per_second


def test_without_matrices_nothing_is_compressed_and_a_higher_rank_sends_more():
    cluster, workload = lab(50 * MBIT)
    bare = Workload(params=669_706, batch_size=64, step_ms=10.0)
    assert cost.horovod_powersgd(cluster, bare).wire_bytes == cost.horovod(cluster, bare).wire_bytes
    assert (cost.horovod_powersgd(cluster, workload, PowerSGDSettings(rank=16)).wire_bytes
            > cost.horovod_powersgd(cluster, workload).wire_bytes)


@pytest.mark.parametrize("matrices", [((784, 0),), ((784,),), [(784, 512)], ((784, 512.0),), ((100_000, 100_000),)])
def test_matrices_that_are_not_the_models_are_refused_naming_the_field(matrices):
    with pytest.raises(AdviseError, match=r"`?matrices`?.*; fix: ") as info:
        Workload(params=669_706, batch_size=64, step_ms=10.0, matrices=matrices)
    assert info.value.field == "matrices"
