"""Nodes that vanish under a decided gang before its pods are bound. PURE.

Required node affinity cannot change once a pod is ungated, so a pod we pinned to a node that then
left the cluster stays Pending forever, and so does its gang. Re-deciding therefore means: release
the claim's node set (it names a node that is gone), delete the gang's *stranded* pods so that their
owner (Volcano Job, batch Job, JobSet, ...) recreates them (the webhook gates the new ones), and
decide the gang again once its members are back.

What is deleted, and only that: a pod of the gang that is not bound, not being deleted, no longer
carries our gate (so its node affinity is ours), whose node set names a node the cluster no longer
has, and which has a controller owner to recreate it. A pod without one (a bare pod) would be lost:
it is reported on the claim (condition ``NodeVanished``, reason ``OwnerlessPods``) and in an Event,
never deleted. Bound and running pods are never touched, and a gang whose members are all bound
keeps its claim. Every delete is conditional on the pod's uid and resourceVersion (a pod bound or
changed since it was read is not deleted), and the writer first confirms with the API server that
each vanished node is really gone (a node only outside ``nodeSelector``, or a node cache that is
behind, deletes nothing). Kueue Workloads are not handled by deleting pods: their check is set to
Retry, and Kueue evicts and requeues the Workload (suspending its Job removes the pods).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, AbstractSet, Any, Mapping, Sequence

if TYPE_CHECKING:
    from volcano_metronome.controller.views import GangView, PodView

VANISHED = "NodeVanished"  # the claim condition, and the Placed=False reason of a claim released for it
REDECIDING, OWNERLESS, REDECIDED = "Redeciding", "OwnerlessPods", "Redecided"


def stranded(pods: Sequence[PodView], live: AbstractSet[str]) -> tuple[PodView, ...]:
    """Unbound pods we ungated whose node set names a node that is not in ``live``: nothing can place them."""
    if not live:
        return ()  # no nodes at all is a node cache not filled, never a reason to delete anything
    return tuple(p for p in pods if p.node_name is None and not p.gated and p.allowed
                 and not _deleting(p.obj) and any(n not in live for n in p.allowed))


def owner(pod: Mapping[str, Any]) -> str:
    """``Kind/name`` of the pod's controller owner ("" for a bare pod, which nothing would recreate)."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") is True:
            return f"{ref.get('kind')}/{ref.get('name')}"
    return ""


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


@dataclass(frozen=True)
class Loss:
    """What vanished nodes did to one gang, and what re-deciding it takes."""

    nodes: tuple[str, ...]  # the vanished nodes its claim or its stranded pods name
    doomed: tuple[PodView, ...]  # stranded pods with an owner: deleted, their owner recreates them
    ownerless: tuple[PodView, ...]  # stranded bare pods: reported, never deleted
    release: bool  # the claim still holds a vanished node while members are unbound: release it

    @property
    def reason(self) -> str:
        """The claim condition's reason."""
        return OWNERLESS if self.ownerless else REDECIDING

    def message(self, workload: bool = False) -> str:
        """The claim condition's and the Events' message."""
        text = (f"node{'s' if len(self.nodes) > 1 else ''} {', '.join(self.nodes)} vanished before the gang was "
                f"bound; re-deciding")
        if workload:
            return text + ": admission check set to Retry (Kueue evicts and requeues the Workload)"
        if self.doomed:  # no count: the message must not change as the deletes land (it is announced once)
            text += ": its unbound pods pinned there are deleted for their owners to recreate"
        if self.ownerless:
            names = ", ".join(p.name for p in self.ownerless[:5]) + (
                f" and {len(self.ownerless) - 5} more" if len(self.ownerless) > 5 else "")
            text += (f"; {len(self.ownerless)} pod(s) without an owner are pinned there and are NOT deleted "
                     f"(nothing would recreate them): {names}. Delete and recreate them to let the gang be "
                     f"decided again")
        return text


def loss(gang: GangView, live: AbstractSet[str]) -> Loss | None:
    """The gang's loss to vanished nodes, or None when it has none (or has finished)."""
    if gang.finished or not live:
        return None
    stuck = stranded(gang.pods, live)
    claim = gang.claim
    gone = tuple(n for n in claim.nodes if n not in live) if claim is not None and claim.placed else ()
    bound = sum(1 for p in gang.pods if p.node_name is not None)
    release = bool(gone) and bound < gang.size
    if not stuck and not release:
        return None
    nodes = tuple(sorted(set(gone) | {n for p in stuck for n in (p.allowed or ()) if n not in live}))
    return Loss(nodes, tuple(p for p in stuck if owner(p.obj)), tuple(p for p in stuck if not owner(p.obj)),
                release)
