"""Re-fitting the cost model from measured epochs (tfdist/adapt/refit.py, measured.py), without
TensorFlow: epochs are made from the model's own equations for a known "true" cluster, and the re-fit
of a launch-time cluster must find that cluster again."""
from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

from tfdist.adapt import AdaptError, EpochMeasurement, WorkerEpoch, decide, epoch_seconds, refit
from tfdist.adapt.refit import (EVEN_SPEED, current_regime, ps_overhead_ms, regime_window, ring_overhead_ms,
                                speeds_at_rest, stragglers)
from tfdist.advise import cost
from tfdist.advise.errors import AdviseError
from tfdist.advise.model_inputs import Cluster, Workload

GBIT = 125e6
SMALL = Workload(params=669_706, batch_size=64, step_ms=10.0)
LAUNCHED = Cluster(workers=2, ps=1, bandwidths=(GBIT,))


def measure(truth: Cluster, workload: Workload, variant: str, epoch: int = 1) -> EpochMeasurement:
    """What a job on ``truth`` reports, by the model's equations: a ring's wait is the rest of the step
    after the worker's compute (the ring, the step's fixed cost and the wait for the slowest worker);
    a ps worker pulls then pushes the whole model over its host's link, and its communication holds the
    step's fixed cost and (de)serialisation too (ParameterServerMetrics: the fastest worker's step less
    its compute)."""
    computes = [workload.step_ms / s for s in truth.speeds]
    m = workload.model_bytes
    workers = []
    for worker, compute in enumerate(computes):
        if variant == "parameter_server":
            bandwidth = truth.bandwidths[truth.host_of(worker)]
            comm, moved = (2 * m / bandwidth + 2 * truth.latency_s + cost.ps_fixed_s(workload)) * 1000, 2 * m
        else:
            prediction = cost.predict_all(truth, workload)[variant]
            comm = prediction.step_ms - compute
            moved = 2 * prediction.wire_bytes  # sent and received at once
        workers.append(WorkerEpoch(compute_ms=compute, communication_ms=comm,
                                   examples_per_second=workload.batch_size / (compute + comm) * 1000,
                                   bytes_per_step=moved))
    return EpochMeasurement(epoch=epoch, variant=variant, workers=tuple(workers))


def test_a_straggler_at_a_quarter_of_a_core_is_recovered_from_its_compute_time():
    truth = dataclasses.replace(LAUNCHED, speeds=(1.0, 0.25))
    for variant in ("horovod", "parameter_server"):
        cluster, workload = refit(LAUNCHED, SMALL, [measure(truth, SMALL, variant)])
        assert cluster.speeds == pytest.approx((1.0, 0.25))
        assert workload.step_ms == pytest.approx(10.0)
        assert cluster.bandwidths == pytest.approx((GBIT, GBIT))  # the link is not blamed for the wait
        assert (cluster.ps, cluster.ps_bandwidth, workload.params) == (1, GBIT, SMALL.params)


def test_step_ms_is_the_fastest_workers_compute_and_speeds_are_relative_to_it():
    truth = dataclasses.replace(LAUNCHED, speeds=(0.5, 0.25))  # both slower than at launch
    cluster, workload = refit(LAUNCHED, SMALL, [measure(truth, SMALL, "horovod")])
    assert workload.step_ms == pytest.approx(20.0) and cluster.speeds == pytest.approx((1.0, 0.5))


def test_a_slowed_link_is_recovered_from_bytes_over_communication_time():
    truth = dataclasses.replace(LAUNCHED, bandwidths=(GBIT / 20,))  # both links at 50 Mbit/s
    for variant in ("horovod", "parameter_server", "multi_worker_mirrored"):
        cluster, _ = refit(LAUNCHED, SMALL, [measure(truth, SMALL, variant)])
        assert cluster.bandwidths == pytest.approx((GBIT / 20,) * 2, rel=1e-6), variant


def test_parameter_servers_tell_the_slow_host_apart_and_a_ring_cannot():
    truth = dataclasses.replace(LAUNCHED, bandwidths=(GBIT, GBIT / 20))
    cluster, _ = refit(LAUNCHED, SMALL, [measure(truth, SMALL, "parameter_server")])
    assert cluster.bandwidths == pytest.approx((GBIT, GBIT / 20))
    cluster, _ = refit(LAUNCHED, SMALL, [measure(truth, SMALL, "horovod")])
    assert cluster.bandwidths == pytest.approx((GBIT / 20, GBIT / 20))  # the ring's pace, for every host


