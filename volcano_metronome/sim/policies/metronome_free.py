"""``metronome-free``: metronome's own placements with no offset ever published (the control for TDM).

Where the fabric has traffic classes for it to hand out, it publishes metronome's classes: they need no
clock, so the difference to ``metronome`` stays what the offsets alone buy.

The same core makes the same decisions (same candidates, same node sets, same queue order, same
re-optimisation bookkeeping), but nothing it decides about phases reaches the runtime: a placement
carries neither an offset nor a snapped period, and no shift (move, lock or unlock) is published.
Every gang runs free at its natural iteration time with no padding. The difference between
``metronome`` and ``metronome-free`` is what the phase offsets buy; the difference between
``metronome-free`` and ``volcano-topology`` is what the placement heuristic buys.
"""

from __future__ import annotations

from typing import Sequence

from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.policies import Placement
from volcano_metronome.sim.policies.metronome import Metronome


class MetronomeFree(Metronome):
    """metronome's placements; every gang runs free."""

    name = "metronome-free"
    aligned = False

    def schedule(self, now: float, pending: Sequence[JobSpec]) -> list[Placement]:
        """metronome's cycle, with the phase (offset and snapped period) of every placement dropped."""
        return [Placement(p.uid, p.nodes, p.members, traffic_class=p.traffic_class)
                for p in super().schedule(now, pending)]

    def shifts(self) -> list[tuple[str, float | None]]:
        """Nothing is ever published (the core's moves, locks and unlocks are discarded)."""
        super().shifts()
        return []

    def periods(self) -> list[tuple[str, float]]:
        """Nothing is ever published (the periods of gangs re-laid by a lock are discarded)."""
        super().periods()
        return []


POLICY = MetronomeFree
