"""The event kernel fires in (time, rank, sequence) order, skips cancelled events, stops when told."""

from __future__ import annotations

from volcano_metronome.sim.kernel import LIFECYCLE, NETWORK, SCHEDULING, Kernel


def test_events_fire_in_time_then_rank_then_scheduling_order() -> None:
    kernel = Kernel()
    fired: list[str] = []
    kernel.at(2.0, fired.append, "late")
    kernel.at(1.0, fired.append, "cycle", rank=SCHEDULING)
    kernel.at(1.0, fired.append, "flow", rank=NETWORK)
    kernel.at(1.0, fired.append, "job-a", rank=LIFECYCLE)
    kernel.at(1.0, fired.append, "job-b", rank=LIFECYCLE)
    kernel.run()
    assert fired == ["flow", "job-a", "job-b", "cycle", "late"]
    assert kernel.now == 2.0 and kernel.fired == 5


def test_cancelled_events_do_not_fire_and_past_times_are_clamped() -> None:
    kernel = Kernel()
    fired: list[float] = []
    doomed = kernel.at(1.0, lambda: fired.append(kernel.now))
    doomed.cancel()

    def later() -> None:
        kernel.at(0.0, lambda: fired.append(kernel.now))  # in the past: fires now, not before

    kernel.at(3.0, later)
    kernel.run()
    assert fired == [3.0]


def test_run_until_leaves_later_events_queued() -> None:
    kernel = Kernel()
    fired: list[int] = []
    for t in range(5):
        kernel.at(float(t), fired.append, t)
    kernel.run(until=2.5)
    assert fired == [0, 1, 2] and kernel.pending == 2
    kernel.run(stop=lambda: len(fired) == 4)
    assert fired == [0, 1, 2, 3]