def test_the_refitted_model_predicts_what_the_true_cluster_predicts():
    """Uneven workers (within EVEN_SPEED) on slow links: both are found, and every plan is predicted
    as on the true cluster. (With a straggler the ring says nothing of its links: the test below.)"""
    truth = dataclasses.replace(LAUNCHED, speeds=(1.0, 0.8), bandwidths=(GBIT / 20,))
    cluster, workload = refit(LAUNCHED, SMALL, [measure(truth, SMALL, "horovod")])
    for name, prediction in cost.predict_all(truth, SMALL).items():
        refitted = cost.predict_all(cluster, workload)[name]
        assert refitted.examples_per_second == pytest.approx(prediction.examples_per_second, rel=1e-6), name


#: The benchmarks' MLP with its kernels, which PowerSGD compresses; a ring's fixed cost as the lab's (8 ms)
MLP = dataclasses.replace(SMALL, matrices=((784, 512), (512, 512), (512, 10)), allreduce_overhead_ms=8.0)


@pytest.mark.parametrize("variant", ["horovod", "horovod_fp16", "horovod_powersgd", "multi_worker_mirrored"])
def test_a_ring_is_read_as_its_variant_adds_up_its_wait(variant):
    """PowerSGD pays two rounds' latency and fixed cost and its own products between them, fp16 its
    casts: with one round's fixed cost taken off its wait, as for a plain ring, the re-fit of the model's
    own figures missed the links under both (PowerSGD at 0.44x their rate)."""
    truth = dataclasses.replace(LAUNCHED, speeds=(1.0, 0.9), bandwidths=(GBIT / 20,))
    cluster, workload = refit(LAUNCHED, MLP, [measure(truth, MLP, variant)])
    assert cluster.bandwidths == pytest.approx((GBIT / 20,) * 2, rel=1e-6)
    for name, prediction in cost.predict_all(truth, MLP).items():
        refitted = cost.predict_all(cluster, workload)[name]
        assert refitted.examples_per_second == pytest.approx(prediction.examples_per_second, rel=1e-6), name


@pytest.mark.parametrize("variant", ["horovod", "horovod_fp16", "horovod_powersgd"])
def test_the_rings_fixed_cost_a_round_is_found_from_any_horovod_variant(variant):
    """The Replanner measures it once, on the first even ring epochs at the probe's links: PowerSGD's
    wait holds it twice (two rounds) beside its own work, fp16's beside its casts."""
    truth = dataclasses.replace(LAUNCHED, bandwidths=(GBIT / 20,))
    assert ring_overhead_ms(truth, [measure(truth, MLP, variant)], MLP) == pytest.approx(8.0)
    assert ring_overhead_ms(truth, [measure(truth, MLP, "parameter_server")], MLP) is None


def test_a_parameter_server_steps_fixed_cost_is_found_at_the_launch_links_and_the_links_past_it():
    """What a worker's communication holds beyond the wire and the (de)serialisation is the step's fixed
    cost; with it the links read as they are. A ps on the workers' hosts is not read: each worker moves
    its own share, and the communication the chief reports is the fastest's."""
    costly = dataclasses.replace(SMALL, ps_overhead_ms=14.0)
    truth = dataclasses.replace(LAUNCHED, speeds=(1.0, 0.25))
    epoch = measure(truth, costly, "parameter_server")
    assert ps_overhead_ms(LAUNCHED, [epoch], SMALL) == pytest.approx(14.0)
    assert ps_overhead_ms(LAUNCHED, [measure(truth, costly, "horovod")], SMALL) is None
    assert refit(LAUNCHED, costly, [epoch])[0].bandwidths == pytest.approx((GBIT, GBIT))
    colocated = Cluster(workers=2, ps=1, bandwidths=(GBIT,), ps_placement="colocated")
    assert ps_overhead_ms(colocated, [epoch], SMALL) is None
    assert refit(colocated, SMALL, [epoch])[0].bandwidths == colocated.bandwidths


