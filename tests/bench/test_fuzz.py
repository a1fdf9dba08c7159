"""Random scenarios: drawn by their index alone, always valid, run to a JSON; a crash is recorded, not raised."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import yaml

from volcano_metronome.bench import fuzz, regimes
from volcano_metronome.catalog import builtin
from volcano_metronome.cli import main as cli_main
from volcano_metronome.sim.workload import parse_sim

#: Scenario 211 as the hand-run prototype wrote it (``yaml.safe_load`` of its file): the one where
#: metronome's placements opened untouched racks (docs/simulator-rounds.md, round 11). The generator must
#: still draw it, so that a scenario named in a report stays reproducible by its index.
S211 = {
    "name": "fuzz-211",
    "seeds": 1,
    "slot_ms": 5,
    "topology": {"racks": 8, "nodes_per_rack": 4, "gpus_per_node": 8, "nic_gbps": 50, "uplink_gbps": 50.0},
    "policy": {"ordering": "FIFO"},
    "generate": {
        "count": 40,
        "seed": 223962,
        "arrival": {"process": "poisson", "rate_per_min": 80},
        "mix": {"resnet50": 1, "xlm": 3, "vgg19": 2, "gpt1": 3, "moe-gpt": 3},
        "shapes": [{"workers": 6, "gpus_per_worker": 2, "weight": 4},
                   {"workers": 4, "gpus_per_worker": 2, "weight": 2},
                   {"workers": 16, "gpus_per_worker": 2, "weight": 3}],
        "iterations": [50, 300],
        "priorities": {10: 1, 0: 1},
    },
}


def test_a_scenario_is_a_pure_function_of_its_index():
    assert fuzz.scenario(5) == fuzz.scenario(5)
    assert fuzz.scenario(5) != fuzz.scenario(6)
    assert len({json.dumps(fuzz.scenario(i), sort_keys=True) for i in range(50)}) == 50


def test_scenario_211_is_the_prototype_s():
    data = fuzz.scenario(211)
    assert data == S211
    assert yaml.safe_load(fuzz.scenario_yaml(data)) == S211  # what --write writes reads back the same
    parse_sim(data, builtin())


def test_the_models_are_the_catalog_s():
    assert set(fuzz.MODEL_NAMES) == set(builtin().names())


def test_every_generated_scenario_parses():
    """Parsing only: a refusal would be the generator's bug, reported as a crash by the command."""
    catalog = builtin()
    for i in range(200):
        for execution in fuzz.EXECUTIONS:
            sim = parse_sim(fuzz.scenario(i, execution), catalog)
            assert sim.generate is not None
    parse_sim(fuzz.quick(fuzz.scenario(7)), catalog)


def test_the_executions_differ_only_in_the_execution_block():
    drawn = 0
    for i in range(100):
        any_, steady, noisy = (fuzz.scenario(i, e) for e in fuzz.EXECUTIONS)
        assert "execution" not in steady
        assert noisy["execution"]["noise_cv"] > 0
        if "noise_cv" in any_.get("execution", {}):
            assert noisy["execution"] == any_["execution"]
            drawn += 1
        rest = [{k: v for k, v in d.items() if k not in ("name", "execution")} for d in (any_, steady, noisy)]
        assert rest[0] == rest[1] == rest[2]
    assert 25 < drawn < 75  # the draw's own noise about half the time


