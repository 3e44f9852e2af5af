"""The switch decision (tfdist/adapt/decision.py), without TensorFlow: the network lab's figures, the
rules of issue 36 (gain over cost and margin, payback, min_stay) and which switches need a restart."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

from tfdist.adapt import (DEFAULT_RESTART_S, IN_PROCESS_SWITCH_S, AdaptError, decide, epoch_seconds,
                          needs_restart, switch_cost)
from tfdist.advise import Cluster, Workload, predict_all
from tfdist.plan import VARIANTS

EPOCH = 60_000  # examples per epoch
#: The network lab (issue 36): examples/s of Horovod and parameter servers.
STEADY = {"horovod": EPOCH / 8355, "parameter_server": EPOCH / 4476}
STRAGGLER = {"horovod": EPOCH / 2252, "parameter_server": EPOCH / 4191}  # w2 at a quarter of a core


def test_identical_workers_stay_on_horovod():
    decision = decide(STEADY, "horovod", epoch=5, planned_at=0, epochs_remaining=20)
    assert not decision.switch and decision.to is None
    assert decision.alternative == "parameter_server"
    assert "predicted fastest" in decision.reason


def test_a_straggler_switches_to_parameter_servers_when_enough_epochs_remain():
    decision = decide(STRAGGLER, "horovod", epoch=5, planned_at=0, epochs_remaining=10)
    assert decision.switch and decision.to == "parameter_server"
    assert decision.stay_s == pytest.approx(10 * EPOCH / 2252)
    assert decision.switch_cost_s == DEFAULT_RESTART_S
    assert decision.alternative_s == pytest.approx(10 * EPOCH / 4191 + DEFAULT_RESTART_S)
    assert decision.reason.startswith("switch horovod -> parameter_server: 10 epoch(s) left: horovod 266 s, "
                                      "parameter_server 173 s with a 30 s switch, 35% sooner (margin 10%), "
                                      "paid back after 2.4 epoch(s)")


@pytest.mark.parametrize("epoch, planned_at", [(0, 0), (1, 0), (6, 5)])
def test_no_switch_within_min_stay_epochs_of_taking_the_plan(epoch, planned_at):
    decision = decide(STRAGGLER, "horovod", epoch=epoch, planned_at=planned_at, epochs_remaining=10)
    assert not decision.switch and f"kept until epoch {planned_at + 2} (min_stay 2)" in decision.reason
    assert decide(STRAGGLER, "horovod", epoch=epoch, planned_at=planned_at, epochs_remaining=10,
                  min_stay=epoch - planned_at).switch


def test_no_switch_that_cannot_pay_back_in_the_remaining_epochs():
    decision = decide(STRAGGLER, "horovod", epoch=5, planned_at=0, epochs_remaining=2)
    assert not decision.switch
    assert "no switch pays back: parameter_server saves 12 s an epoch and would need 2.4 epochs" in decision.reason
    assert not decide(STRAGGLER, "horovod", epoch=5, planned_at=0, epochs_remaining=10, restart_s=200.0).switch


def test_no_switch_when_the_gain_is_within_the_margin():
    decision = decide(STRAGGLER, "horovod", epoch=5, planned_at=0, epochs_remaining=3)  # pays back, 8.7 %
    assert not decision.switch and "8.73% sooner is within the margin of 10%" in decision.reason
    assert decide(STRAGGLER, "horovod", epoch=5, planned_at=0, epochs_remaining=3, margin=0.05).switch
    fp16 = {"horovod": 10.0, "horovod_fp16": 9.5}  # 5 % faster, in-process
    assert not decide(fp16, "horovod", epoch=5, planned_at=0, epochs_remaining=50).switch
    assert decide(fp16, "horovod", epoch=5, planned_at=0, epochs_remaining=50, margin=0.04).switch


def test_an_in_process_change_wins_where_a_restart_would_not_pay_back():
    seconds = {"horovod": 10.0, "horovod_fp16": 8.0, "parameter_server": 5.0}
    decision = decide(seconds, "horovod", epoch=5, planned_at=0, epochs_remaining=4)
    assert decision.to == "horovod_fp16" and decision.switch_cost_s == IN_PROCESS_SWITCH_S
    assert decide(seconds, "horovod", epoch=5, planned_at=0, epochs_remaining=20).to == "parameter_server"


def test_nothing_to_decide():
    assert not decide(STRAGGLER, "horovod", epoch=5, planned_at=0, epochs_remaining=0).switch
    alone = decide({"horovod": 5.0}, "horovod", epoch=5, planned_at=0, epochs_remaining=9)
    assert not alone.switch and alone.alternative is None and alone.stay_s == 45.0


@pytest.mark.parametrize("a, b, restart", [
    ("horovod", "horovod", False), ("horovod", "horovod_fp16", False), ("horovod_fp16", "horovod", False),
    ("horovod", "horovod_hierarchical", True), ("horovod_fp16", "horovod_hierarchical", True),
    ("horovod", "parameter_server", True), ("parameter_server", "multi_worker_mirrored", True),
    # PowerSGD's error feedback and factors start with the job: to or from it is a restart
    ("horovod", "horovod_powersgd", True), ("horovod_powersgd", "horovod_fp16", True),
    ("multi_worker_mirrored", "multi_worker_mirrored_powersgd", True),
    ("multi_worker_mirrored_powersgd", "multi_worker_mirrored", True),
])
def test_which_switches_need_a_new_cluster(a, b, restart):
    assert needs_restart(a, b) is restart
    expected = 0.0 if a == b else DEFAULT_RESTART_S if restart else IN_PROCESS_SWITCH_S
    assert switch_cost(a, b) == expected
    assert switch_cost(a, b, restart_s=12.5) == (12.5 if restart else expected)


@pytest.mark.parametrize("kwargs, field", [
    ({"seconds_per_epoch": {"horovod": -1.0, "parameter_server": 5.0}}, "seconds_per_epoch[horovod]"),
    ({"seconds_per_epoch": {"horovod": math.nan}}, "seconds_per_epoch[horovod]"),
    ({"seconds_per_epoch": {"horovod": 5.0, "horovd": 1.0}}, "seconds_per_epoch"),
    ({"seconds_per_epoch": {"parameter_server": 5.0}}, "seconds_per_epoch"),
    ({"current": "hvd"}, "current"),
    ({"epoch": 2, "planned_at": 3}, "planned_at"),
    ({"epoch": True}, "epoch"),
    ({"epochs_remaining": -1}, "epochs_remaining"),
    ({"epochs_remaining": 2.5}, "epochs_remaining"),
    ({"margin": 1.0}, "margin"),
    ({"margin": -0.1}, "margin"),
    ({"min_stay": -1}, "min_stay"),
    ({"restart_s": math.inf}, "restart_s"),
])
def test_bad_input_names_the_field_and_the_fix(kwargs, field):
    arguments = {"seconds_per_epoch": STRAGGLER, "current": "horovod", "epoch": 5, "planned_at": 0,
                 "epochs_remaining": 10, **kwargs}
    with pytest.raises(AdaptError) as info:
        decide(arguments.pop("seconds_per_epoch"), arguments.pop("current"), **arguments)
    assert info.value.field == field and "; fix: " in str(info.value)


def test_bad_variants_and_epoch_sizes_are_refused():
    with pytest.raises(AdaptError, match="'ps' is not a known variant") as info:
        needs_restart("horovod", "ps")
    assert info.value.field == "b"
    with pytest.raises(AdaptError) as info:
        epoch_seconds(predict_all(Cluster(workers=2, bandwidths=(125e6,)),
                                  Workload(params=10, batch_size=8, step_ms=1.0)), 0)
    assert info.value.field == "examples_per_epoch"


@settings(max_examples=examples(300), deadline=None)
@given(seconds=st.dictionaries(st.sampled_from(sorted(VARIANTS)), st.floats(0.01, 1e4), min_size=1),
       data=st.data(), planned_at=st.integers(0, 50), stayed=st.integers(0, 10),
       remaining=st.integers(0, 200), restart=st.none() | st.floats(0, 1e3), margin=st.floats(0, 0.9),
       min_stay=st.integers(0, 5))
def test_every_switch_obeys_the_rules(seconds, data, planned_at, stayed, remaining, restart, margin, min_stay):
    current = data.draw(st.sampled_from(sorted(seconds)))
    decision = decide(seconds, current, epoch=planned_at + stayed, planned_at=planned_at,
                      epochs_remaining=remaining, restart_s=restart, margin=margin, min_stay=min_stay)
    assert decision.stay_s == pytest.approx(remaining * seconds[current])
    if not decision.switch:
        assert decision.to is None
        return
    assert stayed >= min_stay  # never within min_stay of taking the plan
    assert seconds[current] > min(seconds.values())  # never when staying is predicted fastest
    target = decision.to
    assert target != current and decision.alternative == target
    assert decision.switch_cost_s == switch_cost(current, target, restart)
    finish = remaining * seconds[target] + decision.switch_cost_s
    assert decision.alternative_s == pytest.approx(finish)
    assert finish < (1 - margin) * decision.stay_s  # pays back, with the margin to spare
