"""``volcano-metronome scenarios [--show NAME]``: the built-in scenarios."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``scenarios``."""
    parser.add_argument("--show", metavar="NAME", help="print the YAML of one built-in scenario")


def run(args: argparse.Namespace) -> int:
    """List the built-in scenarios (or print one)."""
    from volcano_metronome.commands.files import builtin_scenarios, load_sim_scenario
    from volcano_metronome.core.errors import InvalidInput

    known = builtin_scenarios()
    if args.show:
        if args.show not in known:
            raise InvalidInput("--show", args.show, f"one of {', '.join(known)}")
        print(known[args.show], end="")
        return 0
    width = max(len(name) for name in known) + 2
    print(f"{'name':<{width}}{'nodes':>7}{'GPUs':>7}{'jobs':>7}{'seeds':>7}  description")
    for name in known:
        sim = load_sim_scenario(name)
        topo = sim.scenario.topology
        jobs = len(sim.scenario.jobs) + (sim.generate.count if sim.generate else 0)
        print(f"{name:<{width}}{topo.nodes:>7}{topo.nodes * topo.gpus_per_node:>7}{jobs:>7}{sim.seeds:>7}  {sim.description}")
    return 0
