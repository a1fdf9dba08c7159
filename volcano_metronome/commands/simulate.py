"""``volcano-metronome simulate SCENARIO [--policies ...] [--seeds N] [--json FILE] [--plot DIR] [--floor]``."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

ALL_POLICIES = "default,volcano-topology,exclusive,cassini,metronome-free,metronome"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``simulate``."""
    parser.add_argument("scenario", help="scenario YAML file, or a built-in scenario name (see `scenarios`)")
    parser.add_argument("--policies", default=ALL_POLICIES, help=f"comma-separated policies (default: {ALL_POLICIES})")
    parser.add_argument("--seeds", type=int, default=None,
                        help="number of seeds (default: the scenario's `seeds`, else 1)")
    parser.add_argument("--json", metavar="FILE", help="write the JSON report to FILE ('-': print it instead of the table)")
    parser.add_argument("--plot", metavar="DIR", help="write PNG figures into DIR")
    parser.add_argument("--catalog", metavar="FILE", help="YAML file of extra catalog models")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--floor", action="store_true",
                        help="also run volcano-topology against itself with one job one iteration longer, 3 runs a "
                             "seed: how far one seed moves by chance (the report's `floor`)")


def run(args: argparse.Namespace) -> int:
    """Simulate, print the comparison, write what was asked for."""
    from volcano_metronome.commands.files import load_sim_scenario
    from volcano_metronome.core.errors import InvalidInput
    from volcano_metronome.sim import floor
    from volcano_metronome.sim.policies import parse_names
    from volcano_metronome.sim.report import table
    from volcano_metronome.sim.runner import simulate, terminal_progress

    sim = load_sim_scenario(args.scenario, args.catalog)
    policies = parse_names(args.policies)
    count = sim.seeds if args.seeds is None else args.seeds
    if count < 1:
        raise InvalidInput("--seeds", count, "an integer >= 1")
    if args.json and args.json != "-":
        check_output(args.json, "--json")
    if args.plot:
        check_output(args.plot, "--plot", folder=True)
    report, runs = simulate(sim, policies, list(range(count)), None if args.quiet else terminal_progress())
    if args.floor:
        report["floor"] = floor.measure(sim, list(range(count)), bases=floor.known_bases(report))
    if args.json == "-":
        print(json.dumps(report, indent=2))
    else:
        print(table(report))
        if args.floor:
            print(floor.line(report["floor"]["summary"]))
        if args.json:
            write_json(report, args.json)
            print(f"\nreport: {args.json}")
    if args.plot:
        from volcano_metronome.sim.plots import write_plots

        for path in write_plots(runs, args.plot, sim.scenario.grid.slot_ms):
            print(f"plot: {path}", file=sys.stderr if args.json == "-" else sys.stdout)
    return 0


def check_output(path: str, flag: str, folder: bool = False) -> None:
    """Refuse an output path of the wrong kind before any run: a folder where a file goes, or the reverse."""
    from volcano_metronome.core.errors import InvalidInput

    target = pathlib.Path(path)
    if folder and target.exists() and not target.is_dir():
        raise InvalidInput(flag, path, "a folder to write into (this is a file)")
    if not folder and target.is_dir():
        raise InvalidInput(flag, path, "a file to write (this is a folder)")


def write_json(report: object, path: str) -> None:
    """Write ``report`` as indented JSON (parent folders created)."""
    from volcano_metronome.core.errors import MetronomeError

    target = pathlib.Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise MetronomeError(f"cannot write {path}: {exc.strerror or exc}") from None
