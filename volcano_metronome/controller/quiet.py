"""The gangs a plan found quiet, kept from cycle to cycle by the caller (``reconcile.plan``). PURE."""

from __future__ import annotations

import dataclasses

from volcano_metronome.controller.views import GangKey, GangView
from volcano_metronome.core.topology import Topology


class Quiet:
    """Gangs whose last plan wrote nothing, with the view and network it was planned from.

    Planning such a gang again from the same view, on the same network, with no decision, move, lock
    or unlock for it, writes nothing again (the writes are differences, and none depends on the clock
    unless something is written): a cycle skips it. Kept by the caller from cycle to cycle. Between
    consecutive worlds of one Observer (``World.changed``) a cycle visits only the gangs that changed, the
    ones that were not quiet last time and those this cycle's decisions, moves, locks and unlocks name;
    the quiet gangs' part in the plan's counts is kept as sums.
    """

    def __init__(self) -> None:
        self.gangs: dict[GangKey, tuple[GangView, Topology, bool]] = {}  # -> (view, network, drifted)
        self.serial = -1
        self.loud: set[GangKey] = set()  # gangs visited last cycle that were not quiet
        self.uids: dict[str, set[GangKey]] = {}  # gang uid -> the gangs of that uid
        self._uid_of: dict[GangKey, str] = {}
        self.shares: dict[GangKey, _Share] = {}  # quiet gang -> its part in the counts
        self.totals = [0, 0, 0]  # the quiet gangs': pending, placed, drifted
        self.counts: dict[str, list[int]] = {}  # QueuePolicy -> the quiet gangs' (unfinished, placed)

    def index(self, key: GangKey, gang: GangView | None) -> None:
        """Note the uid of gang ``key`` (None: gone)."""
        old = self._uid_of.pop(key, None)
        if old is not None:
            keys = self.uids[old]
            keys.discard(key)
            if not keys:
                del self.uids[old]
        if gang is not None:
            self._uid_of[key] = gang.uid
            self.uids.setdefault(gang.uid, set()).add(key)

    def keep(self, key: GangKey, hit: tuple[GangView, Topology, bool], share: _Share) -> None:
        """Note ``key`` quiet."""
        self.gangs[key] = hit
        self.shares[key] = share
        self.totals[0] += share.pending
        self.totals[1] += share.placed
        self.totals[2] += hit[2]
        count = self.counts.setdefault(share.policy, [0, 0])
        count[0] += share.governed
        count[1] += share.governing_placed

    def drop(self, key: GangKey) -> None:
        """Note ``key`` no longer known to be quiet."""
        hit = self.gangs.pop(key, None)
        share = self.shares.pop(key, None)
        if hit is None or share is None:
            return
        self.totals[0] -= share.pending
        self.totals[1] -= share.placed
        self.totals[2] -= hit[2]
        count = self.counts[share.policy]
        count[0] -= share.governed
        count[1] -= share.governing_placed


@dataclasses.dataclass(frozen=True)
class _Share:
    """A gang's part in a plan's counts: pending, placed, and its QueuePolicy's unfinished and placed gangs."""

    policy: str
    pending: int
    placed: int
    governed: int
    governing_placed: int


def share_of(gang: GangView, decided: bool) -> _Share:
    """A gang's part in a plan's counts (``decided``: this cycle placed it)."""
    held = gang.placed and not gang.finished
    return _Share(gang.policy, int(gang.pending and not decided), int(held or decided), int(not gang.finished),
                  int(not gang.finished and (gang.placed or decided)))
