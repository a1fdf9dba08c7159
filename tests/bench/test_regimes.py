"""bench regimes: the grid runs the simulator's own path, and its verdicts follow issue 12's thresholds."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import yaml

from volcano_metronome.bench import regimes
from volcano_metronome.cli import main as cli


def test_quick_grid_reports_every_cell_with_verdicts() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert regimes.main(["--quick", "--json"]) == 0
    data = json.loads(out.getvalue())
    assert [r["cell"] for r in data["rows"]] == ["half-nodes/one-model/steady", "fragmented/mixed/noisy"]
    for row in data["rows"]:
        assert set(row["avg_jct_s"]) == set(regimes.POLICIES)
        assert set(row["no_harm"]) == {"avg_jct_s_vs_volcano-topology", "avg_jct_s_vs_metronome-free",
                                       "avg_jct_s_vs_cassini", "p99_jct_s_vs_volcano-topology"}
    assert data["summary"]["cells"] == 2
    assert data["summary"]["no_harm_met"] + len(data["summary"]["no_harm_missed"]) == 2


def test_a_cell_equals_the_simulate_command_on_the_same_scenario(tmp_path: Path) -> None:
    mapping = regimes.scenario("half-nodes", "two-models", "noisy", count=6)
    path = tmp_path / "cell.yaml"
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))  # key order is the mix order
    report = tmp_path / "report.json"
    assert cli(["simulate", str(path), "--seeds", "1", "--policies", ",".join(regimes.POLICIES),
                "--json", str(report), "--quiet"]) == 0
    direct = json.loads(report.read_text())["policies"]
    row = regimes.run([("half-nodes", "two-models", "noisy", 6)], [0])["rows"][0]
    assert row["avg_jct_s"] == {p: direct[p]["avg_jct_s"] for p in regimes.POLICIES}
    assert row["p99_jct_s"] == {p: direct[p]["p99_jct_s"] for p in regimes.POLICIES}


def _report(ours: float, vt: float = 100.0, free: float = 100.0, cassini: float = 100.0, p99: float = 200.0,
            vt_excess: float = 0.05, ours_excess_s: float = 0.0) -> dict[str, Any]:
    def policy(jct: float, p99_: float, excess: float) -> dict[str, Any]:
        return {"avg_jct_s": jct, "p99_jct_s": p99_, "contention_excess": excess}
    return {
        "policies": {"metronome": {**policy(ours, p99, 0.0), "placed_locked": 1},
                     "metronome-free": policy(free, 200.0, vt_excess), "volcano-topology": policy(vt, 200.0, vt_excess),
                     "cassini": policy(cassini, 200.0, vt_excess)},
        "gains": {"metronome_vs_volcano-topology": {"contention_excess_recovered_pct": 100.0 - ours_excess_s}},
    }


def test_verdicts_follow_each_threshold() -> None:
    assert regimes.verdict(_report(97.0))["no_harm_met"] and regimes.verdict(_report(97.0))["win_met"]
    assert not regimes.verdict(_report(100.6))["no_harm_met"]  # > 1.005 x volcano-topology
    assert not regimes.verdict(_report(97.0, free=96.0))["no_harm_met"]  # > 1.005 x metronome-free
    assert not regimes.verdict(_report(97.0, cassini=96.0))["no_harm_met"]  # > 1.005 x cassini
    assert not regimes.verdict(_report(97.0, p99=211.0))["no_harm_met"]  # p99 > 1.05 x volcano-topology
    assert not regimes.verdict(_report(98.5))["win_met"]  # > 0.98 x volcano-topology
    assert not regimes.verdict(_report(97.0, ours_excess_s=60.0))["win_met"]  # 40 % recovered < 50 %
    calm = regimes.verdict(_report(97.0, vt_excess=0.005))
    assert not calm["contended"] and calm["win"] == {}


def test_summary_names_the_worst_ratio_and_the_missed_cells() -> None:
    rows = [{"cell": name, **regimes.verdict(_report(jct))} for name, jct in (("a", 97.0), ("b", 101.0))]
    s = regimes.summary(rows)
    assert s["no_harm_missed"] == ["b"] and s["win_met"] == ["a"] and s["win_missed"] == ["b"]
    assert s["worst_no_harm"]["avg_jct_s_vs_volcano-topology"] == {"value": 1.01, "cell": "b", "met": False}