def test_the_median_of_the_last_epochs_ignores_one_outlier_and_older_epochs():
    steady, straggling = LAUNCHED, dataclasses.replace(LAUNCHED, speeds=(1.0, 0.25))
    epochs = [measure(steady, SMALL, "horovod", epoch=e) for e in (1, 2, 3)]
    epochs[1] = measure(straggling, SMALL, "horovod", epoch=2)  # one slow epoch among three
    assert refit(LAUNCHED, SMALL, epochs)[0].speeds == pytest.approx((1.0, 1.0))
    later = [measure(straggling, SMALL, "horovod", epoch=e) for e in (6, 4, 5)]  # any order
    assert refit(LAUNCHED, SMALL, epochs + later)[0].speeds == pytest.approx((1.0, 0.25))
    assert refit(LAUNCHED, SMALL, epochs, last=1)[0].speeds == pytest.approx((1.0, 1.0))  # epoch 3 alone


def test_a_change_of_who_straggles_is_refitted_on_from_its_first_epoch():
    """Scenario B: w2 drops to a quarter of a core after two even epochs. The median of the last three
    saw it only once two of them were slow; the new regime counts from its first epoch, and so does a
    recovery. Within a regime the median still holds (the slow epochs' figures, not the even ones')."""
    steady, straggling = LAUNCHED, dataclasses.replace(LAUNCHED, speeds=(1.0, 0.25))
    epochs = [measure(steady, SMALL, "horovod", epoch=e) for e in (1, 2)]
    slow = measure(straggling, SMALL, "horovod", epoch=3)
    assert current_regime([*epochs, slow]) == [slow]
    assert refit(LAUNCHED, SMALL, [*epochs, slow])[0].speeds == pytest.approx((1.0, 0.25))
    assert stragglers(slow) == {1} and stragglers(epochs[0]) == frozenset()
    recovered = measure(steady, SMALL, "horovod", epoch=5)
    slower = [slow, measure(straggling, SMALL, "horovod", epoch=4)]
    assert current_regime([*slower, recovered]) == [recovered]
    assert refit(LAUNCHED, SMALL, [*slower, recovered])[0].speeds == pytest.approx((1.0, 1.0))
    assert current_regime([*epochs, *slower]) == slower
    noisy = measure(dataclasses.replace(LAUNCHED, speeds=(1.0, 0.6)), SMALL, "horovod", epoch=3)
    assert current_regime([*epochs, noisy]) == [*epochs, noisy]  # a loaded machine's noise: the median's
    assert refit(LAUNCHED, SMALL, [*epochs, noisy])[0].speeds == pytest.approx((1.0, 1.0))


def test_a_worker_hovering_about_the_straggler_line_stays_one_regime():
    """Below CLEAR_STRAGGLER a worker straggles; it is even again only above CAUGHT_UP. Without that
    margin, 0.45, 0.55, 0.48 of the fastest made three regimes of one epoch each, and the re-fit read
    the compute from the last epoch alone."""
    hovering = [measure(dataclasses.replace(LAUNCHED, speeds=(1.0, share)), SMALL, "horovod", epoch=e)
                for e, share in enumerate((0.45, 0.55, 0.48), start=1)]
    assert current_regime(hovering) == hovering
    assert stragglers(hovering[1]) == frozenset() and stragglers(hovering[1], frozenset({1})) == {1}
    assert refit(LAUNCHED, SMALL, hovering)[0].speeds == pytest.approx((1.0, 0.48))  # the median
    caught_up = measure(dataclasses.replace(LAUNCHED, speeds=(1.0, 0.7)), SMALL, "horovod", epoch=4)
    assert current_regime([*hovering, caught_up]) == [caught_up]
    longer = [measure(dataclasses.replace(LAUNCHED, speeds=(1.0, share)), SMALL, "horovod", epoch=e)
              for e, share in enumerate((0.45, 0.55, 0.55, 0.48), start=1)]  # the window of 3 starts at 0.55
    assert regime_window(longer) == longer[1:]
    assert refit(LAUNCHED, SMALL, longer)[0].speeds == pytest.approx((1.0, 0.55))


def test_links_that_just_slowed_count_at_the_slower_of_two_epochs_not_their_mean():
    """The lab's scenario C: links drop from unlimited to 50 Mbit/s; of the three epochs a re-fit reads, the
    last fast one and the first slow one say something about the links, and the one between looked like a
    straggler's (a slow link's first epoch is uneven). The mean of the two read the links as half as fast
    as before (the run left the ring for parameter servers predicted 49x too fast); the slower counts."""
    fast, slow = LAUNCHED, dataclasses.replace(LAUNCHED, bandwidths=(GBIT / 160,))
    uneven = dataclasses.replace(slow, speeds=(1.0, 0.6))  # below EVEN_SPEED: says nothing of the links
    epochs = [measure(fast, SMALL, "horovod", 3), measure(uneven, SMALL, "horovod", 4),
              measure(slow, SMALL, "horovod", 5)]
    assert refit(LAUNCHED, SMALL, epochs)[0].bandwidths == pytest.approx((GBIT / 160,) * 2, rel=1e-6)


