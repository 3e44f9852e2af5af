"""Elastic Horovod (make_strategy("horovod", elastic=True), tfdist/strategies/horovod_elastic.py).

The pieces first, without processes: options, the launch check, the commit callback on a stand-in
state, how a half-done epoch is resumed. Then real elastic ``horovodrun`` jobs on this host: its
two "hosts" are ``localhost`` and ``127.0.0.1`` (both local, so no ssh), listed by a discovery
script that reads a file (tests/scripts/hvd_elastic.py records every epoch with its size).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from support import REPO, SCRIPTS, subprocess_env

from tfdist.errors import TfdistError
from tfdist.launch.commands import find_horovodrun
from tfdist.strategies.horovod_elastic import (
    CommitState,
    ElasticFitError,
    _refuse_backup,
    _remainder,
    _run_elastic,
    remaining_batches,
    steps_per_epoch,
)
from tfdist.strategies.horovod import HorovodLaunchError, HorovodOptions, HorovodStrategy
from tfdist.strategies.inputs import InputError
from tfdist.strategies.options import OptionValueError


# --- options and launch ------------------------------------------------------------------------------
@pytest.mark.parametrize("options, message", [
    ({"elastic": "yes"}, "`elastic` must be True or False, got 'yes'"),
    ({"elastic": True, "commit_every_batches": -1}, "`commit_every_batches` must be an integer >= 0, got -1"),
    ({"elastic": True, "commit_every_batches": 2.5}, "`commit_every_batches` must be an integer >= 0, got 2.5"),
    ({"commit_every_batches": 10}, "`commit_every_batches`=10 commits elastic state, but `elastic` is off"),
    ({"elastic": True, "root_rank": 1}, "`root_rank`=1 with `elastic`"),
])
def test_bad_elastic_options_name_the_option_and_the_fix(options, message):
    with pytest.raises(OptionValueError) as info:
        HorovodOptions(**options)
    assert message in str(info.value) and "; fix: " in str(info.value)


def test_elastic_options_are_horovod_options():
    from tfdist.strategies import option_names

    assert {"elastic", "commit_every_batches"} <= set(option_names("horovod"))
    assert HorovodOptions(elastic=True, commit_every_batches=5).commit_every_batches == 5


def test_elastic_outside_an_elastic_launch_says_how_to_launch():
    """A plain `horovodrun -np 2` job sets no HOROVOD_ELASTIC: elastic=True would not survive anything."""
    with pytest.raises(HorovodLaunchError) as info:
        HorovodStrategy(HorovodOptions(elastic=True), environ={"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"})
    message = str(info.value)
    assert "HOROVOD_ELASTIC is None" in message
    assert "tfdist launch --backend horovod --elastic --min-np 1" in message and "; fix: " in message


def test_backup_and_restore_is_refused_with_elastic(tmp_path):
    with pytest.raises(TfdistError, match="BackupAndRestore with elastic=True.*fix: drop BackupAndRestore"):
        _refuse_backup([tf.keras.callbacks.BackupAndRestore(str(tmp_path))])
    _refuse_backup([tf.keras.callbacks.History()])  # anything else passes


# --- the elastic loop: errors it must not swallow -----------------------------------------------------
class _LoopState:
    """What Horovod's run loop calls on a state, counted."""

    def __init__(self, epoch: int = 0):
        self.epoch = epoch
        self.calls: list[str] = []

    def sync(self):
        self.calls.append("sync")

    def restore(self):
        self.calls.append("restore")

    def on_reset(self):
        self.calls.append("on_reset")


@pytest.fixture
def elastic_loop(monkeypatch):
    """horovod.tensorflow.elastic with its notification manager and reset stubbed: no driver, no hvd.init."""
    import horovod.common.elastic as common_elastic
    import horovod.tensorflow.elastic as hvd_elastic

    class Notifications:
        def init(self):
            pass

        def register_listener(self, state):
            pass

        def remove_listener(self, state):
            pass

    monkeypatch.setattr(common_elastic, "notification_manager", Notifications())
    resets: list[int] = []
    monkeypatch.setattr(hvd_elastic, "_reset", lambda: resets.append(1))
    return hvd_elastic, resets


