"""Re-optimisation: move the offsets of placed gangs to remove overflow, highest priority first.

Only locked gangs move: an unlocked one runs free, so its offset is provisional and a move would
change nothing it does (nor lock it: locks are ``core.decision``'s, where they pay).

Coordinate descent: each gang in turn is lifted out of the snapshot and put back at its best offset
given all the others (same scoring as a new decision, node set unchanged). A move is kept only if
it turns a guarded misfit into a fit or lowers the cost, so the total only goes down and the search
ends. Because each step scores one offset against every link of the gang at once, it solves gangs
that share links in a cycle (A-B on one link, B-C on another, C-A on a third), which per-link
rotations propagated along a tree cannot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volcano_metronome.core.decision import score_offsets
from volcano_metronome.core.model import Policy
from volcano_metronome.core.snapshot import Snapshot

_EPS = 1e-9


@dataclass(frozen=True)
class Move:
    """A new offset for a running gang."""

    uid: str
    old_offset_slots: int
    new_offset_slots: int
    offset_ms: float


@dataclass(frozen=True)
class Reoptimisation:
    """What a re-optimisation changed and the network's overflow before and after (Gbps x ms per hyperperiod)."""

    moves: tuple[Move, ...]
    overflow_before_gbps_ms: float
    overflow_after_gbps_ms: float
    passes: int


def total_overflow(snapshot: Snapshot) -> int:
    """Mbps x slots above capacity, summed over every link and slot of the hyperperiod."""
    cap = snapshot.topology.capacity_mbps[:, None]
    return int(np.maximum(snapshot.load.astype(np.int64) - cap, 0).sum())


def reoptimise(snapshot: Snapshot, policy: Policy, max_moves: int = 16, max_passes: int = 4,
               frozen: frozenset[str] = frozenset()) -> Reoptimisation:
    """Improve the offsets of the snapshot's gangs in place; at most ``max_moves`` gangs change offset."""
    before = total_overflow(snapshot) * snapshot.grid.slot_ms / 1000.0
    # An unlocked gang runs free: its offset is provisional, and moving it would change nothing it does.
    order = sorted((p for p in snapshot.placed.values() if p.gang.uid not in frozen and len(p.links) and p.locked),
                   key=lambda p: (-p.gang.priority, p.gang.created_s, p.gang.uid))
    original = {p.gang.uid: p.offset for p in order}
    passes = 0
    for passes in range(1, max_passes + 1):
        improved = False
        for uid in (p.gang.uid for p in order):
            moved = {u for u, o in original.items() if snapshot.placed[u].offset != o}
            if len(moved) >= max_moves and uid not in moved:
                continue
            placed = snapshot.forget(uid)
            scores = score_offsets(snapshot, placed.gang, placed.pattern, placed.nodes, policy, placed.members)
            current = placed.offset
            best = int(np.lexsort((np.arange(len(scores.cost)), scores.cost, ~scores.fits))[0])
            better = (scores.fits[best] and not scores.fits[current]) or (
                scores.fits[best] == scores.fits[current] and scores.cost[best] < scores.cost[current] - _EPS)
            offset = best if better else current
            snapshot.assume(placed.gang, placed.nodes, placed.members, offset, placed.pattern, placed.holds_gpus,
                            placed.locked)
            improved |= bool(better)
        if not improved:
            break
    after = total_overflow(snapshot) * snapshot.grid.slot_ms / 1000.0
    moves = tuple(Move(uid, old, snapshot.placed[uid].offset, snapshot.placed[uid].offset * snapshot.grid.slot_ms)
                  for uid, old in original.items() if snapshot.placed[uid].offset != old)
    return Reoptimisation(moves, before, after, passes)
