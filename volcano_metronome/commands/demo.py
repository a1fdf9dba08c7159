"""``volcano-metronome demo``: every policy on built-in scenarios, tables, JSON reports and plots.

By default two scenarios side by side: ``sanity-2jobs``, where two gangs must share the same NICs
(the offsets matter: the known-answer case), and ``cluster-256``, where packing leaves almost
nothing shared (they cannot); each table ends with a line saying which regime the run was in, read
from volcano-topology's contention excess. (Of the built-in scenarios, only ``sanity-2jobs`` leaves
volcano-topology a contention excess above 1 % of running time; see docs/simulator.md.)
"""

from __future__ import annotations

import argparse
import pathlib

#: Chosen so that the whole demo runs in about three minutes on a laptop-class machine.
DEMO_SCENARIOS = ("sanity-2jobs", "cluster-256")
DEMO_SEEDS = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``demo``."""
    parser.add_argument("--scenario", action="append", metavar="NAME",
                        help=f"built-in scenario name or YAML file, repeatable (default: {' and '.join(DEMO_SCENARIOS)})")
    parser.add_argument("--seeds", type=int, default=DEMO_SEEDS, help=f"number of seeds (default: {DEMO_SEEDS})")
    parser.add_argument("--out", default="metronome-report",
                        help="output folder (default: ./metronome-report/, one sub-folder per scenario when several)")
    parser.add_argument("--catalog", metavar="FILE", help="YAML file of extra catalog models")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def run(args: argparse.Namespace) -> int:
    """Run the comparison and write report.json and the PNG figures into ``--out``."""
    from volcano_metronome.commands.files import load_sim_scenario
    from volcano_metronome.commands.simulate import ALL_POLICIES, check_output, write_json
    from volcano_metronome.core.errors import InvalidInput
    from volcano_metronome.sim.plots import write_plots
    from volcano_metronome.sim.report import regime, table
    from volcano_metronome.sim.runner import simulate, terminal_progress

    if args.seeds < 1:
        raise InvalidInput("--seeds", args.seeds, "an integer >= 1")
    check_output(args.out, "--out", folder=True)
    names = args.scenario or list(DEMO_SCENARIOS)
    sims = [load_sim_scenario(name, args.catalog) for name in names]
    policies = ALL_POLICIES.split(",")
    root = pathlib.Path(args.out)
    verdicts = []
    for sim in sims:
        out = root if len(sims) == 1 else root / sim.name
        if not args.quiet:
            print(f"volcano-metronome demo: {sim.name} ({sim.description}), policies {', '.join(policies)}, "
                  f"{args.seeds} seed(s); no cluster needed.", flush=True)
        report, runs = simulate(sim, policies, list(range(args.seeds)), None if args.quiet else terminal_progress())
        print(table(report))
        verdicts.append(f"{sim.name}: {regime(report)}")
        print(verdicts[-1])
        write_json(report, str(out / "report.json"))
        print(f"\nreport: {out / 'report.json'}")
        for path in write_plots(runs, out, sim.scenario.grid.slot_ms):
            print(f"plot:   {path}")
        print()
    if len(sims) > 1:
        print("which is which:")
        for line in verdicts:
            print(f"  {line}")
    return 0
