"""An adaptive run followed epoch by epoch (tfdist/adapt/replan.py), without TensorFlow: the chief's
epoch reports as ``tfdist.callbacks.adaptive`` writes them, and the verdicts the launcher writes back."""
from __future__ import annotations

import pytest

from tfdist.adapt.replan import Replanner, Verdict
from tfdist.advise.cost import predict_all, ps_fixed_s
from tfdist.advise.model_inputs import Cluster, Workload

GBIT = 125e6
WORKLOAD = Workload(params=669_706, batch_size=64, step_ms=10.0)
LAUNCHED = Cluster(workers=2, ps=1, bandwidths=(10 * GBIT, 10 * GBIT), ps_bandwidth=10 * GBIT)
CANDIDATES = ("horovod", "horovod_fp16", "parameter_server")
EPOCHS = 20  # long enough that a switch at the fourth epoch pays back a 30 s restart
STEPS = 400  # per epoch and rank


def report(epoch: int, computes: tuple[float, ...] | None, *, variant: str = "horovod", comm: float = 2.0,
           resumable: bool = True, epochs: int = EPOCHS) -> dict:
    """A chief's report of one epoch, the ranks' compute times in ms (None: no per-worker split)."""
    step_ms = max(computes or (10.0,)) + comm
    rate = 2 * 64 * 1000 / step_ms
    workers = [] if computes is None else [
        {"compute_ms": c, "communication_ms": step_ms - c, "examples_per_second": rate / 2} for c in computes]
    return {"epoch": epoch, "variant": variant, "epochs": epochs, "seconds": STEPS * step_ms / 1000,
            "examples_per_second": rate, "workers": workers, "params": 669_706, "resumable": resumable,
            "resume_problem": None if resumable else "its model and optimizer cannot be checkpointed (ValueError: x)"}


def planner(**kwargs) -> Replanner:
    return Replanner(LAUNCHED, WORKLOAD, "horovod", predict_all(LAUNCHED, WORKLOAD), candidates=CANDIDATES,
                     **kwargs)


def test_even_workers_never_switch():
    follow = planner()
    verdicts = [follow.on_epoch(report(epoch, (10.0, 10.0))) for epoch in range(EPOCHS)]
    assert [v.action for v in verdicts] == ["continue"] * EPOCHS
    assert "the plan's first epoch" in verdicts[0].line
    assert verdicts[1].line.startswith("epoch 2/20 on horovod: 10,667 examples/s (re-fitted horovod")
    assert all(": stay on horovod: " in v.line for v in verdicts[1:]), [v.line for v in verdicts]


def test_a_straggler_switches_to_parameter_servers_at_its_first_epoch():
    """w2 at a quarter of a core from the third epoch (index 2): a change of who straggles starts a new
    regime, so the first slow epoch is re-fitted on alone (a median of the last three epochs saw it only
    after two slow epochs: the lab's scenario B switched three epochs after the change), and the ring
    waits for w2 on every step."""
    follow = planner()
    computes = [(10.0, 10.0)] * 2 + [(10.0, 40.0)] * 18
    verdicts = []
    for epoch, figures in enumerate(computes):
        verdicts.append(follow.on_epoch(report(epoch, figures)))
        if verdicts[-1].action == "switch":
            break
    assert [v.action for v in verdicts] == ["continue"] * (len(verdicts) - 1) + ["switch"]
    assert verdicts[-1].to == "parameter_server" and len(verdicts) == 3, [v.line for v in verdicts]
    assert "switch horovod -> parameter_server" in verdicts[-1].line
    assert "paid back after" in verdicts[-1].line


