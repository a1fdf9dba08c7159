"""A scheduling cycle over a snapshot: order the pending gangs, decide each, assume each decision."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from volcano_metronome.core.decision import Decision, NoFit, decide
from volcano_metronome.core.grid import lay_out
from volcano_metronome.core.model import Gang, Policy
from volcano_metronome.core.ordering import order
from volcano_metronome.core.snapshot import Snapshot


def schedule(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy,
             now_s: float = 0.0) -> list[Decision | NoFit]:
    """Decide every pending gang in policy order; placed gangs are assumed into ``snapshot``.

    A gang that does not fit does not block the ones behind it (Kueue's BestEffortFIFO).
    """
    out: list[Decision | NoFit] = []
    for gang in order(pending, policy, now_s):
        result = decide(snapshot, gang, policy)
        if isinstance(result, Decision):
            commit(snapshot, gang, result)
        out.append(result)
    return out


def commit(snapshot: Snapshot, gang: Gang, decision: Decision) -> None:
    """Assume ``decision`` in ``snapshot``: its GPUs are taken, its links loaded, its neighbours locked."""
    nodes = snapshot.topology.nodes_of(decision.nodes)
    pattern = lay_out(gang.profile, snapshot.grid, snapshot.grid.held(gang.profile.period_ms, decision.period_ms))
    snapshot.assume(gang, nodes, np.array(decision.members), decision.offset_slots, pattern, locked=decision.locked)
    for uid, offset in decision.relocations:
        placed = snapshot.forget(uid)
        snapshot.assume(placed.gang, placed.nodes, placed.members, offset, placed.pattern, placed.holds_gpus,
                        locked=True)
    for uid in decision.locks:
        snapshot.lock(uid)
