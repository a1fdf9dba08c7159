"""The queue's own noise (``sim.floor``): a policy against itself, one job one iteration longer."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json

import pytest

from volcano_metronome.catalog import builtin
from volcano_metronome.cli import main as cli_main
from volcano_metronome.sim import floor
from volcano_metronome.sim.workload import parse_sim

ALONE = {
    "name": "alone", "slot_ms": 5, "topology": {"racks": 1, "nodes_per_rack": 2, "gpus_per_node": 8, "nic_gbps": 100},
    "jobs": [{"name": "a", "arrival_s": 0, "workers": 2, "gpus_per_worker": 8, "iterations": 10, "priority": 0,
              "profile": {"period_ms": 200, "windows": [{"start_ms": 100, "len_ms": 50, "gbps": 50}], "jitter_ms": 0}}],
}


def test_the_picks_spread_over_the_arrival_order() -> None:
    assert floor.picks(8) == [2, 4, 6]
    assert floor.picks(40) == [10, 20, 30]
    assert floor.picks(2) == [0, 1] and floor.picks(1) == [0] and floor.picks(0) == []


def test_one_job_one_iteration_longer_and_nothing_else() -> None:
    jobs = parse_sim(dict(ALONE, jobs=[dict(ALONE["jobs"][0], name=n) for n in "abc"]), builtin()).jobs(0)
    longer = floor.lengthened(jobs, 1)
    assert longer == (jobs[0], dataclasses.replace(jobs[1], iterations=11), jobs[2])
    assert jobs[1].iterations == 10  # the drawn jobs untouched


def test_a_job_alone_runs_one_period_longer_and_nothing_else_moves() -> None:
    # Nothing to queue behind and nothing to share links with: 11 iterations of 200 ms against 10.
    sim = parse_sim(ALONE, builtin())
    assert floor.self_ratios(sim, 0) == [pytest.approx(1.1, abs=1e-4)]
    assert floor.self_ratios(sim, 0, "metronome") == [pytest.approx(1.1, abs=1e-4)]


def test_the_summary_counts_runs_beyond_the_band() -> None:
    s = floor.summary([1.0, 1.004, 0.994, 1.02])
    assert (s["runs"], s["beyond_band"], s["slower_beyond_band"], s["lowest"], s["highest"]) == (4, 2, 1, 0.994, 1.02)
    assert "2 of 4 runs moved avg JCT by more than 0.5 % (1 slower); range 0.9940 to 1.0200" in floor.line(s)
    assert floor.summary([])["runs"] == 0 and "no run" in floor.line(floor.summary([]))


def test_measure_gives_every_seed_and_the_summary_of_all(sanity) -> None:  # type: ignore[no-untyped-def]
    m = floor.measure(sanity, [0, 1])
    assert m["policy"] == floor.BASELINE and [s["seed"] for s in m["per_seed"]] == [0, 1]
    assert m["summary"] == floor.summary([r for s in m["per_seed"] for r in s["ratios"]])
    # Two jobs of 100 iterations colliding on the same NICs: one of them one iteration longer, +1/3 %.
    assert all(r == pytest.approx(1.0033, abs=1e-4) for s in m["per_seed"] for r in s["ratios"])


def test_a_base_the_report_already_ran_gives_the_same_floor(sanity, small) -> None:  # type: ignore[no-untyped-def]
    from volcano_metronome.sim.runner import simulate

    for sim in (sanity, small):
        report, _ = simulate(sim, [floor.BASELINE, "metronome"], [0, 1])
        bases = floor.known_bases(report)
        assert set(bases) == {0, 1}
        assert floor.measure(sim, [0, 1], bases=bases) == floor.measure(sim, [0, 1])
    assert floor.known_bases(report, "cassini") == {}  # not run: nothing known


def test_simulate_floor_puts_it_in_the_report_and_the_table() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["simulate", "sanity-2jobs", "--policies", "metronome,volcano-topology", "--floor",
                         "--json", "-", "--quiet"]) == 0
    report = json.loads(out.getvalue())
    assert report["floor"]["summary"]["runs"] == 2 and report["floor"]["policy"] == "volcano-topology"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["simulate", "sanity-2jobs", "--policies", "metronome,volcano-topology", "--quiet"]) == 0
    assert "against itself" not in out.getvalue()  # only when asked: it costs three runs a seed
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["simulate", "sanity-2jobs", "--policies", "metronome,volcano-topology", "--quiet",
                         "--floor"]) == 0
    assert "volcano-topology against itself (one job one iteration longer): 0 of 2 runs" in out.getvalue()