def test_drawn_profiles_change_the_models_and_nothing_else():
    catalog = builtin()
    windows, all_to_all = [], 0
    for i in range(100):
        ours, theirs = fuzz.scenario(i), fuzz.scenario(i, profiles="drawn")
        assert theirs["name"] == f"fuzz-{i}-drawn"
        assert set(theirs["generate"]["mix"]) == set(theirs["catalog"]) == {
            f"drawn-{k}" for k in range(len(theirs["catalog"]))}
        rest = [{**d, "name": None, "catalog": None, "generate": {**d["generate"], "mix": None}} for d in (ours, theirs)]
        assert rest[0] == rest[1]
        for entry in theirs["catalog"].values():
            ends = [(w["start_ms"], w["start_ms"] + w["len_ms"]) for w in entry["windows"]]
            assert all(0 < a < b <= entry["period_ms"] for a, b in ends)
            assert all(b <= c for (_, b), (c, _) in zip(ends, ends[1:]))  # in order, apart
            windows.append(len(ends))
            all_to_all += entry["collective"] == "all-to-all"
        for execution in fuzz.EXECUTIONS:  # the format takes every draw: a refusal is the generator's bug
            parse_sim(fuzz.scenario(i, execution, "drawn"), catalog)
    assert set(windows) == {1, 2, 3} and 0 < all_to_all < len(windows) / 2
    with pytest.raises(ValueError, match="profiles: got 'measured', expected one of catalog, drawn"):
        fuzz.scenario(0, profiles="measured")


def test_a_flat_fabric_is_the_same_nodes_as_one_rack_and_nothing_else():
    catalog = builtin()
    for i in range(100):
        ours, theirs = fuzz.scenario(i), fuzz.scenario(i, fabric="flat")
        assert theirs["name"] == f"fuzz-{i}-flat"
        racked, one = ours["topology"], theirs["topology"]
        assert one["racks"] == 1 and "uplink_gbps" not in one
        assert one["nodes_per_rack"] == racked["racks"] * racked["nodes_per_rack"]
        assert {**one, "racks": None, "nodes_per_rack": None} == {
            **{k: v for k, v in racked.items() if k != "uplink_gbps"}, "racks": None, "nodes_per_rack": None}
        assert {**theirs, "name": None, "topology": None} == {**ours, "name": None, "topology": None}
        assert fuzz.topology_summary(one).split()[2] == "flat"
        for execution in fuzz.EXECUTIONS:
            sim = parse_sim(fuzz.scenario(i, execution, "drawn", "flat"), catalog)
            assert sim.scenario.topology.racks == 1
    with pytest.raises(ValueError, match="fabric: got 'torus', expected one of racks, flat"):
        fuzz.scenario(0, fabric="torus")


def test_drawn_settings_add_settings_and_change_nothing_else():
    catalog = builtin()
    seen: dict[str, set] = {}
    for i in range(150):
        ours, theirs = fuzz.scenario(i), fuzz.scenario(i, settings="drawn")
        assert theirs["name"] == f"fuzz-{i}-settings"
        for key, value in theirs["policy"].items():  # every knob drawn from its choices, or the scenario's own
            assert value == ours["policy"].get(key) or value in fuzz.POLICY_KNOBS[key], key
            seen.setdefault(key, set()).add(value)
        execution = theirs.get("execution", {})
        assert {k: v for k, v in execution.items() if k not in ("traffic_classes", "classes_from")} == ours.get(
            "execution", {})
        seen.setdefault("traffic_classes", set()).add(execution.get("traffic_classes"))
        seen.setdefault("slot_ms", set()).add(theirs.get("slot_ms"))
        for job in theirs.get("jobs", []):  # the mix's models in the scenario's own shapes: valid where it is
            assert job["model"] in ours["generate"]["mix"] and job["priority"] in ours["generate"]["priorities"]
            assert {"workers": job["workers"], "gpus_per_worker": job["gpus_per_worker"]} in [
                {k: s[k] for k in ("workers", "gpus_per_worker")} for s in ours["generate"]["shapes"]]
        seen.setdefault("jobs", set()).add(len(theirs.get("jobs", [])))
        rest = [{k: v for k, v in d.items() if k not in ("name", "policy", "execution", "slot_ms", "max_hyperperiod_ms",
                                                         "jobs")} for d in (ours, theirs)]
        assert rest[0] == rest[1]
        for execution in fuzz.EXECUTIONS:  # the format takes every draw, also with drawn profiles on a flat fabric
            parse_sim(fuzz.scenario(i, execution, "drawn", "flat", "drawn"), catalog)
            parse_sim(fuzz.scenario(i, execution, settings="drawn"), catalog)
    for key, choices in fuzz.POLICY_KNOBS.items():  # every choice of every knob comes up in 150 scenarios
        assert set(choices) <= seen[key], key
    assert seen["traffic_classes"] == {None, *fuzz.TRAFFIC_CLASSES}
    assert seen["slot_ms"] == {5, *fuzz.SLOTS_MS}
    assert seen["jobs"] == {0, 1, 2, 3}
    assert fuzz.settings_summary(fuzz.scenario(3)) == "default"
    assert fuzz.settings_summary(fuzz.scenario(3, settings="drawn")) == (
        "ordering=PriorityWithAging cushion_slots=2 max_candidates=1")
    with pytest.raises(ValueError, match="settings: got 'tuned', expected one of default, drawn"):
        fuzz.scenario(0, settings="tuned")


