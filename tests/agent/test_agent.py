"""The node agent's logic: which gang a node reports, and one measuring round on a synthetic trace."""

from __future__ import annotations

from typing import Any

import pytest

from tests.profiling.synth import Spec, csv
from volcano_metronome.agent.node import AgentConfig, AgentMetrics, measure_once
from volcano_metronome.agent.owners import owner
from volcano_metronome.agent.reports import Scan
from volcano_metronome.shapes.profiles import profile_from_spec
from volcano_metronome.core.errors import InvalidInput


def claim(name: str, nodes: list[str], members: list[int] | None = None, placed: bool = True,
          measured: dict[str, Any] | None = None, locked: bool | None = False) -> dict[str, Any]:
    """A placed claim as the controller writes it: free (``locked: false``) unless told; None: no ``locked`` at all."""
    status: dict[str, Any] = {"nodes": nodes, "members": members or [1] * len(nodes)}
    if locked is not None:
        status["locked"] = locked
    if not placed:
        status["conditions"] = [{"type": "Placed", "status": "False", "reason": "Released"}]
    if measured is not None:
        status["measuredProfile"] = measured
    return {"metadata": {"namespace": "ns", "name": f"podgroup-{name}"}, "status": status,
            "spec": {"gangRef": {"kind": "PodGroup", "name": name}}}


def test_the_first_node_a_gang_owns_alone_reports_it():
    claims = [claim("a", ["n0", "n1", "n2"]), claim("b", ["n0", "n3"])]
    assert owner("n0", claims).why == "shared" and owner("n0", claims).gangs_on_node == 2
    assert owner("n1", claims).claim == ("ns", "podgroup-a")  # n0 is shared: n1 is a's first node of its own
    assert owner("n2", claims).why == "another node reports it"
    assert owner("n3", claims).claim == ("ns", "podgroup-b")
    assert owner("n9", claims).why == "idle"


def test_released_claims_and_empty_members_do_not_count():
    claims = [claim("a", ["n0"]), claim("gone", ["n0"], placed=False), claim("z", ["n0", "n1"], [0, 2])]
    assert owner("n0", claims).claim == ("ns", "podgroup-a")
    assert owner("n1", claims).claim == ("ns", "podgroup-z")


NOW = 1_700_000_000.0


def run_round(claims: list[dict[str, Any]], trace: str, node: str = "n0",
              scan: Scan = Scan(())) -> tuple[str, list, AgentMetrics]:
    writes: list[tuple[str, str, dict[str, Any]]] = []
    metrics = AgentMetrics()
    cfg = AgentConfig(node, "eth9", seconds=4.0, interval_s=10.0, runtime_max_age_s=60.0)
    result = measure_once(cfg, lambda: claims, lambda ns, name, m: writes.append((ns, name, m)), metrics,
                          lambda _: trace, now=lambda: NOW, reports=lambda: scan)
    return result, writes, metrics


def test_a_round_fits_the_owning_gang_and_writes_its_measured_profile():
    trace = csv(Spec(period_ms=300.0, windows=((270.0, 30.0, 40.0),), periods=20), seed=3)
    result, writes, metrics = run_round([claim("a", ["n0", "n1"])], trace)
    assert result == "written"
    ((ns, name, measured),) = writes
    assert (ns, name) == ("ns", "podgroup-a")
    assert measured["source"] == "node-agent" and measured["node"] == "n0"
    assert measured["measuredAt"] == "2023-11-14T22:13:20Z" and 0 <= measured["confidence"] <= 1
    profile = profile_from_spec({k: measured[k] for k in ("periodMs", "windows", "jitterMs")}, "measured")
    assert profile.period_ms == pytest.approx(300.0, rel=0.02) and profile.peak_gbps == pytest.approx(40.0, rel=0.1)
    assert metrics.registry.get_sample_value("metronome_agent_period_ms",
                                             {"namespace": "ns", "claim": "podgroup-a", "source": "node-agent"}) \
        == profile.period_ms
    mean = metrics.registry.get_sample_value("metronome_agent_measured_gbps", {"interface": "eth9"})
    assert mean == pytest.approx(40.0 * 30.0 / 300.0, rel=0.1)
    assert metrics.registry.get_sample_value("metronome_agent_fits_total", {"result": "written"}) == 1


def test_a_shared_nic_and_a_refused_fit_write_nothing():
    trace = csv(Spec(period_ms=300.0, windows=((270.0, 30.0, 40.0),), periods=20), seed=3)
    result, writes, metrics = run_round([claim("a", ["n0"]), claim("b", ["n0"])], trace)
    assert (result, writes) == ("shared", [])
    assert metrics.registry.get_sample_value("metronome_agent_gangs_on_node") == 2
    short = csv(Spec(period_ms=300.0, windows=((270.0, 30.0, 40.0),), periods=3), seed=3)
    result, writes, metrics = run_round([claim("a", ["n0"])], short)
    assert (result, writes) == ("too-short", [])
    assert metrics.registry.get_sample_value("metronome_agent_fits_total", {"result": "too-short"}) == 1


def test_a_locked_gang_s_nic_is_not_fitted():
    """Its runtime holds every burst to the slot: the NIC shows the published period (here 300 ms of bursts for a
    gang whose own iteration may be far shorter), so a fit would report the padding as compute."""
    trace = csv(Spec(period_ms=300.0, windows=((270.0, 30.0, 40.0),), periods=20), seed=3)
    for locked in (True, None):  # None: a claim written before lock on demand, which the controller reads as locked
        c = claim("a", ["n0", "n1"], locked=locked)
        c["status"]["periodMs"] = 300.0
        result, writes, metrics = run_round([c], trace)
        assert (result, writes) == ("aligned", [])
        assert metrics.registry.get_sample_value("metronome_agent_fits_total", {"result": "aligned"}) == 1
    assert run_round([claim("a", ["n0", "n1"], locked=False)], trace)[0] == "written"


def test_bad_settings_name_the_flag():
    with pytest.raises(InvalidInput) as caught:
        AgentConfig("", "eth0")
    assert caught.value.field == "--node"
    with pytest.raises(InvalidInput) as caught:
        AgentConfig("n0", "eth0", seconds=30.0, interval_s=10.0)
    assert caught.value.field == "--interval"
