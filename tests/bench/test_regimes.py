"""The regime map: its JSON, that it measures what ``simulate`` measures, and its target verdicts."""

from __future__ import annotations

import contextlib
import io
import json
import math

import pytest
import yaml

from volcano_metronome.bench import regimes
from volcano_metronome.catalog import builtin
from volcano_metronome.cli import main as cli_main
from volcano_metronome.core.grid import SlotGrid
from volcano_metronome.sim.report import gains
from volcano_metronome.sim.workload import offered_load, parse_sim

POLICIES = ",".join(regimes.POLICIES)


@pytest.fixture(scope="module")
def quick() -> dict:
    """The quick grid, one seed, through the command's entry point."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert regimes.main(["--quick", "--seeds", "1", "--json"]) == 0
    doc = json.loads(out.getvalue())
    doc["_stderr"] = err.getvalue()
    return doc


def test_the_json_has_every_scenario_its_axes_figures_ratios_and_verdicts(quick):
    assert quick["grid"]["policies"] == list(regimes.POLICIES)
    assert [r["scenario"] for r in quick["scenarios"]] == [c.name for c in regimes.grid(quick=True)]
    for r in quick["scenarios"]:
        assert set(r["axes"]) == {"periods", "models", "nic_gbps", "sharing", "execution"}
        assert set(r["policies"]) == set(regimes.POLICIES)
        for figures in r["policies"].values():
            assert figures["avg_jct_s"] > 0 and figures["p99_jct_s"] >= figures["avg_jct_s"] * 0.5
        assert set(r["ratios"]) == set(regimes.NO_HARM_KEYS)
        assert r["ratios"]["no_harm.avg_jct_s_vs_volcano-topology"] == pytest.approx(
            r["policies"]["metronome"]["avg_jct_s"] / r["policies"]["volcano-topology"]["avg_jct_s"], abs=1e-4)
        assert set(r["targets"]) == set(regimes.NO_HARM_KEYS + regimes.WIN_KEYS)
        assert all(t["applies"] and isinstance(t["met"], bool) for k, t in r["targets"].items() if k in regimes.NO_HARM_KEYS)
        assert r["volcano_topology_contention_excess"] == r["policies"]["volcano-topology"]["contention_excess"]
        assert set(r["excess_recovered_pct"]) == {"volcano-topology", "metronome-free"}
        assert isinstance(r["locked_placements"], int) and len(r["per_seed"]) == 1
        assert r["offered_load"] == pytest.approx(regimes.OFFERED_LOAD, rel=1e-3)
    summ = quick["summary"]
    assert summ["scenarios"] == 2
    for key, c in summ["counts"].items():
        assert c["met"] + c["missed"] + c["not_applicable"] == 2, key
    assert set(summ["worst"]) == set(regimes.NO_HARM_KEYS + regimes.WIN_KEYS)
    assert "half-nodes-one-100g-quick" in quick["_stderr"] and "scenarios" in quick["_stderr"]


def test_a_scenario_s_figures_equal_those_of_simulate_on_its_yaml(quick, tmp_path):
    """The bench runs the path ``volcano-metronome simulate FILE`` runs: same figures, ratios and excess."""
    cell = regimes.grid(quick=True)[1]
    path = tmp_path / f"{cell.name}.yaml"
    path.write_text(regimes.scenario_yaml(cell), encoding="utf-8")
    out = tmp_path / "report.json"
    assert cli_main(["simulate", str(path), "--seeds", "1", "--policies", POLICIES, "--json", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    mine = next(r for r in quick["scenarios"] if r["scenario"] == cell.name)
    for name in regimes.POLICIES:
        for key, value in mine["policies"][name].items():
            assert value == report["policies"][name][key], (name, key)
    for key in regimes.NO_HARM_KEYS:
        assert mine["ratios"][key] == report["targets"][key]["value"]
    for name in ("volcano-topology", "metronome-free"):
        assert mine["excess_recovered_pct"][name] == report["gains"][f"metronome_vs_{name}"][
            "contention_excess_recovered_pct"]
    assert mine["locked_placements"] == report["policies"]["metronome"]["placed_locked"]


def test_the_grid_is_every_combination_of_its_axes_at_the_same_offered_load():
    cells = regimes.grid()
    assert len(cells) == len({c.name for c in cells}) == 4 * 2 * 3
    for cell in cells:
        sim = parse_sim(yaml.safe_load(regimes.scenario_yaml(cell)), builtin())
        assert sim.generate is not None and sim.name == cell.name
        assert offered_load(sim.generate, sim.scenario) == pytest.approx(regimes.OFFERED_LOAD, rel=1e-3)
        assert sim.generate.count == regimes.COUNT[cell.sharing]


def test_the_noisy_grid_is_the_same_grid_with_the_execution_block_and_runs_noisy():
    steady, noisy = regimes.grid(), regimes.grid(execution="noisy")
    assert [c.name + "-noisy" for c in steady] == [c.name for c in noisy]
    for a, b in zip(steady, noisy):
        data_a, data_b = regimes.scenario_data(a), regimes.scenario_data(b)
        assert "execution" not in data_a and data_b["execution"] == regimes.EXECUTIONS["noisy"]
        assert {k: v for k, v in data_b.items() if k not in ("execution", "name")} == \
            {k: v for k, v in data_a.items() if k != "name"}
        assert parse_sim(yaml.safe_load(regimes.scenario_yaml(b)), builtin()).execution.noise_cv == 0.02


@pytest.mark.parametrize("nic", regimes.NIC_GBPS)
def test_the_period_axis_is_what_it_says_at_both_nic_speeds(nic):
    """``divisible``: the snapped periods divide one another; ``mixed``: none divides another's."""
    grid, catalog = SlotGrid.from_ms(5), builtin()

    def snapped(models):
        return [grid.snap(catalog.get(m).profile(float(nic)).period_ms).slots for m in models]

    a, b = sorted(snapped(regimes.MIXES["divisible"]))
    assert a != b and b % a == 0
    mixed = snapped(regimes.MIXES["mixed"])
    assert len(set(mixed)) == 4
    assert not any(q % p == 0 for p in mixed for q in mixed if p != q)