def test_links_the_epochs_say_nothing_about_keep_their_launch_rate():
    one_host = Cluster(workers=2, workers_per_host=2, bandwidths=(GBIT,))
    epoch = measure(Cluster(workers=2, workers_per_host=2, bandwidths=(GBIT / 20,)), SMALL, "horovod")
    assert refit(one_host, SMALL, [epoch])[0].bandwidths == (GBIT,)  # the ring never left the host
    silent = EpochMeasurement(1, "horovod", tuple(dataclasses.replace(w, bytes_per_step=0.0)
                                                  for w in measure(LAUNCHED, SMALL, "horovod").workers))
    assert refit(LAUNCHED, SMALL, [silent])[0].bandwidths == (GBIT, GBIT)
    hierarchical = EpochMeasurement(1, "horovod_hierarchical", silent.workers)
    assert refit(LAUNCHED, SMALL, [hierarchical])[0].bandwidths == (GBIT, GBIT)


def test_from_measured_epochs_to_a_switch():
    """Measured epochs -> re-fit -> predict_all -> decide, on the lab's unlimited links (10 Gbit/s): the
    model then predicts Horovod 9,593 ex/s against parameter servers 6,146 on identical workers (the lab:
    8,355 and 4,476), and 2,762 against 4,045 with a worker at a quarter of a core (2,252 and 4,191)."""
    lab = Cluster(workers=2, ps=1, bandwidths=(10 * GBIT,))
    for speeds, switch in (((1.0, 1.0), False), ((1.0, 0.25), True)):
        epochs = [measure(dataclasses.replace(lab, speeds=speeds), SMALL, "horovod", e) for e in (2, 3)]
        seconds = epoch_seconds(cost.predict_all(*refit(lab, SMALL, epochs)), 60_000)
        assert set(seconds) == {"horovod", "horovod_fp16", "parameter_server", "multi_worker_mirrored"}
        decision = decide(seconds, "horovod", epoch=3, planned_at=0, epochs_remaining=30)
        assert (decision.switch, decision.to) == (switch, "parameter_server" if switch else None)


def test_a_measurement_round_trips_through_its_report():
    epoch = measure(LAUNCHED, SMALL, "parameter_server", epoch=4)
    assert EpochMeasurement.from_dict(epoch.as_dict()) == epoch
    assert epoch.backend == "parameter_server"
    assert epoch.examples_per_second == pytest.approx(sum(w.examples_per_second for w in epoch.workers))
    beside = dataclasses.replace(epoch, workers=(dataclasses.replace(epoch.workers[0], rest_compute_ms=2.4),
                                                 *epoch.workers[1:]))
    assert [sorted(w) for w in beside.as_dict()["workers"]] == [sorted([*GOOD, "rest_compute_ms"]), sorted(GOOD)]
    assert EpochMeasurement.from_dict(beside.as_dict()) == beside
    counted = dataclasses.replace(epoch, workers=tuple(dataclasses.replace(w, link_bytes_per_step=5.6e6,
                                                                           memory_bytes=8.1e8) for w in epoch.workers))
    assert EpochMeasurement.from_dict(counted.as_dict()) == counted
    for field, bad in (("link_bytes_per_step", -1.0), ("memory_bytes", 0.0), ("memory_bytes", "1 GB")):
        report = counted.as_dict()
        report["workers"][1][field] = bad
        with pytest.raises(AdaptError) as info:
            EpochMeasurement.from_dict(report)
        assert info.value.field == f"workers[1].{field}"


GOOD = {"compute_ms": 10.0, "communication_ms": 2.0, "examples_per_second": 100.0, "bytes_per_step": 1e6}


