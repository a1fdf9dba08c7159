"""``volcano-metronome tools build|path|list|upstream``: the programs built from pinned Go modules, and the
upstream test data of the pinned versions."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Sub-commands ``build``, ``path`` and ``list``."""
    actions = parser.add_subparsers(dest="tools_action", metavar="ACTION", required=True)
    build = actions.add_parser(
        "build",
        help="build programs into the cache unless already there (default: what CI needs)",
        description="Build programs into the binary cache, reusing cached ones. Without NAME: the "
        "integration tier, plus the e2e tier when METRONOME_E2E=1.",
    )
    build.add_argument("names", nargs="*", metavar="NAME", help="programs to build (see `tools list`)")
    build.add_argument("--all", action="store_true", help="build every known program")
    build.add_argument("--force", action="store_true", help="rebuild even when cached")
    build.add_argument("--json", action="store_true", help="print one JSON object per program")
    path = actions.add_parser("path", help="print the path of a built program", description="Print the path of a built program.")
    path.add_argument("name", metavar="NAME")
    listing = actions.add_parser("list", help="list known programs, their versions and whether they are built")
    listing.add_argument("--json", action="store_true", help="print one JSON object per program")
    actions.add_parser(
        "upstream",
        help="gather the upstream CRDs and examples of the pinned versions into the cache; print the directory",
        description="Gather the upstream CRDs and example manifests the tests use, from the pinned Volcano, Kueue, "
        "scheduler-plugins, JobSet, training-operator, MPI-operator and Trainer modules (parts no module provides: from $METRONOME_UPSTREAM_DIR or "
        "../shared/upstream), into the user's cache; print the directory. SOURCES.json there says where each "
        "file came from.",
    )


def run(args: argparse.Namespace) -> int:
    """Run the chosen action; build failures raise MetronomeError (exit 2 via the CLI)."""
    from volcano_metronome.devtools import binaries

    if args.tools_action == "path":
        print(binaries.binary_path(args.name))
        return 0
    if args.tools_action == "upstream":
        from volcano_metronome.devtools import upstream

        print(upstream.gather(progress=lambda message: print(message, file=sys.stderr, flush=True)))
        return 0
    if args.tools_action == "list":
        for row in binaries.describe():
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                state = "built" if row["built"] else "not built"
                print(f"{row['name']:<28} {row['version']:<10} {row['tier']:<12} {state:<10} {row['path']}")
        return 0
    names = list(binaries.TOOLS) if args.all else (args.names or list(binaries.default_names()))
    for name in names:
        binaries.tool(name)  # a typo fails before minutes of building the others

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    # One program at a time so that each line is printed as soon as that program is ready.
    for name in dict.fromkeys(names):
        (result,) = binaries.build([name], force=args.force, progress=progress)
        if args.json:
            print(json.dumps(result.to_json()), flush=True)
        else:
            how = "cached" if result.cached else f"built in {result.seconds:.1f}s"
            print(f"{result.name} {result.version}: {how}: {result.path}", flush=True)
    return 0
