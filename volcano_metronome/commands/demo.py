"""``volcano-metronome demo``: every policy on a built-in scenario, a table, the JSON report and plots."""

from __future__ import annotations

import argparse
import pathlib

#: Chosen so that the whole demo runs in a few minutes on a laptop-class machine.
DEMO_SCENARIO = "cluster-256"
DEMO_SEEDS = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``demo``."""
    parser.add_argument("--scenario", default=DEMO_SCENARIO,
                        help=f"built-in scenario name or YAML file (default: {DEMO_SCENARIO})")
    parser.add_argument("--seeds", type=int, default=DEMO_SEEDS, help=f"number of seeds (default: {DEMO_SEEDS})")
    parser.add_argument("--out", default="metronome-report", help="output folder (default: ./metronome-report/)")
    parser.add_argument("--catalog", metavar="FILE", help="YAML file of extra catalog models")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def run(args: argparse.Namespace) -> int:
    """Run the comparison and write report.json and the PNG figures into ``--out``."""
    from volcano_metronome.commands.files import load_sim_scenario
    from volcano_metronome.commands.simulate import ALL_POLICIES, write_json
    from volcano_metronome.core.errors import InvalidInput
    from volcano_metronome.sim.plots import write_plots
    from volcano_metronome.sim.report import table
    from volcano_metronome.sim.runner import simulate, terminal_progress

    if args.seeds < 1:
        raise InvalidInput("--seeds", args.seeds, "an integer >= 1")
    sim = load_sim_scenario(args.scenario, args.catalog)
    policies = ALL_POLICIES.split(",")
    out = pathlib.Path(args.out)
    if not args.quiet:
        print(f"volcano-metronome demo: {sim.name} ({sim.description}), policies {', '.join(policies)}, "
              f"{args.seeds} seed(s); no cluster needed.", flush=True)
    report, runs = simulate(sim, policies, list(range(args.seeds)), None if args.quiet else terminal_progress())
    print(table(report))
    write_json(report, str(out / "report.json"))
    print(f"\nreport: {out / 'report.json'}")
    for path in write_plots(runs, out, sim.scenario.grid.slot_ms):
        print(f"plot:   {path}")
    return 0
