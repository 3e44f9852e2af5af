"""The described cluster and workload (tfdist/advise/model_inputs.py): defaults, placement, refused values."""
from __future__ import annotations

import dataclasses

import pytest

from tfdist.advise.model_inputs import Cluster, Workload
from tfdist.advise.errors import AdviseError

GBIT = 125e6


def test_defaults_fill_speeds_bandwidths_and_the_ps_link():
    cluster = Cluster(workers=3, bandwidths=(GBIT,), workers_per_host=2, ps=1)
    assert cluster.speeds == (1.0, 1.0, 1.0)
    assert cluster.hosts == 2
    assert cluster.bandwidths == (GBIT, GBIT)
    assert cluster.ps_bandwidth == GBIT
    assert list(cluster.workers_on(0)) == [0, 1] and list(cluster.workers_on(1)) == [2]
    assert [cluster.host_of(w) for w in range(3)] == [0, 0, 1]


def test_the_ps_link_defaults_to_the_slowest_worker_link():
    cluster = Cluster(workers=2, bandwidths=(GBIT, GBIT / 20))
    assert cluster.ps_bandwidth == GBIT / 20


def test_colocated_ps_tasks_go_round_robin_over_worker_hosts():
    cluster = Cluster(workers=2, bandwidths=(GBIT,), ps=3, ps_placement="colocated")
    assert [cluster.ps_on(h) for h in range(2)] == [2, 1]
    assert Cluster(workers=2, bandwidths=(GBIT,), ps=3).ps_on(0) == 0


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Cluster(workers=2, bandwidths=(GBIT,)).workers = 3  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, field, words", [
    ({"workers": 0}, "workers", "from 1"),
    ({"workers": 2.0}, "workers", "whole number"),
    ({"workers": True}, "workers", "whole number"),
    ({"speeds": (1.0,)}, "speeds", "1 value(s) for 2 worker(s)"),
    ({"speeds": (1.0, 0.0)}, "speeds", "positive"),
    ({"speeds": (1.0, float("nan"))}, "speeds", "positive"),
    ({"speeds": (1.0, 1e-9)}, "speeds", "span more than"),
    ({"bandwidths": (GBIT, GBIT, GBIT)}, "bandwidths", "3 rate(s) for 2 worker host(s)"),
    ({"bandwidths": (-1.0,)}, "bandwidths", "positive"),
    ({"ps": -1}, "ps", "from 0"),
    ({"ps_placement": "nearby"}, "ps_placement", "must be one of"),
    ({"ps_bandwidth": 0.0}, "ps_bandwidth", "positive"),
    ({"latency_s": -0.1}, "latency_s", "from 0 to 10"),
    ({"latency_s": float("inf")}, "latency_s", "from 0 to 10"),
    ({"intra_host_bandwidth": float("inf")}, "intra_host_bandwidth", "positive finite"),
])
def test_refused_cluster_values_name_the_field(kwargs, field, words):
    with pytest.raises(AdviseError) as info:
        Cluster(**{"workers": 2, "bandwidths": (GBIT,), **kwargs})
    assert info.value.field == field
    assert words in str(info.value) and "; fix: " in str(info.value)


@pytest.mark.parametrize("kwargs, field", [
    ({"params": 0}, "params"), ({"batch_size": 0}, "batch_size"), ({"step_ms": 0.0}, "step_ms"),
    ({"step_ms": float("nan")}, "step_ms"), ({"dtype_bytes": 0}, "dtype_bytes"),
    ({"overlap": 1.5}, "overlap"),
    ({"overlap": float("nan")}, "overlap"), ({"overlap": True}, "overlap"),
])
def test_refused_workload_values_name_the_field(kwargs, field):
    with pytest.raises(AdviseError) as info:
        Workload(**{"params": 10, "batch_size": 64, "step_ms": 10.0, **kwargs})
    assert info.value.field == field and "; fix: " in str(info.value)


