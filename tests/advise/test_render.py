"""The advice as text and strict JSON (tfdist/advise/render.py) and its inputs (tfdist/advise/user_inputs.py, tfdist/probe/result.py)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from tfdist.advise import AdviseError, advise
from tfdist.advise.user_inputs import manual_inputs, parse_model_ref
from tfdist.probe.result import LinkMeasure, aggregate, build_inputs, render_measured, ring
from tfdist.advise.recommend import Advice
from tfdist.advise.render import advice_json, render
from tfdist.launch.hosts import parse_hosts

GBIT = 125e6


def _advice(**kwargs):
    cluster, workload = manual_inputs(**{"workers": 2, "bandwidths": (GBIT,), "params": 669_706,
                                         "batch_size": 64, "step_ms": 10.0, "ps": 1, **kwargs})
    return advise(cluster, workload), cluster, workload


def test_json_is_strict_and_round_trips():
    advice, _, _ = _advice()
    data = json.loads(advice_json(advice))
    assert data == json.loads(json.dumps(advice.as_dict()))


def test_a_non_finite_figure_is_an_error_naming_it_not_infinity():
    advice, _, _ = _advice()
    broken = {**advice.predictions, "parameter_server": dataclasses.replace(
        advice.predictions["parameter_server"], examples_per_second=float("nan"))}
    with pytest.raises(AdviseError, match=r"strategies\.parameter_server\.examples_per_second is not a finite"):
        advice_json(Advice(advice.recommended, advice.variant, broken, advice.reasons))


def test_the_table_names_a_few_link_rates_whatever_the_hosts():
    rates = tuple(GBIT * (1 + i / 1000) for i in range(500))
    advice, cluster, workload = _advice(workers=500, bandwidths=rates, ps=0)
    first = render(advice, cluster, workload).split("\n\n")[0]
    assert len(first) < 600 and "(500 different rates)" in " ".join(first.split())


def test_manual_inputs_name_the_field_with_short_messages():
    with pytest.raises(AdviseError) as info:
        manual_inputs(workers=4, bandwidths=(GBIT,) * 3, params=1, batch_size=1, step_ms=1.0)
    assert info.value.field == "bandwidths" and "3 rates for 4 worker host(s)" in str(info.value)
    with pytest.raises(AdviseError) as info:
        manual_inputs(workers=100_000, bandwidths=(GBIT,), params=1, batch_size=1, step_ms=1.0, speeds=(1.0,))
    assert info.value.field == "speeds" and len(str(info.value)) < 200


def test_build_inputs_from_a_probe_and_its_errors():
    slots = parse_hosts("a:1,b:1,c:1")
    links = [LinkMeasure(x, y, 1e9, 1e-4) for x, y in ring(["a", "b", "c"])]
    found = aggregate(slots, links, steps={"a": 10.0, "b": 20.0}, params=1000, dtype_bytes=4, batch_size=8)
    cluster, workload, same = build_inputs(found, 2, 1, 8)
    assert same is found and cluster.speeds == (1.0, 0.5) and workload.params == 1000
    assert render_measured(found).startswith("Measured:\n  a: link 1 Gbit/s")
    with pytest.raises(AdviseError) as info:
        build_inputs(found, 2, 1, 8, worker_speeds=(1.0,))
    assert info.value.field == "speeds"
    with pytest.raises(AdviseError) as info:
        build_inputs(found, 5, 1, 8)
    assert info.value.field == "hosts" and "the job needs 6 slots" in str(info.value)


@pytest.mark.parametrize("text", ["models:build_model", "pkg.models:build", " m:f "])
def test_model_refs(text):
    assert parse_model_ref(text) == text.strip()


@pytest.mark.parametrize("text, words", [
    ("nocolon", "is not MODULE:FUNCTION (no colon)"), (":f", "'' is not a module name"),
    ("m:", "'' is not a function name"), ("a b:c", "is not a module name"), ("m:f:g", "is not a function name"),
    ("1m:f", "is not a module name"), ("m" * 500 + ":f", "too long"),
])
def test_bad_model_refs_name_the_option(text, words):
    with pytest.raises(AdviseError) as info:
        parse_model_ref(text)
    message = str(info.value)
    assert message.startswith("--model ") and words in message and "; fix: " in message and len(message) < 400
    assert info.value.field == "model"


def test_rate_and_speed_lists_are_counted_before_they_are_built():
    from tfdist.advise.user_inputs import parse_rates, parse_speeds

    assert parse_rates("1gbit,50mbit") == (125e6, 50e6 / 8)
    assert parse_speeds("1, 0.25") == (1.0, 0.25)
    for parse, field in ((parse_rates, "bandwidths"), (parse_speeds, "speeds")):
        with pytest.raises(AdviseError) as info:
            parse(",".join(["1"] * 100_001))
        assert info.value.field == field and "100,001" in str(info.value) and len(str(info.value)) < 300


@pytest.mark.parametrize("text, words", [
    ("1,x", "'x' is not a number"), ("1,nan", "not a positive speed"), ("1,0", "not a positive speed"),
    ("1,1e7", "is not from 1e-06 to 1e+06"), ("1," + "1" * 100, "is not a number"), ("", "'' is not a number"),
])
def test_bad_speeds(text, words):
    from tfdist.advise.user_inputs import parse_speeds

    with pytest.raises(AdviseError) as info:
        parse_speeds(text)
    assert str(info.value).startswith("--worker-speeds '") and words in str(info.value)
    assert "; fix: " in str(info.value) and len(str(info.value)) < 300
