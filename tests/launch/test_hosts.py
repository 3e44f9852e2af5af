"""`--hosts` parsing and task placement: pure, no ssh."""
from __future__ import annotations

import pytest

from tfdist.launch.hosts import HostSlots, HostsError, parse_hosts, place_tasks, total_slots


def placed(hosts: str, **kwargs) -> dict[str, str]:
    return {p.name: p.host for p in place_tasks(parse_hosts(hosts), **kwargs)}


def test_hosts_are_parsed_with_their_slots():
    assert parse_hosts("h1:2,h2:2,h3") == (HostSlots("h1", 2), HostSlots("h2", 2), HostSlots("h3", 1))
    assert parse_hosts(" 10.0.0.1:3 , node-2.example.com:1") == (HostSlots("10.0.0.1", 3),
                                                                HostSlots("node-2.example.com", 1))
    assert total_slots(parse_hosts("a:2,b:3")) == 5


@pytest.mark.parametrize("text, message", [
    ("", "--hosts is empty"),
    ("h1:2,,h2", "has an empty entry"),
    ("h1:0", "has 0 slots"),
    ("h1:x", "which is not a whole number"),
    ("h1:-1", "which is not a whole number"),
    ("h1:99999999999", "slots; fix: give each host 1 to"),
    ("h1:2,h1:1", "lists host 'h1' twice"),
    ("bad_name:1", "is not a valid DNS name"),
    (":2", "the host is empty"),
    ("-oProxyCommand=x:1", "is not a valid DNS name"),
])
def test_bad_host_lists_are_refused_with_the_fix(text, message):
    with pytest.raises(HostsError, match=message) as info:
        parse_hosts(text)
    assert "; fix: " in str(info.value)


def test_default_placement_chief_first_host_ps_last_host_workers_fill_in_host_order():
    # the example: the chief (the coordinator, which runs no steps) takes no slot
    assert placed("a:2,b:2,c:1", workers=4, ps=1) == {
        "chief:0": "a", "worker:0": "a", "worker:1": "a", "worker:2": "b", "worker:3": "b", "ps:0": "c"}
    # several ps tasks: from the last host backwards; the evaluator takes the next free slot
    assert placed("a:2,b:2,c:2", workers=2, ps=2, evaluator=True) == {
        "chief:0": "a", "worker:0": "a", "worker:1": "a", "ps:0": "c", "ps:1": "b", "evaluator:0": "b"}


def test_chief_and_ps_go_where_the_user_says():
    assert placed("a:1,b:2,c:1", workers=3, ps=1, chief_host="b", ps_hosts="a") == {
        "chief:0": "b", "worker:0": "b", "worker:1": "b", "worker:2": "c", "ps:0": "a"}
    # round-robin over --ps-hosts, skipping a full host
    assert placed("a:1,b:3,c:1", workers=1, ps=3, ps_hosts="c,b") == {
        "chief:0": "a", "ps:0": "c", "ps:1": "b", "ps:2": "b", "worker:0": "a"}


def test_peer_clusters_fill_the_slots_in_host_order():
    assert placed("a:1,b:1", workers=2, chief=False) == {"worker:0": "a", "worker:1": "b"}


@pytest.mark.parametrize("kwargs, message", [
    (dict(workers=5, ps=1), r"needs 6 slots \(5 worker \+ 1 ps\) but --hosts gives 5"),
    (dict(workers=1, ps=1, chief_host="z"), "--chief-host names 'z', which is not in --hosts"),
    (dict(workers=1, ps=1, chief_host="a,b"), "names 2 hosts"),
    (dict(workers=1, ps=1, ps_hosts="a,a"), "names a host twice"),
    (dict(workers=1, ps=2, ps_hosts="c"), "ps:1 finds no free slot on --ps-hosts"),
    (dict(workers=2, chief=False, chief_host="a"), "--chief-host applies only"),
])
def test_impossible_placements_are_refused_naming_the_flag(kwargs, message):
    with pytest.raises(HostsError, match=message) as info:
        place_tasks(parse_hosts("a:2,b:2,c:1"), **kwargs)
    assert "; fix: " in str(info.value)


def test_localhost_beside_other_hosts_is_refused():
    from tfdist.launch.hosts import check_reachable_names

    check_reachable_names(parse_hosts("localhost:4"))  # alone: every task is on this machine
    with pytest.raises(HostsError, match="lists 'localhost' beside other hosts") as info:
        check_reachable_names(parse_hosts("localhost:1,h2:1"))
    assert "; fix: " in str(info.value)
