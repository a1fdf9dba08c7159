"""Deciding: the core run over this cycle's pending gangs, and re-optimisation of the running ones. PURE.

Every pending gang is decided on one snapshot of the running gangs' link loads and the free GPUs,
policy by policy; each decision is assumed into it before the next. The re-optimisation pass works
on the same snapshot after the decisions (no second snapshot): it sees the links as they will be
once this cycle's writes land.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from volcano_metronome.controller.views import World
from volcano_metronome.controller.queuepolicy import QueuePolicyView, Reoptimization
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core.cycle import commit
from volcano_metronome.core.decision import Decision, NoFit
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.grid import lay_out
from volcano_metronome.core.holding import HELD, Hold, decide_or_hold, passes
from volcano_metronome.core.model import Gang, Policy
from volcano_metronome.core.ordering import order
from volcano_metronome.core.reoptimize import Move, reoptimise
from volcano_metronome.core.snapshot import Snapshot


# A gang the core could not decide (its input is one no decision exists for, or the core failed on it):
# reported like a no-fit (claim condition, Event, metric) under its own category; other gangs go on.
UNDECIDABLE, UNDECIDABLE_PREFIX = "Undecidable", "cannot be decided: "
# A gang core.holding holds back: it fits, and waits a bounded time for a node set with fewer collisions.
HELD_FOR_CONTENTION = "HeldForContention"


@dataclass(frozen=True)
class Decided:
    """The core's answers for this cycle's pending gangs, by gang uid.

    ``locks`` maps each unlocked gang that must align from now on to the uid of the gang whose
    decision locks it; ``relocations`` the new offsets (ms) the core gave some of them with the lock,
    and locked gangs it re-arranged for a newcomer, whose uid ``moved_by`` gives; ``periods`` the new
    periods (ms, exact or a few slots longer) of locked gangs the lock re-lays at the period they share
    with the deciding gang.
    """

    results: Mapping[str, Decision | NoFit] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    locks: Mapping[str, str] = field(default_factory=dict)
    relocations: Mapping[str, float] = field(default_factory=dict)
    seconds: Mapping[str, float] = field(default_factory=dict)  # how long each gang's decision took (with a clock)
    moved_by: Mapping[str, str] = field(default_factory=dict)
    periods: Mapping[str, float] = field(default_factory=dict)
    # Gangs held back (``core.holding``) and still pending: since when they were first held (the caller's clock),
    # and when the first of those held now may wait no longer.
    held: Mapping[str, float] = field(default_factory=dict)
    hold_until: float | None = None
    # Gangs held this cycle whose best node set a gang of lower priority placed after them left short of GPUs
    # (``core.holding.passes``): that gang's uid and priority.
    overtaken: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    # The snapshot the decisions were assumed into, for the re-optimisation pass of the same cycle.
    snapshot: Snapshot | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Reoptimised:
    """What a re-optimisation pass changes: offset moves, and gangs that may run free again."""

    moves: tuple[Move, ...] = ()
    unlocks: tuple[str, ...] = ()


# ------------------------------------------------------------------------------------------- deciding
def snapshot(world: World, settings: Settings) -> tuple[Snapshot, list[str]]:
    """A core snapshot of the world; running gangs that no longer fit the grid are skipped with a warning."""
    grid = settings.grid
    snap = Snapshot(world.topology, grid, np.array(world.free_gpus, dtype=np.int64))
    warnings: list[str] = []
    for r in world.running():
        try:
            snap.assume_running(r)
        except InvalidInput as exc:
            warnings.append(f"running gang {r.gang.name}: {exc}; its traffic is not accounted for")
    return snap, warnings


def policy_view(world: World, name: str) -> QueuePolicyView | None:
    """QueuePolicy ``name`` where it is usable; None for the built-in default ("") or a broken one."""
    return next((p for p in world.policies if p.name == name and not p.error), None)


def core_policy(world: World, name: str, settings: Settings) -> Policy:
    """The core policy of QueuePolicy ``name`` (the built-in default for "")."""
    view = policy_view(world, name)
    return view.policy if view is not None else Policy(grid=settings.grid)


def decide(world: World, settings: Settings, now_s: float, clock: Callable[[], float] | None = None,
           base: tuple[Snapshot, list[str]] | None = None, held: Mapping[str, float] | None = None) -> Decided:
    """Run the core over every pending gang, policy by policy (by name), on one shared snapshot.

    ``base``: the running gangs' snapshot when the caller keeps one (``controller.loads``); it is
    changed in place. ``clock`` times each decision (``Decided.seconds``). ``held``: the gangs held back
    by earlier cycles and since when (``Decided.held`` of the last cycle); a gang it does not name counts from its
    claim's ``status.heldSince`` (a hold a previous leader started).
    """
    pending = world.pending_gangs()
    held = {**{g.uid: s for g in pending if (s := g.held_since) is not None}, **(held or {})}
    still: dict[str, float] = {}
    until: list[float] = []
    overtaken: dict[str, tuple[str, int]] = {}
    held_now: list[tuple[Gang, Hold]] = []  # held this cycle, in every policy: priorities are the pods'
    snap, warnings = base if base is not None else snapshot(world, settings)
    results: dict[str, Decision | NoFit] = {}
    seconds: dict[str, float] = {}
    for name in sorted({g.policy for g in pending}):
        group = [g for g in pending if g.policy == name]
        gangs = []
        for g in group:
            try:
                gang = g.core_gang()
                lay_out(gang.profile, snap.grid)  # a profile the grid cannot hold fails here, alone
                gangs.append(gang)
            except InvalidInput as exc:
                results[g.uid] = NoFit(g.uid, f"{UNDECIDABLE_PREFIX}{exc}")
        pol = core_policy(world, name, settings)
        for gang in order(gangs, pol, now_s):
            t0 = clock() if clock is not None else 0.0
            since = held.get(gang.uid, now_s)
            result = _decide_one(snap, gang, pol, now_s - since)
            while isinstance(result, Decision) and (passed := passes(snap, held_now, gang, result)) is not None:
                held_now.remove(passed)
                overtaken[passed[0].uid] = (gang.uid, gang.priority)
            results[gang.uid] = result = _assume(snap, gang, result)
            if isinstance(result, Hold):
                held_now.append((gang, result))
                still[gang.uid] = since
                until.append(since + pol.max_hold_s)
            elif isinstance(result, NoFit) and gang.uid in held:  # no room now: its hold still counts from then
                still[gang.uid] = since
            if clock is not None:
                seconds[gang.uid] = clock() - t0
    locks, relocations, moved_by, periods = _locks(results, snap.grid.slot_ms)
    return Decided(results, tuple(warnings), locks, relocations, seconds, moved_by, periods, still,
                   min(until, default=None), overtaken, snap)


def _decide_one(snap: Snapshot, gang: Gang, pol: Policy, held_s: float = 0.0) -> Decision | NoFit:
    """``core.holding.decide_or_hold`` for one gang (held for ``held_s`` so far), isolated: whatever the core
    raises for this gang is this gang's no-fit, never the cycle's failure (every other gang is still decided)."""
    try:
        return decide_or_hold(snap, gang, pol, held_s)
    except Exception as exc:  # noqa: BLE001 - one gang's bad input or a core bug must not stop the others
        return NoFit(gang.uid, f"{UNDECIDABLE_PREFIX}{type(exc).__name__}: {exc}")


def _assume(snap: Snapshot, gang: Gang, result: Decision | NoFit) -> Decision | NoFit:
    """``result``, assumed into ``snap`` where it is a decision; a decision the snapshot refuses is the gang's
    no-fit, as in ``_decide_one``."""
    if isinstance(result, Decision):
        try:
            commit(snap, gang, result)
        except Exception as exc:  # noqa: BLE001 - as above; assume() checks before it changes the snapshot
            return NoFit(gang.uid, f"{UNDECIDABLE_PREFIX}{type(exc).__name__}: {exc}")
    return result


def _locks(results: Mapping[str, Decision | NoFit],
           slot_ms: float) -> tuple[dict[str, str], dict[str, float], dict[str, str], dict[str, float]]:
    """The running gangs this cycle's decisions lock (to the uid of the deciding gang), the new offsets
    (ms) of those the core relocated with a lock, the deciding gang of each relocation, and the new
    periods (ms) of those a lock re-lays (by the decision that locks them, as the lock itself).

    Only the core's decisions lock: it leaves a gang free on a contended link on purpose when locking
    would cost more padding than the collisions it saves, so the controller must not lock it anyway.
    """
    locks: dict[str, str] = {}
    relocations: dict[str, float] = {}
    moved_by: dict[str, str] = {}
    periods: dict[str, float] = {}
    for result in results.values():
        if isinstance(result, Decision):
            for uid in result.locks:
                locks.setdefault(uid, result.uid)
            for uid, period_ms in result.periods:
                if locks.get(uid) == result.uid:  # the decision that takes the lock lays it out
                    periods.setdefault(uid, period_ms)
            for uid, offset_slots in result.relocations:
                relocations.setdefault(uid, offset_slots * slot_ms)
                moved_by.setdefault(uid, result.uid)
    return locks, relocations, moved_by, periods


def reoptimise_running(world: World, settings: Settings, due: Sequence[str],
                       decided: Decided = Decided()) -> Reoptimised:
    """Offset moves for the running gangs of the policies in ``due`` (bounded per policy, priority first),
    and those of their gangs left with no contended link (policies with lock on demand only).

    This cycle's decisions and locks are assumed first: the pass sees the links as they will be once this
    cycle's writes land, and never moves the gangs decided, relocated or re-laid this cycle (a neighbour
    only locked by them may be moved; its lock and move are written together).
    """
    if decided.snapshot is not None:  # this cycle's decisions and locks are in it already
        snap = decided.snapshot
        fresh = {uid for uid, d in decided.results.items() if isinstance(d, Decision) and uid in snap.placed}
    else:
        snap, fresh = _with_decisions(world, settings, decided)
    owner = {g.uid: g.policy for g in world.gangs if g.placed and not g.finished}
    moves: list[Move] = []
    unlocks: list[str] = []
    for name in sorted(due):
        view = next((p for p in world.policies if p.name == name), None)
        max_moves = (view.reoptimization if view is not None else Reoptimization()).max_moves
        frozen = frozenset(uid for uid in snap.placed
                           if owner.get(uid) != name or uid in fresh or uid in decided.relocations
                           or uid in decided.periods)  # laid out by this cycle's decisions
        pol = core_policy(world, name, settings)
        result = reoptimise(snap, pol, max_moves=max_moves, frozen=frozen)
        moves.extend(result.moves)
        if pol.lock_on_demand:
            unlocks.extend(uid for uid in snap.unlockable() if uid not in frozen)
    return Reoptimised(tuple(moves), tuple(unlocks))


def no_fit_category(reason: str) -> str:
    """A short, bounded label for a no-fit reason (metrics and condition reasons)."""
    text = reason.lower()
    if reason.startswith(UNDECIDABLE_PREFIX):
        return UNDECIDABLE
    if text.startswith("insufficient gpus"):
        return "InsufficientGPUs"
    if text.startswith("priority protection"):
        return "PriorityProtection"
    if reason.startswith(HELD):
        return HELD_FOR_CONTENTION
    if "profile" in text:
        return "NoProfile"
    return "Other"


def _with_decisions(world: World, settings: Settings, decided: Decided) -> tuple[Snapshot, set[str]]:
    """A snapshot of ``world`` with ``decided``'s decisions and locks assumed (for a Decided without one)."""
    snap, _ = snapshot(world, settings)
    gangs = {g.uid: g for g in world.gangs}
    fresh: set[str] = set()
    for uid, decision in sorted(decided.results.items()):
        gang = gangs.get(uid)
        if isinstance(decision, Decision) and gang is not None and gang.profile is not None and uid not in snap.placed:
            try:
                commit(snap, gang.core_gang(), decision)
            except InvalidInput:
                continue  # decide() assumed it on its own snapshot; nothing new can fail here
            fresh.add(uid)
    for uid in decided.locks:
        if uid in snap.placed:
            snap.lock(uid)
    return snap, fresh
