"""The ``volcano-metronome`` command: a thin dispatcher over one module per sub-command.

Each command module exposes ``add_arguments(parser)`` and ``run(args) -> int`` and keeps its heavy
imports inside ``run`` so that ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from volcano_metronome import __version__
from volcano_metronome.core.errors import MetronomeError

# name -> (module, one-line help). Add a line here when a command module lands.
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("volcano_metronome.commands.plan", "place a scenario's jobs on an empty cluster and print the decisions"),
    "tools": ("volcano_metronome.commands.tools", "build and locate the Kubernetes programs the tests and dev-cluster run"),
    "simulate": ("volcano_metronome.commands.simulate", "compare scheduling policies on a scenario in the simulator"),
    "scenarios": ("volcano_metronome.commands.scenarios", "list the built-in simulator scenarios"),
    "demo": ("volcano_metronome.commands.demo", "run every policy on a built-in scenario: table, JSON report and plots"),
    "dev-cluster": ("volcano_metronome.commands.devcluster", "start, stop or inspect a local API server with fake GPU nodes"),
    "controller": ("volcano_metronome.commands.controller", "run the queue controller: node sets and phase offsets for gangs"),
    "webhook": ("volcano_metronome.commands.webhook", "serve the mutating admission webhook over TLS (gunicorn)"),
    "certs": ("volcano_metronome.commands.certs", "make a CA and the webhook's serving certificate; print the caBundle"),
    "profile": ("volcano_metronome.commands.profile", "record a NIC byte-counter trace, or fit a profile to one"),
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every registered sub-command."""
    parser = argparse.ArgumentParser(prog="volcano-metronome", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"volcano-metronome {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sub)
        sub.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args._module.run(args))
    except MetronomeError as exc:
        print(f"volcano-metronome {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. piped into head: nothing left to say
        return 0
