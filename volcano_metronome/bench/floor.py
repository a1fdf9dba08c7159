"""``python -m volcano_metronome.bench floor SCENARIO... [--seeds K] [--policy P]``: the queue's own noise.

A policy against itself, the same scenario and seed with one job one iteration longer
(``sim.floor``): how often one seed leaves issue 12's 0.5 % do-no-harm band by chance. ``fuzz
--floor`` adds the same figures to every random scenario, ``volcano-metronome simulate --floor`` to a
report.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from volcano_metronome.commands.files import load_sim_scenario
from volcano_metronome.core.errors import MetronomeError
from volcano_metronome.sim.floor import BASELINE, PICKS, line, measure, summary
from volcano_metronome.sim.policies import POLICIES


def main(argv: list[str] | None = None) -> int:
    """Print every run's ratio and the summary (``--json``: the JSON document)."""
    parser = argparse.ArgumentParser(prog="python -m volcano_metronome.bench floor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="+", help="a built-in scenario's name or a scenario file")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..K-1 (default: the scenario's own count)")
    parser.add_argument("--policy", choices=sorted(POLICIES), default=BASELINE, help=f"default {BASELINE}")
    parser.add_argument("--json", action="store_true", help="print the JSON on stdout")
    args = parser.parse_args(argv)
    if args.seeds is not None and args.seeds < 1:
        parser.error(f"--seeds: got {args.seeds}, expected an integer >= 1")
    scenarios: list[dict[str, Any]] = []
    for name in args.scenario:
        try:
            sim = load_sim_scenario(name)
        except MetronomeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        measured = measure(sim, range(args.seeds or sim.seeds), args.policy)
        for s in measured["per_seed"]:
            print(f"{sim.name} seed {s['seed']}: {' '.join(f'{r:.4f}' for r in s['ratios'])}", file=sys.stderr)
        scenarios.append({"scenario": sim.name, **measured})
    total = summary([r for m in scenarios for s in m["per_seed"] for r in s["ratios"]])
    print(line(total, args.policy), file=sys.stderr)
    if args.json:
        print(json.dumps({"policy": args.policy, "picks": list(PICKS), "scenarios": scenarios, "summary": total},
                         indent=2))
    return 0