@pytest.mark.parametrize("field, value", [
    ("compute_ms", -1.0), ("compute_ms", 0.0), ("communication_ms", math.nan), ("communication_ms", -0.5),
    ("examples_per_second", math.inf), ("bytes_per_step", "5MB"), ("compute_ms", True),
    ("rest_compute_ms", 0.0), ("rest_compute_ms", "2ms"),
])
def test_a_bad_worker_figure_names_its_field_and_the_fix(field, value):
    with pytest.raises(AdaptError) as info:
        WorkerEpoch(**{**GOOD, field: value})
    assert info.value.field == field and f"`{field}`" in str(info.value) and "; fix: " in str(info.value)
    report = {"epoch": 1, "variant": "horovod", "workers": [GOOD, {**GOOD, field: value}]}
    with pytest.raises(AdaptError) as info:
        EpochMeasurement.from_dict(report)
    assert info.value.field == f"workers[1].{field}" and "; fix: " in str(info.value)


@pytest.mark.parametrize("report, field, words", [
    ({"epoch": 1, "variant": "horovd", "workers": [GOOD]}, "variant", "parameter_server"),
    ({"epoch": -1, "variant": "horovod", "workers": [GOOD]}, "epoch", "-1"),
    ({"epoch": 1, "variant": "horovod", "workers": []}, "workers", "non-empty"),
    ({"epoch": 1, "variant": "horovod", "workers": "w1"}, "workers", "list"),
    ({"epoch": 1, "variant": "horovod"}, "epoch measurement", "missing workers"),
    ({"epoch": 1, "variant": "horovod", "workers": [{**GOOD, "gpu_ms": 1}]}, "workers[0]", "gpu_ms"),
    ([1, 2], "epoch measurement", "JSON object"),
])
def test_a_bad_report_names_its_field(report, field, words):
    with pytest.raises(AdaptError) as info:
        EpochMeasurement.from_dict(report)
    assert info.value.field == field and words in str(info.value) and "; fix: " in str(info.value)


def test_refit_refuses_no_epochs_another_worker_count_and_a_stalled_worker():
    for epochs, field in (([], "epochs"), (None, "epochs"), (["epoch"], "epochs[0]")):
        with pytest.raises(AdaptError) as info:
            refit(LAUNCHED, SMALL, epochs)
        assert info.value.field == field and "; fix: " in str(info.value)
    three = measure(Cluster(workers=3, ps=1, bandwidths=(GBIT,)), SMALL, "horovod")
    with pytest.raises(AdaptError, match="3 worker.*cluster has 2") as info:
        refit(LAUNCHED, SMALL, [three])
    assert info.value.field == "workers"
    with pytest.raises(AdaptError) as info:
        refit(LAUNCHED, SMALL, [three], last=0)
    assert info.value.field == "last"
    stalled = EpochMeasurement(1, "parameter_server", (WorkerEpoch(**GOOD),
                                                       WorkerEpoch(**{**GOOD, "compute_ms": 1e9})))
    with pytest.raises(AdviseError) as info:  # the model's own range, with its fix
        refit(LAUNCHED, SMALL, [stalled])
    assert info.value.field == "speeds" and "stalled worker" in str(info.value)


@settings(max_examples=examples(100), deadline=None)
@given(slow=st.lists(st.floats(0.01, 1.0), min_size=1, max_size=5),
       rates=st.lists(st.floats(1e6, 1e10), min_size=6, max_size=6),
       variant=st.sampled_from(["horovod", "parameter_server", "multi_worker_mirrored"]))
def test_any_measured_cluster_is_found_again(slow, rates, variant):
    """Speeds (the fastest at 1) are always found; per-host rates under parameter servers, the slowest
    link's rate under a ring, except with a straggler (below ``EVEN_SPEED``): then the ring says
    nothing of the links and they keep their launch rate. A ring's links faster than at launch are
    read no slower than at launch and no faster than they are (as far as the step shows them carrying)."""
    workers = len(slow) + 1
    truth = Cluster(workers=workers, ps=1, speeds=(1.0, *slow), bandwidths=tuple(rates[:workers]))
    launched = Cluster(workers=workers, ps=1, bandwidths=(GBIT,))
    measured = measure(truth, SMALL, variant)
    cluster, workload = refit(launched, SMALL, [measured])
    assert cluster.speeds == pytest.approx(truth.speeds, rel=1e-9)
    assert workload.step_ms == pytest.approx(SMALL.step_ms)
    slowest = min(truth.bandwidths)
    if variant == "parameter_server":
        assert cluster.bandwidths == pytest.approx(truth.bandwidths, rel=1e-6)
    elif min(slow) < EVEN_SPEED:
        assert cluster.bandwidths == pytest.approx((GBIT,) * workers, rel=1e-6)
    elif slowest <= GBIT:
        assert cluster.bandwidths == pytest.approx((slowest,) * workers, rel=1e-6)
    else:
        assert len(set(cluster.bandwidths)) == 1 and GBIT * (1 - 1e-6) <= cluster.bandwidths[0] <= slowest * (1 + 1e-6)


