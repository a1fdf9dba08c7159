"""Lock on demand in the simulator: a gang aligns its bursts only while another gang shares its links.

The cluster is sanity-2jobs' (two nodes, 100 Gbps NICs). Every job below needs both nodes, so any two
share both NICs. Their period (190 ms) is off the grid and snaps to 200 ms: an aligned iteration
pads 10 ms, which is what a gang running free does not pay. Identical gangs sharing their links are
locked at their exact period instead (38 slots, no padding: ``core.decision._exact``).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

import pytest

from volcano_metronome.commands.files import load_sim_scenario

from volcano_metronome.core.profile import Profile, Window
from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.engine import Engine, JobRun, RunResult
from volcano_metronome.sim.policies import Context, make
from volcano_metronome.sim.workload import SimScenario

# 80 ms of compute, a 90 ms burst at the NIC's full rate, 20 ms of compute: duty cycle 0.47.
PROFILE = Profile(190.0, (Window(80.0, 90.0, 100.0),), 0.0)
SNAPPING_S = 0.200 - 0.190
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def spec(name: str, arrival: float, gpus: int, iterations: int) -> JobSpec:
    return JobSpec(name, arrival, 2, gpus, iterations, 0, PROFILE)


def run(sim: SimScenario, jobs: list[JobSpec], policy: str = "metronome", lock_on_demand: bool = True) -> RunResult:
    scenario = dataclasses.replace(sim.scenario, policy=dataclasses.replace(sim.scenario.policy,
                                                                            lock_on_demand=lock_on_demand))
    chosen = make(policy, Context(scenario, scenario.topology.build(), 0))
    return Engine(sim, jobs, chosen).run()


def by_name(result: RunResult) -> dict[str, JobRun]:
    return {j.spec.name: j for j in result.jobs}


def test_a_lone_gang_runs_free_and_pays_no_padding(sanity: SimScenario) -> None:
    (a,) = run(sanity, [spec("a", 0.337, 6, 40)]).jobs
    assert a.padded_s == 0.0 and a.aligned_iterations == 0
    assert a.end_s - a.start_s == pytest.approx(a.isolated_s)
    # The same gang locked from the start (lock on demand off, as before) pads every iteration to 200 ms.
    (locked,) = run(sanity, [spec("a", 0.337, 6, 40)], lock_on_demand=False).jobs
    assert locked.aligned_iterations == 40 and locked.steady == 39
    assert locked.padded_s == pytest.approx(locked.first_wait_s + 39 * SNAPPING_S)
    assert locked.end_s - locked.start_s == pytest.approx(locked.isolated_s + locked.padded_s)


def test_cassini_keeps_aligning_every_gang(sanity: SimScenario) -> None:
    (a,) = run(sanity, [spec("a", 0.0, 6, 40)], policy="cassini").jobs
    assert a.aligned_iterations == 40 and a.padded_s == pytest.approx(39 * SNAPPING_S)


@pytest.mark.parametrize("policy", ["metronome", "cassini"])
def test_a_short_iteration_that_a_lock_would_pad_by_more_than_half_runs_free(sanity: SimScenario,
                                                                            policy: str) -> None:
    # 6 ms iterations snap to 10 ms on 5 ms slots (OVERFILL: 50 %): aligned, every iteration would wait 4 ms.
    short = Profile(6.0, (Window(1.0, 2.0, 100.0),), 0.0)
    jobs = [JobSpec("short", 0.0, 2, 5, 400, 0, short), spec("long", 0.1, 3, 40)]  # on both nodes: NICs shared
    result = by_name(run(sanity, jobs, policy=policy, lock_on_demand=False))
    assert result["short"].aligned_iterations == 0 and result["short"].padded_s == 0.0
    assert result["long"].aligned_iterations == 40  # beside it, the 190 ms gang is aligned as before


def test_a_gang_sharing_the_nics_locks_both_they_interleave_and_departure_unlocks(sanity: SimScenario) -> None:
    result = run(sanity, [spec("a", 0.0, 6, 40), spec("b", 1.0, 2, 10)])
    jobs = by_name(result)
    a, b = jobs["a"], jobs["b"]
    assert result.extra["placed_unlocked"] == 1 and result.extra["placed_locked"] == 1
    assert result.extra["locks"] == 1 and result.extra["unlocks"] == 1
    assert result.extra["exact_locks"] == 1  # both identical: locked at their exact 190 ms, not the grid's 200
    # a ran free (190 ms iterations): its 6th burst is ready at 5 x 0.19 + 0.08 = 1.03 s, after b's
    # placement locked it at its provisional offset 0 on 190 ms: 0.08 + m 0.19 -> 1.03 s, no wait.
    assert a.offset_s == 0.0 and a.first_wait_s == 0.0 and a.reanchor_s == 0.0
    assert a.grid_period_s == b.grid_period_s == pytest.approx(0.19)
    # b was placed at 1.0 s clear of a's burst (80..170 ms of 190): offset 90 ms, the soonest one that
    # clears it; its burst, ready at 1.08 s, waits for its slot at 0.09 + 0.08 + 5 x 0.19 = 1.12 s.
    assert b.offset_s == pytest.approx(0.09) and b.first_wait_s == pytest.approx(0.04)
    # Interleaved: neither burst ever met the other (every burst at full rate).
    for j in (a, b):
        assert j.comm_s == pytest.approx(j.comm_ideal_s)
    # b ends at 1.12 + 9 x 0.19 + 0.09 + 0.02 = 2.94 s; a's last aligned burst was ready at 2.93 s
    # (iterations 5 to 15 aligned, none padded), then the unlock let a run free again.
    assert b.end_s == pytest.approx(2.94)
    assert a.aligned_iterations == 11 and a.steady == 10 and not a.aligned
    assert a.padded_s == 0.0
    assert a.end_s - a.start_s == pytest.approx(a.isolated_s + a.padded_s)
    assert b.end_s - b.start_s == pytest.approx(b.isolated_s + b.padded_s)


def test_a_gang_placed_beside_a_locked_one_only_locks_the_newcomer(sanity: SimScenario) -> None:
    # c arrives while a and b are locked together; it cannot be placed (no GPU left) until b leaves,
    # so it takes b's place beside a, which is still locked at its turn: nothing to lock, no unlock.
    result = run(sanity, [spec("a", 0.0, 6, 40), spec("b", 1.0, 2, 10), spec("c", 1.5, 2, 5)])
    c = by_name(result)["c"]
    assert c.start_s == pytest.approx(by_name(result)["b"].end_s)
    assert result.extra["locks"] == 1 and result.extra["placed_locked"] == 2
    # After c leaves too, a is alone again and runs free.
    assert result.extra["unlocks"] == 1 and not by_name(result)["a"].aligned
    assert all(j.comm_s == pytest.approx(j.comm_ideal_s) for j in result.jobs)


def test_a_contended_run_locks_unlocks_and_runs_free_and_conserves_bytes() -> None:
    # On small (tests/sim/test_runs.py) no lock pays any more (mixed periods: no offset without overflow
    # for a whole closure of neighbours); identical jobs on half nodes lock, unlock and run free.
    sim = load_sim_scenario(str(EXAMPLES / "contended" / "half-nodes.yaml"))
    result = Engine(sim, sim.jobs(0), "metronome", seed=0).run()
    extra = result.extra
    assert extra["placed_unlocked"] > 0 and extra["locks"] > 0 and extra["unlocks"] > 0
    assert all(not math.isnan(j.end_s) for j in result.jobs)
    assert result.carried == pytest.approx(result.demanded, rel=1e-7, abs=1e-6)


@pytest.mark.parametrize("burst_ms, locked_s, faster", [
    # 91 ms bursts every 180 ms: two cover 38 slots of 36 and collide at every offset of their period; held to
    # 190 ms (core.decision._exact, stretched) they interleave, 10 ms of padding against the collisions.
    (91.0, 0.19, 0.85),
    # 110 ms bursts (61 % of the period): held to 220 ms (core.decision.OVERFILL) they take turns, 40 ms of
    # padding per iteration; 21.95 s of JCT on average against 24.79 free.
    (110.0, 0.22, 0.9),
])
def test_identical_gangs_whose_bursts_overfill_their_period_take_turns_at_a_longer_one(
        sanity: SimScenario, burst_ms: float, locked_s: float, faster: float) -> None:
    wide = Profile(180.0, (Window(180.0 - burst_ms, burst_ms, 100.0),), 0.0)
    jobs = [JobSpec("a", 0.0, 2, 6, 100, 0, wide), JobSpec("b", 0.5, 2, 2, 100, 0, wide)]
    locked, free = by_name(run(sanity, jobs)), by_name(run(sanity, jobs, "metronome-free"))
    assert locked["a"].grid_period_s == locked["b"].grid_period_s == pytest.approx(locked_s)
    assert all(j.comm_s == pytest.approx(j.comm_ideal_s) for j in locked.values())
    assert all(j.comm_s > j.comm_ideal_s + 2.0 for j in free.values())
    assert sum(j.end_s - j.spec.arrival_s for j in locked.values()) < faster * sum(
        j.end_s - j.spec.arrival_s for j in free.values())


def test_gangs_whose_periods_nearly_divide_lock_at_commensurate_periods(sanity: SimScenario) -> None:
    # 100 ms bursts every 250 and every 465 ms on the same two NICs: at their grid snaps (280 and 525 ms) they
    # sweep every relative phase; held to 250 and 500 ms (core.decision._exact, the second 7.5 % longer) they
    # meet at fixed phases, and the lock interleaves them.
    short = Profile(250.0, (Window(150.0, 100.0, 100.0),), 0.0)
    long = Profile(465.0, (Window(365.0, 100.0, 100.0),), 0.0)
    jobs = [JobSpec("a", 0.0, 2, 6, 60, 0, short), JobSpec("b", 0.5, 2, 2, 30, 0, long)]
    locked, free = by_name(run(sanity, jobs)), by_name(run(sanity, jobs, "metronome-free"))
    assert locked["a"].grid_period_s == pytest.approx(0.25) and locked["b"].grid_period_s == pytest.approx(0.5)
    assert all(j.comm_s == pytest.approx(j.comm_ideal_s) for j in locked.values())
    assert all(j.comm_s > j.comm_ideal_s + 1.0 for j in free.values())
    # b pads 35 ms per iteration (1.05 s in all) to save more than a second of collisions on each side.
    assert sum(j.end_s - j.spec.arrival_s for j in locked.values()) < sum(
        j.end_s - j.spec.arrival_s for j in free.values()) - 1.0