def figures(avg: float, p99: float, excess: float = 0.0, excess_s: float = 0.0) -> dict:
    return {"avg_jct_s": avg, "p99_jct_s": p99, "contention_excess": excess, "avg_contention_excess_s": excess_s,
            "bottleneck_utilization": 0.5}


def report(*seeds: dict, median: dict | None = None) -> dict:
    """A hand-made ``simulate`` report: the seeds' figures, gains from the report's own function."""
    per_seed = [{"seed": i, "policies": p, "gains": gains(p)} for i, p in enumerate(seeds)]
    policies = median if median is not None else seeds[0]
    return {"seeds": list(range(len(seeds))), "policies": policies, "gains": gains(policies), "per_seed": per_seed}


def winning(**changes: dict) -> dict:
    """metronome 0.97 x every policy's avg JCT, 0.95 x p99, 60 % of volcano-topology's 5 % excess recovered."""
    base = {"metronome": figures(97.0, 190.0, 0.02, 2.0), "metronome-free": figures(100.0, 200.0, 0.05, 5.0),
            "volcano-topology": figures(100.0, 200.0, 0.05, 5.0), "cassini": figures(100.0, 200.0, 0.04, 4.0)}
    return {**base, **changes}


def missed(verdict: dict) -> set[str]:
    return {k for k, t in verdict.items() if t["met"] is False}


def test_verdicts_meet_every_target_on_a_clear_win():
    v = regimes.verdicts(report(winning()))
    assert missed(v) == set()
    assert all(t["applies"] for t in v.values())
    assert v["win_if_contended.avg_jct_vs_volcano-topology"]["value"] == 0.97
    assert v["win_if_contended.excess_recovered_vs_volcano-topology"]["value"] == 60.0


@pytest.mark.parametrize("changes, fails", [
    ({"metronome": figures(100.6, 190.0, 0.02, 2.0), "metronome-free": figures(110.0, 200.0, 0.05, 5.0),
      "cassini": figures(110.0, 200.0)},
     {"no_harm.avg_jct_s_vs_volcano-topology", "win_if_contended.avg_jct_vs_volcano-topology"}),
    ({"metronome": figures(100.6, 190.0, 0.02, 2.0), "volcano-topology": figures(110.0, 200.0, 0.05, 5.0),
      "cassini": figures(110.0, 200.0)},
     {"no_harm.avg_jct_s_vs_metronome-free"}),
    ({"metronome": figures(100.6, 190.0, 0.02, 2.0), "volcano-topology": figures(110.0, 200.0, 0.05, 5.0),
      "metronome-free": figures(110.0, 200.0)},
     {"no_harm.avg_jct_s_vs_cassini"}),
    ({"metronome": figures(97.0, 210.2, 0.02, 2.0)}, {"no_harm.p99_jct_s_vs_volcano-topology"}),
    ({"metronome": figures(98.1, 190.0, 0.02, 2.0)}, {"win_if_contended.avg_jct_vs_volcano-topology"}),
    ({"metronome": figures(97.0, 190.0, 0.026, 2.6)}, {"win_if_contended.excess_recovered_vs_volcano-topology"}),
])
def test_verdicts_fail_each_threshold_and_only_it(changes, fails):
    assert missed(regimes.verdicts(report(winning(**changes)))) == fails


def test_verdicts_at_the_bounds_are_met():
    at = winning(**{"metronome": figures(100.5, 210.0, 0.025, 2.5)})
    at["volcano-topology"] = figures(102.5, 200.0, 0.05, 5.0)  # 100.5 / 102.5 = 0.9805: just over the win bound
    v = regimes.verdicts(report(at))
    assert missed(v) == {"win_if_contended.avg_jct_vs_volcano-topology"}
    assert v["no_harm.avg_jct_s_vs_metronome-free"]["value"] == 1.005
    assert v["no_harm.p99_jct_s_vs_volcano-topology"]["value"] == 1.05
    assert v["win_if_contended.excess_recovered_vs_volcano-topology"]["value"] == 50.0


