"""Dispatch ``python -m volcano_metronome.bench NAME ...`` to ``volcano_metronome.bench.NAME.main``."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "decide": "one scheduling decision on a large leaf-spine cluster",
    "cycle": "one controller cycle (events, snapshot, decisions, plan) on a large cluster",
    "webhook": "admission latency and throughput of the real TLS server",
    "controller": "gangs ungated per second against a real kube-apiserver",
    "pipeline": "submission to bound, Volcano or Kueue alone and with metronome, on the local stack",
    "regimes": "a grid of generated scenarios: where metronome's offsets pay, and do-no-harm on each",
    "fuzz": "random generated scenarios: crashes, and do-no-harm on each",
    "floor": "a baseline against itself with one job one iteration longer: the noise of one seed",
}


def main(argv: list[str]) -> int:
    """Run the benchmark named by ``argv[0]``."""
    if not argv or argv[0] not in BENCHMARKS:
        lines = "\n".join(f"  {name:<11} {text}" for name, text in BENCHMARKS.items())
        print(f"usage: python -m volcano_metronome.bench NAME [ARGS]\n\n{lines}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"volcano_metronome.bench.{argv[0]}")
    return int(module.main(argv[1:]))


sys.exit(main(sys.argv[1:]))
