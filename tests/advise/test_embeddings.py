"""Embedding tables in the cost model: a step moves the looked-up rows, not the table (no TensorFlow)."""
from __future__ import annotations

import json

import pytest
from support import invoke

from tfdist.advise import AdviseError, manual_inputs, predict_all
from tfdist.advise.model_inputs import INDEX_BYTES, Embedding, Workload
from tfdist.advise.cost import horovod, multi_worker_mirrored, parameter_server
from tfdist.advise.user_inputs import parse_embedding

GBIT = 125e6  # bytes/s
TABLE = Embedding(rows=1_000_000, dim=128, lookups=1)
PARAMS = 128_000_000 + 100_000  # the table and 100k dense parameters


def _inputs(embeddings=(TABLE,), workers=2, ps=1, batch=64, rate=GBIT, **extra):
    return manual_inputs(workers=workers, bandwidths=(rate,), params=PARAMS, batch_size=batch, step_ms=20.0,
                         ps=ps, embeddings=embeddings, **extra)


def test_a_step_moves_the_dense_parameters_and_one_batch_of_rows():
    _, workload = _inputs()
    assert workload.sparse_params == 128_000_000
    assert workload.dense_bytes == 100_000 * 4
    assert workload.sparse_step_bytes == 64 * (128 * 4 + INDEX_BYTES)
    assert workload.step_bytes == 400_000 + 33_280
    assert Workload(params=PARAMS, batch_size=64, step_ms=20.0).step_bytes == PARAMS * 4  # no tables: all of it


def test_parameter_servers_pull_and_push_only_the_rows():
    cluster, workload = _inputs()
    prediction = parameter_server(cluster, workload)
    # one separate ps: each worker pulls and pushes dense + rows over its own 1 Gbit/s link, plus 2 latencies
    assert prediction.communication_ms == pytest.approx((2 * 433_280 / GBIT + 2 * cluster.latency_s) * 1000)
    told_nothing = parameter_server(*_inputs(embeddings=()))
    assert prediction.examples_per_second > 50 * told_nothing.examples_per_second


def test_allreduce_allgathers_the_rows_and_compresses_only_the_dense_part():
    cluster, workload = _inputs(workers=4)
    n, alpha = 4, cluster.latency_s
    ring = 2 * (n - 1) * alpha + 2 * (n - 1) / n * 400_000 / GBIT
    gather = 2 * (n - 1) * alpha + (n - 1) * 33_280 / GBIT
    assert horovod(cluster, workload).communication_ms == pytest.approx((ring + gather) * 1000)
    fp16 = horovod(cluster, workload, compression="fp16").communication_ms
    ring16 = 2 * (n - 1) * alpha + 2 * (n - 1) / n * 200_000 / GBIT
    assert fp16 == pytest.approx((ring16 + gather + 400_000 / 5e9) * 1000)  # the casts: of the dense bytes
    mwms = multi_worker_mirrored(cluster, workload).communication_ms
    ring_mwms = 2 * (n - 1) * alpha + 2 * (n - 1) / n * 400_000 / (GBIT * 0.6)
    gather_mwms = 3 * (n - 1) * alpha + (n - 1) * 33_280 / (GBIT * 0.6)  # TensorFlow gathers the lengths too
    assert mwms == pytest.approx((ring_mwms + gather_mwms) * 1000)


def test_each_table_is_gathered_on_its_own_so_latency_counts_per_table():
    halves = (Embedding(500_000, 128, 0.5), Embedding(500_000, 128, 0.5))  # the same rows, in two tables
    one, two = _inputs(workers=4), _inputs(embeddings=halves, workers=4)
    assert one[1].sparse_step_bytes == two[1].sparse_step_bytes
    alpha = one[0].latency_s
    assert horovod(*two).communication_ms - horovod(*one).communication_ms == pytest.approx(2 * 3 * alpha * 1000)
    assert (multi_worker_mirrored(*two).communication_ms - multi_worker_mirrored(*one).communication_ms
            == pytest.approx(3 * 3 * alpha * 1000))


