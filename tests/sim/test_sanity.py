"""Known answers: two equal jobs on the same two NICs, duty cycle 0.5, burst rate = capacity."""

from __future__ import annotations

import pytest

from volcano_metronome.sim.engine import Engine, RunResult
from volcano_metronome.sim.workload import SimScenario

ISOLATED_S = 100 * 0.200  # 100 iterations of 200 ms
COMM_S = 100 * 0.100  # 100 windows of 100 ms at full rate


def run(sim: SimScenario, policy: str) -> RunResult:
    return Engine(sim, sim.jobs(0), policy).run()


def jobs(result: RunResult) -> dict[str, tuple[float, float, float]]:
    return {j.spec.name: (j.start_s, j.end_s, j.comm_s) for j in result.jobs}


@pytest.mark.parametrize("policy", ["metronome", "cassini"])
def test_phased_jobs_interleave_and_run_at_their_isolated_speed(sanity: SimScenario, policy: str) -> None:
    result = run(sanity, policy)
    for name, (start, end, comm) in jobs(result).items():
        assert start == 0.0
        # b waits once for its slot (100 ms), then both run exactly as if alone.
        assert end == pytest.approx(ISOLATED_S, abs=0.1 + 1e-9), name
        assert comm == pytest.approx(COMM_S, rel=1e-6), name
    assert all(j.comm_s == pytest.approx(j.comm_ideal_s) for j in result.jobs)


@pytest.mark.parametrize("policy", ["default", "volcano-topology", "metronome-free"])
def test_colliding_jobs_each_get_half_the_link_so_communication_doubles(sanity: SimScenario, policy: str) -> None:
    result = run(sanity, policy)
    for name, (_, end, comm) in jobs(result).items():
        assert comm == pytest.approx(2 * COMM_S, rel=1e-6), name
        assert end == pytest.approx(ISOLATED_S + COMM_S, rel=1e-6), name


def test_exclusive_reservation_runs_one_job_after_the_other(sanity: SimScenario) -> None:
    result = jobs(run(sanity, "exclusive"))
    first, second = sorted(result.values())
    assert first[:2] == pytest.approx((0.0, ISOLATED_S))
    assert second[0] == pytest.approx(ISOLATED_S)  # waited for the first one's reservation
    assert second[1] == pytest.approx(2 * ISOLATED_S)


def test_isolated_time_and_slowdown_reference(sanity: SimScenario) -> None:
    result = run(sanity, "default")
    assert all(j.isolated_s == pytest.approx(ISOLATED_S) for j in result.jobs)


def test_metronome_free_never_pads_nor_aligns(sanity: SimScenario) -> None:
    result = run(sanity, "metronome-free")
    assert all(j.padded_s == 0.0 and j.aligned_iterations == 0 for j in result.jobs)


def test_contention_excess_known_answer(sanity: SimScenario) -> None:
    """Colliding, each job's 100 windows take 200 ms instead of 100 ms: 10 s lost per job of 30 s running."""
    from volcano_metronome.sim.runner import simulate

    report, _ = simulate(sanity, ["volcano-topology", "metronome-free", "metronome"], [0])
    vt, free, ours = (report["policies"][p] for p in ("volcano-topology", "metronome-free", "metronome"))
    assert vt["avg_contention_excess_s"] == pytest.approx(COMM_S) and vt["contention_excess"] == pytest.approx(1 / 3, abs=1e-4)
    assert free["contention_excess"] == pytest.approx(1 / 3, abs=1e-4)
    assert ours["avg_contention_excess_s"] == pytest.approx(0.0, abs=1e-6)
    assert report["gains"]["metronome_vs_volcano-topology"]["contention_excess_recovered_pct"] == pytest.approx(100.0)
    assert report["gains"]["metronome_vs_metronome-free"]["contention_excess_recovered_pct"] == pytest.approx(100.0)