def test_workload_bytes():
    workload = Workload(params=669_706, batch_size=64, step_ms=10.0)
    assert workload.model_bytes == 2_678_824
    assert workload.step_s == 0.01
    assert Workload(params=10, batch_size=1, step_ms=1.0, dtype_bytes=2).model_bytes == 20


@pytest.mark.parametrize("kwargs, field, words", [
    ({"speeds": (1e7, 1e7)}, "speeds", "from 1e-06 to 1e+06"),
    ({"bandwidths": (1.0,)}, "bandwidths", "1 kbit/s to 100 Tbit/s"),
    ({"bandwidths": (1e300,)}, "bandwidths", "1 kbit/s to 100 Tbit/s"),
    ({"ps_bandwidth": 100.0}, "ps_bandwidth", "1 kbit/s"),
    ({"intra_host_bandwidth": 1e-300}, "intra_host_bandwidth", "1 kbit/s"),
    ({"workers": 10**30}, "workers", "got a number of 31 digits"),
    ({"workers": 1001, "ps": 1}, "workers", "too large for the parameter-server model"),
])
def test_values_that_would_make_predictions_non_finite_or_endless_are_refused(kwargs, field, words):
    with pytest.raises(AdviseError) as info:
        Cluster(**{"workers": 2, "bandwidths": (GBIT,), **kwargs})
    assert info.value.field == field
    assert words in str(info.value) and "; fix: " in str(info.value) and len(str(info.value)) < 400


def test_the_ps_model_size_counts_hosts_not_workers():
    Cluster(workers=1000, bandwidths=(GBIT,), ps=1)  # 1,000 hosts x 1,000 workers: at the bound
    Cluster(workers=4000, bandwidths=(GBIT,), ps=1, workers_per_host=16)  # 250 hosts x 4,000
    Cluster(workers=100_000, bandwidths=(GBIT,), ps=0)  # no parameter-server prediction at all


def test_the_speeds_count_message_stays_short_at_the_limit():
    with pytest.raises(AdviseError) as info:
        Cluster(workers=100_000, bandwidths=(GBIT,), speeds=(1.0, 1.0))
    assert len(str(info.value)) < 300 and "1,1,...,0.25 (100,000 values)" in str(info.value)


@pytest.mark.parametrize("kwargs, field", [
    ({"step_ms": 1e-4}, "step_ms"), ({"step_ms": 2e9}, "step_ms"), ({"ps_overhead_ms": 2e6}, "ps_overhead_ms"),
    ({"allreduce_overhead_ms": float("inf")}, "allreduce_overhead_ms"),
    ({"ps_epochs_factor": float("inf")}, "ps_epochs_factor"), ({"ps_epochs_factor": 1e7}, "ps_epochs_factor"),
    ({"params": 10**14}, "params"), ({"batch_size": 10**10}, "batch_size"),
])
def test_workload_bounds(kwargs, field):
    with pytest.raises(AdviseError) as info:
        Workload(**{"params": 10, "batch_size": 64, "step_ms": 10.0, **kwargs})
    assert info.value.field == field and "; fix: " in str(info.value)


@pytest.mark.parametrize("workers, per_host, ps", [(2, 1, 3), (7, 2, 10), (5, 5, 2), (100, 3, 1000), (3, 1, 0)])
def test_colocated_ps_count_per_host_is_round_robin(workers, per_host, ps):
    cluster = Cluster(workers=workers, bandwidths=(GBIT,), ps=ps, ps_placement="colocated",
                      workers_per_host=per_host)
    for host in range(cluster.hosts):
        assert cluster.ps_on(host) == sum(1 for j in range(ps) if j % cluster.hosts == host)
    assert sum(cluster.ps_on(h) for h in range(cluster.hosts)) == ps


def test_example_speeds_is_short_whatever_the_count():
    from tfdist.advise.model_inputs import example_speeds

    assert example_speeds(1) == "1,0.25" and example_speeds(3) == "1,1,0.25"
    assert example_speeds(10**9) == "1,1,...,0.25 (1,000,000,000 values)"
