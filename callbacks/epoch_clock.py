"""One clock for where a training epoch starts and stops, shared by the callbacks that time epochs.

    clock = EpochClock()
    callbacks = [Throughput(64, clock=clock), ParameterServerMetrics(64, clock=clock)]
    # strategy.metrics(64) builds its callbacks on one clock like this

An epoch's training time runs from its ``on_epoch_begin`` to its first ``on_test_begin``
(validation is not training) or, without validation, to its ``on_epoch_end``. Every callback on
the clock forwards these hooks (and ``on_train_begin``); the first call of each per epoch reads the
time and the others find it read, so all of them time the same interval to the same float. The
start of training is read at the first ``on_train_begin`` only and kept across fits: an elastic fit
calls ``fit`` once per epoch, and its wall time runs from the first. A run resumed on another
plan (an adaptive run's next segment) continues the wall time of the one it resumes
(:meth:`EpochClock.continue_from`).
"""
from __future__ import annotations

import time
from typing import Callable


class EpochClock:
    """The training interval of the current epoch and the time since training began.

    ``now`` is the time source (seconds; ``time.perf_counter`` unless a test passes another).
    """

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self._now = now
        self.train_start: float | None = None
        self._start: float | None = None  # the open epoch's on_epoch_begin
        self._stop: float | None = None   # its first on_test_begin
        self._end: float | None = None    # its on_epoch_end: set, the epoch is closed

    def continue_from(self, seconds: float) -> None:
        """Start the wall clock ``seconds`` ago (before the first ``on_train_begin``): a resumed run
        continues the wall time of the run it resumes, the pause between them included."""
        if self.train_start is None:
            self.train_start = self._now() - seconds

    def train_begin(self) -> None:
        """``on_train_begin``: the first one starts the wall clock; later fits keep it. An epoch a
        failed fit left open is dropped, so the next ``on_epoch_begin`` starts afresh."""
        if self.train_start is None:
            self.train_start = self._now()
        if self._end is None:
            self._start = None

    def epoch_begin(self) -> None:
        """``on_epoch_begin``: opens the epoch (once: other callbacks find it open)."""
        if self._start is None or self._end is not None:
            self._start, self._stop, self._end = self._now(), None, None

    def test_begin(self) -> None:
        """``on_test_begin``: the open epoch's training stops at its first validation; an
        ``evaluate`` outside an epoch changes nothing."""
        if self._start is not None and self._end is None and self._stop is None:
            self._stop = self._now()

    def epoch_end(self) -> float | None:
        """``on_epoch_end``: closes the epoch (once) and returns its training seconds, the same
        for every caller; ``None`` when no epoch began."""
        if self._start is None:
            return None
        if self._end is None:
            self._end = self._now()
        return (self._stop if self._stop is not None else self._end) - self._start

    @property
    def wall_time(self) -> float | None:
        """Seconds from the first ``on_train_begin`` to the last epoch's end (validation included);
        ``None`` before both."""
        if self.train_start is None or self._end is None:
            return None
        return self._end - self.train_start