def test_a_multi_worker_mirrored_run_with_a_straggler_switches_to_parameter_servers():
    """On a cluster without Horovod the plan is MultiWorkerMirrored; its per-worker figures (each worker's
    compute and wait, WorkerMetrics) make a straggler seen as on the ring, and the run leaves it."""
    follow = Replanner(LAUNCHED, WORKLOAD, "multi_worker_mirrored", predict_all(LAUNCHED, WORKLOAD),
                       candidates=("multi_worker_mirrored", "parameter_server"))
    computes = [(10.0, 10.0)] * 2 + [(10.0, 40.0)] * 18
    verdicts = []
    for epoch, figures in enumerate(computes):
        verdicts.append(follow.on_epoch(report(epoch, figures, variant="multi_worker_mirrored")))
        if verdicts[-1].action == "switch":
            break
    assert verdicts[-1].action == "switch" and verdicts[-1].to == "parameter_server", [v.line for v in verdicts]
    assert "switch multi_worker_mirrored -> parameter_server" in verdicts[-1].line
    assert ": stay on multi_worker_mirrored: " in verdicts[1].line, [v.line for v in verdicts]


def test_a_new_plan_is_kept_for_min_stay_epochs_and_its_first_epoch_is_not_refitted_on():
    follow = planner()
    follow.switched("parameter_server", at_epoch=4, took_s=12.0)
    assert follow.restart_s == 12.0 and follow.current == "parameter_server" and follow.segment == []
    first = follow.on_epoch(report(4, None, variant="parameter_server"))
    assert first.action == "continue" and "first epoch" in first.line
    second = follow.on_epoch(report(5, None, variant="parameter_server"))
    assert second.action == "continue"
    assert "parameter_server reports no per-worker compute and communication time yet" in second.line
    third = follow.on_epoch(report(6, None, variant="parameter_server"))
    assert third.line == "epoch 7/20 on parameter_server: 10,667 examples/s"  # said once


def test_a_switch_the_run_cannot_resume_is_refused_with_the_fix_and_said_once():
    follow = planner()
    computes = [(10.0, 10.0)] * 2 + [(10.0, 40.0)] * 18
    verdicts = [follow.on_epoch(report(epoch, figures, resumable=False)) for epoch, figures in enumerate(computes)]
    assert all(v.action == "continue" for v in verdicts)
    refused = [v.line for v in verdicts if "cannot switch plans" in v.line]
    assert len(refused) == 1 and "fix: " in refused[0] and "cannot be checkpointed" in refused[0], refused


def test_no_switch_pays_back_near_the_end():
    """The straggler shows two epochs before the end: a 30 s restart is never won back."""
    follow = planner()
    computes = [(10.0, 10.0)] * 9 + [(10.0, 40.0)] * 3
    verdicts = [follow.on_epoch(report(epoch, figures, epochs=12)) for epoch, figures in enumerate(computes)]
    assert all(v.action == "continue" for v in verdicts), [v.line for v in verdicts]


def test_the_fixed_plans_are_accounted_on_the_predictions_of_their_time():
    follow = planner()
    for epoch, figures in enumerate([(10.0, 10.0)] * 3):
        follow.on_epoch(report(epoch, figures))
    assert set(follow.fixed_seconds) == set(CANDIDATES)
    assert abs(follow.measured_seconds - 3 * STEPS * 12.0 / 1000) < 1e-9
    assert all(seconds > 0 for seconds in follow.fixed_seconds.values())
    assert follow.fixed_seconds["horovod"] == follow.measured_seconds  # the plan that ran, as measured
    before = dict(follow.fixed_seconds)
    follow.switched("parameter_server", at_epoch=3)
    follow.on_epoch(report(3, None, variant="parameter_server"))
    assert follow.fixed_seconds["parameter_server"] - before["parameter_server"] == pytest.approx(STEPS * 12.0 / 1000)
    assert follow.fixed_seconds["horovod"] - before["horovod"] == pytest.approx(
        STEPS * 2 * 64 / follow.predictions["horovod"].examples_per_second)


def test_a_malformed_report_keeps_the_plan():
    follow = planner()
    assert follow.on_epoch({"epoch": "x"}).action == "continue"
    assert follow.on_epoch({**report(1, (10.0, 10.0)), "examples_per_second": None}).line.endswith(
        "no examples/s measured; the plan is kept")
    broken = report(2, (10.0, 10.0))
    broken["workers"][0]["compute_ms"] = -1
    assert "not re-fitted" in follow.on_epoch(broken).line


