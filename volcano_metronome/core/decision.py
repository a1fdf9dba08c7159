"""One gang, one decision: a node set and a phase offset, or the reason it does not fit.

Every candidate node set (``core.placement``) is scored at every offset of the gang's period, across
all the links it would load at once (``core.phasing``), so the offset is one number that works on
every shared link together. Choice, in order:

1. an offset at which the guarded pattern (windows widened by the policy's cushion and the profile's
   jitter) keeps every link within capacity in every slot: among those, the lowest peak utilisation,
   then fewer racks, then the better-ranked node set, then the offset that comes first counting
   from ``earliest`` (0 by default: the smaller offset; a caller that passes the current phase gets
   the offset whose first slot comes soonest, so a gang does not wait a period for its first burst);
2. otherwise, among offsets that take no more than ``overflow_tolerance`` of the traffic of any
   higher-priority gang on any link, the least cost: added overflow plus ``priority_weight`` times
   the bandwidth taken from higher-priority gangs; ties as above;
3. otherwise: no fit.

Lock on demand (``Policy.lock_on_demand``): aligning bursts to a slot costs a gang the padding up
to its snapped period, which buys nothing unless its bursts could collide with another gang's. A
link is *contended* when the peak rates of the gangs on it add up to more than its capacity; only
there can phases matter. A gang that shares no contended link is therefore *unlocked*: its offset is
provisional and its runtime runs free. The first gang whose placement makes one of its links
contended locks it (``Decision.locks``) at that provisional offset, which the new gang's offset was
chosen against; ``Snapshot.unlockable`` names locked gangs left with no contended link.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volcano_metronome.core import phasing
from volcano_metronome.core.grid import Pattern, dilate, lay_out
from volcano_metronome.core.model import Gang, Policy
from volcano_metronome.core.placement import Candidate, candidates
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.core.traffic import loaded_links

# Float noise allowance on the tolerance test (Mbps x slots).
_EPS = 1e-6


@dataclass(frozen=True)
class Decision:
    """Where and when a gang runs, and what we predict it costs the network."""

    uid: str
    nodes: tuple[str, ...]
    members: tuple[int, ...]
    offset_slots: int
    offset_ms: float
    period_ms: float  # the snapped period the offset refers to
    snapping_error: float
    links: tuple[str, ...]
    feasible: bool  # no slot over capacity on any link, guards included
    overflow_gbps_ms: float  # added overflow per gang period, summed over links
    peak_utilisation: float
    racks: int
    score: float  # the cost minimised (0 when feasible)
    locked: bool = True  # the gang shares a contended link, so its runtime must align bursts to the offset
    locks: tuple[str, ...] = ()  # unlocked gangs on its links that must now align to their offsets


@dataclass(frozen=True)
class NoFit:
    """A gang that cannot be placed now, and why."""

    uid: str
    reason: str


def _free_for(snapshot: Snapshot, gang: Gang) -> tuple[np.ndarray, int | None]:
    """Free GPUs per node as ``gang`` may use them (none outside ``gang.nodes``), and how many nodes it may use."""
    if gang.nodes is None:
        return snapshot.free_gpus, None
    index = snapshot.topology.node_index
    allowed = [index[n] for n in gang.nodes if n in index]
    free = np.zeros_like(snapshot.free_gpus)
    free[allowed] = snapshot.free_gpus[allowed]
    return free, len(allowed)


@dataclass(frozen=True)
class _Scored:
    candidate: Candidate
    offset: int
    lateness: int  # slots from the caller's earliest offset to this one
    feasible: bool
    cost: float
    overflow: int
    peak: float

    def key(self) -> tuple[bool, float, float, int, int, int]:
        return (not self.feasible, self.cost, self.peak, self.candidate.racks, self.candidate.rank, self.lateness)


def decide(snapshot: Snapshot, gang: Gang, policy: Policy, earliest: int = 0) -> Decision | NoFit:
    """The best node set and offset for ``gang`` given the snapshot, or why there is none.

    ``earliest`` (slots) breaks the last tie: the offset reached first counting from it wins.
    """
    pattern = lay_out(gang.profile, snapshot.grid)
    free, admitted = _free_for(snapshot, gang)
    found = candidates(snapshot.topology, free, snapshot.link_mean, gang, policy.max_candidates)
    if not found.primary:
        reason = found.reason
        if admitted is not None:
            reason += (f" (its pods' node selector, affinity and tolerations admit {admitted} of "
                       f"{len(free)} nodes)")
        return NoFit(gang.uid, reason)
    scored = [s for c in found.primary if (s := _score(snapshot, gang, pattern, c, policy, earliest)) is not None]
    if not any(s.feasible for s in scored):
        scored += [s for c in found.secondary if (s := _score(snapshot, gang, pattern, c, policy, earliest)) is not None]
    if not scored:
        return NoFit(gang.uid, (
            f"priority protection: every node set and offset would delay more than "
            f"{policy.overflow_tolerance:.0%} of a higher-priority gang's traffic on some link"))
    best = min(scored, key=_Scored.key)
    return _decision(snapshot, gang, pattern, best, policy)


@dataclass(frozen=True, eq=False)
class OffsetScores:
    """Every offset of one gang on one node set: guarded fit, cost, overflow, peak, tolerance."""

    fits: np.ndarray  # bool (P,)
    cost: np.ndarray  # float (P,)
    overflow: np.ndarray  # int (P,): Mbps x slots added over the snapshot's span
    peak: np.ndarray  # float (P,)
    tolerated: np.ndarray  # bool (P,): no higher-priority gang loses more than the tolerance


def score_offsets(snapshot: Snapshot, gang: Gang, pattern: Pattern, nodes: np.ndarray,
                  policy: Policy) -> OffsetScores:
    """Score ``gang`` at every offset on ``nodes`` against the snapshot's current loads."""
    period = pattern.slots
    links, mult = loaded_links(snapshot.topology, nodes)
    if not len(links):
        zeros = np.zeros(period)
        return OffsetScores(np.ones(period, bool), zeros, zeros.astype(np.int64), zeros, np.ones(period, bool))
    base = phasing.fold(snapshot.rows(links, period), period)
    cap = snapshot.topology.capacity_mbps[links]
    peak_load = base.max(axis=1)
    fits = phasing.fits(peak_load, cap, mult, dilate(pattern.rates, pattern.guard_slots + policy.cushion_slots))
    peak = phasing.peak_utilisation(peak_load, cap, mult, pattern.rates)
    if fits.any():
        # A guarded fit adds no overflow anywhere, so cost is moot for the offsets that matter.
        zeros = np.zeros(period)
        return OffsetScores(fits, zeros, zeros.astype(np.int64), peak, np.ones(period, bool))
    overflow = phasing.added_overflow(base, cap, mult, pattern.rates).sum(axis=0)
    cost = overflow.astype(float)
    tolerated = np.ones(period, bool)
    higher = snapshot.higher_rows(links, gang.priority, period)
    if higher is not None:
        lost = phasing.damage(base, phasing.fold(higher, period), cap, mult, pattern.rates)
        volume = higher.sum(axis=1).astype(float)
        tolerated = (lost <= policy.overflow_tolerance * volume[:, None] + _EPS).all(axis=0)
        cost = cost + policy.priority_weight * lost.sum(axis=0)
    return OffsetScores(fits, cost, overflow, peak, tolerated)


