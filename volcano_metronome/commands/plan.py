"""``volcano-metronome plan SCENARIO.yaml [--json] [--catalog FILE]``."""

from __future__ import annotations

import argparse
import json

from volcano_metronome.commands.files import load_scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``plan``."""
    parser.add_argument("scenario", help="scenario YAML file, or a built-in scenario name (see `scenarios`)")
    parser.add_argument("--json", action="store_true", help="print the decisions as JSON")
    parser.add_argument("--catalog", metavar="FILE", help="YAML file of extra catalog models")


def run(args: argparse.Namespace) -> int:
    """Print the decisions for the scenario's jobs."""
    from volcano_metronome.plan import plan, report

    doc = report(plan(load_scenario(args.scenario, args.catalog)))
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"{'job':<20} {'status':<8} {'offset_ms':>9} {'overflow':>10}  nodes / reason")
    for row in doc["decisions"]:
        if row["status"] == "placed":
            print(f"{row['job']:<20} placed   {row['offset_ms']:>9g} {row['overflow_gbps_ms']:>10g}  "
                  f"{', '.join(row['nodes'])}")
        else:
            print(f"{row['job']:<20} pending  {'-':>9} {'-':>10}  {row['reason']}")
    return 0