def ps_report(epoch: int, computes: tuple[float, ...], comm: float = 20.0, rest: float | None = None) -> dict:
    """A parameter-server epoch as the chief reports it: each worker steps at its own pace (compute,
    then ``comm`` ms of pull and push: the ps link is the bottleneck, at about half the ring's rate,
    as on the lab), split as ``callbacks.plan_check.parameter_server_figures`` does; ``rest``: worker
    0 shares the coordinator's host, which timed a step there at rest in ``rest`` ms."""
    rates = [64 * 1000 / (c + comm) for c in computes]
    workers = [{"compute_ms": c, "communication_ms": comm, "examples_per_second": r} for c, r in zip(computes, rates)]
    if rest is not None:
        workers[0]["rest_compute_ms"] = rest
    return {"epoch": epoch, "variant": "parameter_server", "epochs": EPOCHS, "seconds": STEPS * 2 * 64 / sum(rates),
            "examples_per_second": sum(rates), "workers": workers, "params": 669_706, "resumable": True,
            "resume_problem": None}


def test_parameter_servers_switch_back_to_the_ring_once_the_straggler_recovers():
    """Scenario D: on parameter servers since epoch 4 (w2 straggling), the run stays while w2 is slow
    and goes back to Horovod at the first epoch with w2 at full speed again (a new regime)."""
    follow = planner()
    follow.switched("parameter_server", at_epoch=4, took_s=12.0)
    slow = [follow.on_epoch(ps_report(epoch, (10.0, 40.0))) for epoch in range(4, 8)]
    assert [v.action for v in slow] == ["continue"] * 4, [v.line for v in slow]
    assert "stay on parameter_server" in slow[-1].line, slow[-1].line
    verdicts = []
    for epoch in range(8, EPOCHS):
        verdicts.append(follow.on_epoch(ps_report(epoch, (10.0, 10.0))))
        if verdicts[-1].action == "switch":
            break
    assert [v.action for v in verdicts] == ["continue"] * (len(verdicts) - 1) + ["switch"], [v.line for v in verdicts]
    assert verdicts[-1].to in ("horovod", "horovod_fp16") and len(verdicts) == 1, [v.line for v in verdicts]
    assert "switch parameter_server -> horovod" in verdicts[-1].line


def lab_planner(**kwargs) -> Replanner:
    """The lab as the probe found it: unlimited links (about 2 GB/s) and the job's even ranks computing
    5.4 ms a step; in-process changes of compression, as ``tfdist launch`` follows a run."""
    lab = Cluster(workers=2, ps=1, bandwidths=(2e9, 2e9), ps_bandwidth=2e9)
    workload = Workload(params=669_706, batch_size=64, step_ms=5.4)
    return Replanner(lab, workload, "horovod", predict_all(lab, workload), candidates=CANDIDATES,
                     in_process=frozenset({"compression"}), **kwargs)


def test_the_rings_fixed_cost_is_measured_on_the_job_and_not_read_as_slow_links():
    """The lab's even ranks wait 9.2 ms a step on unlimited links, where the 2.7 MB take about 1.3 ms:
    the rest is Horovod's own cost a step, which fp16 does not halve. Read as slow links it predicted fp16
    1.3x faster, and an in-process change (1 s) flapped the lab run between the two (horovod ->
    horovod_fp16 -> horovod -> parameter_server). Measured once, on the first even epochs, it is kept."""
    follow = lab_planner()
    verdicts = [follow.on_epoch(report(epoch, (5.4, 5.4), comm=9.2)) for epoch in range(EPOCHS)]
    assert [v.action for v in verdicts] == ["continue"] * EPOCHS, [v.line for v in verdicts]
    assert follow.ring_overhead_ms == pytest.approx(9.2 - 2.68 / 2 - 2 * 0.05, abs=0.3)
    fp16, plain = follow.predictions["horovod_fp16"], follow.predictions["horovod"]
    assert fp16.examples_per_second < 1.1 * plain.examples_per_second


