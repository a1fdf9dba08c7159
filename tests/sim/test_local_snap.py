"""Local-hyperperiod snapping in the simulator (issue 12, round 5), on sanity-2jobs' two nodes (100 Gbps NICs).

Gang ``a`` has a 200 ms period (40 slots, on the grid) and a 60 ms burst at the NIC's full rate; gang ``b``
a 176 ms period, whose grid snap is 180 ms (36 slots): lcm 360 slots, so at 180 ms ``b``'s bursts sweep
every phase of ``a``'s and no offset avoids them. Its local snap is 200 ms: 24 ms of padding an iteration
buys an offset at which the two never collide, and the lock pays.
"""

from __future__ import annotations

import pytest

from tests.sim.test_lock_on_demand import by_name, run
from volcano_metronome.core.profile import Profile, Window
from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.workload import SimScenario

A = Profile(200.0, (Window(100.0, 60.0, 100.0),), 0.0)
B = Profile(176.0, (Window(80.0, 60.0, 100.0),), 0.0)


def jobs() -> list[JobSpec]:
    return [JobSpec("a", 0.0, 2, 5, 200, 0, A), JobSpec("b", 0.5, 2, 3, 200, 0, B)]


def test_the_newcomer_takes_its_neighbours_period_and_neither_is_delayed(sanity: SimScenario) -> None:
    result = by_name(run(sanity, jobs()))
    a, b = result["a"], result["b"]
    assert b.grid_period_s == pytest.approx(0.200) and a.grid_period_s == pytest.approx(0.200)
    # Both align while they share the NICs (b is unlocked again for its last iterations, once a has left).
    assert a.aligned_iterations > 190 and b.aligned_iterations > 190
    # Interleaved: every burst at its own rate (no contention), and b pads 24 ms an aligned iteration.
    assert b.comm_s == pytest.approx(b.comm_ideal_s, rel=1e-6) and a.comm_s == pytest.approx(a.comm_ideal_s, rel=1e-6)
    assert b.padded_s >= (b.aligned_iterations - 1) * 0.024 - 1e-6


def test_running_free_at_the_grid_snap_would_have_cost_more(sanity: SimScenario) -> None:
    phased = by_name(run(sanity, jobs()))
    free = by_name(run(sanity, jobs(), policy="metronome-free"))
    assert free["b"].comm_s > free["b"].comm_ideal_s * 1.05  # they collide when nobody aligns
    assert max(j.end_s for j in phased.values()) < max(j.end_s for j in free.values())
