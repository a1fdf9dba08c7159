"""``metronome``: the product's own scheduling core, exactly as the controller drives it.

Per cycle: the pending gangs with room (``common.placeable``), in the QueuePolicy's order
(``core.ordering.order``: priority, aging, FIFO), each decided by ``core.holding.decide_or_hold``
(``core.decision.decide``, held back where ``core.holding`` says so; a gang of lower priority that takes
room a held gang waits for is counted, ``core.holding.passes``) against the live
``core.snapshot.Snapshot``, else assumed with
``core.cycle.commit`` (this is ``core.cycle.schedule`` unrolled so that each decision is timed on its
own). Then, if the links touched by this cycle's placements without a guarded fit or that moved their
neighbours, or by departures since the last cycle, carry overflow, ``core.reoptimize.reoptimise`` moves
offsets of the gangs on those links (bounded moves and passes; every other gang is frozen). Completions
call ``Snapshot.forget``.
Decision and re-optimisation latencies are measured here with ``time.perf_counter`` (the core has
no clock). A gang that loads no link gets no offset: its runtime has nothing to align.

Lock on demand (``Policy.lock_on_demand``, see ``core.decision``), published as the controller
will: a gang placed unlocked gets its snapped period but no offset, and runs free; the decision that
locks it (``Decision.locks``) publishes its provisional offset (moved first where the decision says
so: ``Decision.relocations``), on which its runtime re-anchors.
After departures, on the same pass as re-optimisation, every gang ``Snapshot.unlockable`` names
is unlocked (its offset withdrawn): no contended link is left to it, so it runs free again.

``decide`` is given the current phase as ``earliest`` (see ``common.first_slot``): among offsets
that are otherwise equal it picks the one whose first slot comes soonest, so a gang with a free
choice starts at once instead of waiting up to a period for offset 0.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

import numpy as np

from volcano_metronome.core.cycle import commit
from volcano_metronome.core.decision import Decision
from volcano_metronome.core.holding import Hold, decide_or_hold, passes
from volcano_metronome.core.model import Gang
from volcano_metronome.core.reoptimize import reoptimise
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.policies import Context, Placement, SimPolicy
from volcano_metronome.sim.policies.common import first_slot, placeable, queue_order

#: Bounds of one re-optimisation (gangs moved, passes over the unfrozen gangs).
MAX_MOVES = 8
MAX_PASSES = 2


class Metronome(SimPolicy):
    """The core: node set and offset per gang, priorities, bounded re-optimisation."""

    name = "metronome"
    aligned = True

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        topo = ctx.topology
        scenario = ctx.scenario
        # Where the fabric has classes for it to hand out, its QueuePolicy lists them all (``core.classes``).
        self.policy = dataclasses.replace(scenario.policy, traffic_classes=ctx.traffic_classes)
        self.snapshot = Snapshot(topo, scenario.grid, np.full(len(topo.nodes), scenario.topology.gpus_per_node))
        self.capacity = topo.capacity_mbps
        self.links_of: dict[str, np.ndarray] = {}
        self.on_link: dict[int, set[str]] = {}
        self.dirty: set[int] = set()
        self.departed = False
        self._shifts: list[tuple[str, float | None]] = []
        self._periods: list[tuple[str, float]] = []
        self._wakeups: list[float] = []
        self.held_since: dict[str, float] = {}  # gangs held back (core.holding): since when
        self.reopt_ms: list[float] = []
        self.counts = {"decisions": 0, "sharing": 0, "sharing_zero_overflow": 0, "sharing_guarded_fit": 0,
                       "reoptimisations": 0, "moves": 0, "placed_unlocked": 0, "placed_locked": 0, "locks": 0,
                       "unlocks": 0, "relocations": 0,
                       "exact_locks": 0, "held": 0, "overtaken": 0}
        self.snapping: list[float] = []
        # For the TDM picture: per link, the most gangs ever on it at once and their phases then.
        self.crowd = self.stats.crowd

    def schedule(self, now: float, pending: Sequence[JobSpec]) -> list[Placement]:
        """One scheduling cycle over the pending gangs, then bounded re-optimisation."""
        out = []
        held: list[tuple[Gang, Hold]] = []  # held this cycle (core.holding.passes)
        for job in placeable(queue_order(pending, self.policy, now), self.snapshot.free_gpus):
            gang = job.gang()
            started = time.perf_counter()
            # The absolute slot: right whichever period (grid, local or exact snap) the gang gets.
            earliest = first_slot(now, self.snapshot.grid)
            held_s = now - self.held_since.get(gang.uid, now)
            result = decide_or_hold(self.snapshot, gang, self.policy, held_s, earliest)
            elapsed = (time.perf_counter() - started) * 1000.0
            if not isinstance(result, Decision):
                if isinstance(result, Hold):
                    held.append((gang, result))
                    if gang.uid not in self.held_since:
                        # First held: one wake-up when its wait runs out.
                        self.held_since[gang.uid] = now
                        self._wakeups.append(now + self.policy.max_hold_s)
                        self.counts["held"] += 1
                continue
            while (passed := passes(self.snapshot, held, gang, result)) is not None:
                held.remove(passed)
                self.counts["overtaken"] += 1
            self.held_since.pop(gang.uid, None)
            self.stats.decision_ms.append(elapsed)
            index = self.snapshot.topology.link_index
            links = np.array([index[name] for name in result.links], dtype=np.int64)
            self._count(result, links)
            commit(self.snapshot, gang, result)
            self._track(gang.uid, links)
            if not result.feasible or result.relocations:
                # Re-optimised where the placement has no guarded fit, or where it moved gangs on its links (their
                # phases changed there): the rule every round since round 9 measured, when a moved gang's decision
                # was judged infeasible against where its neighbours had been (docs/simulator-rounds.md, round 38).
                self.dirty.update(links.tolist())
            self.counts["relocations"] += len(result.relocations)
            self.counts["locks"] += len(result.locks)
            # Gangs locked now, and locked neighbours the lock re-arranged: each re-anchors on its new offset
            # (and, re-laid at a period in step with this gang's, on its new period).
            self._periods.extend(result.periods)
            self.counts["exact_locks"] += int(self._off_grid(result))
            rearranged = tuple(uid for uid, _ in result.relocations if uid not in result.locks)
            for uid in (*result.locks, *rearranged):
                self._shifts.append((uid, self.snapshot.placed[uid].offset * self.snapshot.grid.slot_ms))
            phased = len(links) > 0
            offset = result.offset_ms if phased and result.locked else None
            out.append(Placement(gang.uid, self.snapshot.topology.nodes_of(result.nodes), np.array(result.members),
                                 offset, result.period_ms if phased else None, result.traffic_class))
        self._reoptimise()
        if self.departed:
            self.departed = False
            self._unlock()
        return out

    def release(self, now: float, uid: str) -> None:
        """Forget the gang; its links may now let neighbours move to better offsets."""
        self.snapshot.depart(uid)
        links = self.links_of.pop(uid)
        for link in links.tolist():
            self.on_link[link].discard(uid)
        self.dirty.update(links.tolist())
        self.departed = True

    def shifts(self) -> list[tuple[str, float | None]]:
        """Offsets published since the last call: moves, locks (a number) and unlocks (None)."""
        out, self._shifts = self._shifts, []
        return out

    def periods(self) -> list[tuple[str, float]]:
        """New periods (ms) published since the last call: gangs a lock re-laid at a period in step with its decider's."""
        out, self._periods = self._periods, []
        return out

    def wakeups(self) -> list[float]:
        """When the gangs held back since the last call may wait no longer."""
        out, self._wakeups = self._wakeups, []
        return out

    def _off_grid(self, result: Decision) -> bool:
        """Whether the gang is locked at a period off the grid (its exact period: ``core.decision._exact``)."""
        grid = self.snapshot.grid
        return result.locked and grid.max_hyperperiod_slots % int(round(result.period_ms / grid.slot_ms)) != 0

    def _count(self, result: Decision, links: np.ndarray) -> None:
        self.counts["decisions"] += 1
        if len(links):
            self.snapping.append(result.snapping_error)
            self.counts["placed_locked" if result.locked else "placed_unlocked"] += 1
        if len(links) and self.snapshot.load[links].any():
            self.counts["sharing"] += 1
            self.counts["sharing_zero_overflow"] += int(result.overflow_gbps_ms == 0)
            self.counts["sharing_guarded_fit"] += int(result.feasible)

    def _track(self, uid: str, links: np.ndarray) -> None:
        self.links_of[uid] = links
        for link in links.tolist():
            members = self.on_link.setdefault(link, set())
            members.add(uid)
            if len(members) > len(self.crowd.get(link, ())):
                self.crowd[link] = [self._phase(u) for u in sorted(members)]

    def _phase(self, uid: str) -> dict[str, Any]:
        placed = self.snapshot.placed[uid]
        profile = placed.gang.profile
        return {"uid": uid, "offset_ms": placed.offset * self.snapshot.grid.slot_ms, "period_ms": placed.pattern.period.ms,
                "windows": [[w.start_ms, w.len_ms, w.gbps] for w in profile.windows], "priority": placed.gang.priority}

    def _reoptimise(self) -> None:
        if not self.dirty:
            return
        links = np.array(sorted(self.dirty), dtype=np.int64)
        self.dirty = set()
        if not (self.snapshot.load[links] > self.capacity[links, None]).any():
            return
        near = set().union(*(self.on_link.get(int(link), set()) for link in links))
        frozen = frozenset(self.snapshot.placed) - near
        started = time.perf_counter()
        result = reoptimise(self.snapshot, self.policy, max_moves=MAX_MOVES, max_passes=MAX_PASSES, frozen=frozen)
        self.reopt_ms.append((time.perf_counter() - started) * 1000.0)
        self.counts["reoptimisations"] += 1
        self.counts["moves"] += len(result.moves)
        for move in result.moves:
            self._shifts.append((move.uid, move.offset_ms))

    def _unlock(self) -> None:
        """Withdraw the offsets of locked gangs whose neighbours have all left (the product's re-optimisation pass)."""
        if not self.policy.lock_on_demand:
            return
        for uid in self.snapshot.unlockable():
            self.snapshot.unlock(uid)
            self.counts["unlocks"] += 1
            self._shifts.append((uid, None))

    def finish(self) -> None:
        """Sum up what the core did over the run."""
        c = self.counts
        self.stats.extra = {
            "link_sharing_decisions": c["sharing"],
            "zero_overflow_fraction": c["sharing_zero_overflow"] / c["sharing"] if c["sharing"] else None,
            "guarded_fit_fraction": c["sharing_guarded_fit"] / c["sharing"] if c["sharing"] else None,
            "reoptimisations": c["reoptimisations"],
            "offset_moves": c["moves"],
            "reopt_ms_p50": _pct(self.reopt_ms, 50),
            "reopt_ms_p99": _pct(self.reopt_ms, 99),
            "snapping_error_mean": float(np.mean(self.snapping)) if self.snapping else 0.0,
            "placed_unlocked": c["placed_unlocked"],
            "placed_locked": c["placed_locked"],
            "locks": c["locks"],
            "unlocks": c["unlocks"],
            "relocations": c["relocations"],
            "exact_locks": c["exact_locks"],
            "held_gangs": c["held"],
            "holds_overtaken": c["overtaken"],
        }


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


POLICY = Metronome