def test_links_that_slow_later_change_the_compression_in_process():
    """Issue 36 scenario C: both links drop to 50 Mbit/s after a third of the run. The ring's wait
    grows from 9.2 ms to about 440 ms; past the fixed cost measured on the even epochs that is the wire,
    and fp16 halves it: one in-process switch, no restart."""
    follow = lab_planner()
    verdicts = []
    for epoch in range(EPOCHS):
        slow = epoch >= 6
        verdicts.append(follow.on_epoch(report(epoch, (5.4, 5.4), comm=440.0 if slow else 9.2)))
        if verdicts[-1].action == "switch":
            break
    assert [(v.to, v.in_process) for v in verdicts if v.action == "switch"] == [("horovod_fp16", True)], [
        v.line for v in verdicts]
    assert len(verdicts) in (7, 8)  # one or two slow epochs: the median of three sees it after two


def test_powersgd_unpredicted_at_launch_is_weighed_once_the_job_reports_its_matrices():
    """A launch without --model knows no weight matrices, so it predicts no PowerSGD; the job's epoch
    reports carry them (the MLP's kernels). On links that slowed to 50 Mbit/s, PowerSGD (a restart) beats
    fp16 (in process): it was never weighed while the candidates were the launch's predictions."""
    follow = lab_planner()
    follow = Replanner(follow.cluster, follow.workload, "horovod",
                       {name: p for name, p in follow.predictions.items() if name != "horovod_powersgd"},
                       candidates=(*CANDIDATES, "horovod_powersgd"), in_process=frozenset({"compression"}))
    assert "horovod_powersgd" not in follow.predictions
    verdicts = []
    for epoch in range(EPOCHS):
        said = report(epoch, (5.4, 5.4), comm=440.0 if epoch >= 6 else 9.2)
        said["matrices"] = [[784, 512], [512, 512], [512, 10]]
        verdicts.append(follow.on_epoch(said))
        if verdicts[-1].action == "switch":
            break
    assert [(v.to, v.in_process) for v in verdicts if v.action == "switch"] == [("horovod_powersgd", False)], [
        v.line for v in verdicts]
    assert "horovod_powersgd" not in follow.fixed_seconds  # not predicted from the start: not accounted


def straggle_until_switch(follow: Replanner, first: int = 0) -> list:
    """Even epochs, then w2 at a quarter of the speed from ``first + 2``, until a switch (or the end)."""
    verdicts = []
    for epoch in range(first, EPOCHS):
        verdicts.append(follow.on_epoch(report(epoch, (10.0, 10.0) if epoch < first + 2 else (10.0, 40.0))))
        if verdicts[-1].action == "switch":
            break
    return verdicts


#: A parameter-server worker's communication a step on LAUNCHED, as the model explains it (its wire, the
#: latency, its default fixed cost and the (de)serialisation): no fixed cost beyond the default to measure.
EXPLAINED_MS = (2 * WORKLOAD.step_bytes / LAUNCHED.bandwidths[0] + 2 * LAUNCHED.latency_s
                + ps_fixed_s(WORKLOAD)) * 1000


