"""The commands: simulate, scenarios, demo, plan on built-in names, and --catalog files."""

from __future__ import annotations

import json
import pathlib

import pytest

from volcano_metronome.cli import main

CATALOG = """
tiny-model:
  period_ms: 100
  windows: [{start_ms: 50, len_ms: 50, fraction: 1.0}]
  derivation: "a test model"
"""

SCENARIO = """
name: uses-tiny
topology: {racks: 1, nodes_per_rack: 2, gpus_per_node: 4, nic_gbps: 100}
jobs:
  - {name: a, model: tiny-model, workers: 2, gpus_per_worker: 3, iterations: 20}
  - {name: b, model: tiny-model, workers: 2, gpus_per_worker: 1, iterations: 20}
"""


def test_scenarios_lists_the_built_in_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0] for line in out.splitlines()[1:]}
    assert rows == {"sanity-2jobs", "testbed-24", "cluster-256", "cluster-256-light", "scale-1k", "multi-tenant",
                    "oversubscribed-racks", "llm-heavy", "multi-tenant-128", "moe-racks"}
    assert main(["scenarios", "--show", "sanity-2jobs"]) == 0
    assert "name: sanity-2jobs" in capsys.readouterr().out


def test_simulate_prints_the_table_and_writes_json_and_plots(tmp_path: pathlib.Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "out" / "report.json"
    code = main(["simulate", "sanity-2jobs", "--json", str(report), "--plot", str(tmp_path / "plots")])
    assert code == 0
    captured = capsys.readouterr()
    assert "vs default" in captured.out and "avg JCT" in captured.out
    assert "jobs done" in captured.err  # progress
    doc = json.loads(report.read_text())
    assert set(doc) >= {"scenario", "seeds", "policies", "gains"}
    fields = {"jobs", "completed", "avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_slowdown", "avg_queue_s",
              "bottleneck_utilization", "avg_link_utilization", "makespan_s", "by_priority", "decision_ms_p50",
              "decision_ms_p99", "contention_excess", "avg_contention_excess_s"}
    assert all(fields <= set(f) for f in doc["policies"].values())
    assert set(doc["gains"]["metronome_vs_default"]) == {"not_compared", "avg_jct_reduction_pct", "p99_jct_reduction_pct",
                                                         "bottleneck_utilization_gain_pct",
                                                         "contention_excess_recovered_pct", "queueing_share_pct"}
    for png in ("jct_cdf.png", "busiest_link.png", "tdm_circle.png"):
        assert (tmp_path / "plots" / png).read_bytes()[:4] == b"\x89PNG"


def test_simulate_json_to_stdout_with_chosen_policies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "sanity-2jobs", "--policies", "metronome,default", "--json", "-", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc["policies"]) == ["metronome", "default"]
    assert doc["gains"]["metronome_vs_default"]["avg_jct_reduction_pct"] == pytest.approx(33.2, abs=0.2)


#: Job a's ring crosses a 50 Gbps uplink at 100 Gbps: ``exclusive`` (peak reservation) never admits it.
NEVER_ADMITTED = """
name: never-admitted
topology: {racks: 2, nodes_per_rack: 1, gpus_per_node: 1, nic_gbps: 100, uplink_gbps: 50}
jobs:
  - {name: a, workers: 2, gpus_per_worker: 1, iterations: 10,
     profile: {period_ms: 200, windows: [{start_ms: 100, len_ms: 100, gbps: 100}]}}
  - {name: b, workers: 1, gpus_per_worker: 1, iterations: 10,
     profile: {period_ms: 200, windows: [{start_ms: 100, len_ms: 100, gbps: 100}]}}
"""


def test_a_baseline_that_never_ran_a_job_is_not_compared_on_the_jobs_it_ran(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.yaml").write_text(NEVER_ADMITTED)
    assert main(["simulate", str(tmp_path / "s.yaml"), "--policies", "metronome,exclusive", "--quiet"]) == 0
    out = capsys.readouterr().out
    # Its average covers job b alone (2 s), metronome's both: a 50 % "loss" that is no comparison.
    assert "exclusive           1/2 " in out
    assert "vs exclusive          not compared: exclusive completed 1 of 2 jobs, metronome 2 of 2" in out
    assert main(["simulate", str(tmp_path / "s.yaml"), "--policies", "metronome,exclusive", "--json", "-",
                 "--quiet"]) == 0
    gain = json.loads(capsys.readouterr().out)["gains"]["metronome_vs_exclusive"]
    assert gain["avg_jct_reduction_pct"] is None and gain["not_compared"].startswith("exclusive completed 1 of 2")


def test_a_catalog_file_adds_models_for_simulate_and_plan(tmp_path: pathlib.Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    assert main(["simulate", str(tmp_path / "scenario.yaml"), "--policies", "metronome", "--quiet",
                 "--catalog", str(tmp_path / "catalog.yaml")]) == 0
    assert "metronome" in capsys.readouterr().out
    assert main(["simulate", str(tmp_path / "scenario.yaml"), "--quiet"]) == 2
    assert "jobs[0].model: got 'tiny-model', expected a catalog model" in capsys.readouterr().err


def test_plan_resolves_built_in_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "sanity-2jobs"]) == 0
    out = capsys.readouterr().out
    assert "placed" in out and " 100 " in out  # b interleaved 100 ms after a


