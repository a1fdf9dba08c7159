"""A scheduling cycle over a snapshot: order the pending gangs, decide each, assume each decision."""

from __future__ import annotations

import dataclasses
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

    A gang that does not fit does not block the ones behind it (Kueue's BestEffortFIFO). No gang is held back
    (``core.holding`` needs how long each has been held, which the shells keep: ``controller.deciding`` and the
    simulator's policy call ``core.holding.decide_or_hold`` instead).
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
    grid = snapshot.grid
    nodes = snapshot.topology.nodes_of(decision.nodes)
    periods, offsets = dict(decision.periods), dict(decision.relocations)
    for uid in sorted(periods.keys() | offsets.keys()):  # re-laid first: the relocations' offsets are on the new periods
        placed = snapshot.forget(uid)
        pattern = placed.pattern
        if uid in periods:
            pattern = lay_out(placed.gang.profile, grid, grid.held(placed.gang.profile.period_ms, periods[uid]))
        snapshot.assume(placed.gang, placed.nodes, placed.members, offsets.get(uid, placed.offset), pattern,
                        placed.holds_gpus, locked=True)
    if decision.profile is not None:  # throttled by a slow link on these nodes: planned as it runs there
        gang = dataclasses.replace(gang, profile=decision.profile)
    pattern = lay_out(gang.profile, grid, grid.held(gang.profile.period_ms, decision.period_ms))
    snapshot.assume(gang, nodes, np.array(decision.members), decision.offset_slots, pattern, locked=decision.locked)
    if decision.traffic_class is not None:
        snapshot.classes[gang.uid] = decision.traffic_class
    for uid in decision.locks:
        snapshot.lock(uid)