def test_a_plan_that_delivered_less_than_its_switch_promised_is_weighed_at_what_it_delivered():
    """The lab's parameter servers, predicted from a ring's epochs at 6,354 examples/s, ran 3,300: the
    ratio is kept, so the model's error for that plan is not paid for twice (no switch back to it that
    only the raw prediction would make)."""
    follow = planner()
    verdicts = straggle_until_switch(follow)
    assert verdicts[-1].to == "parameter_server"
    promised = follow.predictions["parameter_server"].examples_per_second
    follow.switched("parameter_server", at_epoch=3, took_s=12.0)
    assert follow.promised == {"parameter_server": promised} and follow.delivered == {}
    for epoch in (3, 4):  # the first epoch of a plan is start-up; the second is timed
        half = ps_report(epoch, (10.0, 40.0), comm=EXPLAINED_MS)
        half.update(examples_per_second=promised / 2, seconds=STEPS * 2 * 64 / (promised / 2))
        follow.on_epoch(half)
    assert follow.delivered["parameter_server"] == pytest.approx(0.5)
    assert follow.expected_rate("parameter_server") == pytest.approx(
        0.5 * follow.predictions["parameter_server"].examples_per_second)

    recovered = ps_report(5, (10.0, 10.0), comm=EXPLAINED_MS)  # w2 caught up: the promise was for a straggler
    recovered.update(examples_per_second=promised / 4, seconds=STEPS * 2 * 64 / (promised / 4))
    follow.on_epoch(recovered)
    assert follow.delivered["parameter_server"] == pytest.approx(0.5)  # kept, not 0.25 or a mix
    at_once = planner()  # w2 caught up just as the run switched: the new plan never ran the promised regime
    straggle_until_switch(at_once)
    at_once.switched("parameter_server", at_epoch=3, took_s=12.0)
    for epoch in (3, 4, 5):
        even = ps_report(epoch, (10.0, 10.0))
        even.update(examples_per_second=promised / 4, seconds=STEPS * 2 * 64 / (promised / 4))
        at_once.on_epoch(even)
    assert at_once.promised_for == {"parameter_server": {1}} and at_once.delivered == {}

    raw, told = planner(), planner()
    told.delivered["parameter_server"] = 0.5
    assert straggle_until_switch(raw)[-1].to == "parameter_server"
    scaled = straggle_until_switch(told)
    assert all(v.action == "continue" for v in scaled), [v.line for v in scaled]
    kept = planner()
    kept.delivered["parameter_server"] = 0.95  # a plan that nearly kept its promise is still taken
    found = straggle_until_switch(kept)
    assert found[-1].to == "parameter_server" and "x 0.95 as it ran before" in found[-1].line, found[-1].line


def test_parameter_servers_re_fitted_on_their_own_epochs_predict_what_they_ran():
    """The lab (scenario D, after the switch): a worker's step held 16.6 ms of communication where the
    probe's links carry its 5.4 MB in 1.3 ms. The re-fit on those epochs said 11,895 examples/s for the
    4,395 they ran once w2 was even again, and 7,107 for 4,825 while it straggled: the bytes of a pull
    and a push were never counted, so the links kept the probe's rate, and the rest of the 16.6 ms was
    nowhere. Now the step's fixed cost is measured on the first epochs on parameter servers and the
    links are read past it: with even workers the re-fit gives back what the plan ran. (With a
    straggler the model charges that cost at the straggler's pace, f / s, and predicts less than the
    lab's straggler ran: 0.77x here, against 1.47x before.) The promise the switch made is made again
    with the measured cost, so what the plan delivers against it is the model's error beyond that cost."""
    lab = Cluster(workers=2, ps=1, bandwidths=(4.1e9, 4.24e9), ps_bandwidth=4.17e9, latency_s=1.13e-5)
    workload = Workload(params=669_706, batch_size=64, step_ms=10.0)
    follow = Replanner(lab, workload, "horovod", predict_all(lab, workload), candidates=CANDIDATES)
    straggle_until_switch(follow)
    follow.switched("parameter_server", at_epoch=3, took_s=12.0)
    promised = follow.promised["parameter_server"]
    for epoch in range(3, 7):
        straggling = ps_report(epoch, (2.41, 26.73), comm=16.6)
        follow.on_epoch(straggling)
    assert follow.ps_overhead_ms == pytest.approx(16.6 - 1.3 - 1.3, abs=0.3)
    refitted = follow.predictions["parameter_server"].examples_per_second
    assert 0.7 * straggling["examples_per_second"] < refitted <= straggling["examples_per_second"], refitted
    assert follow.promised["parameter_server"] < 0.8 * promised  # made again with the measured cost
    assert follow.delivered["parameter_server"] == pytest.approx(
        straggling["examples_per_second"] / follow.promised["parameter_server"], rel=1e-6)
    for epoch in range(7, 10):  # w2 even again
        even = ps_report(epoch, (2.41, 2.41), comm=16.6)
        follow.on_epoch(even)
    assert follow.predictions["parameter_server"].examples_per_second == pytest.approx(
        even["examples_per_second"], rel=0.02)


def straggler_after_even_ring(computes: tuple[float, float] = (5.4, 21.6)) -> tuple[Replanner, Verdict]:
    """The lab's scenario D up to the switch: three even ring epochs (5.4 ms of compute, 9.2 ms of wait),
    then one whose ranks compute ``computes``; the planner and its verdict on that epoch."""
    follow = lab_planner()
    for epoch in range(3):
        follow.on_epoch(report(epoch, (5.4, 5.4), comm=9.2))
    return follow, follow.on_epoch(report(3, computes, comm=9.2))