def test_a_non_horovod_unknown_error_fails_the_fit_instead_of_ending_it_quietly(elastic_loop):
    """Horovod's run wrapper swallows an UnknownError that names no Horovod op (run returns None):
    fit must raise, not return a History with epochs missing."""
    hvd_elastic, resets = elastic_loop

    def attempt(state):
        raise tf.errors.UnknownError(None, None, "a py_function in the input pipeline failed")

    with pytest.raises(ElasticFitError, match="elastic fit failed at epoch 0 with UnknownError: a py_function"
                                              ".*; fix: ") as info:
        _run_elastic(hvd_elastic, attempt, _LoopState(), epochs=3)
    assert isinstance(info.value, TfdistError) and isinstance(info.value.__cause__, tf.errors.UnknownError)
    assert resets == []


def test_a_failed_horovod_op_of_any_error_type_restores_and_resets(elastic_loop):
    hvd_elastic, resets = elastic_loop
    errors = [tf.errors.UnknownError(None, None, "HorovodAlltoall failed: connection closed"),
              tf.errors.InternalError(None, None, "HorovodAllreduce: Horovod has been shut down")]

    def attempt(state):
        if errors:
            raise errors.pop(0)
        state.epoch = 3

    state = _LoopState()
    _run_elastic(hvd_elastic, attempt, state, epochs=3)
    assert state.calls == ["sync", "restore", "on_reset", "sync", "restore", "on_reset", "sync"]
    assert len(resets) == 2


def test_other_errors_pass_through_unchanged(elastic_loop):
    hvd_elastic, _ = elastic_loop

    def attempt(state):
        raise tf.errors.InvalidArgumentError(None, None, "Incompatible shapes: [16,1] vs. [16,2]")

    with pytest.raises(tf.errors.InvalidArgumentError, match="Incompatible shapes"):
        _run_elastic(hvd_elastic, attempt, _LoopState(), epochs=1)


def test_a_loop_that_returns_with_epochs_missing_is_an_error(elastic_loop):
    hvd_elastic, _ = elastic_loop

    def attempt(state):
        state.epoch = 2  # e.g. Horovod's wrapper swallowed an error after two committed epochs

    with pytest.raises(ElasticFitError, match="returned after 2 of 5 epochs.*; fix: "):
        _run_elastic(hvd_elastic, attempt, _LoopState(), epochs=5)
    _run_elastic(hvd_elastic, lambda state: setattr(state, "epoch", 5), _LoopState(), epochs=5)


# --- the learning rate an elastic job rescales --------------------------------------------------------
class _FakeHvd:
    """The few horovod.tensorflow names HorovodStrategy.optimizer uses, at a given size, no hvd.init."""

    def __init__(self, size: int):
        import horovod.tensorflow as hvd

        self._size = size
        self.Compression, self.Average, self.Sum = hvd.Compression, hvd.Average, hvd.Sum

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return 0


