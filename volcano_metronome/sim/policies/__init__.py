"""Scheduling policies the simulator compares, one module each, behind one small interface.

A policy sees the pending jobs at every scheduling cycle (after arrivals and completions) and returns
the placements it makes; it is told when a job ends. Policies that phase gangs (``aligned``) give
each placement that loads links the snapped period of its grid and, unless the gang runs free (lock
on demand), an offset on that grid; they may later publish new offsets to running gangs, or
withdraw them (``shifts``). The engine's runtime helper aligns bursts to what is published. Every
policy keeps its own view of free GPUs; the engine checks each placement against its own ledger.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.topology import Topology
from volcano_metronome.scenario import JobSpec, Scenario

#: Policy name -> module under volcano_metronome.sim.policies (each defines ``POLICY``).
POLICIES: dict[str, str] = {
    "default": "default",
    "volcano-topology": "volcano_topology",
    "exclusive": "exclusive",
    "cassini": "cassini",
    "metronome": "metronome",
    "metronome-free": "metronome_free",
}


@dataclass(frozen=True, eq=False)
class Placement:
    """Where a job runs; for phased policies also the snapped period and the offset on it (ms after the epoch)."""

    uid: str
    nodes: np.ndarray  # node indices
    members: np.ndarray  # members on each node
    offset_ms: float | None = None  # None with a period: the gang runs free until an offset is published
    period_ms: float | None = None
    traffic_class: int | None = None  # the fabric's class it is given (``core.classes``); None: the default, 0


@dataclass(frozen=True, eq=False)
class Context:
    """What a policy is built from."""

    scenario: Scenario
    topology: Topology
    seed: int
    traffic_classes: int = 0  # classes the fabric serves in priority that a policy may hand out; 0: none


@dataclass
class Stats:
    """Measurements a policy reports: decision latencies (ms), figures for the report, phases to draw."""

    decision_ms: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    #: Per link id: the gangs on it at its most crowded moment (uid, offset_ms, period_ms, windows, priority).
    crowd: dict[int, list[dict[str, Any]]] = field(default_factory=dict)


class SimPolicy:
    """Base class: subclasses implement ``schedule`` and may override ``release`` and ``shifts``."""

    name = ""
    aligned = False
    #: Whether the gangs' runtime helper holds bursts to a quarter period late after a collision
    #: (``runtime.aim_and_arm``); a policy whose plans collide by design keeps half a period throughout.
    collision_aware = True

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.stats = Stats()

    def schedule(self, now: float, pending: Sequence[JobSpec]) -> list[Placement]:
        """Place what can be placed now; jobs not placed stay pending."""
        raise NotImplementedError

    def release(self, now: float, uid: str) -> None:
        """A placed job has ended: give its resources back."""

    def periods(self) -> list[tuple[str, float]]:
        """New periods (ms) published to running gangs since the last call (before their ``shifts``)."""
        return []

    def shifts(self) -> list[tuple[str, float | None]]:
        """What changed for running gangs since the last call, as ``(uid, offset_ms)``.

        A number is a new offset (a gang that ran free is thereby locked); None withdraws the offset
        (the gang is unlocked and runs free).
        """
        return []

    def wakeups(self) -> list[float]:
        """Times (s) at which a cycle must run although nothing arrives or ends (a held gang's last wait)."""
        return []

    def finish(self) -> None:
        """The run is over: fill ``stats.extra`` with whatever the policy wants reported."""


def make(name: str, ctx: Context) -> SimPolicy:
    """The policy called ``name``."""
    if name not in POLICIES:
        raise InvalidInput("policy", name, f"one of {', '.join(POLICIES)}")
    module = importlib.import_module(f"volcano_metronome.sim.policies.{POLICIES[name]}")
    policy: SimPolicy = module.POLICY(ctx)
    return policy


def parse_names(text: str) -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``, every name checked, order kept, duplicates dropped."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise InvalidInput("--policies", text, f"a comma-separated list of {', '.join(POLICIES)}")
    for n in names:
        if n not in POLICIES:
            raise InvalidInput("--policies", n, f"one of {', '.join(POLICIES)}")
    return list(dict.fromkeys(names))