def test_a_ring_caps_each_hosts_link_at_its_own_launch_rate():
    """Links launched at 10 and 100 MB/s, a compute-bound ring on links of 200 MB/s: each host keeps the
    rate its own probe found (the ring's one rate, capped per host), not the slower host's."""
    launched = Cluster(workers=2, ps=1, bandwidths=(10e6, 100e6))
    truth = dataclasses.replace(launched, bandwidths=(200e6, 200e6))
    compute_bound = dataclasses.replace(SMALL, params=2_000, step_ms=50.0)
    cluster, _ = refit(launched, compute_bound, [measure(truth, compute_bound, "horovod")])
    assert cluster.bandwidths == pytest.approx((10e6, 100e6)), cluster.bandwidths


@pytest.mark.parametrize("variant", ["horovod", "multi_worker_mirrored"])
def test_a_ring_reads_its_links_faster_than_at_launch_as_far_as_its_steps_carried(variant):
    """A wire-bound ring on links 4x faster than the probe said: its steps carried more than the launch
    rate, which the re-fit takes, up to the links' own rate. The same ring with a step that is mostly
    compute carried less than the launch rate a second: its short wait says only that the links are no
    slower than at launch (a token bucket lets a short exchange through at once)."""
    launched = Cluster(workers=2, ps=1, bandwidths=(10e6,))
    truth = dataclasses.replace(launched, bandwidths=(40e6, 40e6))
    wire_bound = dataclasses.replace(SMALL, params=2_000_000)
    cluster, _ = refit(launched, wire_bound, [measure(truth, wire_bound, variant)])
    assert 20e6 < cluster.bandwidths[0] <= 40e6 * (1 + 1e-6), cluster.bandwidths
    compute_bound = dataclasses.replace(SMALL, params=2_000, step_ms=50.0)
    cluster, _ = refit(launched, compute_bound, [measure(truth, compute_bound, variant)])
    assert cluster.bandwidths == pytest.approx((10e6, 10e6)), cluster.bandwidths


def test_a_ring_paced_by_a_cpu_starved_straggler_keeps_the_links_launch_rate():
    """The lab (tests/multihost/test_adaptive_run.py): two even Horovod ranks waited 9.2 ms a step on
    unlimited links; w2 at a tenth of a core computes 66 ms and the ring's wait grows to 81 ms on both.
    The links did not change: a parameter server on them would not be network-bound. The even epoch's
    wait is the baseline, whether or not it is among the epochs the median reads."""
    lab = Cluster(workers=2, ps=1, bandwidths=(2e9, 2.5e9), ps_bandwidth=2.4e9)
    moved = 2 * 2 * 0.5 * SMALL.model_bytes
    even = EpochMeasurement(1, "horovod", (WorkerEpoch(5.4, 9.2, 4364.0, moved), WorkerEpoch(5.1, 9.5, 4361.0, moved)))
    slow = [EpochMeasurement(e, "horovod", (WorkerEpoch(6.1, 142.2, 431.0, moved), WorkerEpoch(66.4, 81.6, 432.0, moved)))
            for e in (2, 3)]
    # what the even epoch's wait says of the links: less the latency and the step's fixed cost, which
    # paces with the slower rank (5.1 against 5.4 ms of compute)
    ring_rate = moved / 2 / (9.2 / 1000 - 2 * lab.latency_s - SMALL.allreduce_overhead_ms / 1000 / (5.1 / 5.4))
    for last, links in ((3, (ring_rate, ring_rate)), (2, lab.bandwidths)):
        cluster, workload = refit(lab, SMALL, [even, *slow], last=last)  # the even epoch in the median, or not
        assert cluster.speeds == pytest.approx((1.0, 6.1 / 66.4))
        assert cluster.bandwidths == pytest.approx(links)  # not the 16 MB/s the straggler's wait would say
        predicted = cost.predict_all(cluster, workload)
        assert predicted["parameter_server"].examples_per_second > 1.3 * predicted["horovod"].examples_per_second


