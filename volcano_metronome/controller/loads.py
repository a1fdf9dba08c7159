"""The running gangs' link x slot loads, kept from cycle to cycle. PURE (no I/O, no clock).

Building a cycle's snapshot from every running gang costs seconds at 10,000 gangs. :class:`RunningLoads`
keeps one core snapshot of the running gangs instead and applies each cycle's differences: a gang
that left (or whose nodes, members, offset, profile, priority or lock changed) is forgotten, one that
arrived (or changed) is assumed. A cycle decides and re-optimises on that snapshot; whatever the cycle
assumed, moved or locked is rolled back when it ends, so the next cycle starts from the running gangs
as the objects describe them (this cycle's decisions come back as claims). Link means are worked out
from the whole-number loads and the hyperperiod folds back when a period leaves, so the snapshot
equals one built from scratch for the same running gangs (``tests/controller/test_incremental.py``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np

from volcano_metronome.controller.settings import Settings
from volcano_metronome.controller.views import World, running_gang
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.grid import lay_out
from volcano_metronome.core.model import Running
from volcano_metronome.core.snapshot import Placed, Snapshot
from volcano_metronome.core.topology import Topology


class RunningLoads:
    """A snapshot of the running gangs, kept current across cycles; see the module docstring."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._snap: Snapshot | None = None
        self._topology: Topology | None = None
        self._running: dict[str, Running] = {}  # what the snapshot holds (or failed to hold), by gang uid
        self._failed: dict[str, str] = {}  # uid -> why its traffic is not accounted for
        self._memo: dict[tuple[str, ...], tuple[object, Running | None]] = {}  # view -> its Running

    @contextmanager
    def snapshot(self, world: World) -> Iterator[tuple[Snapshot, list[str]]]:
        """The cycle's snapshot of ``world`` (and warnings about running gangs left out); rolled back on exit."""
        snap, warnings = self._update(world)
        before = dict(snap.placed)
        try:
            yield snap, warnings
        finally:
            _restore(snap, before)

    def running(self, world: World) -> list[Running]:
        """``world.running()``, re-deriving only the gangs and orphan claims whose views changed."""
        index = world.topology.node_index
        memo: dict[tuple[str, ...], tuple[object, Running | None]] = {}
        out: list[Running] = []
        for gang in world.gangs:
            if gang.placed and not gang.finished and gang.profile is not None and gang.claim is not None:
                key: tuple[str, ...] = ("gang", str(gang.key))
                hit = self._memo.get(key)
                r = hit[1] if hit is not None and hit[0] is gang else running_gang(
                    gang.claim, gang.profile, gang.priority, gang.gpus_per_member, gang.created_s, index, str(gang.key))
                memo[key] = (gang, r)
                if r is not None:
                    out.append(r)
        for claim in world.orphans:
            if claim.profile is not None:
                key = ("orphan", claim.namespace, claim.name)
                hit = self._memo.get(key)
                r = hit[1] if hit is not None and hit[0] is claim else running_gang(
                    claim, claim.profile, claim.priority or 0, 0, 0.0, index, f"{claim.namespace}/{claim.name}")
                memo[key] = (claim, r)
                if r is not None:
                    out.append(r)
        self._memo = memo
        return out

    def _update(self, world: World) -> tuple[Snapshot, list[str]]:
        if self._snap is None or world.topology is not self._topology:
            self._snap = Snapshot(world.topology, self.settings.grid, np.zeros(len(world.topology.nodes), np.int64))
            self._topology, self._running, self._failed, self._memo = world.topology, {}, {}, {}
        snap = self._snap
        running = self.running(world)
        now: dict[str, Running] = {}
        for r in running:
            now.setdefault(r.gang.uid, r)
        for uid in [u for u, r in self._running.items() if now.get(u) != r]:
            if uid in snap.placed:
                snap.forget(uid)
            del self._running[uid]
            self._failed.pop(uid, None)
        for uid in list(self._failed):  # retried: gangs that left may have made room (a shorter hyperperiod)
            del self._running[uid], self._failed[uid]
        warnings: list[str] = []
        seen: set[str] = set()
        for r in running:
            uid = r.gang.uid
            if uid in seen:  # two views of one claim: the second is refused, as a fresh snapshot refuses it
                exc = InvalidInput("gang.uid", uid, "a gang the snapshot does not hold yet")
                warnings.append(f"running gang {r.gang.name}: {exc}; its traffic is not accounted for")
                continue
            seen.add(uid)
            if uid in self._running:
                continue
            self._running[uid] = r
            try:
                _assume(snap, r)
            except InvalidInput as exc:
                self._failed[uid] = f"running gang {r.gang.name}: {exc}; its traffic is not accounted for"
                warnings.append(self._failed[uid])
        snap.fold()
        snap.free_gpus = np.array(world.free_gpus, dtype=np.int64)
        return snap, warnings


def _assume(snap: Snapshot, r: Running) -> None:
    grid = snap.grid
    nodes = snap.topology.nodes_of(r.nodes)
    offset = int(round(r.offset_ms / grid.slot_ms))
    pattern = lay_out(r.gang.profile, grid, grid.held(r.gang.profile.period_ms, r.period_ms))
    snap.assume(r.gang, nodes, np.array(r.members), offset, pattern, hold_gpus=False,
                locked=r.locked)


def _restore(snap: Snapshot, before: dict[str, Placed]) -> None:
    """Undo what a cycle did to ``snap``: gangs it assumed forgotten, gangs it moved or locked put back."""
    for uid in [u for u in snap.placed if u not in before]:
        snap.forget(uid)
    for uid, placed in before.items():
        current = snap.placed.get(uid)
        if current is placed:
            continue
        if current is not None:
            snap.forget(uid)
        snap.assume(placed.gang, placed.nodes, placed.members, placed.offset, placed.pattern, placed.holds_gpus,
                    placed.locked)
    snap.fold()
