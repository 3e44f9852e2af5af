"""PlanCheck's record of a planned run (callbacks/plan_check.py): the measured figures against the plan,
and each epoch's per-worker figures that the launcher re-fits the cost model from (tfdist.adapt)."""
from __future__ import annotations

import json
import math

import tf_keras

from tfdist.callbacks.plan_check import PlanCheck, worker_figures
from tfdist.plan import Plan

PLAN = Plan(backend="horovod", variant="horovod", options={}, workers=2, ps=0, batch_size=64,
            predicted_examples_per_second=1000.0, predicted_step_ms=128.0, bottleneck="compute",
            explanation="compute-bound")


def logs(rate: float, *ranks: tuple[float, float, float]) -> dict[str, float]:
    """An epoch's logs as Throughput and Horovod's WorkerMetrics leave them: (compute, comm, examples/s) per rank."""
    found = {"examples_per_second": rate}
    for rank, (compute, comm, examples) in enumerate(ranks):
        found |= {f"worker/{rank}/compute_time_ms": compute, f"worker/{rank}/comm_time_ms": comm,
                  f"worker/{rank}/examples_per_second": examples, f"worker/{rank}/step_time_ms": compute + comm}
    return found


def test_the_record_carries_each_epochs_per_worker_figures(tmp_path):
    path = tmp_path / "plan.measured.json"
    check = PlanCheck(PLAN, is_chief=True, result_path=str(path))
    check.set_model(tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(2)]))  # 3 x 2 + 2
    check.on_train_begin()
    check.on_epoch_end(0, logs(900.0, (30.0, 5.0, 450.0), (31.0, 4.0, 450.0)))
    check.on_epoch_end(1, logs(1000.0, (10.0, 30.0, 500.0), (40.0, 1.0, 500.0)))
    check.on_train_end()
    record = json.loads(path.read_text())
    assert record["epochs"] == 2 and record["measured_examples_per_second"] == 1000.0
    assert record["params"] == 8  # the job's own model, which the launcher re-fits the cost model on
    assert record["worker_epochs"] == [
        {"epoch": 0, "workers": [{"compute_ms": 30.0, "communication_ms": 5.0, "examples_per_second": 450.0},
                                 {"compute_ms": 31.0, "communication_ms": 4.0, "examples_per_second": 450.0}]},
        {"epoch": 1, "workers": [{"compute_ms": 10.0, "communication_ms": 30.0, "examples_per_second": 500.0},
                                 {"compute_ms": 40.0, "communication_ms": 1.0, "examples_per_second": 500.0}]}]


def test_the_record_carries_each_ranks_link_bytes_and_peak_memory_where_measured():
    """WorkerMetrics' bytes per step over the host's links and peak memory go into the record beside
    the timings; a NaN one (unmeasured) is left out, and never holds back the timings."""
    measured = logs(10.0, (10.0, 1.0, 5.0), (11.0, 1.0, 5.0)) | {
        "worker/0/link_bytes_per_step": 5.6e6, "worker/0/peak_memory_mb": 812.5,
        "worker/1/link_bytes_per_step": math.nan, "worker/1/peak_memory_mb": 790.0}
    assert worker_figures(measured) == [
        {"compute_ms": 10.0, "communication_ms": 1.0, "examples_per_second": 5.0, "link_bytes_per_step": 5.6e6,
         "memory_bytes": 812.5e6},
        {"compute_ms": 11.0, "communication_ms": 1.0, "examples_per_second": 5.0, "memory_bytes": 790.0e6}]


def test_an_epoch_without_per_worker_figures_or_with_a_nan_one_adds_none():
    assert worker_figures({"examples_per_second": 10.0}) == []  # no per-worker keys
    assert worker_figures(logs(10.0, (10.0, math.nan, 5.0))) == []  # a train step without the allreduce marks
    assert worker_figures(logs(10.0, (10.0, 1.0, 5.0))) == [
        {"compute_ms": 10.0, "communication_ms": 1.0, "examples_per_second": 5.0}]


def ps_logs(local: float, *workers: tuple[float, float]) -> dict[str, float]:
    """An epoch's logs as ParameterServerMetrics leaves them: (step time ms, examples/s) per worker."""
    found = {"examples_per_second": sum(rate for _, rate in workers), "local_compute_ms": local,
             "coordinator_step_ms": 5.0}
    for index, (step, rate) in enumerate(workers):
        found |= {f"worker/{index}/step_time_ms": step, f"worker/{index}/examples_per_second": rate,
                  f"worker/{index}/steps": 100.0}
    return found


def test_a_parameter_server_epoch_is_split_into_each_workers_compute_and_communication():
    """The launcher re-fits worker speeds from these (an adaptive run on parameter servers sees a
    straggler recover): the communication is the fastest worker's step less the compute timed on the
    chief, the same for every worker; each worker's compute is the rest of its step."""
    assert worker_figures(ps_logs(10.0, (14.0, 4000.0), (44.0, 1400.0))) == [
        {"compute_ms": 10.0, "communication_ms": 4.0, "examples_per_second": 4000.0},
        {"compute_ms": 40.0, "communication_ms": 4.0, "examples_per_second": 1400.0}]
    # workers faster than the chief's processor: no communication is left over
    assert worker_figures(ps_logs(20.0, (14.0, 4000.0), (16.0, 3500.0))) == [
        {"compute_ms": 14.0, "communication_ms": 0.0, "examples_per_second": 4000.0},
        {"compute_ms": 16.0, "communication_ms": 0.0, "examples_per_second": 3500.0}]
    assert worker_figures(ps_logs(10.0, (14.0, 4000.0), (math.nan, 0.0))) == []  # a worker that ran no step
    without_compute = ps_logs(10.0, (14.0, 4000.0))
    del without_compute["local_compute_ms"]
    assert worker_figures(without_compute) == []


def test_a_worker_beside_the_coordinator_carries_its_hosts_compute_at_rest():
    """ParameterServerMetrics times the chief's host at rest for the worker that shares it; the figure
    goes with that worker only (the launcher predicts a ring without the coordinator's load there)."""
    found = ps_logs(2.4, (23.5, 2700.0), (19.0, 3400.0)) | {"worker/0/rest_compute_ms": 2.4}
    assert [w.get("rest_compute_ms") for w in worker_figures(found)] == [2.4, None]
    assert [w.get("rest_compute_ms") for w in worker_figures(found | {"worker/0/rest_compute_ms": math.nan})] == [
        None, None]


def test_the_callbacks_ask_the_strategys_tf_config_who_shares_the_chiefs_host():
    """A ParameterServerStrategy keeps no cluster resolver on the model's side: the lab run carried no
    figure at rest until the callbacks asked tfdist's strategy for its TF_CONFIG."""
    from types import SimpleNamespace

    from tfdist.callbacks import _runtime
    from tfdist.cluster import TFConfig
    from tfdist.runtime.state import current_strategy, set_current

    config = TFConfig(cluster={"chief": ("w1:1",), "worker": ("w1:2", "w2:2"), "ps": ("p:1",)}, task_type="chief",
                      task_index=0)
    before = current_strategy()
    try:
        set_current(SimpleNamespace(environment=SimpleNamespace(config=config)))
        assert _runtime.workers_beside_chief() == frozenset({0})
        set_current(None)
        assert _runtime.workers_beside_chief(SimpleNamespace(distribute_strategy=None)) == frozenset()
    finally:
        set_current(before)
