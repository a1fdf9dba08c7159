"""Where the phase offsets pay: issue 12's targets over a fixed grid of contended regimes.

``python -m volcano_metronome.bench regimes [--quick] [--seeds N] [--only TEXT] [--json]``

Every scenario of the grid is generated with the scenario format's own ``generate:`` block and run
through the simulator exactly as ``volcano-metronome simulate`` runs it (``sim.runner.simulate``),
under ``metronome``, ``metronome-free`` (the ablation: our placements, no offsets),
``volcano-topology`` (the strongest baseline) and ``cassini``; the verdicts are the report's own
(``sim.report.issue12_targets``). The grid (fixed before it was first run, docs/simulator.md, "Where
the offsets pay: a regime map") crosses three ways links get shared, three period mixes and two
execution models:

* sharing: ``half-nodes`` (a flat rack of 8 nodes, 100 Gbps NICs, gangs of 3 x 4 GPUs, so packed
  gangs share half nodes' NICs), ``fragmented`` (4 racks x 8 nodes, 200 Gbps NICs, 2:1 uplinks,
  gangs of 2- to 4-GPU workers at high load), ``multirack`` (8 racks x 4 nodes, 200 Gbps NICs, 4:1
  uplinks, whole-node gangs of 4 to 12 nodes that span racks);
* mix: ``one-model`` (vgg11 only: every gang's period equal), ``two-models`` (vgg11 and gpt3),
  ``mixed`` (eight catalog models);
* execution: ``steady`` (no noise) or ``noisy`` (2 % two-sided iteration noise, one straggling
  iteration in 500 at twice its compute, start-up delay 5 to 30 s: the issue-12 scenarios' block
  without overlap).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Mapping, Sequence

from volcano_metronome.sim.report import SHARED_EXCESS, issue12_targets
from volcano_metronome.sim.runner import simulate
from volcano_metronome.sim.workload import SimScenario, parse_sim

POLICIES = ("metronome", "metronome-free", "volcano-topology", "cassini")

SHARING: dict[str, dict[str, Any]] = {
    "half-nodes": {
        "topology": {"racks": 1, "nodes_per_rack": 8, "gpus_per_node": 8, "nic_gbps": 100},
        "generate": {"count": 24, "seed": 3, "arrival": {"rate_per_min": 6},
                     "shapes": [{"workers": 3, "gpus_per_worker": 4, "weight": 1}], "iterations": [400, 800]},
    },
    "fragmented": {
        "topology": {"racks": 4, "nodes_per_rack": 8, "gpus_per_node": 8, "nic_gbps": 200, "uplink_gbps": 800},
        "generate": {"count": 60, "seed": 21, "arrival": {"rate_per_min": 30},
                     "shapes": [{"workers": 4, "gpus_per_worker": 2, "weight": 3},
                                {"workers": 4, "gpus_per_worker": 4, "weight": 3},
                                {"workers": 8, "gpus_per_worker": 2, "weight": 2},
                                {"workers": 8, "gpus_per_worker": 4, "weight": 2},
                                {"workers": 6, "gpus_per_worker": 3, "weight": 1}],
                     "iterations": [200, 600]},
    },
    "multirack": {
        "topology": {"racks": 8, "nodes_per_rack": 4, "gpus_per_node": 8, "nic_gbps": 200, "uplink_gbps": 200},
        "generate": {"count": 40, "seed": 12, "arrival": {"rate_per_min": 12},
                     "shapes": [{"workers": 4, "gpus_per_worker": 8, "weight": 3},
                                {"workers": 6, "gpus_per_worker": 8, "weight": 3},
                                {"workers": 8, "gpus_per_worker": 8, "weight": 2},
                                {"workers": 12, "gpus_per_worker": 8, "weight": 1}],
                     "iterations": [200, 600]},
    },
}

MIXES: dict[str, dict[str, int]] = {
    "one-model": {"vgg11": 1},
    "two-models": {"vgg11": 1, "gpt3": 1},
    "mixed": {"vgg11": 1, "vgg16": 1, "resnet50": 1, "bert-base": 1, "roberta-base": 1, "gpt1": 1, "gpt3": 1,
              "wideresnet101": 1},
}

EXECUTIONS: dict[str, dict[str, Any]] = {
    "steady": {},
    "noisy": {"noise_cv": 0.02, "straggler_probability": 0.002, "straggler_slowdown": 2.0, "startup_s": [5, 30]},
}

#: ``--quick``: two small cells, for the test suite.
QUICK = (("half-nodes", "one-model", "steady", 8), ("fragmented", "mixed", "noisy", 12))


def scenario(sharing: str, mix: str, execution: str, count: int | None = None) -> dict[str, Any]:
    """The scenario mapping of one cell of the grid (``count`` overrides the number of jobs)."""
    base = SHARING[sharing]
    generate = {**base["generate"], "mix": MIXES[mix]}
    if count is not None:
        generate["count"] = count
    return {"name": f"{sharing}/{mix}/{execution}", "slot_ms": 5, "topology": base["topology"],
            "policy": {"ordering": "StrictPriority"}, "execution": EXECUTIONS[execution], "generate": generate}


def cells(quick: bool) -> list[tuple[str, str, str, int | None]]:
    """The grid, or the two quick cells."""
    if quick:
        return list(QUICK)
    return [(s, m, e, None) for s in SHARING for m in MIXES for e in EXECUTIONS]


def verdict(report: Mapping[str, Any]) -> dict[str, Any]:
    """One cell's figures and issue 12's verdicts, from the simulator's report."""
    policies = report["policies"]
    ours = policies["metronome"]
    targets = issue12_targets(report)
    no_harm = {k.removeprefix("no_harm."): v for k, v in targets.items() if k.startswith("no_harm.")}
    win = {k.removeprefix("win_if_contended."): v for k, v in targets.items() if k.startswith("win_if_contended.")}
    excess = policies["volcano-topology"]["contention_excess"]
    return {
        "avg_jct_s": {p: policies[p]["avg_jct_s"] for p in policies},
        "p99_jct_s": {p: policies[p]["p99_jct_s"] for p in policies},
        "contention_excess": {p: policies[p]["contention_excess"] for p in policies},
        "recovered_pct": report["gains"].get("metronome_vs_volcano-topology", {}).get("contention_excess_recovered_pct"),
        "offsets_alone_pct": _change(policies["metronome-free"]["avg_jct_s"], ours["avg_jct_s"]),
        "placed_locked": ours.get("placed_locked"),
        "no_harm": no_harm,
        "no_harm_met": all(v["met"] for v in no_harm.values()),
        "contended": excess is not None and excess >= SHARED_EXCESS,
        "win": win,
        "win_met": bool(win) and all(v["met"] for v in win.values()),
    }


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts of cells meeting each target, and the worst do-no-harm ratio of each kind with its cell."""
    worst: dict[str, dict[str, Any]] = {}
    for row in rows:
        for key, v in row["no_harm"].items():
            if key not in worst or v["value"] > worst[key]["value"]:
                worst[key] = {"value": v["value"], "cell": row["cell"], "met": v["met"]}
    contended = [r for r in rows if r["contended"]]
    return {
        "cells": len(rows),
        "no_harm_met": sum(1 for r in rows if r["no_harm_met"]),
        "no_harm_missed": [r["cell"] for r in rows if not r["no_harm_met"]],
        "worst_no_harm": worst,
        "contended": len(contended),
        "win_met": [r["cell"] for r in contended if r["win_met"]],
        "win_missed": [r["cell"] for r in contended if not r["win_met"]],
    }


def run(grid: Sequence[tuple[str, str, str, int | None]], seeds: Sequence[int], say: Any = None) -> dict[str, Any]:
    """Simulate every cell under the four policies; the rows and their summary."""
    rows = []
    for sharing, mix, execution, count in grid:
        sim: SimScenario = parse_sim(scenario(sharing, mix, execution, count))
        report, _ = simulate(sim, POLICIES, seeds)
        row = {"cell": sim.name, "sharing": sharing, "mix": mix, "execution": execution,
               "jobs": len(sim.jobs(seeds[0])), **verdict(report)}
        rows.append(row)
        if say is not None:
            say(_line(row))
    return {"benchmark": "regimes", "policies": list(POLICIES), "seeds": list(seeds), "rows": rows,
            "summary": summary(rows)}


def _change(base: float | None, new: float | None) -> float | None:
    return None if not base or new is None else round(100 * (new - base) / base, 2)


def _ratio(row: Mapping[str, Any], key: str) -> str:
    v = row["no_harm"].get(key)
    return "-" if v is None else f"{v['value']:.3f}{'' if v['met'] else '!'}"


def _line(row: Mapping[str, Any]) -> str:
    jct = row["avg_jct_s"]
    excess = row["contention_excess"]["volcano-topology"]
    win = ("met" if row["win_met"] else "MISSED") if row["contended"] else "n/a"
    rec = row["recovered_pct"]
    return (f"{row['cell']:<32} {jct['metronome'] / jct['volcano-topology']:6.3f} "
            f"{_ratio(row, 'avg_jct_s_vs_metronome-free'):>7} {_ratio(row, 'avg_jct_s_vs_cassini'):>7} "
            f"{_ratio(row, 'p99_jct_s_vs_volcano-topology'):>7} {100 * excess:6.2f}% "
            f"{'-' if rec is None else f'{rec:.1f}%':>7} {row['placed_locked'] or 0:>4} "
            f"{'met' if row['no_harm_met'] else 'MISSED':>7} {win:>7}")


HEADER = (f"{'cell':<32} {'vs VT':>6} {'vs free':>7} {'vs cas':>7} {'p99 VT':>7} {'VT exc':>7} "
          f"{'recov':>7} {'lock':>4} {'noharm':>7} {'win':>7}")


def main(argv: list[str] | None = None) -> int:
    """Run the grid; JSON on stdout, a table on stderr."""
    parser = argparse.ArgumentParser(prog="python -m volcano_metronome.bench regimes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="two small cells (for tests)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0 .. N-1 per cell (default 1)")
    parser.add_argument("--only", default="", help="only the cells whose name contains this text")
    parser.add_argument("--json", action="store_true", help="print JSON only (no table on stderr)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds: got {args.seeds}, expected an integer >= 1")
    grid = [c for c in cells(args.quick) if args.only in "/".join(c[:3])]
    if not grid:
        parser.error(f"--only: got {args.only!r}, which names no cell of the grid")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if not args.json:
        say(HEADER)
    out = run(grid, list(range(args.seeds)), None if args.json else say)
    print(json.dumps(out, indent=1))
    return 0