def test_the_win_targets_do_not_apply_below_one_percent_of_excess():
    quiet = winning(**{"volcano-topology": figures(100.0, 200.0, 0.0099, 1.0)})
    v = regimes.verdicts(report(quiet))
    for key in regimes.WIN_KEYS:
        assert v[key]["applies"] is False and v[key]["met"] is None
    assert missed(v) == set()


def test_do_no_harm_is_judged_on_every_seed_not_on_the_median():
    bad = winning(**{"metronome": figures(101.0, 190.0, 0.02, 2.0)})
    v = regimes.verdicts(report(winning(), bad, winning(), median=winning()))
    t = v["no_harm.avg_jct_s_vs_volcano-topology"]
    assert t["met"] is False and t["value"] == 1.01 and t["worst_seed"] == 1
    assert t["per_seed"] == [0.97, 1.01, 0.97]
    assert v["win_if_contended.avg_jct_vs_volcano-topology"]["met"] is True  # the medians


def test_the_summary_counts_and_names_the_worst():
    rows = []
    for name, scenario in (("a", winning()), ("b", winning(**{"metronome": figures(100.8, 190.0, 0.03, 3.0)})),
                           ("c", winning(**{"volcano-topology": figures(100.0, 200.0, 0.001, 0.1)}))):
        rows.append({"scenario": name, "targets": regimes.verdicts(report(scenario)), "cpu_s": 1.0})
    summ = regimes.summary(rows)
    assert summ["counts"]["no_harm.avg_jct_s_vs_volcano-topology"] == {"met": 2, "missed": 1, "not_applicable": 0}
    assert summ["counts"]["win_if_contended.avg_jct_vs_volcano-topology"] == {"met": 1, "missed": 1,
                                                                               "not_applicable": 1}
    assert summ["worst"]["no_harm.avg_jct_s_vs_volcano-topology"]["scenario"] == "b"
    assert summ["worst"]["win_if_contended.excess_recovered_vs_volcano-topology"] == {
        "value": 40.0, "scenario": "b", "seed": None}
    assert {(m["scenario"], m["target"]) for m in summ["no_harm_misses"]} == {
        ("b", k) for k in regimes.NO_HARM_KEYS if "avg_jct" in k}
    assert math.isclose(summ["cpu_s"], 3.0)


def test_the_summary_counts_seeds_and_their_mean_ratio_per_do_no_harm_target():
    """Scenario a: 0.97 x volcano-topology on three seeds; b: 0.97, 1.01 (a miss) and 1.00."""
    late = winning(**{"metronome": figures(101.0, 190.0, 0.02, 2.0)})
    even = winning(**{"metronome": figures(100.0, 190.0, 0.02, 2.0)})
    rows = [{"scenario": "a", "targets": regimes.verdicts(report(winning(), winning(), winning())), "cpu_s": 1.0},
            {"scenario": "b", "targets": regimes.verdicts(report(winning(), late, even)), "cpu_s": 1.0}]
    seeds = regimes.summary(rows)["per_seed"]["no_harm.avg_jct_s_vs_volcano-topology"]
    assert seeds["met"] == 5 and seeds["seeds"] == 6
    assert math.isclose(seeds["geometric_mean"], (0.97 ** 4 * 1.01 * 1.0) ** (1 / 6), abs_tol=1e-4)


def test_an_earlier_run_s_json_gives_the_table_and_the_heat_map(quick, tmp_path):
    saved = tmp_path / "regimes.json"
    older = {k: v for k, v in quick.items() if k != "_stderr"}
    older["summary"] = {k: v for k, v in older["summary"].items() if k != "per_seed"}
    saved.write_text(json.dumps(older))
    png = tmp_path / "map.png"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert regimes.main(["--from", str(saved), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "half-nodes-mixed-100g-quick" in out.getvalue() and "2 scenarios" in out.getvalue()
    assert "per seed: met on" in out.getvalue()  # an older JSON without the per-seed summary gets it


def test_other_nic_speeds_give_the_same_cells_at_those_speeds_and_a_bad_list_is_refused(capsys):
    cells = regimes.grid(nic_gbps=(50, 400))
    assert [(c.sharing, c.periods) for c in cells[::2]] == [(c.sharing, c.periods) for c in regimes.grid()[::2]]
    assert {c.nic_gbps for c in cells} == {50, 400} and cells[0].name == "regime-half-nodes-one-50g"
    assert regimes.scenario_data(cells[0])["topology"]["nic_gbps"] == 50
    for bad in ("fast", "0", ""):
        with pytest.raises(SystemExit) as stop:
            regimes.main(["--nic-gbps", bad])
        assert stop.value.code == 2
        assert f"--nic-gbps: got {bad!r}, expected comma-separated whole Gbps >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        regimes.main(["--nic-gbps", "50", "--only", "regime-half-nodes-one-100g"])
    assert "regime-half-nodes-one-50g" in capsys.readouterr().err  # --only names the cells at the speeds asked
