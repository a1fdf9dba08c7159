"""``plan``: place a scenario's jobs in arrival order on an empty cluster, without running them."""

from __future__ import annotations

from typing import Any

import numpy as np

from volcano_metronome.core.cycle import commit
from volcano_metronome.core.decision import Decision, NoFit, decide
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.scenario import JobSpec, Scenario


def plan(scenario: Scenario) -> list[tuple[JobSpec, Decision | NoFit]]:
    """Decide every job in arrival order (file order breaks ties); placed jobs keep their nodes."""
    topology = scenario.topology.build()
    snapshot = Snapshot(topology, scenario.grid, np.full(len(topology.nodes), scenario.topology.gpus_per_node))
    out: list[tuple[JobSpec, Decision | NoFit]] = []
    for job in sorted(scenario.jobs, key=lambda j: j.arrival_s):
        gang = job.gang()
        result = decide(snapshot, gang, scenario.policy)
        if isinstance(result, Decision):
            commit(snapshot, gang, result)
        out.append((job, result))
    return out


def report(results: list[tuple[JobSpec, Decision | NoFit]]) -> dict[str, Any]:
    """The JSON document ``plan --json`` prints."""
    rows: list[dict[str, Any]] = []
    for job, result in results:
        if isinstance(result, Decision):
            rows.append({
                "job": job.name, "status": "placed", "nodes": list(result.nodes), "members": list(result.members),
                "offset_ms": result.offset_ms, "period_ms": result.period_ms, "links": list(result.links),
                "overflow_gbps_ms": round(result.overflow_gbps_ms, 6), "feasible": result.feasible,
                "locked": result.locked, "locks": list(result.locks), "reason": "",
            })
        else:
            rows.append({"job": job.name, "status": "pending", "nodes": [], "members": [], "offset_ms": None,
                         "period_ms": None, "links": [], "overflow_gbps_ms": None, "feasible": False,
                         "locked": False, "locks": [],
                         "reason": result.reason})
    return {"decisions": rows}
