"""Value types the scheduling core consumes: gangs, running placements, cluster state, policy."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.grid import SlotGrid
from volcano_metronome.core.profile import Profile
from volcano_metronome.core.topology import Topology

#: The longest ``Policy.max_hold_s``: an hour (a hold is a bounded wait, never admission control).
MAX_HOLD_S = 3600.0
#: Most traffic classes a fabric serves in priority (InfiniBand has 16 service levels; RoCE, 8 priorities).
MAX_TRAFFIC_CLASSES = 16


@dataclass(frozen=True)
class Gang:
    """A gang: ``size`` members that start together, each needing ``gpus_per_member`` GPUs on one node."""

    uid: str
    name: str
    size: int
    gpus_per_member: int
    profile: Profile
    priority: int = 0
    created_s: float = 0.0  # on the caller's clock; the core only compares and subtracts these
    nodes: frozenset[str] | None = None  # the nodes its members may run on (selectors, taints); None: any

    def __post_init__(self) -> None:
        if not self.uid:
            raise InvalidInput("gang.uid", self.uid, "a non-empty identifier")
        if self.nodes is not None and not isinstance(self.nodes, frozenset):
            raise InvalidInput(f"gang {self.name}: nodes", self.nodes, "a frozenset of node names or None")
        if not (isinstance(self.size, int) and self.size >= 1):
            raise InvalidInput(f"gang {self.name}: size", self.size, "an integer >= 1")
        if not (isinstance(self.gpus_per_member, int) and self.gpus_per_member >= 0):
            raise InvalidInput(f"gang {self.name}: gpus_per_member", self.gpus_per_member, "an integer >= 0")

    @property
    def gpus(self) -> int:
        """GPUs the whole gang needs."""
        return self.size * self.gpus_per_member


@dataclass(frozen=True)
class Running:
    """A gang that holds its nodes: members per node, and the offset of its windows (ms after the epoch).

    ``locked``: its runtime aligns bursts to the offset; ``period_ms``: the snapped period it was given,
    which a local snap (``core.decision``) may have made longer than its profile's snap. An unlocked gang
    shared no link when it was placed; its offset is provisional until a gang that shares a link locks
    it (``Decision.locks``).
    """

    gang: Gang
    nodes: tuple[str, ...]
    members: tuple[int, ...]
    offset_ms: float
    locked: bool = True
    period_ms: float | None = None  # the period published for it (``SlotGrid.held``); None: its profile's snap
    traffic_class: int | None = None  # the class published for it (``core.classes``); None: none (the fabric's default)

    def __post_init__(self) -> None:
        if len(self.nodes) != len(self.members) or not self.nodes:
            raise InvalidInput(f"gang {self.gang.name}: members", self.members, "one member count per node")
        if sum(self.members) != self.gang.size:
            raise InvalidInput(f"gang {self.gang.name}: members", self.members,
                               f"member counts summing to the gang size {self.gang.size}")
        k = self.traffic_class
        if k is not None and (isinstance(k, bool) or not (isinstance(k, int) and 0 <= k < MAX_TRAFFIC_CLASSES)):
            raise InvalidInput(f"gang {self.gang.name}: traffic_class", k,
                               f"an integer in [0, {MAX_TRAFFIC_CLASSES - 1}] or None")


@dataclass(frozen=True)
class ClusterState:
    """What the core needs to know about a cluster: its network, free GPUs and the running gangs."""

    topology: Topology
    free_gpus: tuple[int, ...]  # aligned with topology.nodes; GPUs not held by any pod
    running: tuple[Running, ...] = ()

    def __post_init__(self) -> None:
        if len(self.free_gpus) != len(self.topology.nodes):
            raise InvalidInput("free_gpus", len(self.free_gpus),
                               f"one entry per node ({len(self.topology.nodes)} nodes)")


class Ordering(str, enum.Enum):
    """How pending gangs are ordered (QueuePolicy ``spec.ordering``)."""

    STRICT_PRIORITY = "StrictPriority"
    FIFO = "FIFO"
    PRIORITY_WITH_AGING = "PriorityWithAging"


@dataclass(frozen=True)
class Policy:
    """The knobs of one QueuePolicy that the core uses (defaults are the chart's defaults)."""

    ordering: Ordering = Ordering.STRICT_PRIORITY
    aging_per_minute: float = 1.0  # priority points a waiting gang gains per minute (PriorityWithAging)
    priority_weight: float = 4.0  # extra cost of a Gbps*ms taken from a higher-priority gang
    cushion_slots: int = 0  # guard slots on each side of every window when testing feasibility
    overflow_tolerance: float = 0.05  # share of a higher-priority gang's traffic on a link we may delay
    max_candidates: int = 8  # node sets scored per gang (see core.placement)
    lock_on_demand: bool = True  # a gang that shares no link runs free (no padding) until one does
    max_hold_s: float = 60.0  # longest a gang is held back where every node set collides heavily (core.holding)
    traffic_classes: int = 0  # classes the fabric serves in priority that gangs are given (core.classes); 0: none
    grid: SlotGrid = field(default_factory=SlotGrid)

    def __post_init__(self) -> None:
        if not isinstance(self.ordering, Ordering):
            raise InvalidInput("policy.ordering", self.ordering, f"one of {[o.value for o in Ordering]}")
        if not self.aging_per_minute >= 0:
            raise InvalidInput("policy.aging_per_minute", self.aging_per_minute, "a number >= 0")
        if not self.priority_weight >= 0:
            raise InvalidInput("policy.priority_weight", self.priority_weight, "a number >= 0")
        if not (isinstance(self.cushion_slots, int) and 0 <= self.cushion_slots <= 100):
            raise InvalidInput("policy.cushion_slots", self.cushion_slots, "an integer in [0, 100]")
        if not 0.0 <= self.overflow_tolerance <= 1.0:
            raise InvalidInput("policy.overflow_tolerance", self.overflow_tolerance, "a fraction in [0, 1]")
        if not isinstance(self.lock_on_demand, bool):
            raise InvalidInput("policy.lock_on_demand", self.lock_on_demand, "true or false")
        if not (isinstance(self.max_candidates, int) and 1 <= self.max_candidates <= 256):
            raise InvalidInput("policy.max_candidates", self.max_candidates, "an integer in [1, 256]")
        hold = self.max_hold_s
        if isinstance(hold, bool) or not (isinstance(hold, (int, float)) and 0.0 <= hold <= MAX_HOLD_S):
            raise InvalidInput("policy.max_hold_s", self.max_hold_s, f"a number of seconds in [0, {MAX_HOLD_S:g}]")
        classes = self.traffic_classes
        if isinstance(classes, bool) or not (isinstance(classes, int) and 0 <= classes <= MAX_TRAFFIC_CLASSES):
            raise InvalidInput("policy.traffic_classes", classes, f"an integer in [0, {MAX_TRAFFIC_CLASSES}]")