def quick_run(*extra: str) -> tuple[int, dict, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = fuzz.main(["--quick", "--json", *extra])
    return code, json.loads(out.getvalue()), err.getvalue()


def test_quick_gives_the_json_and_the_table(tmp_path):
    code, doc, err = quick_run("--start", "3", "--write", str(tmp_path))
    assert code == 0
    assert set(doc) == {"run", "scenarios", "crashes", "summary"}
    assert doc["run"]["indices"] == [3, 4] and doc["crashes"] == []
    for r in doc["scenarios"]:
        assert set(r["policies"]) == set(regimes.POLICIES)
        assert set(r["ratios"]) == set(r["met"]) == set(regimes.NO_HARM_KEYS)
        assert all(isinstance(m, bool) for m in r["met"].values())
        assert r["ratios"]["no_harm.avg_jct_s_vs_volcano-topology"] == pytest.approx(
            r["policies"]["metronome"]["avg_jct_s"] / r["policies"]["volcano-topology"]["avg_jct_s"], abs=1e-4)
        assert r["volcano_topology_contention_excess"] == r["policies"]["volcano-topology"]["contention_excess"]
        assert r["jobs"] == fuzz.QUICK_COUNT and isinstance(r["placed_locked"], int) and r["cpu_s"] >= 0
        assert isinstance(r["held_gangs"], int) and isinstance(r["holds_overtaken"], int)
        assert r["holds_overtaken"] == 0 or r["held_gangs"] >= 1
        assert r["scenario"] == f"fuzz-{r['index']}-quick"
        # One seed: each attribution ratio is the row's own figures divided.
        for name, (ours, theirs) in fuzz.ATTRIBUTION.items():
            assert r["attribution"][name] == [pytest.approx(
                r["policies"][ours]["avg_jct_s"] / r["policies"][theirs]["avg_jct_s"], abs=1e-4)]
    summ = doc["summary"]
    assert summ["scenarios"] == 2 and summ["crashes"] == 0
    assert {a["seeds"] for a in summ["attribution"].values()} == {2}
    assert "placement metronome-free / volcano-topology" in err
    for key in regimes.NO_HARM_KEYS:
        assert summ["counts"][key]["met"] + summ["counts"][key]["missed"] == 2
        assert summ["worst"][key]["index"] in (3, 4)
    assert "2 scenarios, 0 crashed" in err
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["fuzz-3.yaml", "fuzz-4.yaml"]
    assert yaml.safe_load((tmp_path / "fuzz-3.yaml").read_text()) == fuzz.quick(fuzz.scenario(3))
    # The bench runs the path ``simulate FILE`` runs: the file it wrote gives the same figures.
    report_path = tmp_path / "report.json"
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli_main(["simulate", str(tmp_path / "fuzz-3.yaml"), "--policies", ",".join(regimes.POLICIES),
                         "--json", str(report_path), "--quiet"]) == 0
    report = json.loads(report_path.read_text())
    mine = doc["scenarios"][0]
    for name, figures in mine["policies"].items():
        assert figures == {k: report["policies"][name][k] for k in figures}, name
    for key in regimes.NO_HARM_KEYS:
        assert mine["ratios"][key] == report["targets"][key]["value"]


@pytest.mark.parametrize(("profiles", "fabric", "settings", "name"), [
    ("drawn", "racks", "default", "fuzz-5-drawn-quick"), ("catalog", "flat", "default", "fuzz-5-flat-quick"),
    ("catalog", "racks", "drawn", "fuzz-5-settings-quick")])
def test_the_variants_run_as_simulate_runs_the_file_written(tmp_path, profiles, fabric, settings, name):
    code, doc, _ = quick_run("--profiles", profiles, "--fabric", fabric, "--settings", settings, "--start", "5",
                             "--count", "1", "--write", str(tmp_path))
    assert code == 0 and (doc["run"]["profiles"], doc["run"]["fabric"], doc["run"]["settings"]) == (
        profiles, fabric, settings)
    [r] = doc["scenarios"]
    assert r["scenario"] == name
    written = yaml.safe_load((tmp_path / "fuzz-5.yaml").read_text())
    assert written == fuzz.quick(fuzz.scenario(5, profiles=profiles, fabric=fabric, settings=settings))
    assert ("catalog" in written) == (profiles == "drawn") and (written["topology"]["racks"] == 1) == (fabric == "flat")
    assert r["settings"] == fuzz.settings_summary(written) and (r["settings"] == "default") == (settings == "default")
    assert r["jobs"] == written["generate"]["count"] + len(written.get("jobs", []))
    report_path = tmp_path / "report.json"
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli_main(["simulate", str(tmp_path / "fuzz-5.yaml"), "--policies", ",".join(regimes.POLICIES),
                         "--json", str(report_path), "--quiet"]) == 0
    report = json.loads(report_path.read_text())
    for policy, figures in r["policies"].items():
        assert figures == {k: report["policies"][policy][k] for k in figures}, policy


def test_attribution_says_whether_the_placements_or_the_offsets_moved_the_jct():
    rows = [{"attribution": {"placement": [0.9, 1.0], "offsets": [1.0, 1.004], "both": [0.9, 1.004]}},
            {"attribution": {"placement": [1.1, None], "offsets": [0.99, None], "both": [1.089, None]}}]
    out = fuzz.attribution(rows)
    assert out["placement"] == {"seeds": 3, "geometric_mean": pytest.approx((0.9 * 1.0 * 1.1) ** (1 / 3), abs=1e-4),
                                "faster": 1, "slower": 1}
    # 1.004 is inside the 0.5 % band: neither faster nor slower.
    assert (out["offsets"]["faster"], out["offsets"]["slower"], out["offsets"]["seeds"]) == (1, 0, 3)
    assert (out["both"]["faster"], out["both"]["slower"]) == (1, 1)
    assert fuzz.attribution([])["both"] == {"seeds": 0, "geometric_mean": None, "faster": 0, "slower": 0}


def test_where_a_gang_is_held_the_hold_is_measured_against_its_ablation(tmp_path):
    # 31251 (small): one gang held, 1.021 x volcano-topology with the hold, 1.000 x without (round 33; round 28's
    # 31302 holds no gang since short bursts are laid by their volume).
    code, doc, err = quick_run("--start", "31251", "--count", "1", "--write", str(tmp_path))
    assert code == 0
    [r] = doc["scenarios"]
    assert r["held_gangs"] >= 1
    # The ablation through the path ``simulate FILE`` runs: the same scenario with maxHoldSeconds 0.
    data = yaml.safe_load((tmp_path / "fuzz-31251.yaml").read_text())
    data["policy"]["max_hold_s"] = 0
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(data))
    report_path = tmp_path / "bare.json"
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli_main(["simulate", str(bare), "--policies", "metronome,volcano-topology", "--json",
                         str(report_path), "--quiet"]) == 0
    plain = json.loads(report_path.read_text())["policies"]
    assert plain["volcano-topology"]["avg_jct_s"] == r["policies"]["volcano-topology"]["avg_jct_s"]
    assert r["hold"]["ratio"] == [pytest.approx(
        r["policies"]["metronome"]["avg_jct_s"] / plain["metronome"]["avg_jct_s"], abs=1e-4)]
    assert r["hold"]["without_vs_volcano_topology"] == [pytest.approx(
        plain["metronome"]["avg_jct_s"] / plain["volcano-topology"]["avg_jct_s"], abs=1e-4)]
    assert r["hold"]["ratio"][0] > 1.005  # the hold is what loses here
    summ = doc["summary"]["hold"]
    assert (summ["scenarios"], summ["seeds"], summ["slower"]) == (1, 1, 1)
    assert summ["misses_vs_volcano_topology"] == {"with": 1, "without": 0}
    assert "hold      metronome / without the hold" in err


