"""The runtime helper timing its own loop: Stopwatch + Metronome on an injected clock, and ``timed.measure``."""

from __future__ import annotations

import random

import pytest

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.profiling.fit import Refusal
from volcano_metronome.profiling.timed import Burst, Measured, describe, measure
from volcano_metronome.runtime import Metronome, Stopwatch


class Clock:
    """A fake clock in seconds that only moves when the loop works or sleeps."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def run_loop(stopwatch: Stopwatch, clock: Clock, iterations: int, compute_ms: float, comm_ms: float,
             nbytes: int | None = None, jitter_ms: float = 0.0, metronome: Metronome | None = None,
             seed: int = 1) -> None:
    rng = random.Random(seed)
    for _ in range(iterations):
        clock.sleep((compute_ms + rng.uniform(0.0, jitter_ms)) / 1000.0)
        if metronome is not None:
            metronome.wait()
        else:
            stopwatch.iteration()
        with stopwatch.burst(nbytes=nbytes):
            clock.sleep(comm_ms / 1000.0)


def test_a_free_loop_is_measured_in_the_fitters_terms():
    clock = Clock()
    stopwatch = Stopwatch(clock=clock)
    # 80 ms of compute then a 20 ms all-reduce sending 25 MB: 10 Gbps for 20 ms every 100 ms.
    run_loop(stopwatch, clock, 30, 80.0, 20.0, nbytes=25_000_000)
    result = stopwatch.measured()
    assert isinstance(result, Measured), result
    assert result.period_ms == pytest.approx(100.0, abs=0.1)
    assert len(result.windows) == 1
    (w,) = result.windows
    # The fitter's convention: compute first, the last window ends the period.
    assert w.start_ms == pytest.approx(80.0, abs=0.1) and w.len_ms == pytest.approx(20.0, abs=0.1)
    assert w.gbps == pytest.approx(10.0, rel=1e-3)
    assert result.jitter_ms == 0.0 and result.periods == 29 and result.padding_ms == 0.0
    profile = result.profile()
    assert profile is not None and profile.duty_cycle == pytest.approx(0.2, abs=1e-3)
    data = result.to_dict()
    assert set(data) >= {"period_ms", "windows", "jitter_ms", "periods"}
    assert data["windows"] == [{"start_ms": 80.0, "len_ms": 20.0, "gbps": 10.0}]
    assert "period 100 ms over 29 iterations" in describe(result)


def test_without_bytes_the_rate_is_unknown_and_there_is_no_core_profile():
    clock = Clock()
    stopwatch = Stopwatch(clock=clock)
    run_loop(stopwatch, clock, 10, 50.0, 10.0)
    result = stopwatch.measured()
    assert isinstance(result, Measured)
    assert result.windows[0].gbps is None and result.profile() is None
    assert result.to_dict()["windows"][0]["gbps"] is None


def test_jitter_is_the_spread_of_the_bursts_lateness():
    clock = Clock()
    stopwatch = Stopwatch(clock=clock)
    run_loop(stopwatch, clock, 200, 80.0, 10.0, nbytes=1_000_000, jitter_ms=6.0)
    result = stopwatch.measured()
    assert isinstance(result, Measured)
    assert result.period_ms == pytest.approx(93.0, abs=0.5)  # 80 + mean of U(0, 6) + 10
    assert 4.5 <= result.jitter_ms <= 6.0


def test_the_helpers_padding_is_taken_out_of_the_measured_profile():
    clock = Clock(start=0.0)
    stopwatch = Stopwatch(clock=clock)
    # A locked gang: 100 ms slots; the job itself needs 60 ms compute + 10 ms all-reduce.
    metronome = Metronome(period_ms=100.0, offset_ms=0.0, epoch_ms=0.0, clock=clock, sleep=clock.sleep,
                          stopwatch=stopwatch)
    run_loop(stopwatch, clock, 20, 60.0, 10.0, nbytes=1_000_000, metronome=metronome)
    result = stopwatch.measured()
    assert isinstance(result, Measured)
    assert result.period_ms == pytest.approx(70.0, abs=0.1)  # the job's own period, not the slot's
    # Padded 40 ms to the first slot (at 100 ms), then 30 ms every iteration.
    assert result.padding_ms == pytest.approx((40.0 + 18 * 30.0) / 19, abs=0.1)
    assert result.windows[0].len_ms == pytest.approx(10.0, abs=0.1)


def test_too_few_iterations_and_no_bursts_are_refused():
    clock = Clock()
    stopwatch = Stopwatch(clock=clock)
    run_loop(stopwatch, clock, 3, 50.0, 10.0)
    refused = stopwatch.measured()
    assert isinstance(refused, Refusal) and refused.reason == "too-short"
    quiet = measure([0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0], [])
    assert isinstance(quiet, Refusal) and quiet.reason == "aperiodic"
    assert "no profile measured (aperiodic" in describe(quiet)


def test_iterations_with_an_unusual_number_of_bursts_are_left_out():
    marks = [100.0 * k for k in range(11)]
    bursts = [Burst(100.0 * k + 70.0, 100.0 * k + 90.0, 2_500_000) for k in range(10)]
    bursts.append(Burst(330.0, 340.0, 10**9))  # a checkpoint write in iteration 3 only
    result = measure(marks, bursts)
    assert isinstance(result, Measured) and len(result.windows) == 1
    assert result.windows[0].len_ms == 20.0 and result.windows[0].gbps == pytest.approx(1.0)


def test_two_collectives_per_iteration_give_two_windows_and_overlaps_merge():
    marks = [100.0 * k for k in range(11)]
    two = [b for k in range(10) for b in (Burst(100.0 * k + 10.0, 100.0 * k + 15.0, 625_000),
                                         Burst(100.0 * k + 70.0, 100.0 * k + 90.0, 2_500_000))]
    result = measure(marks, two)  # the longest quiet stretch (15 to 70 ms) begins the period
    assert isinstance(result, Measured)
    assert [(w.start_ms, w.len_ms, w.gbps) for w in result.windows] == [(55.0, 20.0, 1.0), (95.0, 5.0, 1.0)]
    nested = [b for k in range(10) for b in (Burst(100.0 * k + 70.0, 100.0 * k + 90.0, 2_500_000),
                                            Burst(100.0 * k + 80.0, 100.0 * k + 95.0, 0))]
    merged = measure(marks, nested)
    assert isinstance(merged, Measured) and len(merged.windows) == 1
    assert merged.windows[0].len_ms == 25.0


def test_bad_input_names_the_field():
    with pytest.raises(InvalidInput) as caught:
        measure([0.0, 10.0, 10.0, 30.0], [])
    assert caught.value.field == "marks_ms[2]"
    with pytest.raises(InvalidInput) as caught:
        Stopwatch(keep=1)
    assert caught.value.field == "keep"
    with pytest.raises(InvalidInput) as caught:
        with Stopwatch().burst(nbytes=-1):
            pass
    assert caught.value.field == "nbytes"


def test_only_the_last_iterations_are_kept():
    clock = Clock()
    stopwatch = Stopwatch(clock=clock, keep=16)
    run_loop(stopwatch, clock, 40, 40.0, 10.0, nbytes=1)
    run_loop(stopwatch, clock, 40, 90.0, 10.0, nbytes=1)  # the job slowed down: only the new period is seen
    result = stopwatch.measured()
    assert isinstance(result, Measured) and result.period_ms == pytest.approx(100.0, abs=0.1)
    assert result.periods == 15
