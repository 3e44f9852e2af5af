"""benchmarks/recommender.py without the lab (no root, no TensorFlow): the RESULT and /proc parsing, the
interleaved schedule, the advisor's prediction it prints, and the tables."""
from __future__ import annotations

import subprocess
import sys

import pytest
from support import REPO, load_script

DRIVER = REPO / "benchmarks" / "recommender.py"
PARAMS = 500_000 * 64 + 1000 * 64 + 2 * (64 * 64 + 64) + 2  # the example's two towers at 500k x 64


@pytest.fixture(scope="module")
def bench():
    return load_script(DRIVER, "tfdist_bench_recommender")


def test_the_module_does_not_import_tensorflow():
    code = ("import importlib.util, sys; "
            f"spec = importlib.util.spec_from_file_location('m', {str(DRIVER)!r}); "
            "m = importlib.util.module_from_spec(spec); sys.modules['m'] = m; spec.loader.exec_module(m); "
            "m.parse_args([]); print('tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"


def test_the_chief_result_line_is_read_through_the_launchers_prefix(bench):
    output = ("[worker:0] RESULTS are not here\n[chief:0]  Epoch 2/2\n"
              "[chief:0]  RESULT strategy=parameter_server ps=2 table_shards=2 examples_per_second=15505\n"
              "tfdist launch: chief:0 exited with code 0\n")
    assert bench.result_fields(output) == {"strategy": "parameter_server", "ps": "2", "table_shards": "2",
                                           "examples_per_second": "15505"}
    assert bench.result_fields("[chief:0@c]   RESULT a=1 b=2\n") == {"a": "1", "b": "2"}  # over ssh
    assert bench.result_fields("RESULT a=1\n") == {"a": "1"}  # a plain process (the compute timing)
    assert bench.result_fields("no result\n") is None
    assert bench.result_fields("RESULT a=1\nRESULT a=2\n") is None  # two chiefs: not one result


def test_peak_resident_set_is_vmhwm_in_kib(bench):
    status = "Name:\tpython\nVmPeak:\t 9000000 kB\nVmHWM:\t  2357248 kB\nVmRSS:\t  1000000 kB\n"
    assert bench.peak_kib(status) == 2_357_248
    assert bench.peak_kib(status, "VmRSS") == 1_000_000
    assert bench.peak_kib("Name:\tpython\nState:\tZ (zombie)\n") is None


def test_the_schedule_interleaves_and_reverses_every_other_repeat(bench):
    runs = bench.schedule(["ps1", "ps2", "ps2-whole"], [None, 200.0], 2)
    first = [(c, r) for c, r, repeat in runs if repeat == 0]
    second = [(c, r) for c, r, repeat in runs if repeat == 1]
    assert first == [("ps1", None), ("ps2", None), ("ps2-whole", None), ("ps1", 200.0), ("ps2", 200.0)]
    assert second == first[::-1]
    assert ("ps2-whole", 200.0) not in first  # memory only: unshaped


def test_the_prediction_is_the_advisors_told_of_the_two_tables(bench):
    from tfdist.advise import manual_inputs, predict_all
    from tfdist.advise.model_inputs import Embedding

    tables = bench.tables(1000, 500_000, 64)
    assert tables == (Embedding(1000, 64, 1), Embedding(500_000, 64, 1))
    cluster, workload = manual_inputs(workers=2, bandwidths=(25e6,), params=PARAMS, batch_size=256, step_ms=20.0,
                                      ps=2, latency_ms=0.05, embeddings=tables)
    assert bench.predict(PARAMS, 2, 20.0, 25e6, 0.05, tables) == predict_all(cluster, workload)[
        "parameter_server"].examples_per_second
    # told nothing, the advisor moves 128 MB a step at 200 Mbit/s: a few examples/s; one batch of rows: thousands
    assert bench.predict(PARAMS, 2, 20.0, 25e6, 0.05) < 100 < 1000 < bench.predict(PARAMS, 2, 20.0, 25e6, 0.05, tables)


def test_the_tables_show_ratios_predictions_load_and_each_ps_peak(bench):
    def run(config, rate_mbit, eps, peaks, load=1.5, ok=True):
        last = {name: kib - 100 * 1024 for name, kib in peaks.items()}  # 100 MB below the peak at the end
        return {"config": config, "rate_mbit": rate_mbit, "repeat": 0, "ok": ok, "load": load,
                "examples_per_second": eps, "peak_kib": peaks, "last_rss_kib": last, "predicted": 8000.0,
                "predicted_dense": 25.0,
                "left_on_hosts": {}, **({} if ok else {"error": "exit code 1", "tail": ["boom"]})}

    records = [run("ps1", None, 10_000.0, {"ps:0": 1024 * 900}), run("ps2", None, 12_000.0,
               {"ps:0": 1024 * 500, "ps:1": 1024 * 520}, load=3.0),
               run("ps2-whole", None, 9_000.0, {"ps:0": 1024 * 880, "ps:1": 1024 * 300}),
               run("ps1", 200.0, 4_000.0, {"ps:0": 1024 * 910}), run("ps2", 200.0, 0.0, {}, ok=False)]
    settings = {"configs": ["ps1", "ps2", "ps2-whole"], "rates": [None, 200.0], "repeats": 1, "items": 500_000,
                "embedding_dim": 64, "table_mb": 122.0, "params": PARAMS,
                "compute": {"step_ms": 20.0}, "link_rate_mbit": 9000.0, "latency_ms": 0.05}
    text = bench.report(records, settings)
    lines = text.splitlines()
    ps2 = next(line for line in lines if line.startswith("unshaped") and "| ps2 " in line)
    assert "12,000" in ps2 and "1.20x" in ps2 and "25.0" in ps2 and "480x" in ps2 and "1.50x" in ps2
    assert "3.0-3.0" in ps2  # the load during its runs
    slow = next(line for line in lines if line.startswith("200 Mbit/s") and "| ps2 " in line)
    assert "failed" in slow
    memory = next(line for line in lines if line.startswith("ps2-whole"))
    assert [cell.strip() for cell in memory.split("|")][3:9] == ["880", "300", "780", "200", "880", "1"]
    ps1 = next(line for line in lines[lines.index(next(x for x in lines if x.startswith("ps memory"))):]
               if line.startswith("ps1"))
    assert [cell.strip() for cell in ps1.split("|")][3:9] == ["905 (900-910)", "-", "805 (800-810)", "-",
                                                              "905 (900-910)", "2"]
    assert "failed: ps2 200 Mbit/s repeat 0: exit code 1" in text and "    boom" in text
