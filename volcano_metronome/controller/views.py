"""The values a cycle works on: gangs, their pods and claims, and the observed world. PURE.

Built by ``controller.observe`` (kept between cycles by its ``Observer``, ``loads.RunningLoads`` and
``claimset``); read by deciding and planning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping, Sequence

from volcano_metronome.controller import ranks as ranking
from volcano_metronome.shapes import JSON
from volcano_metronome.shapes.times import parse_time
from volcano_metronome.controller.network import CapacityState
from volcano_metronome.controller.queuepolicy import ClassEnv, QueuePolicyView
from volcano_metronome.core.model import Gang, Running
from volcano_metronome.core.profile import Profile
from volcano_metronome.core.topology import Topology

PODGROUP, WORKLOAD, JOB = "PodGroup", "Workload", "Job"
GANG_KINDS = (PODGROUP, WORKLOAD, JOB)
# The resource table (shapes.resources) says the same; the deciding half may not import it (it builds URLs with
# urllib), so tests/controller/test_views.py holds the two equal.
GANG_API_VERSIONS = {PODGROUP: "scheduling.volcano.sh/v1beta1", WORKLOAD: "kueue.x-k8s.io/v1beta2", JOB: "batch/v1"}
RELEASED = "Released"
PODS_TIMEOUT = "PodsTimeout"  # Placed=False reason (and Event) of a claim released because its pods did not come
# The claim status field that keeps a held gang's hold start (core.holding) across controller restarts.
HELD_SINCE = "heldSince"


@dataclass(frozen=True, order=True)
class GangKey:
    """A gang's identity: the namespace, kind (PodGroup, Workload or Job) and name of its object."""

    namespace: str
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


@dataclass(frozen=True)
class PodView:
    """What a cycle needs of one pod of a gang."""

    namespace: str
    name: str
    resource_version: str
    gated: bool  # our gate is still on it
    gates: tuple[str, ...]
    node_name: str | None  # bound to
    pinned: str | None  # the node our affinity pins it to (when it names one node)
    gpus: int
    priority: int
    created_s: float
    annotations: Mapping[str, str]
    obj: JSON = field(compare=False, repr=False)
    allowed: tuple[str, ...] | None = None  # the node set our affinity confines it to
    ranks: Mapping[str, ranking.Key] = field(default_factory=dict)  # rank sort keys by source (controller.ranks)
    volcano_role: str = ""  # its Volcano task role when Volcano schedules it ("" otherwise)


