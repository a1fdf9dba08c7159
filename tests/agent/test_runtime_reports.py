"""The node agent prefers the runtime helper's own timing to its NIC fit: written with ``source: runtime``
for the gangs whose first node it runs on (shared NICs included), never overwritten by a NIC fit while fresh."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from tests.agent.test_agent import NOW, claim, run_round
from tests.profiling.synth import Spec, csv
from tests.profiling.test_timed import Clock, run_loop
from volcano_metronome import api
from volcano_metronome.agent.reports import Scan, read_reports
from volcano_metronome.profiling.report import RuntimeReport
from volcano_metronome.profiling.timed import Measured, MeasuredWindow
from volcano_metronome.runtime import Publication, Stopwatch

TRACE = csv(Spec(period_ms=300.0, windows=((270.0, 30.0, 40.0),), periods=20), seed=3)


def report(gang: str, at: float = NOW - 5.0, gbps: float | None = 12.5, pod: str = "p0",
           periods: int = 40) -> RuntimeReport:
    measured = Measured(250.0, (MeasuredWindow(200.0, 50.0, gbps),), 3.0, periods, 0.0)
    return RuntimeReport("ns", "PodGroup", gang, pod, at, measured)


def sample(metrics: Any, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_fresh_runtime_report_is_written_instead_of_the_nic_fit() -> None:
    result, writes, metrics = run_round([claim("a", ["n0", "n1"])], TRACE, scan=Scan((report("a"),)))
    assert result == "runtime"
    ((ns, name, measured),) = writes  # the NIC fit (a 300 ms period) is not written
    assert (ns, name) == ("ns", "podgroup-a")
    assert measured == {"periodMs": 250.0, "windows": [{"startMs": 200.0, "lenMs": 50.0, "gbps": 12.5}],
                        "jitterMs": 3.0, "source": "runtime", "node": "n0", "measuredAt": "2023-11-14T22:13:15Z",
                        "periods": 40}
    assert sample(metrics, "metronome_agent_period_ms", namespace="ns", claim="podgroup-a", source="runtime") == 250.0
    assert sample(metrics, "metronome_agent_peak_gbps", namespace="ns", claim="podgroup-a", source="runtime") == 12.5
    assert sample(metrics, "metronome_agent_fits_total", result="runtime") == 1
    assert sample(metrics, "metronome_agent_period_ms", namespace="ns", claim="podgroup-a", source="node-agent") is None


def test_a_locked_gang_s_runtime_report_is_written() -> None:
    """The helper takes its own padding out of its timing, so a locked gang's report is its own profile."""
    result, writes, _ = run_round([claim("a", ["n0", "n1"], locked=True)], TRACE, scan=Scan((report("a"),)))
    assert result == "runtime" and [m["periodMs"] for _, _, m in writes] == [250.0]


def test_the_pods_of_a_job_under_kueue_report_to_its_workload_s_claim() -> None:
    """The pods (so their reports) name the job; the claim's gangRef names the Workload Kueue made for it, and the
    controller writes the job on the claim: the report reaches it."""
    workload = claim("job-j-1a2b3", ["n0"])
    workload["spec"]["gangRef"] = {"kind": "Workload", "name": "job-j-1a2b3"}
    job = RuntimeReport("ns", "Job", "j", "p0", NOW - 5.0, report("x").measured)
    assert run_round([workload], TRACE, scan=Scan((job,)))[0] == "written"  # no identity on the claim: NIC fit
    workload["metadata"]["annotations"] = {api.GANG_KIND: "Job", api.GANG_NAME: "j"}
    result, writes, _ = run_round([workload], TRACE, scan=Scan((job,)))
    assert result == "runtime" and [m["source"] for _, _, m in writes] == ["runtime"]


def test_gangs_sharing_a_nic_are_measured_by_their_own_timing() -> None:
    claims = [claim("a", ["n0", "n1"]), claim("b", ["n0"]), claim("c", ["n1", "n0"])]
    result, writes, metrics = run_round(claims, TRACE, scan=Scan((report("a"), report("b"), report("c"))))
    assert result == "shared"  # the NIC mixes them: no fit
    # n0 is the first node of a and b, not of c (n1's agent reports c).
    assert sorted(name for _, name, _ in writes) == ["podgroup-a", "podgroup-b"]
    assert {m["source"] for _, _, m in writes} == {"runtime"}
    assert sample(metrics, "metronome_agent_fits_total", result="runtime") == 2


def test_stale_rateless_and_other_gangs_reports_leave_the_nic_fit() -> None:
    scan = Scan((report("a", at=NOW - 61.0), report("a", gbps=None), report("zz")))
    result, writes, _ = run_round([claim("a", ["n0"])], TRACE, scan=scan)
    assert result == "written"
    ((_, _, measured),) = writes
    assert measured["source"] == "node-agent" and measured["periodMs"] == pytest.approx(300.0, rel=0.02)


def test_the_newest_report_of_the_gangs_processes_wins() -> None:
    scan = Scan((report("a", at=NOW - 20.0, pod="p0"), report("a", at=NOW - 2.0, pod="p1", gbps=20.0),
                 report("a", at=NOW - 10.0, pod="p2")))
    _, writes, _ = run_round([claim("a", ["n0"])], TRACE, scan=scan)
    ((_, _, measured),) = writes
    assert measured["windows"][0]["gbps"] == 20.0


def test_the_nic_fit_does_not_overwrite_a_fresh_runtime_measurement_from_another_node() -> None:
    """Gang a's first node n0 is shared, so n1's agent fits a's NIC; the claim already holds a's own timing."""
    runtime = {"periodMs": 250.0, "windows": [{"startMs": 200.0, "lenMs": 50.0, "gbps": 12.5}], "source": "runtime",
               "node": "n0", "measuredAt": "2023-11-14T22:13:00Z"}
    claims = [claim("a", ["n0", "n1"], measured=runtime), claim("b", ["n0"])]
    result, writes, metrics = run_round(claims, TRACE, node="n1")
    assert (result, writes) == ("runtime-preferred", [])
    assert sample(metrics, "metronome_agent_fits_total", result="runtime-preferred") == 1
    stale = {**runtime, "measuredAt": "2023-11-14T22:10:00Z"}  # 200 s old: the process stopped publishing
    result, writes, _ = run_round([claim("a", ["n0", "n1"], measured=stale), claim("b", ["n0"])], TRACE, node="n1")
    assert result == "written" and writes[0][2]["source"] == "node-agent"


def test_reports_are_read_from_the_directory_and_bad_files_are_named(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    stopwatch = Stopwatch(clock=clock, wall=lambda: NOW)
    run_loop(stopwatch, clock, 20, 80.0, 20.0, nbytes=25_000_000)
    published = stopwatch.publish(Publication(tmp_path, "ns", "PodGroup", "a", "a-0"))
    assert isinstance(published, RuntimeReport)
    (tmp_path / "ns.a-1.json").write_text('{"namespace": "ns"}')
    (tmp_path / ".ns.a-2.json.partial").write_text("{")
    scan = read_reports(tmp_path)
    assert scan.reports == (published,)
    (problem,) = scan.problems
    assert "ns.a-1.json" in problem and "gang_kind" in problem
    assert read_reports(tmp_path / "absent") == Scan(())
    result, writes, metrics = run_round([claim("a", ["n0"])], TRACE, scan=scan)
    assert result == "runtime" and writes[0][2]["periodMs"] == pytest.approx(100.0, abs=0.1)
    assert sample(metrics, "metronome_agent_fits_total", result="runtime-invalid") == 1
