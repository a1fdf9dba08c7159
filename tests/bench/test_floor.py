"""``bench floor`` and ``bench fuzz --floor``: the queue's own noise on the command line."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Callable

from volcano_metronome.bench import floor as floor_bench
from volcano_metronome.bench import fuzz
from volcano_metronome.sim import floor


def run(main: Callable[[list[str]], int], *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_the_command_prints_every_run_and_the_json() -> None:
    code, out, err = run(floor_bench.main, "sanity-2jobs", "--seeds", "1", "--json")
    assert code == 0
    doc = json.loads(out)
    (only,) = doc["scenarios"]
    # Two jobs: each lengthened once; both ratios above 1 (a job longer, no queue to reorder).
    assert only["scenario"] == "sanity-2jobs" and [s["seed"] for s in only["per_seed"]] == [0]
    assert len(only["per_seed"][0]["ratios"]) == 2 and all(r > 1.0 for r in only["per_seed"][0]["ratios"])
    assert doc["summary"] == only["summary"] and doc["policy"] == floor.BASELINE
    assert "sanity-2jobs seed 0:" in err and "volcano-topology against itself" in err


def test_an_unknown_scenario_is_a_clear_error() -> None:
    code, out, err = run(floor_bench.main, "no-such-scenario")
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