def test_a_scenario_that_holds_no_gang_is_not_run_again(monkeypatch):
    calls = []
    real = fuzz.simulate

    def simulate(sim, policies, seeds, say=None):
        calls.append(tuple(policies))
        return real(sim, policies, seeds, say)

    monkeypatch.setattr(fuzz, "simulate", simulate)
    _, doc, err = quick_run("--start", "3")
    assert all(r["held_gangs"] == 0 and "hold" not in r for r in doc["scenarios"])
    assert calls == [tuple(regimes.POLICIES)] * 2
    assert doc["summary"]["hold"] == {"scenarios": 0, "seeds": 0, "geometric_mean": None, "faster": 0, "slower": 0,
                                      "misses_vs_volcano_topology": {"with": 0, "without": 0}}
    assert "without the hold" not in err


def test_the_hold_summary_counts_misses_with_and_without_the_hold():
    def held(ratios, without, met):
        return {"met": {"no_harm.avg_jct_s_vs_volcano-topology": met},
                "hold": {"ratio": ratios, "without_vs_volcano_topology": without}}

    rows = [held([0.8, 1.0], [1.01, 1.0], True), held([1.06], [1.004], False), {"met": {}}]
    out = fuzz.hold_summary(rows)
    assert (out["scenarios"], out["seeds"], out["faster"], out["slower"]) == (2, 3, 1, 1)
    assert out["geometric_mean"] == pytest.approx((0.8 * 1.0 * 1.06) ** (1 / 3), abs=1e-4)
    # The first misses only without the hold (worst seed 1.01), the second only with it.
    assert out["misses_vs_volcano_topology"] == {"with": 1, "without": 1}


