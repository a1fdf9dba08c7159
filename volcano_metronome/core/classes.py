"""Traffic classes: which of the fabric's priority classes a newly placed gang's bursts use.

Where the fabric serves traffic classes in strict priority (InfiniBand service levels, RoCE priorities;
``Policy.traffic_classes``), a gang takes the class after the lowest-served one among the gangs already
on its links: 0 (served first) where it shares none, the last class once they run out. A newcomer is
never served before a gang already running on its links, so on a shared link its bursts fill the gaps
the incumbents' leave, and the two interleave without a clock (docs/simulator-rounds.md, round 22), so a
gang is locked only beside a gang of its own class (``classify``). A gang keeps its class to the end: NCCL reads ``NCCL_IB_SL`` / ``NCCL_IB_TC`` once, when it makes a
communicator. A gang that was given no class runs in the fabric's default, counted as class 0.

The simulator's fabric applies the same rule (``sim.engine``) when it gives every gang a class.
"""

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

    Bursts in different classes do not share a link's bandwidth: the higher class goes first and the lower
    fills its gaps, so they interleave with no clock, and a lock would only add its padding. Under noise the
    offsets lost to the classes alone on a third of the regime grid's seeds (round 23). A gang is locked as
    decided only beside a gang of its own class, once the classes have run out.
    """
    index = snapshot.topology.link_index
    shared = snapshot.neighbours(np.array([index[name] for name in decision.links], dtype=np.int64), but=decision.uid)
    theirs = [snapshot.classes.get(uid) for uid in shared]
    klass = next_class(theirs, classes)
    if any((0 if k is None else k) == klass for k in theirs):
        return dataclasses.replace(decision, traffic_class=klass)
    return dataclasses.replace(decision, traffic_class=klass, locked=False, locks=(), relocations=(), periods=())