def test_a_ring_predicted_from_parameter_server_epochs_takes_the_compute_the_ring_measured():
    """The lab (scenario D): the ring's ranks compute 5.4 ms a step and wait 9.2 (8,767 examples/s);
    on parameter servers the coordinator times one pass of zeros at 2.4 ms. Once w2 was even again the
    re-fit on the parameter servers' epochs predicted the ring at 10,376 examples/s on that 2.4 ms, and
    the run went back to it with three epochs left to run 6,800. The ring is predicted with its own
    compute: what it ran before, as long as the links and who straggles have not changed."""
    follow, _ = straggler_after_even_ring()
    follow.switched("parameter_server", at_epoch=4, took_s=15.0)
    for epoch in range(4, 7):
        follow.on_epoch(ps_report(epoch, (2.41, 26.73), comm=16.6))
    # w2 straggling: the ring paced by its 26.73 ms as measured (plus the 3 ms the two kinds' timings of the
    # fastest differ by), not by 5.4 ms times the 11x it lags by
    straggling = follow.predictions["horovod"]
    assert straggling.step_ms == pytest.approx(predict_all(
        Cluster(workers=2, ps=1, bandwidths=(2e9, 2e9), ps_bandwidth=2e9, speeds=(1.0, 5.4 / (26.73 + 5.4 - 2.41))),
        Workload(params=669_706, batch_size=64, step_ms=5.4,
                 allreduce_overhead_ms=follow.ring_overhead_ms))["horovod"].step_ms, rel=1e-6)
    for epoch in range(7, 10):
        follow.on_epoch(ps_report(epoch, (2.41, 2.41), comm=16.6))
    assert follow.computes == pytest.approx({"ring": 5.4, "parameter_server": 2.41})
    ring = 2 * 64 * 1000 / (5.4 + 9.2)
    assert follow.predictions["horovod"].examples_per_second == pytest.approx(ring, rel=0.05)

    # and back on the ring, the parameter servers are predicted with their own compute and fixed cost:
    # what they ran with w2 even (before, every worker read 0.45 as fast: the ring's 5.4 ms against 2.41)
    follow.switched("horovod", at_epoch=10, took_s=5.0)
    for epoch in range(10, 13):
        follow.on_epoch(report(epoch, (5.4, 5.4), comm=9.2))
    assert follow.predictions["parameter_server"].examples_per_second == pytest.approx(
        2 * 64 * 1000 / (2.41 + 16.6), rel=0.03)


def test_a_ring_predicted_from_parameter_servers_does_not_carry_the_coordinators_load_on_its_host():
    """The lab (scenario D, the chief beside worker 0 on w1): once w2 was even again, worker 0 computed
    6.2-7.8 ms a step on parameter servers against w2's 2.1-2.7, the coordinator's dispatch taking w1's
    CPU. A ring has no coordinator; predicted at worker 0's 0.35 it came out at 4,270 examples/s where
    it had run 8,300, and the run stayed on parameter servers with half the run left. Worker 0's host,
    timed at rest at each epoch's end, computes as fast as it did while w2 straggled: the ring is
    predicted even, as it ran, and the run goes back to it."""
    follow, _ = straggler_after_even_ring()
    follow.switched("parameter_server", at_epoch=4, took_s=15.0)
    for epoch in range(4, 7):
        assert follow.on_epoch(ps_report(epoch, (2.41, 26.73), comm=16.6, rest=2.41)).action == "continue"
    verdicts = []
    for epoch in range(7, EPOCHS):
        verdicts.append(follow.on_epoch(ps_report(epoch, (6.9, 2.41), comm=16.6, rest=2.41)))
        if verdicts[-1].action == "switch":
            break
    ring = 2 * 64 * 1000 / (5.4 + 9.2)
    assert follow.predictions["horovod"].examples_per_second == pytest.approx(ring, rel=0.05)
    assert verdicts[-1].action == "switch" and verdicts[-1].to == "horovod", [v.line for v in verdicts]
    # what the ring delivers against that promise is measured: it was made for even workers, not for
    # the straggler worker 0 looked like beside the coordinator
    at = 7 + len(verdicts)
    follow.switched("horovod", at_epoch=at, took_s=5.0)
    assert follow.promised_for["horovod"] == frozenset()
    for epoch in range(at, at + 3):
        follow.on_epoch(report(epoch, (5.4, 5.4), comm=9.2))
    assert follow.delivered["horovod"] == pytest.approx(1.0, abs=0.05)