def test_a_crash_is_recorded_the_run_goes_on_and_the_exit_code_is_1(monkeypatch):
    real = fuzz.simulate

    def simulate(sim, policies, seeds, say=None):
        if sim.name.startswith("fuzz-1-"):
            raise RuntimeError("boom")
        return real(sim, policies, seeds, say)

    monkeypatch.setattr(fuzz, "simulate", simulate)
    code, doc, err = quick_run()
    assert code == 1
    [crash] = doc["crashes"]
    assert crash["index"] == 1 and crash["stage"] == "simulate" and crash["error"] == "RuntimeError: boom"
    assert "RuntimeError: boom" in crash["traceback"] and len(crash["traceback"]) <= 1500
    assert [r["index"] for r in doc["scenarios"]] == [0]
    assert doc["summary"]["crashes"] == 1 and doc["summary"]["crashed"] == [1] and doc["summary"]["scenarios"] == 2
    assert "CRASH (simulate) RuntimeError: boom" in err


def test_a_scenario_the_parser_refuses_is_a_crash_of_the_generator(monkeypatch):
    real = fuzz.scenario

    def scenario(index, execution="any", profiles="catalog", fabric="racks", settings="default"):
        data = real(index, execution, profiles, fabric, settings)
        if index == 0:
            data["topology"]["nic_gbps"] = -1
        return data

    monkeypatch.setattr(fuzz, "scenario", scenario)
    code, doc, _ = quick_run()
    assert code == 1
    assert [(c["index"], c["stage"]) for c in doc["crashes"]] == [(0, "parse")]
    assert "nic_gbps" in doc["crashes"][0]["error"]
    assert [r["index"] for r in doc["scenarios"]] == [1]
