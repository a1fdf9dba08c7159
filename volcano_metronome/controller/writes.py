"""The writes a cycle plans, one gang at a time, in the order the writer applies them. PURE values."""

from __future__ import annotations

from dataclasses import dataclass

from volcano_metronome.controller import vanished
from volcano_metronome.shapes import JSON
from volcano_metronome.core.decision import Decision, NoFit
from volcano_metronome.core.reoptimize import Move


LOCKED, UNLOCKED, REDECIDING, TIMED_OUT = "Locked", "Unlocked", vanished.REDECIDING, "PodsTimeout"


@dataclass(frozen=True)
class CreateClaim:
    """Create an STBandwidthClaim (AlreadyExists is fine: someone, maybe we, made it)."""

    namespace: str
    name: str
    body: JSON


@dataclass(frozen=True)
class ClaimStatus:
    """Merge-patch a claim's status, conditional on ``resource_version`` (None: the one just created)."""

    namespace: str
    name: str
    resource_version: str | None
    status: JSON


@dataclass(frozen=True)
class DeleteClaim:
    """Delete a claim the controller created, once its gang is gone."""

    namespace: str
    name: str
    resource_version: str


@dataclass(frozen=True)
class PodPatch:
    """Merge-patch one pod, conditional on its resourceVersion."""

    namespace: str
    name: str
    resource_version: str
    patch: JSON
    ungates: bool


@dataclass(frozen=True)
class DeletePod:
    """Delete a pod stranded on a vanished node (``controller.vanished``), conditional on its uid and
    resourceVersion: a pod bound or changed since it was read is left alone."""

    namespace: str
    name: str
    uid: str
    resource_version: str


@dataclass(frozen=True)
class WorkloadCheck:
    """Set the whole ``status.admissionChecks`` list of a Workload (ours changed), conditionally."""

    namespace: str
    name: str
    resource_version: str
    entries: tuple[JSON, ...]
    state: str


@dataclass(frozen=True)
class StatusPatch:
    """Merge-patch the status of a cluster-scoped object (AdmissionCheck, QueuePolicy, STBandwidthCapacity)."""

    kind: str  # "AdmissionCheck", "QueuePolicy" or "STBandwidthCapacity"
    name: str
    status: JSON


@dataclass(frozen=True)
class Event:
    """An Event about ``regarding`` (an object reference)."""

    regarding: JSON
    reason: str
    note: str
    type: str = "Normal"


Write = CreateClaim | ClaimStatus | DeleteClaim | PodPatch | DeletePod | WorkloadCheck | StatusPatch | Event


@dataclass(frozen=True)
class GangWrites:
    """One gang's writes, in order: ``claim`` one by one, then ``pods`` (in any order), then ``after``.

    ``requires`` names other gangs of the plan whose claim writes must succeed first (a deciding gang
    waits for the locks its decision takes); when they fail, this gang waits a cycle.
    ``vanished`` names nodes the writer must find gone from the API server before it writes anything
    of this gang (a gang re-decided because they vanished).
    """

    gang: str
    claim: tuple[CreateClaim | ClaimStatus | DeleteClaim, ...] = ()
    pods: tuple[PodPatch | DeletePod, ...] = ()
    after: tuple[WorkloadCheck | Event, ...] = ()
    placed: bool = False  # this plan records a new decision for the gang
    traffic_class: int | None = None  # the class that decision gives it (QueuePolicy trafficClasses)
    requires: tuple[str, ...] = ()
    # LOCKED, UNLOCKED, REDECIDING or TIMED_OUT when this plan locks, unlocks or releases a gang
    transition: str = ""
    vanished: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.claim or self.pods or self.after)


@dataclass(frozen=True)
class Plan:
    """Everything one cycle writes, and what it decided (for metrics and logs)."""

    gangs: tuple[GangWrites, ...] = ()
    other: tuple[StatusPatch, ...] = ()
    decisions: tuple[Decision | NoFit, ...] = ()
    moves: tuple[Move, ...] = ()
    pending: int = 0
    placed: int = 0
    drifted: int = 0  # placed gangs with pods bound outside their node set
    wake_at_s: float | None = None  # when the first claim held for pods that have not come is due for release

    @property
    def writes(self) -> int:
        """Number of API writes in the plan."""
        return sum(len(g.claim) + len(g.pods) + len(g.after) for g in self.gangs) + len(self.other)
