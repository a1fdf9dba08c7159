"""``python -m volcano_metronome.bench decide --nodes N --running R --gang G --json``.

Builds a leaf-spine cluster of N nodes (8 per rack, 8 GPUs each, 100 Gbps NICs, rack uplinks 2:1
oversubscribed) with R running gangs of mixed catalog profiles at random offsets, then times
``core.decision.decide`` for a new gang of G whole nodes, repeated, through the real code path.
The process's first decision (cold code paths) is timed apart (``first_ms``) and not in the percentiles:
a running controller pays it once.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time

import numpy as np

from volcano_metronome.catalog import builtin
from volcano_metronome.core.decision import Decision, decide
from volcano_metronome.core.grid import SlotGrid, lay_out
from volcano_metronome.core.model import Gang, Policy
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.core.topology import leaf_spine

NODES_PER_RACK = 8
GPUS_PER_NODE = 8
NIC_GBPS = 100.0


def populate(snapshot: Snapshot, running: int, reserve: int, rng: np.random.Generator) -> int:
    """Place up to ``running`` random gangs (mostly inside one rack, a tenth across two); returns how many.

    ``reserve`` whole nodes, scattered at random, are kept free so that the new gang can fit (across
    racks, as in a fragmented cluster).
    """
    catalog = builtin()
    profiles = [catalog.get(name).profile(NIC_GBPS) for name in catalog.names()]
    topo = snapshot.topology
    racks = len(topo.nodes) // NODES_PER_RACK
    kept = np.zeros(len(topo.nodes), dtype=bool)
    kept[rng.choice(len(topo.nodes), size=min(reserve, len(topo.nodes)), replace=False)] = True
    placed = 0
    for i in range(running * 3):
        if placed == running:
            break
        members = int(rng.choice([2, 2, 4, 4, 8]))
        gpus = int(rng.choice([1, 1, 2]))
        home = int(rng.integers(racks))
        pool = np.arange(home * NODES_PER_RACK, (home + 1) * NODES_PER_RACK)
        if racks > 1 and rng.random() < 0.1:
            other = (home + 1 + int(rng.integers(racks - 1))) % racks
            pool = np.concatenate([pool, np.arange(other * NODES_PER_RACK, (other + 1) * NODES_PER_RACK)])
        pool = pool[(snapshot.free_gpus[pool] >= gpus) & ~kept[pool]]
        if len(pool) < min(members, 2):
            continue
        nodes = rng.choice(pool, size=min(members, len(pool)), replace=False)
        per_node = np.full(len(nodes), members // len(nodes))
        per_node[: members - int(per_node.sum())] += 1
        if (snapshot.free_gpus[nodes] < per_node * gpus).any():
            continue
        profile = profiles[int(rng.integers(len(profiles)))]
        gang = Gang(f"run-{i}", f"run-{i}", members, gpus, profile, int(rng.integers(3)), float(i))
        offset = int(rng.integers(lay_out(profile, snapshot.grid).slots))
        snapshot.assume(gang, nodes, per_node, offset)
        placed += 1
    return placed


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON line."""
    parser = argparse.ArgumentParser(prog="python -m volcano_metronome.bench decide", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--running", type=int, default=1000)
    parser.add_argument("--gang", type=int, default=16, help="members of the new gang, one whole node each")
    parser.add_argument("--repeat", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    racks = max(1, args.nodes // NODES_PER_RACK)
    topo = leaf_spine(racks, NODES_PER_RACK, NIC_GBPS, NIC_GBPS * NODES_PER_RACK / 2)
    grid = SlotGrid()
    started = time.perf_counter()
    snapshot = Snapshot(topo, grid, np.full(len(topo.nodes), GPUS_PER_NODE))
    running = populate(snapshot, args.running, 2 * args.gang, rng)
    build_s = time.perf_counter() - started

    catalog = builtin()
    policy = Policy()
    warm = Gang("warm-up", "warm-up", args.gang, GPUS_PER_NODE, catalog.get(catalog.names()[0]).profile(NIC_GBPS),
                1, 1e9)
    t0 = time.perf_counter()
    decide(snapshot, warm, policy)
    first_ms = (time.perf_counter() - t0) * 1000.0
    times: list[float] = []
    feasible = 0
    for r in range(args.repeat):
        profile = catalog.get(catalog.names()[r % len(catalog.names())]).profile(NIC_GBPS)
        gang = Gang(f"new-{r}", f"new-{r}", args.gang, GPUS_PER_NODE, profile, 1, 1e9)
        t0 = time.perf_counter()
        result = decide(snapshot, gang, policy)
        times.append((time.perf_counter() - t0) * 1000.0)
        feasible += isinstance(result, Decision) and result.feasible
    times.sort()
    doc = {
        "nodes": len(topo.nodes),
        "running": running,
        "gang": args.gang,
        "p50_ms": round(statistics.median(times), 3),
        "p99_ms": round(times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))], 3),
        "first_ms": round(first_ms, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "repeat": args.repeat,
        "hyperperiod_slots": snapshot.hyperperiod,
        "links": len(topo.links),
        "snapshot_build_s": round(build_s, 2),
        "feasible_decisions": feasible,
    }
    print(json.dumps(doc))
    if not args.json:
        print(f"decision p50 {doc['p50_ms']} ms, p99 {doc['p99_ms']} ms on {doc['nodes']} nodes with "
              f"{running} running gangs", file=sys.stderr)
    return 0
