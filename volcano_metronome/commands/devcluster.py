"""``volcano-metronome dev-cluster up|down|status``: the whole local stack, with fake GPU nodes, to try things on."""

from __future__ import annotations

import argparse
import json
import sys

from volcano_metronome.core.errors import InvalidInput


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Sub-commands ``up``, ``down`` and ``status``."""
    actions = parser.add_subparsers(dest="dev_action", metavar="ACTION", required=True)
    up = actions.add_parser(
        "up",
        help="start the local stack in the background: control plane, scheduler, controller-manager, "
        "kwok nodes, Kueue, Volcano, JobSet, the training-operators, our CRDs, webhook and controller",
        description="Start the dev cluster in the background (or report the running one). Components whose "
        "program is not built are left out and named.",
    )
    up.add_argument("--racks", type=int, default=4, help="leaf switches, one rack each (default 4)")
    up.add_argument("--nodes-per-rack", type=int, default=4, help="fake nodes per rack (default 4)")
    up.add_argument("--gpus-per-node", type=int, default=8, help="nvidia.com/gpu per node (default 8)")
    up.add_argument("--keep-state", action="store_true",
                    help="bring back the objects of the previous run (default: a stopped cluster starts empty)")
    down = actions.add_parser("down", help="stop every process of the dev cluster")
    down.add_argument("--purge", action="store_true", help="also delete its certificates, data and logs")
    status = actions.add_parser("status", help="report each process of the dev cluster")
    status.add_argument("--json", action="store_true", help="print the status as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the chosen action; returns 0, or 1 from ``status`` when the cluster is not running."""
    from volcano_metronome.devtools import devcluster, fabric

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    if args.dev_action == "up":
        for flag in ("racks", "nodes_per_rack", "gpus_per_node"):
            if getattr(args, flag) < 1:
                raise InvalidInput(f"--{flag.replace('_', '-')}", getattr(args, flag), "a positive integer")
        layout = fabric.Layout(racks=args.racks, nodes_per_rack=args.nodes_per_rack, gpus_per_node=args.gpus_per_node)
        current = devcluster.up(layout=layout, keep_state=args.keep_state, progress=progress)
        print(fabric.node_summary(layout))
        print(devcluster.sample_text(current))
        return 0
    if args.dev_action == "down":
        stopped = devcluster.down(purge=args.purge)
        print("dev cluster stopped" if stopped else "dev cluster was not running")
        return 0
    current = devcluster.status()
    if args.json:
        print(json.dumps(current.to_json()))
    elif not current.processes:
        print(f"dev cluster not started (state in {current.state_dir})")
    else:
        for name, alive in current.processes.items():
            print(f"{name:<24} {'running' if alive else 'stopped'}")
        for name, reason in current.skipped.items():
            print(f"{name:<24} not started: {reason}")
        print(f"API server {current.server_url}: {'ready' if current.ready else 'not ready'}")
        print(f"kubeconfig: {current.kubeconfig}")
    return 0 if current.running and current.ready else 1
