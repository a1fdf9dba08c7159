"""Applying a plan through the API, in order, idempotently, with optimistic concurrency.

Three phases over all gangs at once (each phase's writes run in parallel): first every gang's
claim writes (one after the other within a gang; a gang that ``requires`` others starts only once
their claim writes succeeded, so a deciding gang's claim is written after the locks its decision
takes), then the pod patches of the gangs whose claim writes succeeded, then their
Workload and Event writes. A gang whose write fails stops there for
this cycle; the next cycle starts again from what the API server holds. A 409 (the object changed
since it was read) refreshes the object into the overlay so the next cycle plans from it.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from volcano_metronome import kube
from volcano_metronome.controller.cache import Overlay
from volcano_metronome.shapes import JSON
from volcano_metronome.controller.writes import (LOCKED, REDECIDING, TIMED_OUT, UNLOCKED, ClaimStatus, CreateClaim, DeleteClaim,
                                                 DeletePod, Event, GangWrites, Plan, PodPatch, StatusPatch,
                                                 WorkloadCheck)
from volcano_metronome.kube import Conflict, KubeError, NotFound, Resource

log = logging.getLogger(__name__)


class Api(Protocol):
    """The part of :class:`volcano_metronome.kube.Kube` the controller writes through."""

    def get(self, resource: Resource, namespace: str | None, name: str,
            subresource: str | None = None) -> JSON | None:
        """The object, or None."""

    def create(self, resource: Resource, obj: Any, namespace: str | None = None) -> JSON:
        """Create."""

    def patch(self, resource: Resource, namespace: str | None, name: str, patch: Any, *, kind: str = "merge",
              subresource: str | None = None, resource_version: str | None = None) -> JSON:
        """Patch, optionally conditional."""

    def delete(self, resource: Resource, namespace: str | None, name: str, *,
               resource_version: str | None = None, uid: str | None = None) -> bool:
        """Delete."""

    def emit_event(self, regarding: Any, *, reason: str, note: str, type_: str = "Normal",
                   action: str = "Schedule", controller: str = ..., instance: str = ...) -> JSON:
        """Record an Event."""


@dataclass
class Outcome:
    """What applying a plan did."""

    writes: int = 0
    conflicts: int = 0
    errors: int = 0
    ungated: int = 0
    placed: list[str] = field(default_factory=list)
    placed_classes: list[int] = field(default_factory=list)  # the traffic class of each placed gang that got one
    locked: list[str] = field(default_factory=list)  # running gangs told to align, all their writes done
    unlocked: list[str] = field(default_factory=list)  # running gangs let run free, all their writes done
    redecided: list[str] = field(default_factory=list)  # claims released for a vanished node, all writes done
    timed_out: list[str] = field(default_factory=list)  # claims released: their pods did not come, all writes done
    deleted_pods: int = 0  # pods stranded on a vanished node deleted for their owners to recreate
    failed: list[str] = field(default_factory=list)
    by_kind: dict[tuple[str, str], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, kind: str, result: str) -> None:
        with self._lock:
            self.by_kind[(kind, result)] = self.by_kind.get((kind, result), 0) + 1
            if result == "ok":
                self.writes += 1
            elif result == "conflict":
                self.conflicts += 1
            elif result == "error":
                self.errors += 1


class Writer:
    """Applies plans; ``after_write`` runs after every successful write (a fault-injection hook)."""

    def __init__(self, api: Api, overlay: Overlay, concurrency: int = 16, identity: str = "volcano-metronome",
                 after_write: Callable[[], None] | None = None, allowed: Callable[[], bool] | None = None) -> None:
        self.api = api
        self.overlay = overlay
        self.identity = identity
        self.after_write = after_write
        self.allowed = allowed or (lambda: True)  # leader check before every write
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="writer")

    def close(self) -> None:
        """Stop the worker threads."""
        self._pool.shutdown(wait=True)

    def apply(self, plan: Plan) -> Outcome:
        """Apply ``plan``; see the module docstring for the order."""
        out = Outcome()
        gangs = [g for g in plan.gangs if g]
        first = [g for g in gangs if not g.requires]
        ok = self._map(lambda g: self._claim_phase(g, out), first)
        planned = {g.gang for g in first}
        done_claims = {g.gang for g, good in zip(first, ok) if good}
        # A required gang without writes in this plan has nothing to wait for.
        second = [g for g in gangs if g.requires and all(r in done_claims or r not in planned for r in g.requires)]
        ok2 = self._map(lambda g: self._claim_phase(g, out), second)
        ready = [g for g, good in [*zip(first, ok), *zip(second, ok2)] if good]
        pod_jobs = [(g, p) for g in ready for p in g.pods]
        pod_ok = self._map(lambda gp: self._pod(gp[1], out), pod_jobs)
        failed_gangs = {g.gang for (g, _), good in zip(pod_jobs, pod_ok) if not good}
        finish = [g for g in ready if g.gang not in failed_gangs]
        done = self._map(lambda g: self._after_phase(g, out), finish)
        for g, good in zip(finish, done):
            if good and g.placed:
                out.placed.append(g.gang)
                if g.traffic_class is not None:
                    out.placed_classes.append(g.traffic_class)
            if good and g.transition:
                {LOCKED: out.locked, UNLOCKED: out.unlocked, REDECIDING: out.redecided,
                 TIMED_OUT: out.timed_out}[g.transition].append(g.gang)
        out.failed = sorted({g.gang for g in gangs} - {g.gang for g, good in zip(finish, done) if good})
        self._map(lambda s: self._status(s, out), list(plan.other))
        return out

    def _map(self, fn: Callable[[Any], bool], items: Sequence[Any]) -> list[bool]:
        if not items:
            return []
        if len(items) == 1:
            return [fn(items[0])]
        return list(self._pool.map(fn, items))

    def _wrote(self) -> None:
        if self.after_write is not None:
            self.after_write()

    def _guard(self) -> bool:
        if not self.allowed():
            log.warning("not the leader any more: dropping the rest of the plan")
            return False
        return True

    # -- phases
    def _claim_phase(self, g: GangWrites, out: Outcome) -> bool:
        created_rv: str | None = None
        if g.vanished and not self._gone(g.vanished, out):
            return False
        for w in g.claim:
            if not self._guard():
                return False
            try:
                if isinstance(w, CreateClaim):
                    created_rv = self._create_claim(w, out)
                    if created_rv is None:
                        return False
                elif isinstance(w, ClaimStatus):
                    rv = w.resource_version or created_rv
                    obj = self.api.patch(kube.CLAIMS, w.namespace, w.name, {"status": w.status}, subresource="status",
                                         resource_version=rv)
                    self.overlay.record(kube.CLAIMS.plural, obj)
                    out.count("claim-status", "ok")
                    self._wrote()
                elif isinstance(w, DeleteClaim):
                    self.api.delete(kube.CLAIMS, w.namespace, w.name, resource_version=w.resource_version)
                    self.overlay.record_deleted(kube.CLAIMS.plural, w.namespace, w.name)
                    out.count("claim-delete", "ok")
                    self._wrote()
            except Conflict:
                out.count(type(w).__name__, "conflict")
                self._refresh(kube.CLAIMS, w.namespace, w.name)
                return False
            except NotFound:
                out.count(type(w).__name__, "not-found")
                return False
            except KubeError as exc:
                out.count(type(w).__name__, "error")
                log.warning("%s %s/%s: %s", type(w).__name__, w.namespace, w.name, exc)
                return False
        return True

    def _create_claim(self, w: CreateClaim, out: Outcome) -> str | None:
        try:
            obj = self.api.create(kube.CLAIMS, w.body, w.namespace)
            self.overlay.record(kube.CLAIMS.plural, obj)
            out.count("claim-create", "ok")
            self._wrote()
            return str(obj["metadata"]["resourceVersion"])
        except Conflict:
            # Already there (made by an earlier incarnation whose informer event we have not seen):
            # never overwrite a recorded decision; plan again from the object itself.
            out.count("claim-create", "conflict")
            self._refresh(kube.CLAIMS, w.namespace, w.name)
            return None

    def _gone(self, nodes: Sequence[str], out: Outcome) -> bool:
        """Whether the API server itself (not our node cache, which ``nodeSelector`` filters and which may
        lag) no longer has any of ``nodes``: only then is a gang re-decided for them."""
        for node in nodes:
            try:
                present = self.api.get(kube.NODES, None, node) is not None
            except KubeError as exc:
                out.count("node-check", "error")
                log.warning("node %s: %s", node, exc)
                return False
            if present:
                out.count("node-check", "exists")
                log.info("node %s is outside the node cache but exists (nodeSelector?): nothing re-decided", node)
                return False
        return True

    def _delete_pod(self, w: DeletePod, out: Outcome) -> bool:
        try:
            self.api.delete(kube.PODS, w.namespace, w.name, resource_version=w.resource_version, uid=w.uid or None)
            self.overlay.record_deleted(kube.PODS.plural, w.namespace, w.name, w.uid)
            out.count("pod-delete", "ok")
            with out._lock:
                out.deleted_pods += 1
            self._wrote()
            return True
        except Conflict:  # changed (maybe bound) since it was read, or replaced: judged again next cycle
            out.count("pod-delete", "conflict")
            self._refresh(kube.PODS, w.namespace, w.name)
        except KubeError as exc:
            out.count("pod-delete", "error")
            log.warning("pod %s/%s delete: %s", w.namespace, w.name, exc)
        return False

    def _pod(self, w: PodPatch | DeletePod, out: Outcome) -> bool:
        if not self._guard():
            return False
        if isinstance(w, DeletePod):
            return self._delete_pod(w, out)
        try:
            obj = self.api.patch(kube.PODS, w.namespace, w.name, w.patch, resource_version=w.resource_version)
            self.overlay.record(kube.PODS.plural, obj)
            out.count("pod", "ok")
            if w.ungates:
                with out._lock:
                    out.ungated += 1
            self._wrote()
            return True
        except Conflict:
            out.count("pod", "conflict")
            self._refresh(kube.PODS, w.namespace, w.name)
        except NotFound:
            out.count("pod", "not-found")
            return True  # the pod is gone; nothing left to do for it
        except KubeError as exc:
            out.count("pod", "error")
            log.warning("pod %s/%s: %s", w.namespace, w.name, exc)
        return False

    def _after_phase(self, g: GangWrites, out: Outcome) -> bool:
        for w in g.after:
            if not self._guard():
                return False
            if isinstance(w, WorkloadCheck):
                try:
                    obj = self.api.patch(kube.WORKLOADS, w.namespace, w.name, {"status": {"admissionChecks":
                                                                                           list(w.entries)}},
                                         subresource="status", resource_version=w.resource_version)
                    self.overlay.record(kube.WORKLOADS.plural, obj)
                    out.count("workload-check", "ok")
                    self._wrote()
                except Conflict:
                    out.count("workload-check", "conflict")
                    self._refresh(kube.WORKLOADS, w.namespace, w.name)
                    return False
                except KubeError as exc:
                    out.count("workload-check", "error")
                    log.warning("workload %s/%s admission check: %s", w.namespace, w.name, exc)
                    return False
            elif isinstance(w, Event):
                try:
                    self.api.emit_event(w.regarding, reason=w.reason, note=w.note, type_=w.type,
                                        instance=self.identity)
                    out.count("event", "ok")
                except KubeError as exc:  # events are best effort
                    out.count("event", "error-ignored")
                    log.info("event %s on %s: %s", w.reason, w.regarding.get("name"), exc)
        return True

    def _status(self, w: StatusPatch, out: Outcome) -> bool:
        resource = {"AdmissionCheck": kube.ADMISSION_CHECKS, "QueuePolicy": kube.QUEUE_POLICIES,
                    "STBandwidthCapacity": kube.CAPACITIES}[w.kind]
        if not self._guard():
            return False
        try:
            obj = self.api.patch(resource, None, w.name, {"status": w.status}, subresource="status")
            self.overlay.record(resource.plural, obj)
            out.count(f"{w.kind}-status", "ok")
            return True
        except KubeError as exc:
            out.count(f"{w.kind}-status", "error-ignored")
            log.info("%s %s status: %s", w.kind, w.name, exc)
            return False

    def _refresh(self, resource: Resource, namespace: str | None, name: str) -> None:
        try:
            obj = self.api.get(resource, namespace, name)
        except KubeError:
            return
        if obj is None:
            self.overlay.record_deleted(resource.plural, namespace, name)
        else:
            obj.setdefault("kind", resource.kind)
            obj.setdefault("apiVersion", resource.api_version)
            self.overlay.record(resource.plural, obj)