@pytest.fixture
def keras_horovod(monkeypatch):
    """Importing horovod.tensorflow.keras sets KMP_* variables: undone after the test."""
    for name in ("KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
        monkeypatch.delenv(name)
    import horovod.tensorflow.keras  # noqa: F401


def _strategy(size: int, **options) -> HorovodStrategy:
    from tfdist.strategies.base import DistributedStrategy

    strategy = HorovodStrategy.__new__(HorovodStrategy)
    DistributedStrategy.__init__(strategy, HorovodOptions(**options))
    strategy._hvd = _FakeHvd(size)
    return strategy


@pytest.mark.parametrize("size", [1, 2])
def test_elastic_records_the_size_the_rate_was_scaled_for_even_at_one_rank(size, keras_horovod):
    """At one rank the factor is 1, but a host that joins later must still double the rate."""
    from tfdist.strategies.horovod import SCALED_FOR

    wrapped = _strategy(size, elastic=True).optimizer(tf.keras.optimizers.SGD(0.05))
    assert getattr(wrapped, SCALED_FOR, None) == size
    assert float(wrapped.learning_rate.numpy()) == pytest.approx(0.05 * size)
    unscaled = _strategy(size, elastic=True).optimizer(tf.keras.optimizers.SGD(0.05), scale_lr=False)
    assert getattr(unscaled, SCALED_FOR, None) is None
    static = _strategy(1).optimizer(tf.keras.optimizers.SGD(0.05))
    assert getattr(static, SCALED_FOR, None) is None  # not elastic: nothing rescales it


def test_an_elastic_schedule_is_refused_even_at_one_rank(keras_horovod):
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)
    with pytest.raises(TfdistError, match="cannot rescale a LearningRateSchedule.*; fix: pass scale_lr=False"):
        _strategy(1, elastic=True).optimizer(tf.keras.optimizers.SGD(schedule))


# --- resuming a half-done epoch ----------------------------------------------------------------------
@pytest.mark.parametrize("done, then, now, left", [
    (0, 8, 16, 16),    # nothing committed mid-epoch: the whole epoch
    (3, 8, 16, 10),    # 3/8 done at size 2 -> 6/16 done at size 1
    (12, 16, 8, 2),    # 12/16 at size 1 -> 6/8 at size 2
    (7, 8, 8, 1),
    (15, 16, 8, 1),    # 7.5/8 rounds to all of it, but the epoch was unfinished: its last batch runs
])
def test_remaining_batches_keep_the_share_of_the_epoch_already_done(done, then, now, left):
    assert remaining_batches(done, then, now) == left


def test_steps_per_epoch_of_arrays_datasets_and_explicit_steps():
    x = np.zeros((100, 3), "float32")
    assert steps_per_epoch(x, {"batch_size": 16}) == 7
    assert steps_per_epoch(x, {}) == 4  # Keras' default batch of 32
    assert steps_per_epoch(tf.data.Dataset.range(10).batch(3), {}) == 4
    assert steps_per_epoch(tf.data.Dataset.range(10).repeat(), {"steps_per_epoch": 5}) == 5
    with pytest.raises(InputError, match="commit_every_batches resumes an epoch part-way.*fix: pass `steps_per_epoch`"):
        steps_per_epoch(tf.data.Dataset.range(10).repeat(), {})


def test_the_rest_of_an_epoch_is_its_remaining_share_of_batches():
    """Unshuffled finite inputs skip the batches already run (so, unshuffled, the unseen examples);
    other inputs run their next `left` batches. Not exactly-once data with shuffling: see the module."""
    x, y = np.arange(10, dtype="float32")[:, None], np.arange(10, dtype="float32")
    weights = np.ones(10, "float32")
    rx, ry, kwargs = _remainder(x, y, {"batch_size": 4, "sample_weight": weights}, done=1, left=2)
    np.testing.assert_array_equal(rx[:, 0], np.arange(4, 10))
    np.testing.assert_array_equal(ry, np.arange(4, 10))
    assert len(kwargs["sample_weight"]) == 6
    dataset = tf.data.Dataset.range(10).batch(2)
    rest, _, kwargs = _remainder(dataset, None, {}, done=3, left=2)
    assert [list(b.numpy()) for b in rest] == [[6, 7], [8, 9]] and "steps_per_epoch" not in kwargs
    repeated = tf.data.Dataset.range(10).batch(2).repeat()
    same, _, kwargs = _remainder(repeated, None, {"steps_per_epoch": 5}, done=3, left=2)
    assert same is repeated and kwargs["steps_per_epoch"] == 2


