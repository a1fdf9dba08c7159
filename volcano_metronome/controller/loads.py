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
from typing import Iterable, Iterator

import numpy as np

from volcano_metronome.controller.settings import Settings
from volcano_metronome.controller.views import ClaimView, GangKey, World, running_gang
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.model import Running
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.core.topology import Topology


#: A contributor of a running gang, in the order a fresh build meets them: gangs by key, then orphan claims.
_Cid = tuple[int, str, str, str]  # (0, namespace, kind, name) of a gang; (1, namespace, name, "") of an orphan


class RunningLoads:
    """A snapshot of the running gangs, kept current across cycles; see the module docstring.

    Between consecutive worlds of one Observer only the gangs ``World.changed`` names (and the orphan claims
    that changed) are turned into running gangs again; a claim's uid held by several of them counts once, for
    the first in a fresh build's order, as :func:`deciding.snapshot` counts it.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._snap: Snapshot | None = None
        self._topology: Topology | None = None
        self._serial = -1
        self._contrib: dict[_Cid, Running] = {}  # every gang and orphan claim that is a running gang
        self._by_uid: dict[str, set[_Cid]] = {}  # uid -> its contributors
        self._held: dict[str, Running] = {}  # what the snapshot holds, by uid
        self._failed: dict[str, tuple[_Cid, str]] = {}  # uid -> (its contributor, why its traffic is left out)
        self._dups: set[str] = set()  # uids of more than one contributor
        self._orphans: tuple[ClaimView, ...] | None = None
        self._orphan_views: dict[tuple[str, str], ClaimView] = {}

    @contextmanager
    def snapshot(self, world: World) -> Iterator[tuple[Snapshot, list[str]]]:
        """The cycle's snapshot of ``world`` (and warnings about running gangs left out); rolled back on exit."""
        snap, warnings = self._update(world)
        snap.touched = {}  # what the cycle assumes, moves or locks: undone when it ends
        try:
            yield snap, warnings
        finally:
            snap.rollback()

    def _update(self, world: World) -> tuple[Snapshot, list[str]]:
        if self._snap is None or world.topology is not self._topology:
            self._snap = Snapshot(world.topology, self.settings.grid, np.zeros(len(world.topology.nodes), np.int64))
            self._topology, self._contrib, self._by_uid, self._held, self._failed = world.topology, {}, {}, {}, {}
            self._dups = set()
            self._orphans, self._orphan_views = None, {}
            self._serial = -1
        snap = self._snap
        full = world.changed is None or world.serial != self._serial + 1
        self._serial = world.serial
        index = world.index if world.index or not world.gangs else {g.key: g for g in world.gangs}
        affected: set[str] = set()
        if full:
            keys: Iterable[GangKey] = set(index) | {GangKey(c[1], c[2], c[3]) for c in self._contrib if c[0] == 0}
        else:
            assert world.changed is not None
            keys = world.changed
        nodes = world.topology.node_index
        for key in keys:
            gang = index.get(key)
            r = None
            if gang is not None and gang.placed and not gang.finished and gang.profile is not None and (
                    gang.claim is not None):
                r = running_gang(gang.claim, gang.profile, gang.priority, gang.gpus_per_member, gang.created_s, nodes,
                                 str(gang.key))
            self._set((0, key.namespace, key.kind, key.name), r, affected)
        if full or world.orphans is not self._orphans:
            now = {c.key: c for c in world.orphans}
            for k in set(self._orphan_views) | set(now):
                claim = now.get(k)
                if not full and self._orphan_views.get(k) is claim:
                    continue
                r = None
                if claim is not None and claim.profile is not None:
                    r = running_gang(claim, claim.profile, claim.priority or 0, 0, 0.0, nodes,
                                     f"{claim.namespace}/{claim.name}")
                self._set((1, k[0], k[1], ""), r, affected)
            self._orphans, self._orphan_views = world.orphans, now
        for uid in sorted(affected | set(self._failed)):  # failed ones retried: gangs that left may have made room
            self._settle(snap, uid)
        snap.fold()
        snap.free_gpus = np.array(world.free_gpus, dtype=np.int64)
        return snap, self._warnings()

    def _set(self, cid: _Cid, r: Running | None, affected: set[str]) -> None:
        old = self._contrib.get(cid)
        if old == r:
            return
        if old is not None:
            del self._contrib[cid]
            users = self._by_uid[old.gang.uid]
            users.discard(cid)
            if not users:
                del self._by_uid[old.gang.uid]
            if len(users) < 2:
                self._dups.discard(old.gang.uid)
            affected.add(old.gang.uid)
        if r is not None:
            self._contrib[cid] = r
            users = self._by_uid.setdefault(r.gang.uid, set())
            users.add(cid)
            if len(users) > 1:
                self._dups.add(r.gang.uid)
            affected.add(r.gang.uid)

    def _settle(self, snap: Snapshot, uid: str) -> None:
        """Make the snapshot hold the running gang of ``uid``'s first contributor (or nothing)."""
        users = self._by_uid.get(uid)
        owner = min(users) if users else None
        desired = self._contrib[owner] if owner is not None else None
        if desired is not None and self._held.get(uid) == desired and uid not in self._failed:
            return
        if uid in snap.placed:
            snap.depart(uid)
        self._held.pop(uid, None)
        self._failed.pop(uid, None)
        if desired is None or owner is None:
            return
        try:
            snap.assume_running(desired)
        except InvalidInput as exc:
            self._failed[uid] = (owner, f"running gang {desired.gang.name}: {exc}; its traffic is not accounted for")
        else:
            self._held[uid] = desired

    def _warnings(self) -> list[str]:
        """Running gangs left out, in a fresh build's order: those the snapshot refused, second views of a claim."""
        out: list[tuple[_Cid, str]] = list(self._failed.values())
        for uid in self._dups:
            exc = InvalidInput("gang.uid", uid, "a gang the snapshot does not hold yet")
            out.extend((cid, f"running gang {self._contrib[cid].gang.name}: {exc}; its traffic is not accounted for")
                       for cid in sorted(self._by_uid[uid])[1:])
        return [message for _, message in sorted(out)]

