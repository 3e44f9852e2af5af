"""EpochClock: where an epoch's training starts and stops, the same for every callback on it; and
Throughput, WorkerMetrics and ParameterServerMetrics timing epochs with it."""
from __future__ import annotations

import pytest

from tfdist.callbacks import ParameterServerMetrics, Throughput, WorkerMetrics
from tfdist.callbacks.epoch_clock import EpochClock


class Time:
    """A time source the test moves by hand."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_training_stops_at_the_first_validation_and_the_wall_time_at_the_epoch_end():
    time = Time(10.0)
    clock = EpochClock(now=time)
    clock.train_begin()
    time.now = 12.0
    clock.epoch_begin()
    time.now = 15.0
    clock.test_begin()
    time.now = 16.0
    clock.test_begin()  # a second evaluation in the same epoch moves nothing
    time.now = 19.0
    assert clock.epoch_end() == 3.0
    assert clock.wall_time == 9.0


def test_without_validation_the_epoch_ends_at_on_epoch_end():
    time = Time()
    clock = EpochClock(now=time)
    clock.train_begin()
    clock.epoch_begin()
    time.now = 4.0
    assert clock.epoch_end() == 4.0


def test_every_callback_on_the_clock_reads_the_same_interval():
    """Each callback forwards each hook: the first call of an epoch reads the time, the others
    find it read."""
    time = Time()
    clock = EpochClock(now=time)
    for _ in range(3):
        clock.train_begin()
    time.now = 1.0
    for _ in range(3):
        clock.epoch_begin()
        time.now += 0.5
    for _ in range(3):
        clock.test_begin()
        time.now += 0.5
    ends = []
    for _ in range(3):
        ends.append(clock.epoch_end())
        time.now += 0.5
    assert ends == [1.5, 1.5, 1.5]  # from the first begin (1.0) to the first validation (2.5)
    time.now = 10.0
    clock.epoch_begin()  # the next epoch starts afresh
    time.now = 11.0
    assert clock.epoch_end() == 1.0


def test_evaluate_after_an_epoch_changes_nothing_and_nothing_is_timed_before_an_epoch():
    time = Time()
    clock = EpochClock(now=time)
    assert clock.epoch_end() is None and clock.wall_time is None
    clock.test_begin()  # an evaluate before any fit
    clock.train_begin()
    clock.epoch_begin()
    time.now = 2.0
    assert clock.epoch_end() == 2.0
    time.now = 5.0
    clock.test_begin()  # evaluate() after fit, with the same callbacks
    assert clock.epoch_end() == 2.0


def test_the_wall_clock_spans_fits_and_an_epoch_a_failed_fit_left_open_is_dropped():
    """An elastic fit calls fit once per epoch: its wall time runs from the first on_train_begin."""
    time = Time()
    clock = EpochClock(now=time)
    clock.train_begin()
    clock.epoch_begin()
    time.now = 3.0
    clock.epoch_end()
    time.now = 4.0
    clock.train_begin()  # the next fit
    clock.epoch_begin()
    time.now = 6.0
    assert clock.epoch_end() == 2.0 and clock.wall_time == 6.0
    clock.epoch_begin()  # this fit fails mid-epoch: no on_epoch_end
    time.now = 20.0
    clock.train_begin()
    time.now = 21.0
    clock.epoch_begin()
    time.now = 22.0
    assert clock.epoch_end() == 1.0 and clock.wall_time == 22.0


def test_the_metric_callbacks_take_a_shared_clock_or_make_their_own():
    clock = EpochClock()
    shared = [Throughput(8, clock=clock), WorkerMetrics(8, clock=clock),
              ParameterServerMetrics(8, clock=clock)]
    assert all(callback.clock is clock for callback in shared)
    own = [Throughput(8), WorkerMetrics(8), ParameterServerMetrics(8)]
    assert len({id(callback.clock) for callback in own}) == 3


def test_throughput_times_the_clocks_interval_in_a_real_fit():
    """A callback before Throughput sets the clock's time at each hook: the step time is epoch
    begin to validation, the wall time first train begin to the epoch's end."""
    import numpy as np
    import tf_keras

    time = Time()
    marks = {"on_train_begin": 100.0, "on_epoch_begin": 110.0, "on_test_begin": 113.0, "on_epoch_end": 120.0}

    class SetTime(tf_keras.callbacks.Callback):
        def __getattribute__(self, name):
            if name in marks:
                return lambda *args, **kwargs: setattr(time, "now", marks[name])
            return super().__getattribute__(name)

    throughput = Throughput(8, replicas=1, workers=1, clock=EpochClock(now=time))
    model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((32, 2), "float32")
    history = model.fit(x, x[:, :1], batch_size=8, epochs=1, validation_data=(x, x[:, :1]), verbose=0,
                        callbacks=[SetTime(), throughput]).history
    assert history["step_time_ms"] == [pytest.approx(3000.0 / 4)]  # 4 steps in 3 s
    assert history["examples_per_second"] == [pytest.approx(32 / 3.0)]
    assert history["wall_time_s"] == [pytest.approx(20.0)]