def _score(snapshot: Snapshot, gang: Gang, pattern: Pattern, cand: Candidate, policy: Policy,
           earliest: int) -> _Scored | None:
    scores = score_offsets(snapshot, gang, pattern, cand.nodes, policy)
    offsets = np.flatnonzero(scores.tolerated | scores.fits)
    if not len(offsets):
        return None
    lateness = (offsets - earliest) % pattern.slots
    keys = (lateness, scores.peak[offsets], scores.cost[offsets], ~scores.fits[offsets])
    pick = int(offsets[np.lexsort(keys)[0]])
    return _Scored(cand, pick, (pick - earliest) % pattern.slots, bool(scores.fits[pick]), float(scores.cost[pick]),
                   int(scores.overflow[pick]),
                   float(scores.peak[pick]))


def _decision(snapshot: Snapshot, gang: Gang, pattern: Pattern, best: _Scored, policy: Policy) -> Decision:
    topo, grid = snapshot.topology, snapshot.grid
    links, mult = loaded_links(topo, best.candidate.nodes)
    neighbours = snapshot.neighbours(snapshot.contended(links, mult * int(pattern.rates.max())))
    span = np.lcm(snapshot.hyperperiod, pattern.slots)
    periods_in_span = int(span // pattern.slots)
    return Decision(
        uid=gang.uid,
        nodes=tuple(topo.nodes[i] for i in best.candidate.nodes),
        members=tuple(int(m) for m in best.candidate.members),
        offset_slots=best.offset,
        offset_ms=best.offset * grid.slot_ms,
        period_ms=pattern.period.ms,
        snapping_error=pattern.period.error,
        links=tuple(topo.links[i].name for i in links),
        feasible=best.feasible,
        overflow_gbps_ms=best.overflow * grid.slot_ms / 1000.0 / periods_in_span,
        peak_utilisation=best.peak,
        racks=best.candidate.racks,
        score=best.cost,
        locked=bool(neighbours) or not policy.lock_on_demand,
        locks=tuple(sorted(uid for uid in neighbours if not snapshot.placed[uid].locked)),
    )
