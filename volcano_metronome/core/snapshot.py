"""A cycle's working view of the cluster: link loads over the hyperperiod and free GPUs.

Like Kueue's scheduling snapshot, it is built once from a :class:`ClusterState` and then updated in
place as the cycle assumes decisions, so that each decision sees the ones before it. It holds no
I/O and no clock; callers own its lifetime.

Loads are whole Mbps in an ``int32`` array of ``links x hyperperiod`` slots; the hyperperiod is the
least common multiple of the periods of the gangs present, at most the grid's cap (which it divides
unless exact periods, off the grid, are present: ``core.decision._exact``). The array is the first
``hyperperiod`` columns of a wider one that repeats with the hyperperiod (as wide as the longest
hyperperiod seen, within the cap), so the hyperperiod shrinks when a period's last gang leaves and grows
back when one arrives without copying every link's loads each time.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from volcano_metronome.core.bottleneck import as_run
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.grid import Pattern, SlotGrid, SnappedPeriod, lay_out
from volcano_metronome.core.model import ClusterState, Gang, Running
from volcano_metronome.core.topology import Topology
from volcano_metronome.core.traffic import loaded_links, scaled


@dataclass(frozen=True, eq=False)
class Placed:
    """A gang the snapshot accounts for: where it runs and at which offset (slots after the epoch)."""

    gang: Gang
    pattern: Pattern
    nodes: np.ndarray
    members: np.ndarray
    links: np.ndarray
    multiplier: np.ndarray  # exact, float (core.traffic.loaded_links)
    offset: int
    holds_gpus: bool
    locked: bool = True  # see core.model.Running

    def row(self, hyperperiod: int) -> np.ndarray:
        """This gang's per-worker rate in every slot of the hyperperiod (before the link multiplier)."""
        return np.tile(np.roll(self.pattern.rates, self.offset), hyperperiod // self.pattern.slots)


class Snapshot:
    """Link loads and free GPUs for one scheduling cycle; see the module docstring."""

    def __init__(self, topology: Topology, grid: SlotGrid, free_gpus: np.ndarray) -> None:
        self.topology = topology
        self.grid = grid
        self.free_gpus = np.asarray(free_gpus, dtype=np.int64).copy()
        self.hyperperiod = 1
        self._wide = np.zeros((len(topology.links), 1), dtype=np.int32)  # repeats with the hyperperiod
        self.load = self._wide[:, :1]
        self.link_mean = np.zeros(len(topology.links))
        # Sum of the peak rates of the gangs on each link: when it fits the capacity, no phase of theirs can collide.
        self.link_peaks = np.zeros(len(topology.links), dtype=np.int64)
        # How many of the gangs it accounts for have members on each node (a rack where all are 0 holds none).
        self.gangs_on = np.zeros(len(topology.nodes), dtype=np.int64)
        self.placed: dict[str, Placed] = {}
        self._link_gangs: dict[int, set[str]] = {}
        self._periods: dict[int, int] = {}  # pattern length in slots -> how many placed gangs have it
        # While a dict: each gang's Placed (None: absent) before its first change since, so that a caller keeping
        # the snapshot across cycles can undo a cycle's changes in proportion to them (:meth:`rollback`).
        self.touched: dict[str, Placed | None] | None = None
        # The traffic class each placed gang was given (``core.classes``). Kept apart from ``Placed`` because a
        # gang's class never changes while moves, locks and re-lays re-assume it; dropped by :meth:`depart` and
        # :meth:`rollback`.
        self.classes: dict[str, int] = {}

    @classmethod
    def build(cls, state: ClusterState, grid: SlotGrid) -> "Snapshot":
        """A snapshot of ``state``; running gangs' GPUs are already missing from ``state.free_gpus``."""
        snap = cls(state.topology, grid, np.array(state.free_gpus))
        periods, hyperperiod = [], 1
        for r in state.running:
            profile = snap.as_run(r.gang, state.topology.nodes_of(r.nodes), np.array(r.members)).profile
            period = grid.held(profile.period_ms, r.period_ms)
            if math.lcm(hyperperiod, period.slots) > grid.max_hyperperiod_slots:
                # Only past the invariant every decision keeps (a changed profile's new snap beside exact periods,
                # a smaller cap): modelled at the nearest period that fits, the hyperperiod itself at worst.
                period = grid.fitting(profile.period_ms, hyperperiod) or SnappedPeriod(
                    hyperperiod, profile.period_ms, grid.slot_ms)
            periods.append(period)
            hyperperiod = math.lcm(hyperperiod, period.slots)
        snap._grow(hyperperiod)
        for running, period in zip(state.running, periods):
            snap.assume_running(running, period)
        return snap

    def as_run(self, gang: Gang, nodes: np.ndarray, members: np.ndarray | None) -> Gang:
        """``gang`` with the profile it runs with on ``nodes`` (``core.bottleneck``), within this grid's cap."""
        return as_run(gang, self.topology, nodes, members, self.grid.max_hyperperiod_ms)

    def assume_running(self, r: Running, period: SnappedPeriod | None = None) -> Placed:
        """Account for a running gang (its GPUs already taken) as it runs on its nodes, at the period published
        for it (or ``period``)."""
        nodes, members = self.topology.nodes_of(r.nodes), np.array(r.members)
        gang = self.as_run(r.gang, nodes, members)
        pattern = lay_out(gang.profile, self.grid, period or self.grid.held(gang.profile.period_ms, r.period_ms))
        offset = int(round(r.offset_ms / self.grid.slot_ms)) % pattern.slots
        if r.traffic_class is None:
            self.classes.pop(r.gang.uid, None)
        else:
            self.classes[r.gang.uid] = r.traffic_class
        return self.assume(gang, nodes, members, offset, pattern, hold_gpus=False, locked=r.locked)

    def rows(self, links: np.ndarray, period: int) -> np.ndarray:
        """Current load of ``links`` over ``lcm(hyperperiod, period)`` slots, as int64."""
        span = math.lcm(self.hyperperiod, period)
        rows = self.load[links].astype(np.int64)
        return np.tile(rows, (1, span // self.hyperperiod)) if span != self.hyperperiod else rows

    def higher_rows(self, links: np.ndarray, priority: int, period: int) -> np.ndarray | None:
        """Load of gangs with priority above ``priority`` on ``links`` (None when there is none)."""
        span = math.lcm(self.hyperperiod, period)
        out: np.ndarray | None = None
        for i, link in enumerate(links):
            for uid in self._link_gangs.get(int(link), ()):
                placed = self.placed[uid]
                if placed.gang.priority <= priority:
                    continue
                if out is None:
                    out = np.zeros((len(links), span), dtype=np.int64)
                where = int(np.searchsorted(placed.links, link))
                out[i] += scaled(placed.multiplier[where], placed.row(span))
        return out

    def assume(self, gang: Gang, nodes: np.ndarray, members: np.ndarray, offset: int,
               pattern: Pattern | None = None, hold_gpus: bool = True, locked: bool = True) -> Placed:
        """Account for ``gang`` on ``nodes`` at ``offset`` slots; takes its GPUs unless told they are taken."""
        if gang.uid in self.placed:
            raise InvalidInput("gang.uid", gang.uid, "a gang the snapshot does not hold yet")
        pattern = pattern or lay_out(gang.profile, self.grid)
        order = np.argsort(nodes)
        nodes, members = np.asarray(nodes)[order], np.asarray(members)[order]
        links, multiplier = loaded_links(self.topology, nodes, members, gang.profile.collective)
        placed = Placed(gang, pattern, nodes, members, links, multiplier, offset % pattern.slots, hold_gpus, locked)
        self._grow(math.lcm(self.hyperperiod, pattern.slots))
        self._note(gang.uid)
        self._apply(placed, +1)
        if hold_gpus:
            self.free_gpus[nodes] -= members * gang.gpus_per_member
        self.placed[gang.uid] = placed
        self._periods[placed.pattern.slots] = self._periods.get(placed.pattern.slots, 0) + 1
        for link in links:
            self._link_gangs.setdefault(int(link), set()).add(gang.uid)
        return placed

    def neighbours(self, links: np.ndarray, but: str = "") -> set[str]:
        """The gangs (other than ``but``) that load any of ``links``."""
        out: set[str] = set()
        for link in links:
            out |= self._link_gangs.get(int(link), set())
        out.discard(but)
        return out

    def contended(self, links: np.ndarray, extra_peaks: np.ndarray | int = 0) -> np.ndarray:
        """The links among ``links`` whose gangs' peak rates (plus ``extra_peaks``) could exceed capacity."""
        return np.asarray(links[self.link_peaks[links] + extra_peaks > self.topology.capacity_mbps[links]])

    def clean(self, uid: str) -> bool:
        """Whether no link of gang ``uid`` is over capacity in any slot where the gang sends."""
        placed = self.placed[uid]
        if not len(placed.links):
            return True
        sending = placed.row(self.hyperperiod) > 0
        load = self.load[placed.links][:, sending]
        return bool((load <= self.topology.capacity_mbps[placed.links][:, None]).all())

    def lock(self, uid: str) -> None:
        """Mark a gang's offset as binding (its runtime aligns from now on)."""
        self._note(uid)
        self.placed[uid] = dataclasses.replace(self.placed[uid], locked=True)

    def unlock(self, uid: str) -> None:
        """Mark a gang's offset as provisional again (its runtime runs free)."""
        self._note(uid)
        self.placed[uid] = dataclasses.replace(self.placed[uid], locked=False)

    def unlockable(self) -> list[str]:
        """Locked gangs that share no contended link any more: they may run free again."""
        return sorted(uid for uid, p in self.placed.items()
                      if p.locked and not self.neighbours(self.contended(p.links), but=uid))

    def forget(self, uid: str) -> Placed:
        """Remove a gang's load (and give back its GPUs if it took them)."""
        self._note(uid)
        placed = self.placed.pop(uid)
        left = self._periods[placed.pattern.slots] - 1
        if left:
            self._periods[placed.pattern.slots] = left
        else:
            del self._periods[placed.pattern.slots]
        self._apply(placed, -1)
        if placed.holds_gpus:
            self.free_gpus[placed.nodes] += placed.members * placed.gang.gpus_per_member
        for link in placed.links:
            self._link_gangs[int(link)].discard(uid)
        return placed

    def depart(self, uid: str) -> None:
        """Forget a gang that leaves for good (a re-assumed gang is forgotten only: it keeps its class)."""
        self.forget(uid)
        self.classes.pop(uid, None)

    def _note(self, uid: str) -> None:
        if self.touched is not None and uid not in self.touched:
            self.touched[uid] = self.placed.get(uid)

    def rollback(self) -> None:
        """Undo every change since :attr:`touched` was set to ``{}`` (assumes, forgets, locks), then stop noting."""
        touched, self.touched = self.touched or {}, None
        for uid, before in touched.items():
            current = self.placed.get(uid)
            if current is before:
                continue
            if current is not None:
                self.forget(uid)
            if before is not None:
                self.assume(before.gang, before.nodes, before.members, before.offset, before.pattern,
                            before.holds_gpus, before.locked)
            else:
                self.classes.pop(uid, None)  # a gang the cycle placed: its class goes with it
        self.fold()

    def _apply(self, placed: Placed, sign: int) -> None:
        self.gangs_on[placed.nodes] += sign
        if not len(placed.links):
            return
        row = placed.row(self._wide.shape[1])
        self._wide[placed.links] += (sign * scaled(placed.multiplier[:, None], row[None, :])).astype(np.int32)
        # From the whole-number loads, not accumulated: any history of assumes and forgets that leaves the same
        # loads leaves the same means, to the bit (a snapshot kept across cycles ranks candidates as a fresh one).
        self.link_mean[placed.links] = self.load[placed.links].sum(axis=1, dtype=np.int64) / self.hyperperiod
        self.link_peaks[placed.links] += sign * scaled(placed.multiplier, int(placed.pattern.rates.max()))

    def fold(self) -> None:
        """Shrink the hyperperiod to the least common multiple of the placed gangs' periods (after forgets)."""
        span = math.lcm(1, *self._periods)
        if span < self.hyperperiod:  # every load row repeats with ``span``: its first ``span`` slots are exact
            self.load = self._wide[:, :span]
            self.hyperperiod = span

    def _grow(self, hyperperiod: int) -> None:
        if hyperperiod == self.hyperperiod:
            return
        if hyperperiod > self.grid.max_hyperperiod_slots:
            raise InvalidInput("hyperperiod", hyperperiod, f"at most {self.grid.max_hyperperiod_slots} slots")
        wide = self._wide.shape[1]
        if wide % hyperperiod:  # wider than ever: the loads repeat with the hyperperiod, so copies extend them
            if math.lcm(wide, hyperperiod) <= self.grid.max_hyperperiod_slots:
                self._wide = np.tile(self._wide, (1, math.lcm(wide, hyperperiod) // wide))
            else:  # beside exact periods, hyperperiods no longer divide one another: start again at this one
                self._wide = np.tile(self.load, (1, hyperperiod // self.hyperperiod))
        self.load = self._wide[:, :hyperperiod]
        self.hyperperiod = hyperperiod