# --- the commit callback ------------------------------------------------------------------------------
class _State:
    """Horovod's ObjectState keeps references to the values at each commit: mutating a committed
    list in place would change the saved copy too, so the callback must assign new objects."""

    def __init__(self, **values):
        self.__dict__.update(values)
        self.commits: list[dict] = []

    def commit(self):
        self.commits.append({k: v for k, v in vars(self).items() if k != "commits"})


def _model(rate: float = 0.2) -> tf.keras.Model:
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(rate), loss="mse")
    return model


def test_epoch_end_commits_history_sizes_and_the_rate_per_replica():
    state = _State(epoch=0, batch=0, steps=0, lr_per_replica=0.1, history={}, sizes=[])
    commit = CommitState(state, size=2, steps=8)
    commit.set_model(_model(rate=0.2))
    commit.on_epoch_end(0, {"loss": np.float32(1.5), "note": "text"})
    first = state.commits[-1]
    commit.on_epoch_end(1, {"loss": 0.5})
    assert state.history == {"loss": [1.5, 0.5]} and state.sizes == [2, 2]
    assert (state.epoch, state.batch, state.steps) == (2, 0, 8)
    assert first["history"] == {"loss": [1.5]} and first["sizes"] == [2], "the first commit must be left alone"
    assert state.lr_per_replica == pytest.approx(0.1)  # 0.2 at size 2


def test_batch_commits_every_k_batches_but_not_on_the_epochs_last():
    state = _State(epoch=3, batch=0, steps=0, lr_per_replica=None, history={}, sizes=[])
    commit = CommitState(state, size=1, steps=7, every_batches=3)
    commit.set_model(_model())
    for batch in range(6):
        commit.on_train_batch_end(batch)
    assert [(c["batch"], c["steps"]) for c in state.commits] == [(3, 7), (6, 7)]
    resumed = CommitState(state, size=1, steps=7, every_batches=2)
    resumed.batch_offset = 4  # a resumed epoch: its batch 0 is the epoch's fifth
    resumed.on_train_batch_end(0)
    resumed.on_train_batch_end(1)
    assert state.commits[-1]["batch"] == 6
    assert not hasattr(CommitState(state, 1, 7), "on_train_batch_end") or \
        "on_train_batch_end" not in vars(CommitState(state, 1, 7)), "no batch hook without batch commits"


def test_during_the_warm_up_the_committed_rate_is_its_target():
    from tfdist.callbacks import LearningRateWarmup

    state = _State(epoch=0, batch=0, steps=0, lr_per_replica=0.1, history={}, sizes=[])
    warmup = LearningRateWarmup(warmup_epochs=2)
    warmup.target_lr = 0.4
    commit = CommitState(state, size=4, steps=8, warmup=warmup)
    commit.set_model(_model(rate=0.25))  # mid-ramp
    commit.on_epoch_end(0, {})
    assert state.lr_per_replica == pytest.approx(0.1)
    commit.on_epoch_end(2, {})  # warm-up over: the optimizer's own rate
    assert state.lr_per_replica == pytest.approx(0.25 / 4)


# --- real elastic jobs on this host -------------------------------------------------------------------
def _elastic_job(tmp_path: Path, *script_args: str, cooldown: tuple[int, int] = (2, 10), start: int = 2,
                 timeout: float = 400) -> tuple[subprocess.CompletedProcess, list[dict], dict]:
    """An elastic job on `localhost` and `127.0.0.1`; with ``start=1`` the discovery lists only
    `localhost` until the script's ``--add-at`` restores the full list."""
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("localhost:1\n127.0.0.1:1\n")
    if start == 1:
        hosts.with_name("hosts.txt.all").write_text(hosts.read_text())
        hosts.write_text("localhost:1\n")
    discover = tmp_path / "discover.sh"
    discover.write_text(f"#!/bin/sh\ncat {hosts}\n")
    discover.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    launcher = find_horovodrun() or "horovodrun"  # by hand, as docs/several-hosts.md shows it
    nic = ["--network-interface", "lo"] if start == 1 else []  # else Horovod waits for 2 hosts to start
    command = [launcher, "--gloo", "-np", str(start), "--min-np", "1", "--max-np", "2", *nic,
               "--host-discovery-script", str(discover), "--blacklist-cooldown-range", *map(str, cooldown),
               sys.executable, str(SCRIPTS / "hvd_elastic.py"), str(out), "--hosts-file", str(hosts), *script_args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=subprocess_env(), cwd=REPO,
                            check=False)
    records = [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines()] \
        if (out / "epochs.jsonl").exists() else []
    final = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else {}
    return result, records, final


