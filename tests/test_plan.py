"""``volcano-metronome plan``: the scenario file in, decisions out (through the real command)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import yaml

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.plan import plan, report
from volcano_metronome.scenario import parse

ROOT = pathlib.Path(__file__).resolve().parents[1]
SANITY = ROOT / "examples" / "sanity.yaml"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "volcano_metronome", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_plan_json_places_a_and_b_100_ms_apart_and_leaves_c_pending():
    result = cli("plan", str(SANITY), "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["job"]: row for row in json.loads(result.stdout)["decisions"]}
    assert set(rows) == {"a", "b", "c"}
    a, b, c = rows["a"], rows["b"], rows["c"]
    assert a["status"] == b["status"] == "placed"
    assert sorted(a["nodes"]) == sorted(b["nodes"]) == ["rack-0-node-0", "rack-0-node-1"]
    assert abs(a["offset_ms"] - b["offset_ms"]) == 100.0
    assert a["overflow_gbps_ms"] == b["overflow_gbps_ms"] == 0.0
    assert len(a["links"]) == 4
    assert c["status"] == "pending" and "insufficient GPUs" in c["reason"]
    for row in rows.values():
        assert {"job", "status", "nodes", "offset_ms", "links", "overflow_gbps_ms", "reason"} <= set(row)


def test_plan_is_deterministic():
    assert cli("plan", str(SANITY), "--json").stdout == cli("plan", str(SANITY), "--json").stdout


def test_plan_table_output():
    result = cli("plan", str(SANITY))
    assert result.returncode == 0
    assert "pending" in result.stdout and "placed" in result.stdout


def sanity() -> dict:
    return yaml.safe_load(SANITY.read_text())


@pytest.mark.parametrize("mutate, field, expected", [
    (lambda d: d["jobs"][1].update(workers=0), "jobs[1].workers", "an integer in [1, 102400]"),
    (lambda d: d["jobs"][1].update(iterations=10**12), "jobs[1].iterations", "an integer in [1, 1000000]"),
    (lambda d: d["jobs"][0]["profile"].update(period_ms=-5), "jobs[0].profile.period_ms", "(0, 3600000]"),
    (lambda d: d["jobs"][2].update(model="resnet5O"), "jobs[2].model", "a catalog model"),
    (lambda d: d["jobs"][0].update(model="resnet50"), "jobs[0]", "exactly one of profile or model"),
    (lambda d: d["topology"].update(racks=2), "topology.uplink_gbps", "needed when racks > 1"),
    (lambda d: d["topology"].update(nics=3), "topology.nics", "one of"),
    (lambda d: d.update(jobz=[]), "jobz", "one of the scenario keys"),
    (lambda d: d["jobs"][1].update(name="a"), "jobs[1].name", "a name no other job has"),
    (lambda d: d.update(policy={"ordering": "Random"}), "policy.ordering", "StrictPriority"),
    (lambda d: d.update(policy={"ordering": {"a": 1}}), "policy.ordering", "StrictPriority"),  # unhashable
    (lambda d: d["topology"].update(gpu=["h100"], mfu=0.4), "topology.gpu", "one of a100"),
    (lambda d: d["jobs"][0]["profile"]["windows"][0].update(len_ms=150), "jobs[0].profile.windows[0].len_ms",
     "start_ms + len_ms <= period_ms=200"),
])
def test_malformed_scenarios_name_the_field(mutate, field, expected):
    data = sanity()
    mutate(data)
    with pytest.raises(InvalidInput) as err:
        parse(data)
    assert err.value.field == field
    assert expected in str(err.value)


def test_cli_reports_a_bad_scenario_in_one_line_with_exit_code_2(tmp_path):
    data = sanity()
    data["jobs"][1]["workers"] = "two"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    result = cli("plan", str(bad))
    assert result.returncode == 2
    assert "jobs[1].workers: got 'two', expected an integer in [1, 102400]" in result.stderr
    assert "Traceback" not in result.stderr
    missing = cli("plan", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_report_of_a_pending_job_has_no_nodes():
    doc = report(plan(parse(sanity())))
    pending = [r for r in doc["decisions"] if r["status"] == "pending"]
    assert pending and all(r["nodes"] == [] and r["offset_ms"] is None for r in pending)


def test_plan_reads_extra_models_from_catalog_file(tmp_path):
    catalog = tmp_path / "models.yaml"
    catalog.write_text(yaml.safe_dump({"mymodel": {"period_ms": 200, "jitter_ms": 0, "derivation": "test",
                                                   "windows": [{"start_ms": 100, "len_ms": 100, "fraction": 1.0}]}}))
    data = sanity()
    for job in data["jobs"]:
        job.pop("profile", None)
        job["model"] = "mymodel"
    scenario = tmp_path / "uses-mymodel.yaml"
    scenario.write_text(yaml.safe_dump(data))
    without = cli("plan", str(scenario), "--json")
    assert without.returncode == 2 and "mymodel" in without.stderr
    result = cli("plan", str(scenario), "--json", "--catalog", str(catalog))
    assert result.returncode == 0, result.stderr
    rows = {row["job"]: row for row in json.loads(result.stdout)["decisions"]}
    assert rows["a"]["period_ms"] == 200.0 and abs(rows["a"]["offset_ms"] - rows["b"]["offset_ms"]) == 100.0


def test_plan_reports_which_gangs_are_locked():
    rows = {r["job"]: r for r in report(plan(parse(sanity())))["decisions"]}
    assert rows["a"]["locked"] is False and rows["a"]["locks"] == []  # alone on its NICs: runs free
    assert rows["b"]["locked"] is True and rows["b"]["locks"] == ["a"]  # shares them: both align


def test_user_catalog_entries_may_name_their_reference_nic():
    from volcano_metronome.catalog import entry_from_mapping

    entry = entry_from_mapping("m", {"period_ms": 200, "windows": [{"start_ms": 100, "len_ms": 100, "fraction": 1}],
                                     "reference_gbps": 50}, "catalog.m")
    assert entry.profile(100.0).period_ms == 150.0  # the same volume in half the time on a twice faster NIC
    with pytest.raises(InvalidInput, match="catalog.m.reference_gbps"):
        entry_from_mapping("m", {"period_ms": 200, "windows": [{"start_ms": 100, "len_ms": 100, "fraction": 1}],
                                 "reference_gbps": 0}, "catalog.m")