def test_a_straggler_is_told_from_slow_links_with_another_job_slowing_the_fastest_worker_too():
    """CI ran the lab's adaptive run beside other tests: the job slowed w1 too, and a bound on the wait
    w2's CPU explains (from its share against w1, then from its slowdown against its own even epochs)
    read w2's CPU-paced wait as slow links: the run never left the ring. A ring with a straggler now
    says nothing of its links."""
    lab = Cluster(workers=2, ps=1, bandwidths=(2e9, 2.5e9), ps_bandwidth=2.4e9)
    moved = 2 * 2 * 0.5 * SMALL.model_bytes
    even = EpochMeasurement(1, "horovod", (WorkerEpoch(5.4, 9.2, 4364.0, moved), WorkerEpoch(5.1, 9.5, 4361.0, moved)))
    busy = [EpochMeasurement(e, "horovod", (WorkerEpoch(20.0, 196.0, 300.0, moved),
                                            WorkerEpoch(66.4, 150.0, 300.0, moved))) for e in (2, 3, 4)]
    cluster, workload = refit(lab, SMALL, [even, *busy])  # the median reads the three busy epochs
    assert cluster.speeds == pytest.approx((1.0, 20.0 / 66.4))
    assert cluster.bandwidths == lab.bandwidths  # not what 150 ms of waiting would say of the links
    predicted = cost.predict_all(cluster, workload)
    assert predicted["parameter_server"].examples_per_second > 1.3 * predicted["horovod"].examples_per_second
    assert refit(lab, SMALL, busy)[0].bandwidths == lab.bandwidths  # without the even epoch too


def test_links_slowing_while_a_worker_straggles_are_not_seen_until_the_workers_are_even():
    """The price of the rule: a straggler and slow links at once keep the links' last rate."""
    truth = dataclasses.replace(LAUNCHED, speeds=(1.0, 0.25), bandwidths=(GBIT / 20,))
    cluster, _ = refit(LAUNCHED, SMALL, [measure(truth, SMALL, "horovod")])
    assert cluster.speeds == pytest.approx((1.0, 0.25)) and cluster.bandwidths == LAUNCHED.bandwidths
    even = dataclasses.replace(truth, speeds=(1.0, 1.0))
    assert refit(LAUNCHED, SMALL, [measure(even, SMALL, "horovod")])[0].bandwidths == pytest.approx((GBIT / 20,) * 2)


def rested(epoch: int, computes: tuple[float, ...], rests: tuple[float | None, ...]) -> EpochMeasurement:
    """A parameter-server epoch whose workers beside the coordinator have a time at rest (None: not beside)."""
    return EpochMeasurement(epoch, "parameter_server", tuple(
        WorkerEpoch(compute_ms=c, communication_ms=16.0, examples_per_second=1000.0, bytes_per_step=0.0,
                    rest_compute_ms=r) for c, r in zip(computes, rests)))


def test_a_worker_beside_the_coordinator_runs_a_ring_at_its_hosts_pace_at_rest():
    even = [rested(e, (6.9, 2.4), (rest, None)) for e, rest in enumerate((2.2, 2.6, 2.4, 2.5, 2.3, 2.4))]
    assert speeds_at_rest(even) == {0: 1.0}  # the medians of the first three and the last three: noise cancels
    assert speeds_at_rest(even, ring_speeds=(0.25, 1.0)) == {0: 0.25}  # as slow as the ring last saw it
    assert speeds_at_rest([rested(e, (6.9, 2.4), (None, None)) for e in range(4)]) == {}  # nobody beside it
    assert speeds_at_rest([]) == {}
    slowed = even[:3] + [rested(e, (27.6, 9.6), (9.6, None)) for e in range(3, 6)]  # its host at a quarter
    assert speeds_at_rest(slowed) == {0: pytest.approx(0.25)}
    recovered = [rested(e, (27.6, 9.6), (9.6, None)) for e in range(3)] + even[3:]
    assert speeds_at_rest(recovered, ring_speeds=(0.25, 1.0)) == {0: 1.0}  # at most as fast as the fastest
    both = [rested(e, (6.9, 6.9, 2.4), (2.4, 2.4, None)) for e in range(3)]  # two workers on the chief's host
    assert speeds_at_rest(both) == {0: 1.0, 1: 1.0}
    some = [rested(e, (6.9, 2.4), (2.4 if e % 2 else None, None)) for e in range(6)]  # not every epoch timed it
    assert speeds_at_rest(some) == {0: 1.0}
