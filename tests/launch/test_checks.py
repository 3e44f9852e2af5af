"""What `tfdist launch` checks before anything starts (tfdist/launch/checks.py): pure, one line each."""
from __future__ import annotations

import pytest

from tfdist.cluster.limits import MAX_TASKS
from tfdist.launch.checks import check_cluster_size, check_host_options, check_placement, horovod_ranks
from tfdist.launch.hosts import HostsError
from tfdist.launch.plan import LaunchError


@pytest.mark.parametrize("kwargs, message", [
    ({"hosts": ""}, "--hosts is empty; fix: "),
    ({"hosts": " \t"}, "--hosts is empty; fix: "),
    ({"hosts": "a:1", "chief_host": ""}, "--chief-host is empty; fix: "),
    ({"hosts": "a:1", "ps_hosts": " "}, "--ps-hosts is empty; fix: "),
    ({"hosts": "a,,b"}, "--hosts 'a,,b' has an empty entry"),
    ({"hosts": "a:" + "9" * 5000}, "slots; fix: give each host 1 to 1024 slots"),
])
def test_host_options(kwargs, message):
    with pytest.raises(HostsError) as info:
        check_host_options(**kwargs)
    assert message in str(info.value) and len(str(info.value)) < 400


def test_host_options_accept_none_and_a_list():
    check_host_options(None)
    check_host_options("h1:2,h2", "h1", "h2")


def test_cluster_size_is_tf_configs_limit():
    assert check_cluster_size(MAX_TASKS - 2, 1) == MAX_TASKS
    assert check_cluster_size(MAX_TASKS, 0, chief=False) == MAX_TASKS
    with pytest.raises(LaunchError, match=r"the cluster has 10,001 tasks \(1 chief \+ 9999 worker\(s\) \+ 1 ps\); "
                                          r"tfdist's limit is 10,000 tasks per cluster; fix: "):
        check_cluster_size(MAX_TASKS - 1, 1)


@pytest.mark.parametrize("kwargs, message", [
    ({"hosts": "a:1,b:1", "workers": 2, "ps": 1}, "the job needs 3 slots (2 worker + 1 ps) but --hosts gives 2"),
    ({"hosts": "a:2,b:2", "workers": 1, "ps": 1, "ps_hosts": "c"}, "--ps-hosts names 'c', which is not in --hosts"),
    ({"hosts": "a:2,b:2", "workers": 1, "ps": 1, "ps_hosts": "b,"}, "--ps-hosts 'b,' has an empty entry"),
    ({"hosts": "localhost:2,b:2", "workers": 1, "ps": 1}, "beside other hosts"),
])
def test_placement(kwargs, message):
    with pytest.raises(HostsError) as info:
        check_placement(**kwargs)
    assert message in str(info.value)


def test_a_long_unknown_host_is_shortened_in_the_message():
    with pytest.raises(HostsError) as info:
        check_placement("a:2,b:2", 1, 1, ps_hosts="x" * 5000)
    assert len(str(info.value)) < 500 and "(5000 characters)" in str(info.value)


@pytest.mark.parametrize("args, ranks", [
    ((None, None), 2), ((None, 7), 7), (("a:2,b:3", None), 5), (("a:2,b:3", 4), 4),
    (("a:2,b:3", None, True, 1), 1), (("a:2,b:3", 3, True, 1, 4), 3),
])
def test_horovod_ranks(args, ranks):
    assert horovod_ranks(*args) == ranks


@pytest.mark.parametrize("args, message", [
    (("a:1", 2), "-np 2 needs 2 slots but --hosts a:1 gives 1; fix: add slots to --hosts, or drop -np (it defaults "
                 "to the 1 slots)"),
    (("a:1,b:1", 3, True, 1), "or drop -np (it defaults to --min-np 1)"),
    (("a:1,b:1", 2, True, 1, 1), "-np 2 is outside --min-np 1 .. --max-np 1"),
    (("a:1", None, True), "--elastic needs --min-np"),
    ((None, MAX_TASKS + 1), "above tfdist's limit of 10,000 ranks"),
    ((",".join(f"h{i}:1024" for i in range(10)), None), "--hosts gives 10,240 slots, above tfdist's limit"),
])
def test_horovod_ranks_refused(args, message):
    with pytest.raises(LaunchError) as info:
        horovod_ranks(*args)
    assert message in str(info.value)
