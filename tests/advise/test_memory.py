"""The memory arithmetic (tfdist/advise/memory.py), without TensorFlow: bytes per ps and per worker, the
fewest ps tasks and shards that fit, and the bound holding against TensorFlow's round-robin placement
(simulated here for every order; the slot counts are checked on real optimizers in
test_memory_tensorflow.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

from tfdist.advise import AdviseError
from tfdist.advise.memory import (EXTRA_VARIABLES, OPTIMIZER_SLOTS, SERVER_FOOTPRINT_BYTES, ModelMemory, Variable,
                                  check_memory, fewest_ps, fewest_shards, parse_optimizer, ps_need, worker_need,
                                  working_pieces)

F = SERVER_FOOTPRINT_BYTES
GiB = 2**30
TABLE = ModelMemory.from_counts(128_000_000, 4, "adagrad")  # the 1M x 128 float32 embedding


def test_the_slots_per_variable_of_the_usual_optimizers():
    assert {name: OPTIMIZER_SLOTS[name] for name in ("momentum", "adagrad", "adam")} == {
        "momentum": 1, "adagrad": 1, "adam": 2}
    assert OPTIMIZER_SLOTS["sgd"] == 1  # tf-keras keeps a momentum slot at momentum=0 (Keras 3: none)
    assert parse_optimizer("Adam") == ("adam", 2) and parse_optimizer("3") == ("3 slot(s)", 3)
    with pytest.raises(AdviseError) as info:
        parse_optimizer("adamm")
    assert str(info.value).startswith("--optimizer 'adamm' is not an optimizer the advisor knows")
    assert "adam 2" in str(info.value) and str(info.value).endswith("0 to 16")
    assert info.value.field == "optimizer"


def test_one_ps_holds_the_whole_table_its_slots_and_working_space():
    need = ps_need(TABLE, ps=1)
    assert (need.variables, need.slots, need.working, need.footprint) == (512e6, 512e6, 4 * 512e6, F)
    assert need.total == F + 6 * 512_000_000


def test_without_shards_more_ps_do_not_help_a_single_variable():
    assert ps_need(TABLE, ps=4).total == ps_need(TABLE, ps=1).total


def test_shards_split_the_largest_variable_and_uneven_rows_round_up():
    assert ps_need(TABLE, ps=2, shards=2).variables == 256_000_000
    odd = ModelMemory((Variable(11 * 8, 11),), "adam", 2)  # 11 rows of 8: pieces of 6 and 5 rows
    need = ps_need(odd, ps=2, shards=2)
    assert (need.variables, need.slots, need.working) == (6 * 8 * 4, 2 * 6 * 8 * 4, 6 * 6 * 8 * 4)
    assert ps_need(odd, ps=2, shards=20).variables == 6 * 8 * 4  # 11 one-row pieces: at most 6 on a ps


def test_a_variable_smaller_than_a_shard_is_not_split():
    small, big = Variable(1000, 10), Variable(1_000_000, 1000)
    assert small.parts(None, 1 << 20, ps=4) == 1  # 4 KB < 1 MiB
    assert big.parts(None, 1 << 20, ps=4) == 4  # 4 MB: ceil(4 / 1.05) = 4, at most one per ps
    assert big.parts(None, 1 << 20, ps=2) == 2
    assert Variable(5, 1).parts(8, None, ps=8) == 1  # one row cannot be split


def test_the_fewest_ps_and_shards_that_fit():
    """With shards the largest variable decides: 1.5 GiB per ps needs 3 ps, shards=3, for the table."""
    cap = 3 * GiB // 2
    found = fewest_ps(TABLE, cap)
    assert (found.ps, found.shards) == (3, 3)
    assert ps_need(TABLE, 3, 3).total <= cap < ps_need(TABLE, 2, 2).total
    assert fewest_shards(TABLE, 3, cap).shards == 3 and fewest_shards(TABLE, 2, cap) is None
    assert (fewest_ps(TABLE, 2 * GiB).ps, fewest_ps(TABLE, 2 * GiB).shards) == (2, 2)
    roomy = fewest_ps(TABLE, 8 * GiB)
    assert (roomy.ps, roomy.shards) == (1, None)  # fits whole: no partitioner
    assert fewest_ps(TABLE, F) is None  # the server alone fills it
    one_row = ModelMemory((Variable(10**8, 1),), "adam", 2)  # a 400 MB row, 2.8 GB with slots and work
    assert fewest_ps(one_row, 2 * GiB) is None


def test_a_worker_holds_the_whole_model_under_allreduce_and_no_variable_under_ps():
    allreduce = worker_need(TABLE, "allreduce")
    assert (allreduce.model, allreduce.working) == (3 * 512_000_000, 4 * 512_000_000)
    assert worker_need(TABLE, "parameter_server").total == F
    check = check_memory(TABLE, ps=2, ps_memory=4 * GiB, worker_memory=2 * GiB)
    assert check.fits("parameter_server") and not check.fits("horovod")
    assert "every worker holds the whole model: 3.57 GiB" in check.refusal("horovod")
    refused = check_memory(TABLE, ps=2, ps_memory=3 * GiB // 2)
    assert refused.ps_fits is False and not refused.fits("parameter_server") and refused.fits("horovod")
    assert refused.refusal("parameter_server") == (
        "with 2 ps and shards=2 the fullest ps needs 1.66 GiB (variables 244 MiB + slots 244 MiB + working "
        "space 977 MiB + server 238 MiB), above --ps-memory 1.5 GiB; --ps 3 with shards=3 is the fewest that fit")
    data = refused.as_dict()
    assert (data["min_ps"], data["min_ps_shards"], data["shards"], data["ps_fits"]) == (3, 3, 2, False)


def test_the_working_space_formula():
    assert [working_pieces(OPTIMIZER_SLOTS[name]) for name in ("adagrad", "adam")] == [4, 6]


def test_counts_without_a_largest_variable_are_one_variable_and_a_largest_one_splits_the_rest():
    assert len(TABLE.variables) == 1
    two = ModelMemory.from_counts(130_000_000, 4, "adam", largest=128_000_000)
    assert [v.elements for v in two.variables] == [128_000_000, 2_000_000]
    with pytest.raises(AdviseError, match="larger than the model"):
        ModelMemory.from_counts(10, 4, "adam", largest=11)


# --- the bound against TensorFlow's placement ----------------------------------------------------------

def _round_robin(order: list[tuple[int, int] | None], ps: int, shards: int | None) -> int:
    """The fullest ps's bytes of pieces as ParameterServerStrategy places them: every variable (rows,
    bytes per row; None: an extra scalar) or piece on the next ps in creation order."""
    held = [0] * ps
    count = 0
    for item in order:
        if item is None:
            count += 1
            continue
        rows, row_bytes = item
        parts = min(shards or 1, rows)
        base, extra = divmod(rows, parts)
        for i in range(parts):
            held[count % ps] += (base + (i < extra)) * row_bytes
            count += 1
    return max(held)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 64)), min_size=1, max_size=12),
       st.integers(1, 6), st.sampled_from([None, 2, 3, 4, 8]), st.data())
def test_the_bound_holds_whatever_the_creation_order(variables, ps, shards, data):
    """No order of creation, with up to EXTRA_VARIABLES scalars interleaved, puts more on one ps than
    ps_need counts."""
    order = data.draw(st.permutations(variables))
    extras = data.draw(st.lists(st.integers(0, len(order)), max_size=EXTRA_VARIABLES))
    placed: list[tuple[int, int] | None] = list(order)
    for at in sorted(extras, reverse=True):
        placed.insert(at, None)
    model = ModelMemory(tuple(Variable(rows * row, rows, 1) for rows, row in variables), "sgd", 0)
    assert _round_robin(placed, ps, shards) <= ps_need(model, ps, shards).variables


def test_the_bound_is_reached_by_an_unlucky_order():
    """Kernels and biases alternating over 2 ps: every kernel on the first ps, which the bound counts."""
    layers = [(100, 10), (1, 10)] * 5  # (rows, bytes per row): a kernel of 1000 B, a bias of 10 B
    model = ModelMemory(tuple(Variable(rows * row, rows, 1) for rows, row in layers), "sgd", 0)
    assert _round_robin(layers, 2, None) == 5 * 1000
    assert 5 * 1000 <= ps_need(model, 2).variables <= 5 * 1000 + 5 * 10
    assert ps_need(model, 2, 2).variables == 5 * 500 + 5 * 10  # a half of each kernel, the biases whole


def test_a_host_holds_every_task_placed_on_it():
    """The one rule: 8 workers on a host need 8 times a worker under allreduce; a colocated ps adds to
    its workers' runtime under parameter servers only, and has what they leave."""
    from tfdist.advise.model_inputs import Cluster
    from tfdist.advise.user_inputs import described_hosts
    from tfdist.advise.memory import HostLoad

    hosts = described_hosts(Cluster(workers=10, workers_per_host=8, ps=1, ps_placement="colocated",
                                    bandwidths=(1e9,)), worker_memory=24 * GiB)
    assert hosts == (HostLoad(8, 1, 24 * GiB, given="--worker-memory"),
                     HostLoad(2, 0, 24 * GiB, given="--worker-memory"))
    check = check_memory(TABLE, ps=1, hosts=hosts)
    assert check.host_need(hosts[0], "allreduce") == 8 * worker_need(TABLE, "allreduce").total
    assert check.host_need(hosts[0], "parameter_server") == 8 * F + ps_need(TABLE, 1).total
    assert check.host_need(hosts[1], "parameter_server") == 2 * F
    assert check.ps_room == 24 * GiB - 8 * F and check.ps_fits is True
    assert check.worker_fits("allreduce") is False and check.fits("parameter_server")
    assert "; 8 workers on one host need 28.6 GiB, above --worker-memory 24 GiB" in check.refusal("horovod")
    tight = check_memory(TABLE, ps=1, hosts=(HostLoad(8, 1, 4 * GiB, given="--worker-memory"),))
    assert tight.ps_fits is False and tight.ps_room == 4 * GiB - 8 * F
    assert "above 2.14 GiB per ps (--worker-memory 4 GiB less the runtime of its 8 workers)" in \
        tight.refusal("parameter_server")
