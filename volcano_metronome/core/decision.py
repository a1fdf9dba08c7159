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
3. otherwise, with lock on demand, the least cost among all offsets, and the gang runs free;
   without it: no fit (or free, where the gang would not be locked: see below).

Priority protection (2.) governs the phases we enforce. With lock on demand a gang is locked only
at an offset that adds no overflow, which takes nothing from any gang, so a locked gang always meets
the tolerance; a gang that overflows runs free, at a phase relative to its neighbours that nobody
chooses, so judging its damage at one offset is meaningless and holding it back would be admission
by bandwidth, which Volcano's placement (the baseline) does not do either. Judged by the expected
damage over all offsets instead, it would be held back more often than now (the mean is never below
the least), waiting a whole job to spare another gang a share of its communication. Without lock on
demand every gang is locked (but those of the next paragraph), so the tolerance decides admission (``NoFit``
when no offset meets it).
The one wait with lock on demand is bounded and for heavy collisions only: ``core.holding``, applied by
the caller to the decision returned here.

Without lock on demand no gang is locked at a period more than ``OVERFILL`` longer than its own
(``overpadded``): a short iteration on long slots (6 ms on 20 ms slots is held to 20 ms) would be padded by
more than any lock the weighing below ever takes. Such a gang runs free, is not refused by the tolerance (its
phase is not ours), and no other gang's lock takes it along (round 39 of docs/simulator-rounds.md). With lock
on demand the weighing decides, for it as for every gang a lock takes along.

Lock on demand (``Policy.lock_on_demand``): aligning bursts to a slot costs a gang the padding up
to its snapped period, which buys nothing unless its bursts could collide with another gang's. A
link is *contended* when the peak rates of the gangs on it add up to more than its capacity; only
there can phases matter. A gang is *locked* (its runtime aligns to the offset) only where that pays:

* its chosen offset adds no overflow on any link (a lock that still overflows pushes the overflow
  onto gangs that were placed cleanly, and their late bursts cascade; a guarded fit is preferred, but
  the guards are a margin, not a condition), every unlocked gang it would lock (its unlocked
  neighbours on contended links, and theirs in turn: a plan holds only if every gang that can
  collide with it aligns) sits at an offset that overflows nowhere, and
* the collisions that running free would cost (``free_delay``: the overflow the gang adds at a
  random phase, averaged over every offset, drained at the worst link's capacity, counted for both
  sides of each collision and as often as the gang iterates free) exceed the padding the lock costs
  (snapping error plus half the jitter per iteration, for the gang and for every neighbour it locks).