@dataclass(frozen=True)
class ClaimView:
    """An STBandwidthClaim as the cycle reads it."""

    namespace: str
    name: str
    resource_version: str
    generation: int
    gang_ref: GangKey | None
    ours: bool  # created by the controller (label metronome.dev/managed=true)
    profile: Profile | None
    priority: int | None
    queue_policy: str | None
    placed: bool  # holds nodes (status.nodes non-empty and not released)
    nodes: tuple[str, ...]
    members: tuple[int, ...]
    offset_ms: float
    period_ms: float
    epoch_ms: int
    conditions: tuple[JSON, ...]
    status: JSON = field(compare=False, repr=False)
    locked: bool = True  # status.locked: its pods carry the offset and epoch, its runtime aligns bursts
    traffic_class: int | None = None  # status.trafficClass: the class its pods carry (QueuePolicy trafficClasses)
    traffic_class_env: ClassEnv = ()  # status.trafficClassEnv: the variables that select it, sorted by name

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name)."""
        return self.namespace, self.name

    @property
    def overflow_gbps_ms(self) -> float:
        """Its part in the predicted overflow gauge: ``status.predictedOverflowGbpsMs`` while it holds nodes, else 0
        (also for a value that is not a finite number: the gauge sums what the decisions predicted)."""
        if not self.placed:
            return 0.0
        try:
            value = float(self.status.get("predictedOverflowGbpsMs") or 0.0)
        except (TypeError, ValueError):
            return 0.0
        return value if math.isfinite(value) else 0.0

    def origin_offset_ms(self) -> float:
        """The offset relative to the Unix epoch, modulo the period: every claim on one time axis."""
        if self.period_ms <= 0:
            return 0.0
        return math.fmod(math.fmod(float(self.epoch_ms), self.period_ms) + self.offset_ms, self.period_ms)


@dataclass(frozen=True)
class AdmissionCheckState:
    """Our AdmissionCheck on one Workload."""

    name: str  # the AdmissionCheck's name
    state: str | None  # Pending, Ready, Retry, Rejected (None: Kueue has not listed it yet)
    message: str
    quota_reserved: bool
    entries: tuple[JSON, ...]  # the workload's whole status.admissionChecks list
    pod_sets: tuple[JSON, ...]  # spec.podSets


@dataclass(frozen=True)
class GangView:
    """A gang: where its numbers come from, its pods, its claim, and whether it may be decided now."""

    key: GangKey
    obj: JSON | None = field(compare=False, repr=False)
    claim_name: str
    claim: ClaimView | None
    profile: Profile | None
    profile_error: str
    size: int
    gpus_per_member: int
    priority: int
    created_s: float
    pods: tuple[PodView, ...]  # live (non-terminal) pods
    policy: str  # QueuePolicy name ("" for the built-in default)
    volcano_queue: str | None = None
    cluster_queue: str | None = None
    check: AdmissionCheckState | None = None
    finished: bool = False
    waiting_for: str = ""  # why it is not decidable yet ("" when it is)
    nodes: frozenset[str] | None = None  # the nodes its pods' selectors, affinity and tolerations admit
    hostnames: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)  # node -> hostname label

    @cached_property  # read several times per gang and cycle, of tens of thousands of gangs
    def uid(self) -> str:
        """The core's id for this gang: the claim's namespace/name (unique, stable across restarts)."""
        return f"{self.key.namespace}/{self.claim_name}"

    @property
    def placed(self) -> bool:
        """Its claim holds nodes."""
        return self.claim is not None and self.claim.placed

    @property
    def held_since(self) -> float | None:
        """When its claim says it was first held back (``status.heldSince``, Unix seconds), or None."""
        return parse_time(self.claim.status.get(HELD_SINCE)) if self.claim is not None else None

    @property
    def unreserved(self) -> bool:
        """A Workload under our AdmissionCheck whose quota Kueue does not (or no longer) reserve."""
        return self.check is not None and not self.check.quota_reserved

    @property
    def pending(self) -> bool:
        """Not placed, not finished, and everything needed for a decision is there."""
        return not self.placed and not self.finished and not self.waiting_for and self.profile is not None

    def core_gang(self) -> Gang:
        """The core's value for this gang (requires a profile)."""
        assert self.profile is not None
        return Gang(uid=self.uid, name=str(self.key), size=self.size, gpus_per_member=self.gpus_per_member,
                    profile=self.profile, priority=self.priority, created_s=self.created_s, nodes=self.nodes)


@dataclass(frozen=True)
class Changed:
    """What the informers reported since the last cycle: the current objects under every changed key.

    ``pods``: (namespace, name) -> (the managed pod, the bound pod), None where that store no longer holds
    it; ``nodes``: name -> the node, None when deleted; ``claims``, ``podgroups``, ``workloads``:
    (namespace, name) -> the object, None when deleted (the whole mapping None: not tracked, every object is
    read). The Observer reads only these between full builds.
    """

    pods: Mapping[tuple[str, str], tuple[JSON | None, JSON | None]] = field(default_factory=dict)
    nodes: Mapping[str, JSON | None] = field(default_factory=dict)
    claims: Mapping[tuple[str, str], JSON | None] | None = None
    podgroups: Mapping[tuple[str, str], JSON | None] | None = None
    workloads: Mapping[tuple[str, str], JSON | None] | None = None


@dataclass(frozen=True)
class Inputs:
    """Every object a cycle reads, as the informers hold them."""

    nodes: Sequence[JSON] = ()
    pods: Sequence[JSON] = ()  # managed pods (label metronome.dev/managed=true)
    bound_pods: Sequence[JSON] = ()  # every non-terminal pod bound to a node
    podgroups: Sequence[JSON] = ()
    workloads: Sequence[JSON] = ()
    admission_checks: Sequence[JSON] = ()
    cluster_queues: Sequence[JSON] = ()
    resource_flavors: Sequence[JSON] = ()
    claims: Sequence[JSON] = ()
    capacities: Sequence[JSON] = ()
    hypernodes: Sequence[JSON] = ()
    queue_policies: Sequence[JSON] = ()
    changed: Changed | None = None  # None: no record of changes, every pod and node is read


