"""The described cluster and workload (tfdist/advise/cluster.py): defaults, placement, refused values."""
from __future__ import annotations

import dataclasses

import pytest

from tfdist.advise.cluster import Cluster, Workload
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
