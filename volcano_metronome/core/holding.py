"""Holding a gang back, for a bounded time, where every node set it fits would collide heavily.

Volcano's topology plugin in soft mode spans rather than waits, and so does the core: a gang that fits
is placed. Where the best node set still costs collisions of at least ``HOLD_COST`` times the time it
covers (the expected overflow a free gang adds at a random phase, drained at the worst link, counted for
both sides: ``Decision.free_delay_ms``), placing it now at least doubles the running time of the gangs
involved, while a gang ending soon may leave it a clean node set: communication-bound gangs (a burst
nearly as long as the iteration) spread over the loaded NICs of a full cluster ran 3.6 to 6 times their
uncontended communication in random scenarios where a minute's wait would have given them a whole node
(docs/simulator-rounds.md, round 18). Such a gang waits, up to ``Policy.max_hold_s`` after it was first
held (0: never), and is placed where it fits once that has passed. A hold is a NoFit: the gangs behind it
go on, as behind any gang that does not fit. A locked decision (its offset overflows nowhere) is never
held: its cost is padding, at most its period.

Before a gang is held, the domains no gang uses are offered too (``decide_or_hold``): binpacking keeps them
whole for the gangs that need one (``core.placement``, round 11), but a gang that would otherwise wait for
room that is already there, clean, takes it (round 19).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from volcano_metronome.core.decision import Decision, NoFit, cost_per_slot, decide
from volcano_metronome.core.model import Gang, Policy
from volcano_metronome.core.snapshot import Snapshot

#: Expected collisions (ms, both sides) per ms of time from which a free placement is held back.
HOLD_COST = 1.0
#: How every hold's reason starts (``no_fit_category``: HeldForContention).
HELD = "held back"
#: Clock rounding (s): a wake-up at ``since + max_hold_s`` may compute ``now - since`` a hair short.
_EPS = 1e-6


@dataclass(frozen=True)
class Hold(NoFit):
    """A gang held back (``hold``): why, and the decision it was held from (its best node set)."""

    best: Decision = field(compare=False, repr=False)


def collision_share(snapshot: Snapshot, decision: Decision) -> float:
    """Expected collisions of a decision left free, per unit of time (both sides); 0 where it is locked."""
    if decision.locked or not decision.links:
        return 0.0
    return cost_per_slot(snapshot, decision) / snapshot.grid.slot_ms


def hold(snapshot: Snapshot, decision: Decision, policy: Policy, held_s: float) -> Hold | None:
    """Why ``decision`` waits instead (``held_s``: how long its gang has been held so far), or None: place it."""
    share = collision_share(snapshot, decision)
    if share < HOLD_COST or held_s + _EPS >= policy.max_hold_s:
        return None
    return Hold(decision.uid, (
        f"{HELD}: its best node set would run free with expected collisions of {share:.2f} x the time "
        f"(both sides; held from {HOLD_COST:g}); waits for a cleaner one up to maxHoldSeconds "
        f"({policy.max_hold_s:g} s) after it was first held, then is placed where it fits"), decision)


def decide_or_hold(snapshot: Snapshot, gang: Gang, policy: Policy, held_s: float,
                   earliest: int = 0) -> Decision | NoFit:
    """``core.decision.decide``, held back where ``hold`` says so unless a domain no gang uses holds the gang
    below the bound (``held_s``: how long it has been held so far)."""
    result = decide(snapshot, gang, policy, earliest)
    if not isinstance(result, Decision) or (held := hold(snapshot, result, policy, held_s)) is None:
        return result
    opened = decide(snapshot, gang, policy, earliest, keep_untouched=False)
    if isinstance(opened, Decision) and hold(snapshot, opened, policy, held_s) is None:
        return opened
    return held


def passes(snapshot: Snapshot, held: Sequence[tuple[Gang, Hold]], gang: Gang,
           decision: Decision) -> tuple[Gang, Hold] | None:
    """The first of ``held`` (gangs held earlier in this cycle) that ``decision`` would pass, or None: one of
    higher priority than ``gang`` whose best node set it leaves short of GPUs. Priority is the gang's own,
    whatever the queue's order, as in priority protection (``core.decision``)."""
    topology, free = snapshot.topology, snapshot.free_gpus
    taken = dict(zip(decision.nodes, (m * gang.gpus_per_member for m in decision.members)))
    for entry in held:
        other, why = entry
        if other.priority <= gang.priority:
            continue
        for name, members in zip(why.best.nodes, why.best.members):
            if name in taken and free[topology.node_index[name]] - taken[name] < members * other.gpus_per_member:
                return entry
    return None