def _check_every_epoch_once(result, records, final, epochs: int) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert final["epoch"] == list(range(epochs)), "the History holds every epoch once"
    assert len(final["history"]["loss"]) == len(final["sizes"]) == epochs
    assert sorted(r["epoch"] for r in records if r["rank"] == 0) == list(range(epochs))
    for record in records:  # the rate follows the size (SGD 0.05 scaled), the shards too
        assert record["lr"] == pytest.approx(0.05 * record["size"])


@pytest.mark.horovod
def test_a_lost_rank_is_survived_and_its_host_rejoins(tmp_path):
    """The rank on 127.0.0.1 dies at the start of epoch 2: the other rank restores the last commit,
    goes on alone (twice the steps per epoch), and 127.0.0.1 comes back after its cool-down."""
    epochs = 6  # 2 at size 2, the failure, 2 s of cool-down (1 s x 2 at the first blacklisting), rejoined
    result, records, final = _elastic_job(tmp_path, "--fail-once", "127.0.0.1:2", "--epochs", str(epochs),
                                          "--epoch-seconds", "2", cooldown=(1, 2))
    _check_every_epoch_once(result, records, final, epochs)
    sizes = final["sizes"]
    assert sizes[:2] == [2, 2] and sizes[2] == 1, sizes
    assert sizes[-1] == 2, f"127.0.0.1 must rejoin: {sizes}"
    steps = {r["size"]: r["steps"] for r in records}
    assert steps == {2: 8, 1: 16}, "256 examples, batch 16: 8 steps per rank at size 2, 16 alone"


@pytest.mark.horovod
def test_hosts_removed_and_added_resume_mid_epoch_from_a_batch_commit(tmp_path):
    """The discovery list drops 127.0.0.1 after epoch 1 and restores it after epoch 3; commits
    every 3 batches, so the job re-forms part-way through an epoch and runs only its rest. (The
    script waits in the next epoch's first batch until Horovod reports the change, so it lands on
    the batch commit at batch 3, not on an epoch end.)"""
    epochs = 5
    result, records, final = _elastic_job(tmp_path, "--remove-at", "1", "--add-at", "3", "--commit-every", "3",
                                          "--epochs", str(epochs), "--epoch-seconds", "1.5")
    _check_every_epoch_once(result, records, final, epochs)
    assert 1 in final["sizes"] and final["sizes"][-1] == 2, final["sizes"]
    full = {1: 16, 2: 8}
    partial = [r for r in records if r["rank"] == 0 and r["steps"] != full[r["size"]]]
    assert partial, "a host change at a batch commit resumes the epoch part-way"
    assert all(0 < r["steps"] < full[r["size"]] for r in partial)


@pytest.mark.horovod
def test_a_job_that_starts_alone_scales_the_rate_when_a_host_joins(tmp_path):
    """One host listed at the start (Horovod starts every slot it finds, whatever -np says): the rate
    is scaled for one rank (a factor of 1), and must still double when the second host joins after
    epoch 1 (the lr check in _check_every_epoch_once)."""
    epochs = 4  # the join lands on epoch 2's end: epoch 3 runs at size 2
    result, records, final = _elastic_job(tmp_path, "--epochs", str(epochs), "--epoch-seconds", "1",
                                          "--add-at", "1", start=1)
    _check_every_epoch_once(result, records, final, epochs)
    assert final["sizes"][0] == 1 and final["sizes"][-1] == 2, final["sizes"]
