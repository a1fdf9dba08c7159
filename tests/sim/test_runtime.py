"""The runtime helper: bursts start no earlier than epoch + offset + window start + k P."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pytest

from volcano_metronome.core.profile import Profile, Window
from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.engine import Engine, JobRun
from volcano_metronome.sim.policies import Context, Placement, SimPolicy
from volcano_metronome.sim.workload import SimScenario


class Pinned(SimPolicy):
    """Places every job on nodes 0 and 1 at a fixed offset; can shift one job once."""

    name = "pinned"
    aligned = True

    def __init__(self, ctx: Context, offsets: dict[str, float | None],
                 shift: tuple[str, float | None] | None = None) -> None:
        super().__init__(ctx)
        self.offsets = offsets
        self.pending_shift = shift
        self.cycles = 0

    def schedule(self, now: float, pending: Sequence[JobSpec]) -> list[Placement]:
        self.cycles += 1
        return [Placement(j.name, np.array([0, 1]), np.array([1, 1]), self.offsets[j.name], 200.0) for j in pending]

    def shifts(self) -> list[tuple[str, float | None]]:
        # The shift is published at the second scheduling cycle (the second job's arrival).
        if self.cycles < 2 or self.pending_shift is None:
            return []
        out, self.pending_shift = [self.pending_shift], None
        return out


def job(name: str, arrival: float = 0.0, iterations: int = 10, jitter: float = 0.0) -> JobSpec:
    profile = Profile(200.0, (Window(100.0, 50.0, 40.0),), jitter)
    return JobSpec(name, arrival, 2, 1, iterations, 0, profile)


def run(sanity: SimScenario, jobs: list[JobSpec], offsets: dict[str, float | None],
        shift: tuple[str, float | None] | None = None) -> dict[str, JobRun]:
    topology = sanity.scenario.topology.build()
    policy = Pinned(Context(sanity.scenario, topology, 0), offsets, shift)
    result = Engine(sanity, jobs, policy).run()
    return {j.spec.name: j for j in result.jobs}


def test_an_early_burst_pads_to_its_slot(sanity: SimScenario) -> None:
    done = run(sanity, [job("a")], {"a": 50.0})["a"]
    # Ready at 100 ms; its slot is 50 + 100 = 150 ms; then every 200 ms; the last burst ends at
    # 150 + 9 x 200 + 50 ms and the 50 ms of compute after it follow.
    assert done.end_s == pytest.approx(0.150 + 9 * 0.2 + 0.05 + 0.05)
    assert done.comm_s == pytest.approx(10 * 0.05)


def test_the_grid_is_absolute_a_late_arrival_waits_for_the_next_slot(sanity: SimScenario) -> None:
    done = run(sanity, [job("a", arrival=0.33)], {"a": 0.0})["a"]
    # Ready at 0.43 s; slots at 0.1 + k 0.2: the first at or after 0.43 s is 0.5 s.
    assert done.end_s == pytest.approx(0.5 + 9 * 0.2 + 0.1)


def test_jitter_is_absorbed_by_padding_on_the_grid(sanity: SimScenario) -> None:
    done = run(sanity, [job("a", jitter=20.0)], {"a": 0.0})["a"]
    # Compute before the burst is 80..100 ms, always padded to the 100 ms slot: same as no jitter.
    assert done.end_s == pytest.approx(10 * 0.2)


def test_unaligned_jitter_shortens_iterations_by_up_to_the_jitter(sanity: SimScenario) -> None:
    engine = Engine(sanity, [job("a", jitter=20.0)], "default")
    result = engine.run()
    (a,) = result.jobs
    assert 10 * 0.18 < a.end_s < 10 * 0.2
    assert a.end_s == pytest.approx(a.isolated_s)


def test_a_late_burst_goes_at_once_and_the_next_iteration_realigns(sanity: SimScenario) -> None:
    spec = job("a")
    j = JobRun(spec, 0, 0)
    j.aligned, j.offset_s, j.grid_period_s = True, 0.0, 0.2
    base = 0.1  # offset + window start
    assert Engine._target(None, j, 0.1) == pytest.approx(base)  # type: ignore[arg-type]
    # Next iteration ready 30 ms late: the target stays on the grid (it will go at once).
    assert Engine._target(None, j, 0.33) == pytest.approx(base + 0.2)  # type: ignore[arg-type]
    # The one after is ready early again: it pads to its own slot, the lateness is gone.
    assert Engine._target(None, j, 0.45) == pytest.approx(base + 0.4)  # type: ignore[arg-type]
    # 150 ms late for the next slot (0.9): the one after (1.1) is nearer, so it waits for that one.
    assert Engine._target(None, j, 1.05) == pytest.approx(base + 1.0)  # type: ignore[arg-type]
    # 60 ms late for the next slot (1.3): it goes at once.
    assert Engine._target(None, j, 1.36) == pytest.approx(base + 1.2)  # type: ignore[arg-type]


def test_a_new_offset_reanchors_the_helper_on_the_new_grid(sanity: SimScenario) -> None:
    done = run(sanity, [job("a", iterations=3), job("b", arrival=0.05, iterations=3)], {"a": 0.0, "b": 0.0},
               shift=("a", 120.0))
    a = done["a"]
    # a is shifted to 120 ms at 0.05 s, when b arrives, before its first burst: ready at 0.1 s, it pads
    # to the new grid 0.12 + 0.1 + k 0.2 = 0.22 s, then 0.42 and 0.62 s; ends 0.67 + 0.05 of compute.
    # Without the shift it would have ended at 0.6 s.
    assert a.end_s == pytest.approx(0.72)
    assert not math.isnan(done["b"].end_s)


def test_a_gang_published_without_an_offset_runs_free(sanity: SimScenario) -> None:
    done = run(sanity, [job("a", jitter=20.0)], {"a": None})["a"]
    assert not done.aligned and done.padded_s == 0.0 and done.aligned_iterations == 0
    assert done.end_s == pytest.approx(done.isolated_s)


def test_a_lock_reanchors_a_free_gang_at_its_next_iteration(sanity: SimScenario) -> None:
    # a runs free (bursts at 0.1 + k 0.2 s) until b's arrival at 0.95 s publishes offset 30 ms; its
    # next burst, ready at 1.1 s, waits for the first slot of the new grid, 0.13 + m 0.2 -> 1.13 s.
    done = run(sanity, [job("a"), job("b", arrival=0.95, iterations=1)], {"a": None, "b": 0.0}, shift=("a", 30.0))
    a = done["a"]
    assert a.reanchor_s == pytest.approx(0.03) and a.padded_s == pytest.approx(0.03) and a.first_wait_s == 0.0
    assert a.aligned_iterations == 5 and a.steady == 4
    assert a.end_s == pytest.approx(1.13 + 4 * 0.2 + 0.1)


def test_an_unlock_stops_alignment_at_the_next_iteration(sanity: SimScenario) -> None:
    # a is aligned (bursts at 0.1 + k 0.2 s, jitter padded away) until b's arrival at 0.95 s withdraws
    # its offset: the burst of iteration 4 (at 0.9 s) was aligned, iterations 5 to 9 run free.
    done = run(sanity, [job("a", jitter=20.0), job("b", arrival=0.95, iterations=1)], {"a": 0.0, "b": 0.0},
               shift=("a", None))
    a = done["a"]
    assert a.aligned_iterations == 5 and not a.aligned
    free = sum(0.2 - 0.02 * (1.0 - u) for u in a.u[5:])
    assert a.end_s == pytest.approx(1.0 + free)


def test_a_straggler_thrown_into_a_neighbours_slot_does_not_drag_it_along(sanity: SimScenario) -> None:
    # Two gangs locked on the same two NICs, interleaved: 120 ms of compute and a 60 ms burst at line
    # rate in a 200 ms period. At iteration 5 a straggles (every compute gap twice as long): its burst
    # is 60 ms late and overlaps the start of b's. Going at once whatever the lateness, the two then
    # went together, each stretched by the other and so late again, for most of the run (1.76 s of
    # contention each, b ending 0.9 s late). Now a, late by more than half a period at the next
    # iteration, waits for its next slot: one collision of 20 ms, and b ends on its grid.
    profile = Profile(180.0, (Window(60.0, 60.0, 100.0),), 0.0)
    jobs = [JobSpec(n, 0.0, 2, 1, 50, 0, profile) for n in ("a", "b")]
    topology = sanity.scenario.topology.build()
    engine = Engine(sanity, jobs, Pinned(Context(sanity.scenario, topology, 0), {"a": 0.0, "b": 100.0}))
    engine.by_name["a"].slow = [2.0 if i == 5 else 1.0 for i in range(50)]
    done = {j.spec.name: j for j in engine.run().jobs}
    # b's last burst leaves in its slot (100 + 60 ms + 49 periods), and its 60 ms of compute follow.
    assert done["b"].end_s == pytest.approx(0.1 + 0.06 + 49 * 0.2 + 0.06 + 0.06)
    for name in ("a", "b"):
        assert done[name].comm_s - done[name].comm_ideal_s < 0.1


class PinnedHalfPeriod(Pinned):
    """``Pinned`` with the helper that allows half a period late after a collision too (round 12's rule)."""

    collision_aware = False


@pytest.mark.parametrize("aware, collide_s", [(True, 0.1), (False, 2.5)])
def test_a_collision_does_not_become_the_gangs_steady_state(sanity: SimScenario, aware: bool,
                                                            collide_s: float) -> None:
    # Two gangs interleaved on the same two NICs, each an 80 ms burst at line rate in a 197 ms
    # iteration held to a 200 ms period (a duty of 0.4). One slow step of a (compute 1.4 x) makes its
    # burst 47 ms late into b's slot; the two stretch each other and each comes back later still. With
    # half a period allowed, that lateness never passes 100 ms before the other gang's makes it worse:
    # they collide on and off to the end (2.8 s of contention each, both ending 4.4 s late in a 20 s
    # run; round 13 of docs/simulator-rounds.md). After a collision the helper allows a quarter period: 25 ms
    # of contention each, and both end on their grids.
    profile = Profile(197.0, (Window(117.0, 80.0, 100.0),), 0.0)
    jobs = [JobSpec(n, 0.0, 2, 1, 100, 0, profile) for n in ("a", "b")]
    topology = sanity.scenario.topology.build()
    pinned = Pinned if aware else PinnedHalfPeriod
    policy = pinned(Context(sanity.scenario, topology, 0), {"a": 0.0, "b": 100.0})
    engine = Engine(sanity, jobs, policy)
    engine.by_name["a"].slow = [1.4 if i == 5 else 1.0 for i in range(100)]
    done = {j.spec.name: j for j in engine.run().jobs}
    lost = [done[n].comm_s - done[n].comm_ideal_s for n in ("a", "b")]
    if aware:
        assert max(lost) < collide_s
        # b's last burst leaves in its slot (100 + 117 ms + 99 periods); 80 ms of burst, no compute after.
        assert done["b"].end_s == pytest.approx(0.1 + 0.117 + 99 * 0.2 + 0.08)
    else:
        assert min(lost) > collide_s
