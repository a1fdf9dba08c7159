"""``volcano-topology``: Volcano's network-topology-aware gang scheduling with binpack, no offsets.

The strongest production baseline: a gang goes to the lowest network tier that can hold it (Volcano
HyperNodes, Kueue Topology-Aware Scheduling): one node if it fits there, else one rack, else the
fewest racks (soft mode: it spans rather than waits). Among fitting nodes and racks the fullest wins
(binpack, to keep large holes for large gangs), and inside the chosen rack pods are bin-packed one
by one (most allocated node first). The scenario's queue order (``common.queue_order``); a gang that
does not fit does not block others.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.policies import Context, Placement, SimPolicy
from volcano_metronome.sim.policies.common import (Gpus, binpack_order, fill, placeable, queue_order, racks_of, room,
                                                   single_node)


def lowest_tier(free: np.ndarray, rack: np.ndarray, job: JobSpec,
                usable: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Binpack candidates for ``job`` at the lowest tier that holds it, best first.

    One candidate for a single node; one per fitting rack (fullest rack first); else one spanning the
    fewest racks. ``usable`` masks nodes out (the exclusive policy's bandwidth filter).
    """
    can = room(free, job)
    if usable is not None:
        can = np.where(usable, can, 0)
    if can.sum() < job.workers:
        return []
    node = single_node(can, free, job.workers)
    if node is not None:
        return [(np.array([node]), np.array([job.workers]))]
    return per_rack(free, rack, job, can) or [spanning(free, rack, job, can)]


def per_rack(free: np.ndarray, rack: np.ndarray, job: JobSpec, can: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """One binpack candidate per rack that holds the gang, fullest rack first."""
    rack_room = np.bincount(rack, weights=can, minlength=int(rack.max()) + 1)
    rack_free = np.bincount(rack, weights=np.where(can > 0, free, 0), minlength=len(rack_room))
    fitting = np.flatnonzero(rack_room >= job.workers)
    out = []
    for r in fitting[np.lexsort((fitting, rack_free[fitting]))]:
        inside = np.flatnonzero((rack == r) & (can > 0))
        out.append(fill(binpack_order(inside, free), can, job.workers))
    return out


def spanning(free: np.ndarray, rack: np.ndarray, job: JobSpec, can: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Across the fewest racks: the roomiest racks first, bin-packed inside each (needs enough room)."""
    rack_room = np.bincount(rack, weights=can, minlength=int(rack.max()) + 1)
    rank = np.empty(len(rack_room), dtype=np.int64)
    rank[np.lexsort((np.arange(len(rack_room)), -rack_room))] = np.arange(len(rack_room))
    nodes = np.flatnonzero(can > 0)
    order = nodes[np.lexsort((nodes, free[nodes], rank[rack[nodes]]))]
    return fill(order, can, job.workers)


class VolcanoTopology(SimPolicy):
    """Lowest tier that fits, binpack."""

    name = "volcano-topology"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.gpus = Gpus(len(ctx.topology.nodes), ctx.scenario.topology.gpus_per_node)
        self.rack = racks_of(ctx.topology)

    def schedule(self, now: float, pending: Sequence[JobSpec]) -> list[Placement]:
        """Place every pending gang that fits, in the scenario's queue order."""
        out = []
        for job in placeable(queue_order(pending, self.ctx.scenario.policy, now), self.gpus.free):
            started = time.perf_counter()
            found = lowest_tier(self.gpus.free, self.rack, job)
            if found:  # as every policy: the decisions that placed a gang are timed
                self.stats.decision_ms.append((time.perf_counter() - started) * 1000.0)
                nodes, members = found[0]
                self.gpus.take(job.name, nodes, members * job.gpus_per_worker)
                out.append(Placement(job.name, nodes, members))
        return out

    def release(self, now: float, uid: str) -> None:
        """Give the job's GPUs back."""
        self.gpus.give_back(uid)


POLICY = VolcanoTopology