Where the gang's own collisions do not pay for the lock, the collisions the gangs of the closure
would spare one another are added (each one's overflow at a random phase against the others,
``_free_ms``); where the closure's provisional offsets leave the gang no offset without overflow,
those offsets are re-optimised among themselves first (they run free, so they may move before they
lock: ``Decision.relocations``), and the lock is taken only if none of them then overflows. Where that
finds nothing, or every neighbour is locked already, the locked neighbours on its contended links are
re-arranged with it, as CASSINI re-arranges the jobs on a link when one arrives: each moved gang
re-anchors once (at most a period, against a collision every iteration of the newcomer's).
Otherwise it runs free, and so do its neighbours. Beside gangs whose periods do not divide its own
on a contended link, no offset avoids collisions at the gang's grid snap, so each node set is also
scored at its local snap (``_local``: the shortest grid period commensurate with theirs), taken only
where the lock it then allows pays. Where every gang on its contended links has the gang's own exact
period (identical jobs: ``SlotGrid.exact``, no snapping beyond the slot), the gang is locked there
instead, or up to ``OVERFILL`` longer where their bursts together overfill it, the free neighbours it locks
re-laid with it (``_exact``, ``Decision.periods``), and likewise where their exact periods, each up to
``STRETCH`` longer, divide one another (185 and 380 ms locked at 190 and 380), whenever that costs less
per unit of time than the grid's choice and the hyperperiod stays within the cap. Where every gang the lock
takes along is the same job, its cost is net of the collisions it spares them (``_exact_at``): they
collide whether or not the newcomer runs free, so the padding of a chain of identical gangs that take turns
is weighed against the chain's collisions, not the newcomer's alone. Beside such periods a
grid snap that would take the hyperperiod past the cap gives way to the shortest period that keeps it
(``SlotGrid.fitting``). With lock on demand, candidate node sets are ranked by that expected cost
first (padding where locked, collisions where free, nothing where no link is contended), then by
locality and their rank in ``core.placement`` (binpack first, as Volcano's topology plugin would
place the gang). ``Snapshot.unlockable`` names locked gangs left with no contended link.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

from volcano_metronome.core import phasing
from volcano_metronome.core.classes import classify
from volcano_metronome.core.grid import Pattern, SnappedPeriod, dilate, lay_out
from volcano_metronome.core.model import Gang, Policy
from volcano_metronome.core.placement import Candidate, Candidates, candidates
from volcano_metronome.core.profile import Profile
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.core.traffic import loaded_links, scaled

# Float noise allowance on the tolerance test (Mbps x slots).
_EPS = 1e-6
#: Most unlocked gangs one decision may lock (the closure of its contended neighbours).
MAX_LOCKS = 64
#: How much longer than its exact period a gang may be held so that its period and its neighbours' divide one
#: another (``_exact``; the lock must still pay for the padding).
STRETCH = 0.1
#: The same where every gang on its contended links is an identical job (their exact period): how long bursts that
#: overfill it may be held apart. Two identical bursts at a link's full rate are held back by ``core.holding`` from
#: 71 % of the period (collisions of ``2 L^2 / P^2`` = 1 x the time), where side by side they need 1.42 periods.
OVERFILL = 0.5


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
    locked: bool = True  # the lock pays (see the module docstring): its runtime must align bursts to the offset
    locks: tuple[str, ...] = ()  # unlocked gangs on its links that must now align to their offsets
    expected_ms: float = 0.0  # predicted cost per hyperperiod: lock padding when locked, else collisions
    free_delay_ms: float = 0.0  # what running free would cost in collisions (per hyperperiod)
    padding_ms: float = 0.0  # what locking would cost in padding (per hyperperiod)
    # New offsets (slots) of the gangs the lock moves: some of ``locks``, and locked neighbours re-arranged with it.
    relocations: tuple[tuple[str, int], ...] = ()
    # New periods (ms) of gangs of ``locks`` that the lock re-lays at the period they share with this gang
    # (``_exact``); their offsets (``relocations`` where moved, else their provisional ones) refer to it.
    periods: tuple[tuple[str, float], ...] = ()
    # The profile it runs with on these nodes where a link is slower than its bursts (``core.bottleneck``): its
    # period and offset refer to it. None: its own.
    profile: Profile | None = None
    traffic_class: int | None = None  # the fabric's priority class its bursts use (``core.classes``); None: none given


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
    lock: "_Lock"
    pattern: Pattern
    scale: float = 1.0  # the lock's costs are per lcm(hyperperiod, period): this brings them to the grid snap's span
    local: bool = False  # the pattern is a local snap (``_local``), longer than the profile's grid snap

    def key(self) -> tuple[bool, float, float, int, int, int]:
        return (not self.feasible, self.cost, self.peak, self.candidate.racks, self.candidate.rank, self.lateness)

    def expected_key(self) -> tuple[float, bool, int, int, int]:
        return (round(self.lock.expected_ms * self.scale, 6), self.local, self.candidate.racks, self.candidate.rank,
                self.lateness)


@dataclass(frozen=True)
class _Lock:
    """Whether placing a gang here locks it, which unlocked neighbours it locks, and what each way costs (ms)."""

    locked: bool
    locks: tuple[str, ...]
    free_delay_ms: float
    padding_ms: float
    closure: tuple[str, ...] = ()  # the unlocked gangs a lock would take along, locked or not
    no_overflow: bool = True

    @property
    def expected_ms(self) -> float:
        return self.padding_ms if self.locked else self.free_delay_ms


def decide(snapshot: Snapshot, gang: Gang, policy: Policy, earliest: int = 0,
           keep_untouched: bool = True) -> Decision | NoFit:
    """The best node set and offset for ``gang`` given the snapshot, or why there is none.

    ``earliest`` (slots after the epoch: the current time, in any form congruent modulo the gang's period;
    the absolute slot is right whichever period, grid, local or exact, the gang gets) breaks the last tie:
    the offset reached first counting from it wins.

    Node sets on which the gang runs throttled by a slow link (``core.bottleneck``) are decided apart, with
    the profile it runs with there; the throttled one is taken only where its expected cost plus the time
    the throttle adds to every iteration is below the best unthrottled one's.

    ``keep_untouched`` (the default): a domain no gang uses is a candidate only where Volcano's binpack would
    open one too (``core.placement``); False offers them as any other (``core.holding``, before holding a gang).
    """
    free, admitted = _free_for(snapshot, gang)
    found = candidates(snapshot.topology, free, snapshot.link_mean, gang, policy.max_candidates,
                       secondary=not policy.lock_on_demand, busy=snapshot.gangs_on > 0 if keep_untouched else None)
    if not found.primary:
        reason = found.reason
        if admitted is not None:
            reason += (f" (its pods' node selector, affinity and tolerations admit {admitted} of "
                       f"{len(free)} nodes)")
        return NoFit(gang.uid, reason)
    groups: dict[Profile, list[Candidate]] = {}
    for c in found.primary:
        groups.setdefault(snapshot.as_run(gang, c.nodes, c.members).profile, []).append(c)
    best: tuple[float, Decision] | None = None
    for profile, primary in sorted(groups.items(), key=lambda item: item[0].period_ms):
        result = _decide_as(snapshot, dataclasses.replace(gang, profile=profile), policy, earliest,
                            dataclasses.replace(found, primary=tuple(primary)), free, declared=gang)
        if isinstance(result, NoFit):
            continue
        if profile != gang.profile:
            result = dataclasses.replace(result, profile=profile)
        rank = cost_per_slot(snapshot, result) + _throttle_per_slot(snapshot, gang.profile, result)
        if best is None or rank < best[0] - 1e-12:
            best = (rank, result)
    # None fits as it would run: every node set planned with the declared profile, as before throttling was modelled.
    result = best[1] if best is not None else _decide_as(snapshot, gang, policy, earliest, found, free)
    if isinstance(result, NoFit) or policy.traffic_classes < 2:
        return result
    return classify(snapshot, result, policy.traffic_classes)


def _throttle_per_slot(snapshot: Snapshot, declared: Profile, d: Decision) -> float:
    """What a slow link adds to every iteration (ms), per slot of time, as ``cost_per_slot`` counts costs."""
    if d.profile is None:
        return 0.0
    return (d.profile.period_ms - declared.period_ms) / (d.period_ms / snapshot.grid.slot_ms)


def _decide_as(snapshot: Snapshot, gang: Gang, policy: Policy, earliest: int, found: Candidates,
               free: np.ndarray, declared: Gang | None = None) -> Decision | NoFit:
    """``decide`` among the candidates of ``found`` with ``gang``'s profile as given: the one ``declared`` runs
    with on the primary ones (the secondary ones kept only where it runs so too); every one when None."""
    period = snapshot.grid.snap(gang.profile.period_ms, "profile.period_ms")
    if math.lcm(snapshot.hyperperiod, period.slots) > snapshot.grid.max_hyperperiod_slots:
        # Exact periods present (off the grid): the grid snap would take the hyperperiod past the cap.
        fitting = snapshot.grid.fitting(gang.profile.period_ms, snapshot.hyperperiod)
        if fitting is None:
            return NoFit(gang.uid, (
                f"no period from {gang.profile.period_ms:g} ms keeps the hyperperiod within the cap of "
                f"{snapshot.grid.max_hyperperiod_ms:g} ms beside the exact periods of the running gangs "
                f"({snapshot.hyperperiod} slots now); it fits once they leave"))
        period = fitting
    pattern = lay_out(gang.profile, snapshot.grid, period)
    scored = [s for c in found.primary if (s := _score(snapshot, gang, pattern, c, policy, earliest)) is not None]
    # Crossing more domains than needed is a worse placement than any contention it avoids (Volcano's
    # topology plugin would not do it either), so with lock on demand spanning candidates are a last resort.
    if not scored if policy.lock_on_demand else not any(s.feasible for s in scored):
        secondary = found.secondary
        if policy.lock_on_demand:  # built only now: most decisions never need them
            secondary = candidates(snapshot.topology, free, snapshot.link_mean, gang, policy.max_candidates,
                                   busy=snapshot.gangs_on > 0).secondary
        if declared is not None:  # only the node sets on which the declared gang runs with this group's profile
            secondary = tuple(c for c in secondary
                              if snapshot.as_run(declared, c.nodes, c.members).profile == gang.profile)
        scored += [s for c in secondary if (s := _score(snapshot, gang, pattern, c, policy, earliest)) is not None]
    if policy.lock_on_demand:
        scored += [s for g in scored if (s := _local(snapshot, gang, g, policy, earliest)) is not None]
    if not scored:
        return NoFit(gang.uid, (
            f"priority protection: every node set and offset would delay more than "
            f"{policy.overflow_tolerance:.0%} of a higher-priority gang's traffic on some link"))
    key = _Scored.expected_key if policy.lock_on_demand else _Scored.key
    best = min(scored, key=key)
    settled = None
    if best.local:  # a local snap pays its padding only to be locked; otherwise the gang keeps its grid snap
        settled = _settle(snapshot, gang, best, policy, earliest)
        if not settled.locked:
            settled = None
            best = min((s for s in scored if not s.local), key=key)
    settled = settled or _settle(snapshot, gang, best, policy, earliest)
    if policy.lock_on_demand and settled.expected_ms > 0:
        exact = _exact(snapshot, gang, [s for s in scored if not s.local], policy, earliest)
        if exact is not None and exact[1] < cost_per_slot(snapshot, settled):
            return exact[0]
    return settled


def cost_per_slot(snapshot: Snapshot, d: Decision, spared_ms: float = 0.0) -> float:
    """A decision's expected cost (padding where locked, collisions where free) per slot of time, less
    ``spared_ms`` (the collisions a lock spares gangs that collide whether or not this one runs free): its
    figures are per ``lcm(hyperperiod, period)``, which differs between periods."""
    return (d.expected_ms - spared_ms) / math.lcm(snapshot.hyperperiod, int(round(d.period_ms / snapshot.grid.slot_ms)))


def _exact(snapshot: Snapshot, gang: Gang, scored: list[_Scored], policy: Policy,
           earliest: int) -> tuple[Decision, float] | None:
    """The gang locked at its exact period (``SlotGrid.exact``: no snapping beyond the slot), or a few slots
    longer, with the free neighbours it would lock re-laid at periods commensurate with it, where every gang on
    its contended links can hold such a period; the best such node set by the same ranking at the shortest
    such period that locks, settled as at the grid snap; None where none locks.

    Identical jobs meet at fixed phases whatever their period, so the grid's only purpose between them,
    commensurability with other periods, buys nothing, and its padding (up to 14 % per iteration for a
    measured vgg11 at 100 Gbps, 245.7 ms held to 280) is what keeps such locks from paying. Where their
    bursts together fill a little more than the period (vgg11 throttled by a 4:1 uplink: 150.4 ms bursts
    every 296.4 ms, 31 slots each of 60), they overlap at every offset of it, so they ran free, colliding
    for about a quarter of every period at a random phase; a longer period (62 slots there, 13.6 ms of padding
    per iteration) lets them interleave, and the lock is taken where it pays. Up to ``OVERFILL`` longer: two
    110 ms bursts every 180 ms interleave at 220 ms, 40 ms of padding per iteration each, less than the
    collisions of two bursts of 61 % of the period at a random phase (docs/simulator-rounds.md, round 25).
    Gangs of different models whose exact periods nearly divide one another are the same case (bert-base and
    vgg19 behind a thin rack uplink, 185 and 380 ms: bert-base held to 190 ms is half of vgg19's): each held up
    to ``STRETCH`` longer so that the periods divide, their bursts meet at fixed phases again
    (``_commensurate``). The free neighbours' periods are provisional like their offsets, so they are re-laid
    with the lock; locked ones must hold a commensurate period already. Bounded by the cap: the snapshot's
    hyperperiod with the periods must fit.
    """
    grid = snapshot.grid
    exact = grid.exact(gang.profile.period_ms, "profile.period_ms").slots
    span = math.lcm(snapshot.hyperperiod, scored[0].pattern.slots)  # the grid snap's, as ``_local``
    sharing = [(s, found, _longest(exact, found.stretch))
               for s in scored if (found := _sharing(snapshot, gang, s, exact)) is not None]
    for slots in range(exact, max((longest for *_, longest in sharing), default=exact) + 1):
        if slots == exact == scored[0].pattern.slots:
            continue  # the grid snap: scored already
        pattern = lay_out(gang.profile, grid, SnappedPeriod(slots, gang.profile.period_ms, grid.slot_ms))
        fit = [(s, relaid) for s, found, longest in sharing
               if slots <= longest and (relaid := _commensurate(snapshot, slots, found)) is not None]
        if fit and (locked := _exact_at(snapshot, gang, fit, policy, earliest, pattern, span, exact)) is not None:
            return locked
    return None


def _longest(exact: int, stretch: float) -> int:
    """The longest period (slots) a gang of exact period ``exact`` may be held to, ``stretch`` longer."""
    return exact + max(1, int(stretch * exact))


def _held(snapshot: Snapshot, uid: str, slots: int, stretch: float = STRETCH) -> int | None:
    """The shortest period (slots) free gang ``uid`` may be held to, its exact one up to ``stretch`` longer, that
    divides or is a multiple of ``slots``; its current one where that already is; None where none is."""
    placed = snapshot.placed[uid]
    current = placed.pattern.slots
    if slots % current == 0 or current % slots == 0:
        return current
    if placed.locked:
        return None
    own = _exact_slots(snapshot, uid)
    return next((q for q in range(own, _longest(own, stretch) + 1)
                 if slots % q == 0 or q % slots == 0), None)


@dataclass(frozen=True, eq=False)
class _Sharing:
    """What a node set shares, none of which depends on the period tried (the peak rate does not): the gangs on its
    contended links, those a lock would take along beyond them, the traffic of one period each puts on those
    links (Mbps x slots: the gang's own, and each neighbour's at the period it holds now), and how much longer
    than their exact periods the gang and those on its links may be held (``OVERFILL`` where they are all
    identical jobs, else ``STRETCH``)."""

    near: frozenset[str]
    beyond: frozenset[str]
    own: dict[int, float]
    theirs: tuple[tuple[str, int, float], ...]
    stretch: float
    exact: int  # the gang's exact period (slots)


def _exact_slots(snapshot: Snapshot, uid: str) -> int:
    """Placed gang ``uid``'s exact period (slots)."""
    return snapshot.grid.exact(snapshot.placed[uid].gang.profile.period_ms).slots


def _same_job(snapshot: Snapshot, uids: Iterable[str], exact: int) -> bool:
    """Whether every placed gang of ``uids`` has the exact period ``exact`` (slots): identical jobs."""
    return all(_exact_slots(snapshot, uid) == exact for uid in uids)


def _sharing(snapshot: Snapshot, gang: Gang, scored: _Scored, exact: int) -> _Sharing | None:
    """``scored``'s node set as ``_commensurate`` needs it (``exact``: the gang's exact period, slots); None where it
    shares no contended link."""
    cand, pattern = scored.candidate, scored.pattern
    links, extra, near = _contended(snapshot, gang, pattern, cand.nodes, cand.members)
    if not near:
        return None
    hot = set(snapshot.contended(links, extra).tolist())
    own = {int(link): float(scaled(m, pattern.rates).sum())
           for link, m in zip(*loaded_links(snapshot.topology, cand.nodes, cand.members, gang.profile.collective))
           if int(link) in hot}
    theirs = tuple((uid, link, float(scaled(m, snapshot.placed[uid].pattern.rates).sum()))
                   for uid in sorted(near)
                   for link, m in zip(snapshot.placed[uid].links.tolist(), snapshot.placed[uid].multiplier)
                   if link in hot)
    beyond = (_unlocked_closure(snapshot, near, links, extra) or set()) - near
    return _Sharing(frozenset(near), frozenset(beyond), own, theirs,
                    OVERFILL if _same_job(snapshot, near, exact) else STRETCH, exact)


def _commensurate(snapshot: Snapshot, slots: int, sharing: _Sharing) -> dict[str, int] | None:
    """The free gangs to re-lay, and at which periods (slots), so that every gang on the node set's contended links
    holds a period commensurate with ``slots``; None where one cannot (a locked gang on an incommensurate period,
    a free one none of whose periods within ``sharing.stretch`` is commensurate), or where their traffic of one common
    hyperperiod cannot fit a contended link's capacity (a lower bound: at such periods no offset can interleave
    them)."""
    held: dict[str, int] = {}
    for uid in sharing.near:
        if (q := _held(snapshot, uid, slots, sharing.stretch)) is None:
            return None
        held[uid] = q
    if math.lcm(snapshot.hyperperiod, slots, *held.values()) > snapshot.grid.max_hyperperiod_slots:
        return None
    # Their traffic of one common hyperperiod must fit each contended link's capacity over it.
    rate = {link: volume / slots for link, volume in sharing.own.items()}
    for uid, link, volume in sharing.theirs:
        rate[link] += volume / held[uid]
    capacity = snapshot.topology.capacity_mbps
    if any(r > capacity[link] + _EPS for link, r in rate.items()):
        return None
    # The gangs a lock takes along beyond its links are re-laid where they can be, else kept as they are: as far
    # as those on its links where they are the same job (a chain of identical gangs, each sharing a NIC with the
    # next, takes turns at one period or not at all), else no more than ``STRETCH``.
    for uid in sharing.beyond:
        stretch = sharing.stretch if _same_job(snapshot, (uid,), sharing.exact) else STRETCH
        held[uid] = _held(snapshot, uid, slots, stretch) or snapshot.placed[uid].pattern.slots
    if math.lcm(snapshot.hyperperiod, slots, *held.values()) > snapshot.grid.max_hyperperiod_slots:
        return None
    return {uid: q for uid, q in sorted(held.items()) if q != snapshot.placed[uid].pattern.slots}


def _exact_at(snapshot: Snapshot, gang: Gang, fit: list[tuple[_Scored, dict[str, int]]], policy: Policy,
              earliest: int, pattern: Pattern, span: int, exact: int) -> tuple[Decision, float] | None:
    """``_exact`` at one period: the best node set of ``fit`` locked there, its neighbours re-laid as given, or None
    (``exact``: the gang's exact period, slots)."""
    best: tuple[_Scored, dict[str, int]] | None = None
    for s, relaid in fit:
        if any(snapshot.placed[u].gang.priority > gang.priority and q > snapshot.placed[u].pattern.slots
               for u, q in relaid.items()):
            continue  # a lower-priority gang's lock never lengthens a higher-priority one's iterations
        with _relaid(snapshot, relaid):
            found = _score(snapshot, gang, pattern, s.candidate, policy, earliest)
            scale = span / math.lcm(snapshot.hyperperiod, pattern.slots)  # as ``_local``: to the grid snap's span
        if found is not None and found.lock.no_overflow:
            found = dataclasses.replace(found, scale=scale)
            if best is None or found.expected_key() < best[0].expected_key():
                best = (found, relaid)
    if best is None:
        return None
    found, relaid = best
    with _relaid(snapshot, relaid):
        d = _settle(snapshot, gang, found, policy, earliest)
        # Where every gang the lock takes along is the same job, what it spares them is weighed too (they collide
        # among themselves whether or not this gang runs free); between other periods the estimate is coarser.
        chain = d.locked and _same_job(snapshot, d.locks, exact)
        cost = cost_per_slot(snapshot, d, d.free_delay_ms - found.lock.free_delay_ms if chain else 0.0)
    if not d.locked:
        return None
    slot = snapshot.grid.slot_ms
    return dataclasses.replace(d, periods=tuple((uid, q * slot) for uid, q in relaid.items() if uid in d.locks)), cost


@contextlib.contextmanager
def _relaid(snapshot: Snapshot, periods: dict[str, int]) -> Iterator[None]:
    """The free gangs of ``periods`` laid at their periods (slots; offsets folded) for the duration; the snapshot
    as it was after."""
    grid = snapshot.grid
    saved = [(snapshot.forget(uid), slots) for uid, slots in periods.items()]
    try:
        for p, slots in saved:
            snapshot.assume(p.gang, p.nodes, p.members, p.offset,
                            lay_out(p.gang.profile, grid, SnappedPeriod(slots, p.gang.profile.period_ms, grid.slot_ms)),
                            p.holds_gpus, locked=p.locked)
        yield
    finally:
        for p, _ in saved:
            if p.gang.uid in snapshot.placed:
                snapshot.forget(p.gang.uid)
            snapshot.assume(p.gang, p.nodes, p.members, p.offset, p.pattern, p.holds_gpus, locked=p.locked)
        snapshot.fold()


def _settle(snapshot: Snapshot, gang: Gang, best: _Scored, policy: Policy, earliest: int) -> Decision:
    """The decision for the chosen node set and offset: locked or free, and whom it locks (module docstring)."""
    lock, pattern = best.lock, best.pattern
    if not (policy.lock_on_demand and not lock.locked and math.isfinite(lock.padding_ms)
            and (lock.closure or not lock.no_overflow)):
        return _decision(snapshot, gang, best)
    # The gangs a lock takes along collide among themselves too while they run free: count that saving.
    span = int(np.lcm(snapshot.hyperperiod, pattern.slots))
    saving = lock.free_delay_ms + sum(_free_ms(snapshot, uid, policy, span) for uid in lock.closure)
    if saving <= lock.padding_ms:
        return _decision(snapshot, gang, best)
    whole = dataclasses.replace(lock, locked=True, locks=lock.closure, free_delay_ms=saving)
    if lock.no_overflow and all(snapshot.clean(uid) for uid in lock.closure):
        return _decision(snapshot, gang, dataclasses.replace(best, lock=whole))
    # Moving only the free gangs first; then, as CASSINI re-arranges every job on a link when one arrives,
    # the locked neighbours too (each re-anchors once, a period at most, against collisions every iteration).
    found = _relocate(snapshot, gang, pattern, best, policy) if lock.closure else None
    if found is None and (locked := _locked_neighbours(snapshot, gang, best)):
        found = _relocate(snapshot, gang, pattern, best, policy, locked)
    if found is None:
        return _decision(snapshot, gang, best)
    moved, scores = found
    offset = moved.pop(gang.uid)
    best = dataclasses.replace(best, offset=offset, lateness=(offset - earliest) % pattern.slots,
                               feasible=bool(scores.fits[offset]), cost=0.0, overflow=0,
                               peak=float(scores.peak[offset]), lock=whole)
    return dataclasses.replace(_decision(snapshot, gang, best), relocations=tuple(sorted(
        (uid, o) for uid, o in moved.items() if o != snapshot.placed[uid].offset)))


def _free_ms(snapshot: Snapshot, uid: str, policy: Policy, span: int) -> float:
    """What gang ``uid`` loses and costs others in collisions over ``span`` slots while it runs free."""
    placed = snapshot.forget(uid)
    try:
        scores = score_offsets(snapshot, placed.gang, placed.pattern, placed.nodes, policy, placed.members)
    finally:
        snapshot.assume(placed.gang, placed.nodes, placed.members, placed.offset, placed.pattern,
                        placed.holds_gpus, placed.locked)
    own = math.lcm(snapshot.hyperperiod, placed.pattern.slots)
    return scores.free_delay * snapshot.grid.slot_ms * span / own


def _contended(snapshot: Snapshot, gang: Gang, pattern: Pattern, nodes: np.ndarray,
               members: np.ndarray) -> tuple[np.ndarray, np.ndarray, set[str]]:
    """The links ``gang`` would load on ``nodes``, its peak on each, and the gangs it would share a contended link with."""
    links, mult = loaded_links(snapshot.topology, nodes, members, gang.profile.collective)
    extra = scaled(mult, int(pattern.rates.max()))
    return links, extra, snapshot.neighbours(snapshot.contended(links, extra))


def _locked_neighbours(snapshot: Snapshot, gang: Gang, best: _Scored) -> tuple[str, ...]:
    """The locked gangs on the contended links of ``gang`` placed as ``best`` would place it."""
    _, _, near = _contended(snapshot, gang, best.pattern, best.candidate.nodes, best.candidate.members)
    return tuple(sorted(u for u in near if snapshot.placed[u].locked))


def _relocate(snapshot: Snapshot, gang: Gang, pattern: Pattern, best: _Scored, policy: Policy,
              locked: tuple[str, ...] = ()) -> tuple[dict[str, int], OffsetScores] | None:
    """Offsets for the gang, the unlocked gangs its lock takes along and the ``locked`` gangs given, at which
    none of them overflows, and the gang's scores beside the others where they moved to (its guarded fit and
    peak there); or None. The free gangs' offsets are provisional, so they may move before they lock:
    re-optimisation over just these gangs, every other gang frozen; the snapshot is left as it was."""
    from volcano_metronome.core.reoptimize import reoptimise  # it scores with this module's kernels

    movable = (gang.uid,) + best.lock.closure + locked
    saved = {uid: (snapshot.placed[uid].offset, snapshot.placed[uid].locked) for uid in best.lock.closure + locked}
    scores: OffsetScores | None = None
    snapshot.assume(gang, best.candidate.nodes, best.candidate.members, best.offset, pattern, hold_gpus=False)
    for uid in best.lock.closure:
        snapshot.lock(uid)
    try:
        reoptimise(snapshot, policy, max_moves=len(movable), max_passes=3,
                   frozen=frozenset(snapshot.placed) - frozenset(movable))
        found = {uid: snapshot.placed[uid].offset for uid in movable}
        if all(snapshot.clean(uid) for uid in movable):
            snapshot.forget(gang.uid)
            scores = score_offsets(snapshot, gang, pattern, best.candidate.nodes, policy, best.candidate.members)
    finally:
        if gang.uid in snapshot.placed:
            snapshot.forget(gang.uid)
        for uid, (offset, was_locked) in saved.items():
            placed = snapshot.forget(uid)
            snapshot.assume(placed.gang, placed.nodes, placed.members, offset, placed.pattern, placed.holds_gpus,
                            locked=was_locked)
    return None if scores is None else (found, scores)


@dataclass(frozen=True, eq=False)
class OffsetScores:
    """Every offset of one gang on one node set: guarded fit, cost, overflow, peak, tolerance."""

    fits: np.ndarray  # bool (P,)
    cost: np.ndarray  # float (P,)
    overflow: np.ndarray  # int (P,): Mbps x slots added over the snapshot's span
    peak: np.ndarray  # float (P,)
    tolerated: np.ndarray  # bool (P,): no higher-priority gang loses more than the tolerance
    # Slots per span the worst link needs to drain the overflow, averaged over offsets, as often as it iterates free.
    free_delay: float = 0.0


def score_offsets(snapshot: Snapshot, gang: Gang, pattern: Pattern, nodes: np.ndarray,
                  policy: Policy, members: np.ndarray | None = None) -> OffsetScores:
    """Score ``gang`` at every offset on ``nodes`` (``members`` workers on each) against the snapshot's loads."""
    period = pattern.slots
    links, mult = loaded_links(snapshot.topology, nodes, members, gang.profile.collective)
    if not len(links):
        zeros = np.zeros(period)
        return OffsetScores(np.ones(period, bool), zeros, zeros.astype(np.int64), zeros, np.ones(period, bool))
    base = phasing.fold(snapshot.rows(links, period), period)
    cap = snapshot.topology.capacity_mbps[links]
    peak_load = base.max(axis=1)
    # Clear of every slot a burst touches, at its full rate: a fit is a promise, not an expectation (and whole
    # slots keep the runs, and so the kernels' passes, as few as the windows).
    guarded = dilate(pattern.whole, pattern.guard_slots + policy.cushion_slots)
    maxima = phasing.WindowMaxima.of(peak_load, phasing.longest_run(guarded, pattern.whole))
    fits = phasing.fits(maxima, cap, mult, guarded)
    peak = phasing.peak_utilisation(peak_load, maxima, cap, mult, pattern.whole)
    zeros = np.zeros(period)
    if not len(snapshot.contended(links, scaled(mult, int(pattern.rates.max())))):
        # The peaks fit together: no phase can overflow anything.
        return OffsetScores(fits, zeros, zeros.astype(np.int64), peak, np.ones(period, bool))
    per_link = phasing.added_overflow(base, cap, mult, pattern.rates)
    free_delay = float((per_link / cap[:, None]).max(axis=0).mean())
    if snapshot.grid.snap(pattern.period.requested_ms).slots == pattern.slots:
        # Free, the gang iterates at its own period, not at the grid snap it is laid on (up to twice as long
        # for periods of seconds): its collisions come as often as its iterations do. Not at a longer period a
        # lock is tried at (``_exact``, ``_local``): weighing what those spare at the gang's own period lost on
        # the regime map (docs/simulator-rounds.md, round 25).
        free_delay *= pattern.period.ms / pattern.period.requested_ms
    if fits.any():
        # A guarded fit adds no overflow anywhere, so cost is moot for the offsets that matter.
        return OffsetScores(fits, zeros, zeros.astype(np.int64), peak, np.ones(period, bool), free_delay)
    overflow = per_link.sum(axis=0)
    cost = overflow.astype(float)
    tolerated = np.ones(period, bool)
    higher = snapshot.higher_rows(links, gang.priority, period)
    if higher is not None:
        lost = phasing.damage(base, phasing.fold(higher, period), cap, mult, pattern.rates)
        volume = higher.sum(axis=1).astype(float)
        tolerated = (lost <= policy.overflow_tolerance * volume[:, None] + _EPS).all(axis=0)
        cost = cost + policy.priority_weight * lost.sum(axis=0)
    return OffsetScores(fits, cost, overflow, peak, tolerated, free_delay)


def _local(snapshot: Snapshot, gang: Gang, scored: _Scored, policy: Policy, earliest: int) -> _Scored | None:
    """``scored``'s node set at the gang's local snap, when that differs from its grid snap and admits an
    offset without overflow; else None.

    On a contended link, gangs whose periods do not divide one another sweep every relative phase over
    their common hyperperiod, so no offset avoids their collisions (round 5 of docs/simulator-rounds.md: not one
    of 100 such decisions had one). The local snap (``SlotGrid.commensurate``) is the shortest grid period
    that divides or is a multiple of every contended neighbour's: the padding that commensurability
    requires, and no more. Whether the gang then locks is decided as at its grid snap (the lock must pay),
    so a local snap is taken only where the collisions it removes cost more than its padding.
    """
    if scored.lock.locked or not math.isfinite(scored.lock.padding_ms):
        return None
    pattern = scored.pattern
    _, _, near = _contended(snapshot, gang, pattern, scored.candidate.nodes, scored.candidate.members)
    theirs = np.array(sorted({snapshot.placed[u].pattern.slots for u in near}), dtype=np.int64)
    if not len(theirs) or ((pattern.slots % theirs == 0) | (theirs % pattern.slots == 0)).all():
        return None
    period = snapshot.grid.commensurate(gang.profile.period_ms, theirs)
    if (period is None or period.slots == pattern.slots
            or math.lcm(snapshot.hyperperiod, period.slots) > snapshot.grid.max_hyperperiod_slots):
        return None
    local = _score(snapshot, gang, lay_out(gang.profile, snapshot.grid, period), scored.candidate, policy, earliest)
    if local is None or not local.lock.no_overflow:
        return None
    scale = math.lcm(snapshot.hyperperiod, pattern.slots) / math.lcm(snapshot.hyperperiod, period.slots)
    return dataclasses.replace(local, scale=scale, local=True)


def _score(snapshot: Snapshot, gang: Gang, pattern: Pattern, cand: Candidate, policy: Policy,
           earliest: int) -> _Scored | None:
    scores = score_offsets(snapshot, gang, pattern, cand.nodes, policy, cand.members)
    offsets = np.flatnonzero(scores.tolerated | scores.fits)
    if not len(offsets):
        if not policy.lock_on_demand and not overpadded(pattern):
            return None
        # Priority protection bounds the phases we enforce. A lock needs an offset that adds no
        # overflow, which takes nothing from anyone, so here the gang would run free: its phase is not
        # ours, the damage at any one offset is not what it will do, and holding it back would trade
        # its whole wait for a share of another gang's communication that Volcano's placement causes too.
        offsets = np.arange(pattern.slots)
    lateness = (offsets - earliest) % pattern.slots
    keys = (lateness, scores.peak[offsets], scores.cost[offsets], ~scores.fits[offsets])
    pick = int(offsets[np.lexsort(keys)[0]])
    feasible = bool(scores.fits[pick])
    overflow = int(scores.overflow[pick])
    return _Scored(cand, pick, (pick - earliest) % pattern.slots, feasible, float(scores.cost[pick]),
                   overflow, float(scores.peak[pick]),
                   _lock(snapshot, gang, pattern, cand.nodes, cand.members, overflow == 0, scores.free_delay,
                         policy), pattern)


def overpadded(pattern: Pattern) -> bool:
    """Whether ``pattern``'s period is more than ``OVERFILL`` longer than the gang's own: no lock holds it there
    unweighed (module docstring)."""
    return pattern.period.error > OVERFILL


def free_reason(d: Decision) -> str:
    """Why decision ``d`` runs free, in words for its claim (``d.locked`` false)."""
    if d.free_delay_ms == 0.0 and d.padding_ms == 0.0:
        return "shares no contended link: runs free until a gang placed on its links could collide with it"
    if not math.isfinite(d.padding_ms) and d.snapping_error > OVERFILL:
        return (f"runs free: the grid would hold its iterations to {d.period_ms:g} ms, "
                f"{d.snapping_error:.0%} longer (at most {OVERFILL:.0%})")
    collisions = f" (collisions expected: {d.free_delay_ms:.3g} ms per hyperperiod)" if d.free_delay_ms else ""
    return f"runs free: a lock on its contended links would overflow, or pad more than it spares{collisions}"


def padding_ms(gang: Gang, pattern: Pattern, span: int) -> float:
    """What holding ``gang`` to its snapped period costs over ``span`` slots: snapping error plus half the jitter."""
    per_iteration = pattern.period.ms - gang.profile.period_ms + gang.profile.jitter_ms / 2.0
    return per_iteration * (span // pattern.slots)


def _lock(snapshot: Snapshot, gang: Gang, pattern: Pattern, nodes: np.ndarray, members: np.ndarray,
          no_overflow: bool, free_delay: float, policy: Policy) -> _Lock:
    """Whether the gang placed on ``nodes`` at an offset that overflows nowhere (or not) is locked; see the
    module docstring."""
    if not policy.lock_on_demand and overpadded(pattern):
        return _Lock(False, (), 0.0, math.inf)  # no lock on offer
    links, extra, neighbours = _contended(snapshot, gang, pattern, nodes, members)
    if not policy.lock_on_demand:
        return _Lock(True, tuple(sorted(u for u in neighbours if not snapshot.placed[u].locked
                                        and not overpadded(snapshot.placed[u].pattern))), 0.0, 0.0)
    if not neighbours:
        return _Lock(False, (), 0.0, 0.0)
    # Both sides of a collision lose the drain time.
    free_ms = 2.0 * free_delay * snapshot.grid.slot_ms
    closure = _unlocked_closure(snapshot, neighbours, links, extra)
    if closure is None:  # free, so it collides all the same: node sets are ranked by that
        return _Lock(False, (), free_ms, math.inf)
    unlocked = tuple(sorted(closure))
    span = int(np.lcm(snapshot.hyperperiod, pattern.slots))
    padding = padding_ms(gang, pattern, span) + sum(
        padding_ms(snapshot.placed[uid].gang, snapshot.placed[uid].pattern, span) for uid in unlocked)
    pays = no_overflow and free_ms > padding and all(snapshot.clean(uid) for uid in unlocked)
    return _Lock(pays, unlocked if pays else (), free_ms, padding, unlocked, no_overflow)


def _unlocked_closure(snapshot: Snapshot, neighbours: set[str], links: np.ndarray,
                      extra: np.ndarray) -> set[str] | None:
    """The unlocked gangs a lock must take along: a locked gang's plan holds only if every gang it can
    collide with aligns too, so each unlocked gang locked brings its own contended neighbours. None
    past ``MAX_LOCKS`` gangs (the lock is then not worth its reach)."""
    added = dict(zip(links.tolist(), extra.tolist()))
    out: set[str] = set()
    todo = [u for u in neighbours if not snapshot.placed[u].locked]
    while todo:
        uid = todo.pop()
        if uid in out:
            continue
        out.add(uid)
        if len(out) > MAX_LOCKS:
            return None
        theirs = snapshot.placed[uid].links
        more = np.array([added.get(int(link), 0) for link in theirs], dtype=np.int64)
        todo.extend(u for u in snapshot.neighbours(snapshot.contended(theirs, more), but=uid)
                    if u not in out and not snapshot.placed[u].locked)
    return out


def _decision(snapshot: Snapshot, gang: Gang, best: _Scored) -> Decision:
    topo, grid, pattern = snapshot.topology, snapshot.grid, best.pattern
    links, _ = loaded_links(topo, best.candidate.nodes, best.candidate.members, gang.profile.collective)
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
        locked=best.lock.locked,
        locks=best.lock.locks,
        expected_ms=best.lock.expected_ms,
        free_delay_ms=best.lock.free_delay_ms,
        padding_ms=best.lock.padding_ms,
    )