def test_demo_of_two_scenarios_writes_one_folder_each_and_says_which_is_which(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--scenario", "sanity-2jobs", "--scenario", str(pathlib.Path(__file__).parent / "scenarios" / "small.yaml"),
                 "--out", str(tmp_path / "r"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "which is which:" in out and "sanity-2jobs: regime: LINKS ARE SHARED" in out
    assert (tmp_path / "r" / "sanity-2jobs" / "report.json").exists() and (tmp_path / "r" / "small" / "report.json").exists()


def test_demo_writes_report_and_plots(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--scenario", "sanity-2jobs", "--out", str(tmp_path / "r"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "policy" in out and (tmp_path / "r" / "report.json").exists()
    assert {p.name for p in (tmp_path / "r").glob("*.png")} == {"jct_cdf.png", "busiest_link.png", "tdm_circle.png"}


@pytest.mark.parametrize("command", ["simulate", "plan"])
def test_a_scenario_file_that_is_not_utf8_is_named_not_a_traceback(command: str, tmp_path: pathlib.Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(b"name: x\n\xff\xfe")
    assert main([command, str(path)]) == 2
    assert f"cannot read {path}: not UTF-8 text (invalid start byte at byte 8)" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["simulate", "no-such-scenario"], "cannot read no-such-scenario: no such file, and no built-in scenario"),
    (["simulate", "sanity-2jobs", "--policies", "kube"], "--policies: got 'kube', expected one of default"),
    (["simulate", "sanity-2jobs", "--seeds", "0"], "--seeds: got 0, expected an integer >= 1"),
    (["scenarios", "--show", "nope"], "--show: got 'nope', expected one of"),
])
def test_bad_arguments_exit_2_with_a_clear_message(argv: list[str], message: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv + ["--quiet"] if argv[0] == "simulate" else argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command", ["simulate", "plan"])
def test_a_key_given_twice_is_refused_with_its_line_not_kept_silently(command: str, tmp_path: pathlib.Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("nic_gbps: 100}", "nic_gbps: 100}\ntopology: {racks: 1}"))
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert "not valid YAML" in err and "found the key 'topology' twice" in err and f'in "{path}", line 4' in err


def test_yaml_merge_keys_still_override_what_they_merge(tmp_path: pathlib.Path) -> None:
    from volcano_metronome.commands.files import read_yaml

    path = tmp_path / "m.yaml"
    path.write_text("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n")
    assert read_yaml(path) == {"base": {"x": 1, "y": 2}, "other": {"x": 1, "y": 3}}


@pytest.mark.parametrize(("flag", "kind", "message"), [
    ("--json", "folder", "--json: got '{p}', expected a file to write (this is a folder)"),
    ("--plot", "file", "--plot: got '{p}', expected a folder to write into (this is a file)"),
])
def test_an_output_path_of_the_wrong_kind_is_refused_before_the_run(flag: str, kind: str, message: str,
                                                                    tmp_path: pathlib.Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out"
    target.mkdir() if kind == "folder" else target.write_text("")
    assert main(["simulate", "sanity-2jobs", flag, str(target), "--quiet"]) == 2
    captured = capsys.readouterr()
    assert message.format(p=target) in captured.err and captured.out == ""


def test_a_catalog_entry_with_a_list_for_a_text_field_is_refused(tmp_path: pathlib.Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.yaml").write_text(CATALOG.replace('"a test model"', "[a, b]"))
    (tmp_path / "s.yaml").write_text(SCENARIO)
    assert main(["simulate", str(tmp_path / "s.yaml"), "--catalog", str(tmp_path / "c.yaml"), "--quiet"]) == 2
    assert "catalog.tiny-model.derivation: got ['a', 'b'], expected a string" in capsys.readouterr().err
