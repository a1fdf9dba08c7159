"""The queue's own noise (``bench floor``): a baseline against itself, one job one iteration longer."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from typing import Callable

import pytest

from volcano_metronome.bench import floor, fuzz
from volcano_metronome.catalog import builtin
from volcano_metronome.sim.workload import parse_sim

ALONE = {
    "name": "alone", "slot_ms": 5, "topology": {"racks": 1, "nodes_per_rack": 2, "gpus_per_node": 8, "nic_gbps": 100},
    "jobs": [{"name": "a", "arrival_s": 0, "workers": 2, "gpus_per_worker": 8, "iterations": 10, "priority": 0,
              "profile": {"period_ms": 200, "windows": [{"start_ms": 100, "len_ms": 50, "gbps": 50}], "jitter_ms": 0}}],
}


def run(main: Callable[[list[str]], int], *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


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


def test_the_command_prints_every_run_and_the_json() -> None:
    code, out, err = run(floor.main, "sanity-2jobs", "--seeds", "1", "--json")
    assert code == 0
    doc = json.loads(out)
    # Two jobs: each lengthened once; every ratio above 1 (a job longer, no queue to reorder).
    assert [r["seed"] for r in doc["runs"]] == [0] and len(doc["runs"][0]["ratios"]) == 2
    assert all(r > 1.0 for r in doc["runs"][0]["ratios"])
    assert doc["summary"]["runs"] == 2 and doc["policy"] == floor.BASELINE
    assert "sanity-2jobs seed 0:" in err and "volcano-topology against itself" in err


def test_an_unknown_scenario_is_a_clear_error() -> None:
    code, out, err = run(floor.main, "no-such-scenario")
    assert code == 2 and out == ""
    assert "no-such-scenario" in err and "built-in" in err


def test_fuzz_floor_adds_the_floor_to_every_row_and_the_summary() -> None:
    code, out, err = run(fuzz.main, "--quick", "--json", "--floor")
    assert code == 0
    doc = json.loads(out)
    assert doc["run"]["floor"] is True
    for row in doc["scenarios"]:
        assert len(row["floor"]) == len(floor.picks(fuzz.QUICK_COUNT))
    ratios = [v for row in doc["scenarios"] for v in row["floor"]]
    assert doc["summary"]["floor"] == floor.summary(ratios)
    assert "volcano-topology against itself" in err
    # Without the flag, neither the rows nor the summary carry it.
    code, out, _ = run(fuzz.main, "--quick", "--json")
    plain = json.loads(out)
    assert "floor" not in plain["summary"] and all("floor" not in r for r in plain["scenarios"])