def test_a_model_that_is_all_table_has_no_ring_only_the_gather():
    cluster, workload = manual_inputs(workers=2, bandwidths=(GBIT,), params=TABLE.params, batch_size=64,
                                      step_ms=20.0, ps=1, embeddings=(TABLE,))
    assert workload.dense_bytes == 0
    assert horovod(cluster, workload).communication_ms == pytest.approx(
        (2 * cluster.latency_s + 33_280 / GBIT) * 1000)


def test_more_lookups_move_more_rows():
    bag = Embedding(rows=1_000_000, dim=128, lookups=20)
    assert _inputs(embeddings=(bag,))[1].sparse_step_bytes == 20 * _inputs()[1].sparse_step_bytes
    mean = Embedding(rows=1_000_000, dim=128, lookups=2.5)  # bags of varying size: the mean, not rounded
    assert _inputs(embeddings=(mean,))[1].sparse_step_bytes == 2.5 * _inputs()[1].sparse_step_bytes


@pytest.mark.parametrize("text, want", [("1Mx128", Embedding(1_000_000, 128, 1)), ("500kx64:20", Embedding(500_000, 64, 20)),
                                        (" 1000X8:1 ", Embedding(1000, 8, 1)), ("1Mx32:2.5", Embedding(10**6, 32, 2.5))])
def test_the_table_text(text, want):
    assert parse_embedding(text) == want


@pytest.mark.parametrize("text, words", [("1M", "is not ROWSxDIM"), ("x128", "is not ROWSxDIM"),
                                         ("1Mx", "is not ROWSxDIM"), ("1Mx128:", "is not ROWSxDIM"),
                                         ("1Mx12q", "is not a count"), ("1Mx128:0", "LOOKUPS '0' is not a positive number"),
                                         ("1Mx128:two", "is not a positive number"), ("1Mx128:nan", "positive number"),
                                         ("1000x999.6", "is not a whole number"), ("1.5x128", "is not a whole number"),
                                         ("1Mx" + "9" * 70, "too long")])
def test_a_bad_table_text_names_the_option_and_the_form(text, words):
    with pytest.raises(AdviseError) as info:
        parse_embedding(text)
    assert words in str(info.value) and "ROWSxDIM[:LOOKUPS]" in str(info.value) and "; fix:" in str(info.value)
    assert str(info.value).startswith("--embedding ") and info.value.field == "embeddings"


def test_tables_larger_than_the_model_are_refused():
    with pytest.raises(AdviseError) as info:
        manual_inputs(workers=2, bandwidths=(GBIT,), params=1_000_000, batch_size=64, step_ms=20.0,
                      embeddings=(TABLE,))
    assert info.value.field == "embeddings" and "128,000,000 parameters, more than the model's 1,000,000" in str(
        info.value)


def test_the_command_takes_tables_and_says_what_a_step_moves(tmp_path):
    argv = ["advise", "--workers", "2", "--ps", "1", "--params", "128.1M", "--embedding", "1Mx128",
            "--batch-size", "64", "--step-ms", "20", "--bandwidth", "1gbit"]
    result = invoke(*argv)
    assert result.exit_code == 0, result.output
    assert "Embedding tables (sparse updates): 1,000,000 x 128, 1 lookup(s) per example; a worker step moves " \
           "33.3 kB of their rows, the rest 400 kB whole." in " ".join(result.output.split())
    assert "the embedding tables' figures assume an optimizer whose sparse update touches only the looked-up " \
           "rows (Adagrad, SGD without momentum)" in " ".join(result.output.split())
    data = json.loads(invoke(*argv, "--json").stdout)
    cluster, workload = _inputs()
    assert data["strategies"]["parameter_server"]["examples_per_second"] == pytest.approx(
        predict_all(cluster, workload)["parameter_server"].examples_per_second, rel=1e-3)
    plan = tmp_path / "plan.json"
    assert invoke(*argv, "--save", str(plan)).exit_code == 0
    assert json.loads(plan.read_text())["inputs"]["embeddings"] == [{"rows": 1_000_000, "dim": 128, "lookups": 1}]