def ring_at(speeds: tuple[float, float], follow: Replanner) -> float:
    """The ring's step (ms) on the lab's links with the ranks' 5.4 ms at ``speeds`` and the ring's
    fixed cost ``follow`` measured."""
    return predict_all(Cluster(workers=2, ps=1, bandwidths=(2e9, 2e9), ps_bandwidth=2e9, speeds=speeds),
                       Workload(params=669_706, batch_size=64, step_ms=5.4,
                                allreduce_overhead_ms=follow.ring_overhead_ms))["horovod"].step_ms


# w1, the chief's host, at a quarter of a core on parameter servers: the chief times its zeros pass at
# 9.64 ms and the split (parameter_server_figures) makes that the fastest worker's compute; worker 0's
# 44.2 ms steps less the 9.4 ms of communication that leaves
W1_SLOW = {"computes": (34.8, 9.64), "comm": 9.4, "rest": 9.64}
W1_EVEN = {"computes": (6.9, 2.41), "comm": 16.6, "rest": 2.41}


def test_the_coordinators_host_slowing_on_parameter_servers_slows_its_worker_on_the_ring():
    """What the host at rest says is believed both ways: w1 (the chief's host) at a quarter of its
    speed times its pass at rest 4x as long, and a ring would wait for worker 0 as long."""
    follow = lab_planner()
    for epoch in range(3):
        follow.on_epoch(report(epoch, (5.4, 5.4), comm=9.2))
    follow.switched("parameter_server", at_epoch=3, took_s=15.0)
    for epoch in range(3, 7):
        follow.on_epoch(ps_report(epoch, **W1_EVEN))
    assert follow.predictions["horovod"].step_ms == pytest.approx(ring_at((1.0, 1.0), follow), rel=1e-6)
    for epoch in range(7, 10):
        follow.on_epoch(ps_report(epoch, **W1_SLOW))
    assert follow.predictions["horovod"].step_ms == pytest.approx(ring_at((0.25, 1.0), follow), rel=1e-6)


def test_a_straggler_on_the_coordinators_host_still_paces_the_ring_until_it_recovers():
    """w1 straggles on the ring and the run leaves it for parameter servers, whose chief is on w1: its
    pass at rest is slow from the plan's first epoch, so it says nothing changed, and worker 0 keeps
    the ring's 0.25 (taken as even, the run went back to a ring that waited for w1, then had to leave
    it again). Once w1 recovers, its pass at rest is 4x as fast, and so is worker 0 on the ring."""
    follow, verdict = straggler_after_even_ring((21.6, 5.4))
    assert (verdict.action, verdict.to) == ("switch", "parameter_server"), verdict.line
    follow.switched("parameter_server", at_epoch=4, took_s=15.0)
    slow = [follow.on_epoch(ps_report(epoch, **W1_SLOW)) for epoch in range(4, 10)]
    assert [v.action for v in slow] == ["continue"] * 6, [v.line for v in slow]
    assert follow.predictions["horovod"].step_ms == pytest.approx(ring_at((0.25, 1.0), follow), rel=1e-6)
    slow_ring = follow.predictions["horovod"].step_ms
    for epoch in range(10, 13):
        follow.on_epoch(ps_report(epoch, **W1_EVEN))
    # worker 0 no longer paces the ring (53.8 ms a step at 0.25; 18.2 ms even, on links re-fitted slower
    # than the probe's since: the chief's split read w1's slow epochs as 9.4 ms of communication)
    assert follow.predictions["horovod"].step_ms < slow_ring / 2.5, (slow_ring, follow.predictions["horovod"])
