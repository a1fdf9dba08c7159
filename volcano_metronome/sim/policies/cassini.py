"""``cassini``: CASSINI (NSDI 2024) as a module on top of a topology-aware binpack scheduler.

The underlying scheduler proposes candidate placements: the lowest-tier binpack candidates of
``volcano-topology`` (one node, else up to ``max_candidates`` fitting racks, else the fewest racks).
For every candidate, CASSINI scores each link the gang would share: it rotates the gang's pattern
around the link's unified circle (the hyperperiod) against the load already there, takes the
rotation with the least overflow, and scores the link ``1 - overflow / demand``; the candidate's
score is the mean over its shared links. Candidates whose job/link affinity graph would contain a
loop are discarded (CASSINI's time-shifts are only consistent on loop-free graphs). Links that carry
exactly the same gangs are one constraint and count once, and both directions of a duplex link are
one link: the strongest honest reading. The best candidate wins (the underlying order breaks ties).

Time-shifts follow CASSINI's traversal of the affinity graph: the new gang takes the best rotation
on its first shared link; every other component it touches is rotated rigidly so that the gang's
rotation on the link joining them is that link's best. When every candidate loops, the underlying
scheduler's first candidate is taken, shifted against its first shared link only. The queue order
is the host scheduler's, i.e. the scenario's (``common.queue_order``); no priorities in the
placement rule, no re-optimisation on departures. Offsets live on the same slot grid as the core's.
Where CASSINI's rule leaves a tie (several rotations with the least overflow, or no shared link at
all), the rotation whose first slot comes soonest wins, as for ``metronome`` (``common.first_slot``).
A gang whose grid snap would pad its iteration by more than ``core.decision.OVERFILL`` (a short iteration on long
slots) runs free and is never shifted, as ``metronome`` leaves it without lock on demand: CASSINI shifts a job's
start, it does not hold a 6 ms iteration to a 20 ms slot (round 39 of docs/simulator-rounds.md).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Sequence

import numpy as np

from volcano_metronome.core import phasing
from volcano_metronome.core.decision import overpadded
from volcano_metronome.core.grid import Pattern, lay_out
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.core.traffic import loaded_links, scaled
from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.fluid import mirror_of
from volcano_metronome.sim.policies import Context, Placement, SimPolicy
from volcano_metronome.sim.policies.common import first_slot, placeable, queue_order, racks_of
from volcano_metronome.sim.policies.volcano_topology import lowest_tier


class Cassini(SimPolicy):
    """Per-link rotation compatibility, loop-free affinity graphs, propagated time-shifts."""

    name = "cassini"
    aligned = True
    # CASSINI takes the rotation with the least overflow, not one without, so its bursts collide by design
    # and the helper's premise after a collision (an accident the quarter-period bound ends) does not hold:
    # it keeps half a period (with the bound: better on 5 of 12 seeds tried, by up to 1.4 %, worse on 7, by
    # up to 3.9 %; docs/simulator-rounds.md round 13).
    collision_aware = False

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        topo, scenario = ctx.topology, ctx.scenario
        # The snapshot is used only as bookkeeping of link loads over the hyperperiod and free GPUs.
        self.snapshot = Snapshot(topo, scenario.grid, np.full(len(topo.nodes), scenario.topology.gpus_per_node))
        self.limit = scenario.policy.max_candidates
        self.physical = mirror_of(topo)
        self.rack = racks_of(topo)
        self.on_link: dict[int, set[str]] = {}
        self.links_of: dict[str, list[int]] = {}
        self._shifts: list[tuple[str, float | None]] = []
        self.counts = {"decisions": 0, "sharing": 0, "looped_all": 0, "discarded_loops": 0, "shifted": 0}

    def schedule(self, now: float, pending: Sequence[JobSpec]) -> list[Placement]:
        """Place pending gangs in the scenario's queue order (the host scheduler's)."""
        out = []
        for job in placeable(queue_order(pending, self.ctx.scenario.policy, now), self.snapshot.free_gpus):
            started = time.perf_counter()
            placed = self._decide(job, now)
            if placed is not None:  # as every policy: the decisions that placed a gang are timed
                self.stats.decision_ms.append((time.perf_counter() - started) * 1000.0)
                out.append(placed)
        return out

    def release(self, now: float, uid: str) -> None:
        """Forget the gang's load and GPUs."""
        self.snapshot.forget(uid)
        for link in self.links_of.pop(uid):
            self.on_link[link].discard(uid)

    def shifts(self) -> list[tuple[str, float | None]]:
        """Running gangs rotated by the last placements."""
        out, self._shifts = self._shifts, []
        return out

    def finish(self) -> None:
        """Report how often loops constrained the choice."""
        self.stats.extra = dict(self.counts)

    def _decide(self, job: JobSpec, now: float) -> Placement | None:
        snap = self.snapshot
        found = lowest_tier(snap.free_gpus, self.rack, job)[: self.limit]
        if not found:
            return None
        # CASSINI shifts jobs by the mean iteration it measures (the job's own profile), with no slack:
        # the slow end a noisy job's measurement gives (``JobSpec.measured``) is metronome's rule.
        gang = replace(job.gang(), profile=job.profile)
        pattern = lay_out(gang.profile, snap.grid)
        earliest = first_slot(now, snap.grid, pattern.slots)
        component: dict[str, int] | None = None
        scored = []
        for rank, (nodes, members) in enumerate(found):
            links, mult = loaded_links(snap.topology, nodes, members, gang.profile.collective)
            weight = dict(zip(self.physical[links].tolist(), mult.tolist()))
            physical = sorted(weight)
            groups: dict[frozenset[str], int] = {}
            for link in physical:
                if self.on_link.get(link):
                    groups.setdefault(frozenset(self.on_link[link]), link)
            shared = sorted(groups.items(), key=lambda kv: kv[1])
            loop = False
            if shared:
                component = component if component is not None else self._components()
                touched = [component[next(iter(gangs))] for gangs, _ in shared]
                loop = len(set(touched)) < len(touched)
            rotations = [self._rotation(link, pattern, earliest, weight[link]) for _, link in shared]
            score = float(np.mean([s for _, s in rotations])) if rotations else 1.0
            scored.append((loop, -score, rank, nodes, members, links, physical, shared, rotations))
        self.counts["decisions"] += 1
        self.counts["discarded_loops"] += sum(1 for s in scored if s[0])
        usable = [s for s in scored if not s[0]]
        if usable:
            _, _, _, nodes, members, links, physical, shared, rotations = min(usable, key=lambda s: (s[1], s[2]))
            propagate = True
        else:
            self.counts["looped_all"] += 1
            _, _, _, nodes, members, links, physical, shared, rotations = scored[0]
            propagate = False
        offset = rotations[0][0] if rotations else earliest
        if shared:
            self.counts["sharing"] += 1
        if propagate and len(shared) > 1:
            assert component is not None
            for (gangs, _), (best, _) in zip(shared[1:], rotations[1:]):
                self._rotate_component(component, component[next(iter(gangs))], offset - best)
        snap.assume(gang, nodes, members, offset, pattern)
        self.links_of[gang.uid] = physical
        for link in physical:
            self.on_link.setdefault(link, set()).add(gang.uid)
        if not len(links) or overpadded(pattern):
            return Placement(gang.uid, nodes, members)
        return Placement(gang.uid, nodes, members, offset * snap.grid.slot_ms, pattern.period.ms)

    def _rotation(self, link: int, pattern: Pattern, earliest: int, multiplier: float = 1.0) -> tuple[int, float]:
        """Best rotation of ``pattern`` against ``link``'s load, and CASSINI's compatibility score there.

        Among rotations with the same least overflow, the one reached first from ``earliest`` wins.
        """
        snap = self.snapshot
        period = pattern.slots
        base = snap.rows(np.array([link]), period)
        cap = snap.topology.capacity_mbps[[link]]
        added = phasing.added_overflow(phasing.fold(base, period), cap, np.full(1, multiplier),
                                       pattern.rates)[0]
        best = int(np.lexsort(((np.arange(period) - earliest) % period, added))[0])
        before = float(np.maximum(base - cap[:, None], 0).sum())
        demand = float(base.sum()) + float(scaled(multiplier, pattern.rates).sum()) * (base.shape[1] // period)
        return best, 1.0 - (before + float(added[best])) / demand if demand else 1.0

    def _components(self) -> dict[str, int]:
        """Connected components of the affinity graph (gangs joined by links they share)."""
        out: dict[str, int] = {}
        for label, start in enumerate(self.links_of):
            if start in out:
                continue
            out[start] = label
            stack = [start]
            while stack:
                uid = stack.pop()
                for link in self.links_of[uid]:
                    for other in self.on_link[link]:
                        if other not in out:
                            out[other] = label
                            stack.append(other)
        return out

    def _rotate_component(self, component: dict[str, int], label: int, delta: int) -> None:
        snap = self.snapshot
        for uid in [u for u, c in component.items() if c == label]:
            placed = snap.placed[uid]
            if overpadded(placed.pattern):  # runs free: never shifted
                continue
            moved = (placed.offset + delta) % placed.pattern.slots
            if moved == placed.offset:
                continue
            snap.forget(uid)
            snap.assume(placed.gang, placed.nodes, placed.members, moved, placed.pattern, placed.holds_gpus)
            self.counts["shifted"] += 1
            if len(placed.links):
                self._shifts.append((uid, moved * snap.grid.slot_ms))


POLICY = Cassini
