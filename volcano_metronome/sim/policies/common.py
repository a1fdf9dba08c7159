"""Pieces the policies share: the queue order, GPU bookkeeping and the classic node-filling rules."""

from __future__ import annotations

import math
from typing import Iterable, Iterator, Sequence

import numpy as np

from volcano_metronome.core.grid import SlotGrid
from volcano_metronome.core.model import Policy
from volcano_metronome.core.ordering import sort_key
from volcano_metronome.core.topology import Topology
from volcano_metronome.scenario import JobSpec


def queue_order(pending: Sequence[JobSpec], policy: Policy, now_s: float) -> list[JobSpec]:
    """``pending`` in the scenario's queue order, by ``core.ordering.order``'s rule (as ``metronome`` orders).

    The order of the queue is the host scheduler's (Volcano's priority or FIFO plugins, Kueue's
    StrictFIFO / BestEffortFIFO with priorities; CASSINI sits on top of one): every policy takes it
    from the scenario's ``policy`` (FIFO, StrictPriority, or PriorityWithAging with its aging), so
    the policies differ in placement and timing only.
    """
    key = sort_key(policy, now_s)
    return sorted(pending, key=lambda job: key(job.gang()))


def placeable(jobs: Iterable[JobSpec], free: np.ndarray) -> Iterator[JobSpec]:
    """``jobs`` in turn, less those ``free`` (read as each comes up) has no room for.

    Free GPUs only shrink within a cycle, so once a gang of ``w`` workers of ``g`` GPUs found no room,
    no gang of ``g`` GPUs per worker and at least ``w`` workers will: on a full cluster a long queue
    costs a cycle a pass over it, not a decision per queued gang. Every policy checks room first, so
    what it decides is unchanged.
    """
    short: dict[int, int] = {}  # per GPUs per worker: the fewest workers found without room this cycle
    for job in jobs:
        per = job.gpus_per_worker
        if per:
            if job.workers >= short.get(per, job.workers + 1):
                continue
            if job.workers > int((np.maximum(free, 0) // per).sum()):
                short[per] = job.workers
                continue
        yield job


def first_slot(now_s: float, grid: SlotGrid, period_slots: int | None = None) -> int:
    """The offset (slots, epoch 0) at which a gang placed at ``now_s`` starts without waiting (the absolute
    slot, without ``period_slots``: the core takes it modulo whichever period it gives the gang).

    The runtime helper sends window ``w`` at ``offset + start_w + k P``, and the engine starts a
    placed gang's compute at once (no start-up delay), so its first burst is ready at
    ``now + start_0``: the first window's start cancels out, and the offset that needs no padding is
    ``now`` itself, rounded up to the grid (rounding down would miss the slot by a sliver and wait a
    whole period), modulo the gang's snapped period.
    """
    slot = math.ceil(now_s * 1000.0 / grid.slot_ms - 1e-9)
    return slot if period_slots is None else slot % period_slots


def room(free: np.ndarray, job: JobSpec) -> np.ndarray:
    """Members of ``job`` each node can take."""
    if job.gpus_per_worker == 0:
        return np.full(len(free), job.workers, dtype=np.int64)
    return np.asarray(np.maximum(free, 0) // job.gpus_per_worker)


def racks_of(topology: Topology) -> np.ndarray:
    """Rack (tier-1 domain) of every node; one rack when the topology has none."""
    return topology.domain_of(1) if topology.tiers > 1 else np.zeros(len(topology.nodes), dtype=np.int64)


def fill(order: np.ndarray, room: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Take nodes in ``order`` until they hold ``size`` members: ``(nodes, members)``, sorted by node."""
    order = order[room[order] > 0]
    cum = np.cumsum(room[order])
    count = int(np.searchsorted(cum, size)) + 1
    nodes = order[:count]
    members = room[nodes].copy()
    members[-1] -= int(cum[count - 1]) - size
    sort = np.argsort(nodes)
    return nodes[sort], members[sort]


def binpack_order(nodes: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Volcano's binpack, pod by pod: the most allocated node with room first (index breaks ties).

    Placing a member makes its node fuller still, so pod-by-pod binpack fills nodes in this order.
    """
    return nodes[np.lexsort((nodes, free[nodes]))]


def single_node(room: np.ndarray, free: np.ndarray, size: int) -> int | None:
    """The fullest node that holds the whole gang, if any."""
    fits = np.flatnonzero(room >= size)
    if not len(fits):
        return None
    return int(fits[np.lexsort((fits, free[fits]))[0]])


class Gpus:
    """Free GPUs per node and what each placed job holds."""

    def __init__(self, nodes: int, gpus_per_node: int) -> None:
        self.free = np.full(nodes, gpus_per_node, dtype=np.int64)
        self.held: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def take(self, uid: str, nodes: np.ndarray, gpus: np.ndarray) -> None:
        """``uid`` takes ``gpus[i]`` GPUs on ``nodes[i]``."""
        self.free[nodes] -= gpus
        self.held[uid] = (nodes, gpus)

    def give_back(self, uid: str) -> None:
        """``uid`` ended."""
        nodes, gpus = self.held.pop(uid)
        self.free[nodes] += gpus