@dataclass(frozen=True)
class World:
    """The observed cluster, ready for the core."""

    topology: Topology
    topology_source: str
    allocatable: tuple[int, ...]
    free_gpus: tuple[int, ...]  # already net of placed gangs' reservations
    gangs: tuple[GangView, ...]
    orphans: tuple[ClaimView, ...]  # claims holding nodes whose gang is gone or finished
    claims: Mapping[tuple[str, str], ClaimView]
    policies: tuple[QueuePolicyView, ...]
    our_checks: frozenset[str]
    admission_checks: tuple[JSON, ...]
    warnings: tuple[str, ...] = ()
    # Which Observer world this is (1, 2, ... per Observer) and the gangs whose view differs from world
    # ``serial - 1``'s (added and removed ones included); None: unknown, treat every gang as changed. Kept
    # state downstream (running loads, drift, the plan) reworks only these when it saw the world before.
    serial: int = field(default=0, compare=False)
    changed: frozenset[GangKey] | None = field(default=None, compare=False, repr=False)
    index: Mapping[GangKey, GangView] = field(default_factory=dict, compare=False, repr=False)  # gangs by key
    pending: frozenset[GangKey] | None = field(default=None, compare=False, repr=False)  # keys of the pending gangs
    # The claims' predicted overflow summed, kept by the Observer as claims change (None: sum them).
    overflow: float | None = field(default=None, compare=False, repr=False)
    capacities: tuple[CapacityState, ...] = ()  # what became of each STBandwidthCapacity (its status)

    def predicted_overflow(self) -> float:
        """The placed claims' predicted overflow, summed (Gbps*ms per period; exactly rounded)."""
        if self.overflow is not None:
            return self.overflow
        return math.fsum(c.overflow_gbps_ms for c in self.claims.values())

    def pending_gangs(self) -> list[GangView]:
        """The gangs to decide, in the gangs' order (from :attr:`pending` when the Observer listed them)."""
        if self.pending is None or not self.index:
            return [g for g in self.gangs if g.pending]
        return [self.index[k] for k in sorted(self.pending) if self.index[k].pending]

    def running(self) -> tuple[Running, ...]:
        """Gangs holding nodes (placed claims, orphans included until released) as the core's values."""
        out: list[Running] = []
        index = self.topology.node_index
        for gang in self.gangs:
            if gang.placed and not gang.finished and gang.profile is not None and gang.claim is not None:
                r = running_gang(gang.claim, gang.profile, gang.priority, gang.gpus_per_member, gang.created_s,
                             index, str(gang.key))
                if r is not None:
                    out.append(r)
        for claim in self.orphans:
            if claim.profile is not None:
                r = running_gang(claim, claim.profile, claim.priority or 0, 0, 0.0, index, f"{claim.namespace}/{claim.name}")
                if r is not None:
                    out.append(r)
        return tuple(out)


def running_gang(claim: ClaimView, profile: Profile, priority: int, gpm: int, created: float,
                 index: Mapping[str, int], label: str) -> Running | None:
    """A placed claim's gang as the core's running gang (None when none of its nodes is left)."""
    # Nodes that left the cluster no longer carry this gang's traffic.
    kept = [(n, m) for n, m in zip(claim.nodes, claim.members) if n in index and m > 0]
    if not kept:
        return None
    gang = Gang(uid=f"{claim.namespace}/{claim.name}", name=label, size=sum(m for _, m in kept),
                gpus_per_member=gpm, profile=profile, priority=priority, created_s=created)
    return Running(gang, tuple(n for n, _ in kept), tuple(m for _, m in kept), claim.origin_offset_ms(),
                   locked=claim.locked, period_ms=claim.period_ms or None, traffic_class=claim.traffic_class)
