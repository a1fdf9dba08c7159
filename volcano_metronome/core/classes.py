"""Traffic classes: which of the fabric's priority classes a newly placed gang's bursts use.

Where the fabric serves traffic classes in strict priority (InfiniBand service levels, RoCE priorities;
``Policy.traffic_classes``), a gang takes the class after the lowest-served one among the gangs already
on its links: 0 (served first) where it shares none, the last class once they run out. A newcomer is
never served before a gang already running on its links, so on a shared link its bursts fill the gaps
the incumbents' leave, and the two interleave without a clock (docs/simulator-rounds.md, round 22);
so a gang is locked only beside a gang of its own class. Where its bursts cannot fit in their gaps, a
lower class would starve it: it shares the class of the lowest-served of them instead (``classify``).
A gang keeps its class to the end: NCCL reads ``NCCL_IB_SL`` / ``NCCL_IB_TC`` once, when it makes a
communicator. A gang that was given no class runs in the fabric's default, counted as class 0.

With ``execution.classes_from: start-order`` the simulator's fabric gives every gang the class of
``next_class`` (``sim.engine``), whatever its policy."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Iterable

import numpy as np

from volcano_metronome.core.snapshot import Snapshot

if TYPE_CHECKING:
    from volcano_metronome.core.decision import Decision


def next_class(neighbours: Iterable[int | None], classes: int) -> int:
    """The class after the lowest-served of ``neighbours`` (None: the default, 0), of ``classes``; 0 if none."""
    used = [0 if k is None else k for k in neighbours]
    return min(classes - 1, max(used) + 1) if used else 0


def classify(snapshot: Snapshot, decision: Decision, classes: int) -> Decision:
    """``decision`` with its gang's class among ``classes``, left free where no gang on its links shares the class.

    The class is the next one (``next_class``) where the gang's bursts fit in the gaps of its neighbours'
    (the decision found an offset without overflow), else the lowest-served neighbour's. Bursts in different
    classes do not share a link's bandwidth: the higher class goes first and the lower fills its gaps, so
    they interleave with no clock, and a lock would only add its padding (under noise the offsets lost to the
    classes alone on a third of the regime grid's seeds, round 23). A gang is locked as decided only beside a
    gang of its own class.
    """
    index = snapshot.topology.link_index
    shared = snapshot.neighbours(np.array([index[name] for name in decision.links], dtype=np.int64), but=decision.uid)
    theirs = [snapshot.classes.get(uid, 0) for uid in shared]  # a gang given no class is in the default, 0
    klass = next_class(theirs, classes)
    if theirs and decision.overflow_gbps_ms > 0:
        # Its bursts cannot all fit in the gaps of theirs (no offset is free of overflow): a class below theirs
        # would starve it, every burst waiting out the bursts above (round 23: +20 % p99, +2 % average on a
        # fresh scenario). It shares the lowest-served one's class instead, fairly, as on a fabric without classes.
        klass = max(theirs)
    if klass in theirs:
        return dataclasses.replace(decision, traffic_class=klass)
    return dataclasses.replace(decision, traffic_class=klass, locked=False, locks=(), relocations=(), periods=())