@pytest.mark.parametrize("extra, words", [(["--embedding", "2Mx128"], "more than the model's"),
                                          (["--embedding", "1M"], "is not ROWSxDIM")])
def test_the_command_refuses_a_bad_table_naming_the_option(extra, words):
    result = invoke("advise", "--workers", "2", "--params", "128.1M", "--batch-size", "64", "--step-ms", "20",
                    "--bandwidth", "1gbit", *extra)
    assert result.exit_code == 2 and "--embedding" in result.output and words in result.output, result.output
    assert "Traceback" not in result.output


def test_an_allreduce_workers_gradient_of_a_table_is_the_gathered_rows_not_the_table():
    from tfdist.advise.user_inputs import memory_check

    gib = 2**30
    cluster, workload = _inputs(batch=64)
    dense = memory_check(*_inputs(embeddings=()), ("adagrad", 1), largest=128_000_000, worker_memory=64 * gib)
    sparse = memory_check(cluster, workload, ("adagrad", 1), largest=128_000_000, worker_memory=64 * gib)
    table = 128_000_000 * 4
    gathered = 400_000 + 2 * 64 * (128 * 4 + INDEX_BYTES)  # the dense rest and both workers' rows
    assert dense.allreduce.model - sparse.allreduce.model == PARAMS * 4 - gathered > 0.99 * table
    assert sparse.allreduce.model == PARAMS * 4 * 2 + gathered  # variables and slots whole, as before


def test_the_tables_the_probe_found_reach_the_workload_unless_given():
    from tfdist.probe import driver as probe
    from tfdist.probe.result import build_inputs, render_measured
    from tfdist.launch.hosts import parse_hosts

    hosts = ["w1", "w2", "p1"]
    links = [probe.LinkMeasure(a, b, 1e9, 1e-4) for a, b in probe.ring(hosts)]
    found = probe.aggregate(parse_hosts("w1:1,w2:1,p1:1"), links, steps={"w1": 10.0, "w2": 10.0},
                            params=PARAMS, dtype_bytes=4, batch_size=64, embeddings=[[1_000_000, 128, 1]])
    _, workload, _ = build_inputs(found, 2, 1, 64)
    assert workload.embeddings == (TABLE,)
    assert found.as_dict()["embeddings"] == [{"rows": 1_000_000, "dim": 128, "lookups": 1.0}]
    assert "  Embedding layers: 1,000,000 x 128, 1 lookup(s) per example" in render_measured(found)
    given = Embedding(1_000_000, 128, 4)
    assert build_inputs(found, 2, 1, 64, embeddings=(given,))[1].embeddings == (given,)
    plain = probe.aggregate(parse_hosts("w1:1,w2:1,p1:1"), links, steps={"w1": 10.0, "w2": 10.0},
                            params=PARAMS, dtype_bytes=4, batch_size=64)
    assert build_inputs(plain, 2, 1, 64)[1].embeddings == ()


@pytest.mark.parametrize("text", ["1Mx128:٢", "１Mx128", "1Mx128:2\u00a0"])
def test_a_table_text_outside_ascii_is_refused_naming_the_character(text):
    """float() reads any script's digits ('٢' is 2.0): the LOOKUPS went through as a number (issue 34)."""
    with pytest.raises(AdviseError, match=r"--embedding.*not ASCII.*fix: type it as"):
        parse_embedding(text)


@pytest.mark.parametrize("text", ["1,٠.25", "1,0.25\u2007"])
def test_worker_speeds_outside_ascii_are_refused_naming_the_character(text):
    from tfdist.advise.user_inputs import parse_speeds

    with pytest.raises(AdviseError, match=r"--worker-speeds.*not ASCII.*fix: type it as"):
        parse_speeds(text)
