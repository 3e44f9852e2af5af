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


def test_the_advisor_picks_it_only_where_the_wire_limits_the_ring_and_says_what_it_changes():
    from tfdist.advise.recommend import advise, allowed

    slow, slow_workload = lab(50 * MBIT)
    found = cost.predict_all(slow, slow_workload)
    assert "horovod_powersgd" in found and "horovod_powersgd" in allowed(found)
    advice = advise(slow, slow_workload)
    assert advice.variant == "horovod_powersgd", advice.reasons
    assert any("may need more epochs" in reason for reason in advice.reasons), advice.reasons
    fast, fast_workload = lab(2e9, overhead_ms=8.0)
    found = cost.predict_all(fast, fast_workload)
    assert "horovod_powersgd" not in allowed(found)  # the ring is not wire-bound: no compression
    assert advise(fast, fast_workload).variant != "horovod_powersgd"
    assert "horovod_powersgd" not in cost.predict_all(slow, Workload(params=669_706, batch_size=64, step_ms=10.0))


def test_under_multi_worker_mirrored_the_same_factors_go_through_the_slower_collectives():
    """The same bytes as Horovod's PowerSGD, at the share of the link TensorFlow's collectives reach and
    with their fixed cost a round; and no overlap (Keras aggregates after the backward pass)."""
    cluster, workload = lab(50 * MBIT)
    mirrored, plain = cost.multi_worker_mirrored_powersgd(cluster, workload), cost.multi_worker_mirrored(cluster, workload)
    assert mirrored.wire_bytes == cost.horovod_powersgd(cluster, workload).wire_bytes
    # 1.2 kB of factors and bias per step at 0.6 of 50 Mbit/s: about 13 ms, against 427 ms of plain gradients
    assert mirrored.communication_ms == pytest.approx(
        (2 * 2 * 1 * cluster.latency_s + mirrored.wire_bytes / (50 * MBIT * cost.MWMS_BANDWIDTH_FACTOR)) * 1000)
    assert mirrored.examples_per_second > 4 * plain.examples_per_second  # measured 4.8x on the lab (docs/powersgd.md)
    assert mirrored.examples_per_second < cost.horovod_powersgd(cluster, workload).examples_per_second
    fast, fast_workload = lab(2e9, overhead_ms=8.0)
    assert (cost.multi_worker_mirrored_powersgd(fast, fast_workload).examples_per_second
            < cost.multi_worker_mirrored(fast, fast_workload).examples_per_second)


def test_without_horovod_the_advisor_plans_powersgd_on_multi_worker_mirrored_where_the_wire_limits_it():
    from tfdist.advise.recommend import advise, allowed

    no_horovod = {"horovod": "Horovod with its TensorFlow ops is not installed on w2"}
    slow, slow_workload = lab(50 * MBIT)
    advice = advise(slow, slow_workload, unavailable=no_horovod)
    assert advice.variant == "multi_worker_mirrored_powersgd", advice.reasons
    assert any("make_strategy('multi_worker_mirrored', compression='powersgd')" in reason
               for reason in advice.reasons), advice.reasons
    fast, fast_workload = lab(2e9, overhead_ms=8.0)
    assert advise(fast, fast_workload, unavailable=no_horovod).variant == "parameter_server"  # not wire-bound: no
    assert "multi_worker_mirrored_powersgd" not in allowed(cost.predict_all(fast, fast_workload))  # compression
    assert advise(slow, slow_workload).variant == "horovod_powersgd"  # with Horovod, its ring is faster


def test_the_probe_hands_the_measured_models_kernels_to_the_model_and_not_its_tables():
    from tfdist.launch.hosts import parse_hosts
    from tfdist.probe.driver import LinkMeasure, aggregate, ring

    links = [LinkMeasure(a, b, 50 * MBIT * 8, 1e-4) for a, b in ring(["w1", "w2", "p"])]
    variables = [((50_000, 16), 4), ((3, 3, 16, 32), 4), ((32,), 4), ((288, 64), 4), ((64,), 4)]
    found = aggregate(parse_hosts("w1:1,w2:1,p:1"), links, steps={"w1": 10.0, "w2": 10.0}, params=830_000,
                      dtype_bytes=4, batch_size=64, variables=variables, embeddings=[(50_000, 16, 1.0)])
    workload = found.to_workload(64)
    assert workload.matrices == ((144, 32), (288, 64))  # the embedding table left out, the conv kernel as 144 x 32
    assert found.to_workload(64, params=900_000).matrices == ()  # another model's count: its kernels are unknown


def test_the_rate_the_probe_timed_replaces_the_assumed_one_and_a_slow_worker_does_it_slower():
    cluster, workload = lab(50 * MBIT)
    assumed = cost.horovod_powersgd(cluster, workload)
    measured = Workload(**{**workload.__dict__, "powersgd_bytes_per_s": cost.POWERSGD_MATRIX_BYTES_PER_S / 10})
    slower = cost.horovod_powersgd(cluster, measured)
    held = (784 * 512 + 512 * 512 + 512 * 10) * 4  # every kernel of the MLP is compressed at rank 4
    extra_ms = held / (cost.POWERSGD_MATRIX_BYTES_PER_S / 10) * 1000 - held / cost.POWERSGD_MATRIX_BYTES_PER_S * 1000
    assert slower.step_ms == pytest.approx(assumed.step_ms + extra_ms)
    halved = Cluster(workers=2, ps=1, bandwidths=(50 * MBIT,) * 2, ps_bandwidth=50 * MBIT, speeds=(1.0, 0.5))
    # its work runs on every worker between the allreduces: the slow one takes twice as long over it
    assert cost.horovod_powersgd(halved, measured).step_ms - cost.horovod_powersgd(halved, workload).step_ms \
        == pytest.approx(2 * extra_ms)


@pytest.mark.parametrize("rate", [0, -1.0, float("nan"), True, "5e8", 1e20])
def test_a_bad_measured_rate_is_refused_naming_the_field(rate):
    with pytest.raises(AdviseError, match=r"powersgd_bytes_per_s.*; fix: ") as info:
        Workload(params=669_706, batch_size=64, step_ms=10.0, powersgd_bytes_per_s=rate)
    assert info.value.field == "powersgd_bytes_per_s"


def test_the_probes_timed_rate_reaches_the_workload_and_its_json():
    from tfdist.launch.hosts import parse_hosts
    from tfdist.probe.driver import LinkMeasure, aggregate, ring

    links = [LinkMeasure(a, b, 50 * MBIT * 8, 1e-4) for a, b in ring(["w1", "w2", "p"])]
    found = aggregate(parse_hosts("w1:1,w2:1,p:1"), links, steps={"w1": 10.0, "w2": 20.0}, params=669_706,
                      dtype_bytes=4, batch_size=64, variables=[((784, 512), 4), ((512,), 4)],
                      powersgd_bytes_per_s=2e8)
    assert found.to_workload(64).powersgd_bytes_per_s == 2e8
    assert found.as_dict()["powersgd_bytes_per_s"] == 2e8
