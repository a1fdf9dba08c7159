"""``python -m volcano_metronome.bench floor SCENARIO [--seeds K] [--policy P]``: the queue's own noise.

How far one policy's average JCT moves when nothing changes but one job running one iteration longer
(a fraction of a second in minutes): an A/A comparison. Gangs that do not fit let the ones behind
them go on, so the end of one job decides which gang takes its nodes, and every start after that
moves. Issue 12's do-no-harm bound asks metronome to stay within 0.5 % of each baseline on one seed;
this says how often a baseline misses that bound against itself, on the same scenario and seed, by
the smallest change there is. Read a miss of a comparison next to it: a ratio inside the floor is
not evidence either way, and only the share of misses beyond it is (docs/simulator.md, "The
queue's own noise").

Each run lengthens one job, at a quarter, half and three quarters of the arrival order
(``PICKS``), and divides its average JCT by the unchanged run's. ``fuzz --floor`` adds the same
figures to every random scenario.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, Sequence

from volcano_metronome.commands.files import load_sim_scenario
from volcano_metronome.core.errors import MetronomeError
from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.engine import Engine
from volcano_metronome.sim.policies import POLICIES
from volcano_metronome.sim.report import figures
from volcano_metronome.sim.workload import SimScenario

#: The baseline whose noise the do-no-harm bound is read against.
BASELINE = "volcano-topology"
#: Where in the arrival order the lengthened job sits (shares of the job count).
PICKS = (0.25, 0.5, 0.75)
#: The do-no-harm bound's band (issue 12: 1.005 x).
BAND = 0.005


def picks(count: int) -> list[int]:
    """The indices of the jobs lengthened, one run each (distinct; fewer for a handful of jobs)."""
    return sorted({min(count - 1, int(share * count)) for share in PICKS}) if count else []


def lengthened(jobs: Sequence[JobSpec], index: int) -> tuple[JobSpec, ...]:
    """``jobs`` with job ``index`` one iteration longer."""
    out = list(jobs)
    out[index] = dataclasses.replace(out[index], iterations=out[index].iterations + 1)
    return tuple(out)


def self_ratios(sim: SimScenario, seed: int, policy: str = BASELINE) -> list[float]:
    """``policy``'s average JCT with each pick lengthened, over its average JCT on the jobs as drawn."""
    jobs = sim.jobs(seed)
    base = figures(Engine(sim, jobs, policy, seed).run())["avg_jct_s"]
    if not base:
        return []
    return [round(figures(Engine(sim, lengthened(jobs, i), policy, seed).run())["avg_jct_s"] / base, 4)
            for i in picks(len(jobs))]


def summary(ratios: Sequence[float]) -> dict[str, Any]:
    """How many runs moved beyond ``BAND``, and the extremes."""
    return {"runs": len(ratios), "beyond_band": sum(abs(r - 1.0) > BAND for r in ratios),
            "slower_beyond_band": sum(r > 1.0 + BAND for r in ratios),
            "lowest": min(ratios, default=None), "highest": max(ratios, default=None)}


def line(s: dict[str, Any], policy: str = BASELINE) -> str:
    """The summary in one sentence."""
    if not s["runs"]:
        return f"{policy} against itself: no run"
    return (f"{policy} against itself (one job one iteration longer): {s['beyond_band']} of {s['runs']} runs moved "
            f"avg JCT by more than {100 * BAND:g} % ({s['slower_beyond_band']} slower); range {s['lowest']:.4f} "
            f"to {s['highest']:.4f}")


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
    rows: list[dict[str, Any]] = []
    for name in args.scenario:
        try:
            sim = load_sim_scenario(name)
        except MetronomeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for seed in range(args.seeds or sim.seeds):
            ratios = self_ratios(sim, seed, args.policy)
            rows.append({"scenario": sim.name, "seed": seed, "ratios": ratios})
            print(f"{sim.name} seed {seed}: {' '.join(f'{r:.4f}' for r in ratios)}", file=sys.stderr, flush=True)
    total = summary([r for row in rows for r in row["ratios"]])
    print(line(total, args.policy), file=sys.stderr)
    if args.json:
        print(json.dumps({"policy": args.policy, "picks": list(PICKS), "runs": rows, "summary": total}, indent=2))
    return 0
