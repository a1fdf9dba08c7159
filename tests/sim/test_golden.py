"""Golden reports: the figures of two small scenarios, compared with tolerances.

Regenerate after an intended change of the model with
``METRONOME_REGEN_GOLDEN=1 pytest tests/sim/test_golden.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import pytest

from volcano_metronome.sim.policies import POLICIES
from volcano_metronome.sim.runner import simulate
from volcano_metronome.sim.workload import SimScenario

GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
FIGURES = ("jobs", "completed", "avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_slowdown", "avg_queue_s",
           "bottleneck_utilization", "avg_link_utilization", "makespan_s", "comm_stretch", "networked_jobs",
           "contention_excess", "avg_contention_excess_s")
REL = 0.02  # the simulation is deterministic; this absorbs float noise across numpy builds
ABS = 0.01


def kept(report: dict[str, Any]) -> dict[str, Any]:
    return {
        "scenario": report["scenario"],
        "seeds": report["seeds"],
        "policies": {name: {k: f[k] for k in FIGURES} for name, f in report["policies"].items()},
        "by_priority": {name: f["by_priority"] for name, f in report["policies"].items()},
        "gains": report["gains"],
    }


def compare(actual: Any, expected: Any, where: str = "") -> list[str]:
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), where
        return [m for k in expected for m in compare(actual[k], expected[k], f"{where}.{k}")]
    if isinstance(expected, list):
        return [m for i, (a, e) in enumerate(zip(actual, expected)) for m in compare(a, e, f"{where}[{i}]")]
    if isinstance(expected, (int, float)) and not isinstance(expected, bool) and expected is not None:
        if actual is None or abs(actual - expected) > max(ABS, REL * abs(expected)):
            return [f"{where}: {actual} != {expected}"]
        return []
    return [] if actual == expected else [f"{where}: {actual!r} != {expected!r}"]


@pytest.mark.parametrize("which", ["sanity", "small"])
def test_report_matches_the_golden_file(which: str, request: pytest.FixtureRequest) -> None:
    sim: SimScenario = request.getfixturevalue(which)
    report, _ = simulate(sim, list(POLICIES), list(range(sim.seeds)))
    actual = kept(report)
    path = GOLDEN / f"{sim.name}.json"
    if os.environ.get("METRONOME_REGEN_GOLDEN") == "1":
        path.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n")
    expected = json.loads(path.read_text())
    mismatches = compare(actual, expected)
    assert not mismatches, "\n".join(mismatches)
