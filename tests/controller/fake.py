"""An in-memory API server boundary for the controller's unit tests.

It implements the calls the controller makes through ``volcano_metronome.kube.Kube`` (get, create,
merge/JSON patch with resourceVersion preconditions, status subresource, replace, delete, events)
and the read side the informers give (stores), with the API server rules that matter here:
resourceVersions bump on every write; a stale resourceVersion is a 409; status goes through the
status subresource only; scheduling gates may only be removed; node affinity may change only while
the pod is gated. ``lag`` makes the stores serve an older copy, like an informer that has not
caught up; ``fail`` injects errors.
"""

from __future__ import annotations

import copy
import itertools
import uuid
from typing import Any, Callable, Iterable

from volcano_metronome import api, kube
from volcano_metronome.kube import Conflict, Invalid, NotFound, Resource

JSON = dict[str, Any]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class FakeApi:
    """The in-memory API server; see the module docstring."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], JSON] = {}
        self.resources: dict[str, Resource] = {}
        self._rv = itertools.count(100)
        self.events: list[JSON] = []
        self.writes: list[tuple[str, str, str]] = []  # (verb, plural, name)
        self.failures: list[tuple[Callable[[str, str, str], bool], Exception]] = []
        self.frozen_views: dict[str, list[JSON]] | None = None

    # -- helpers for tests
    def controller(self, now: float, settings: Any = None, **kw: Any) -> Any:
        """A Controller reading this fake's stores and writing to it, at the fixed wall clock ``now``."""
        from volcano_metronome.controller.loop import Controller
        from volcano_metronome.controller.settings import Settings

        return Controller(self, self.stores(), settings or Settings(), identity="t", clock=lambda: now, **kw)

    def put(self, resource: Resource, obj: JSON) -> JSON:
        """Store an object as is (status included), like a fixture created by another component."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", "2025-01-01T00:00:00Z")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(self._rv))
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        self.resources[resource.plural] = resource
        self.objects[(resource.plural, meta.get("namespace") if resource.namespaced else None, meta["name"])] = obj
        return copy.deepcopy(obj)

    def obj(self, resource: Resource, namespace: str | None, name: str) -> JSON:
        return copy.deepcopy(self.objects[(resource.plural, namespace if resource.namespaced else None, name)])

    def all(self, resource: Resource) -> list[JSON]:
        return [copy.deepcopy(o) for (p, _, _), o in sorted(self.objects.items(), key=lambda kv: str(kv[0]))
                if p == resource.plural]

    def fail(self, when: Callable[[str, str, str], bool], exc: Exception) -> None:
        """Raise ``exc`` on the next write for which ``when(verb, plural, name)`` holds."""
        self.failures.append((when, exc))

    def freeze_views(self) -> None:
        """Stores keep serving the current objects (a lagging informer) until ``thaw_views``."""
        self.frozen_views = {p: self.all(r) for p, r in self.resources.items()}

    def thaw_views(self) -> None:
        self.frozen_views = None

    # -- the Kube API
    def get(self, resource: Resource, namespace: str | None, name: str, subresource: str | None = None) -> JSON | None:
        key = (resource.plural, namespace if resource.namespaced else None, name)
        return copy.deepcopy(self.objects[key]) if key in self.objects else None

    def create(self, resource: Resource, obj: Any, namespace: str | None = None) -> JSON:
        self._maybe_fail("create", resource.plural, obj["metadata"]["name"])
        ns = namespace or obj["metadata"].get("namespace")
        key = (resource.plural, ns if resource.namespaced else None, obj["metadata"]["name"])
        if key in self.objects:
            raise Conflict(f"{resource.plural} {key[2]} already exists", 409, "AlreadyExists")
        body = copy.deepcopy(dict(obj))
        body.pop("status", None)
        if resource.namespaced:
            body["metadata"]["namespace"] = ns
        self.writes.append(("create", resource.plural, key[2]))
        return self.put(resource, body)

    def patch(self, resource: Resource, namespace: str | None, name: str, patch: Any, *, kind: str = "merge",
              subresource: str | None = None, resource_version: str | None = None) -> JSON:
        self._maybe_fail("patch" + (f"/{subresource}" if subresource else ""), resource.plural, name)
        key = (resource.plural, namespace if resource.namespaced else None, name)
        if key not in self.objects:
            raise NotFound(f"{resource.plural} {name} not found", 404, "NotFound")
        current = self.objects[key]
        if resource_version is not None and current["metadata"]["resourceVersion"] != resource_version:
            raise Conflict(f"{resource.plural} {name}: the object has been modified", 409, "Conflict")
        if kind == "json":
            import jsonpatch

            updated = jsonpatch.apply_patch(current, patch)
        else:
            patch = copy.deepcopy(patch)
            patch.get("metadata", {}).pop("resourceVersion", None)
            if subresource == "status":
                patch = {"status": patch.get("status")}
            else:
                patch.pop("status", None)
            updated = merge_patch(current, patch)
        if resource.plural == "pods":
            _validate_pod_update(current, updated)
        if updated.get("spec") != current.get("spec"):
            updated["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
        updated["metadata"]["resourceVersion"] = str(next(self._rv))
        self.objects[key] = updated
        self.writes.append(("patch" + (f"/{subresource}" if subresource else ""), resource.plural, name))
        return copy.deepcopy(updated)

    def replace(self, resource: Resource, obj: Any, subresource: str | None = None) -> JSON:
        meta = obj["metadata"]
        key = (resource.plural, meta.get("namespace") if resource.namespaced else None, meta["name"])
        self._maybe_fail("replace", resource.plural, meta["name"])
        if key not in self.objects:
            raise NotFound(f"{resource.plural} {meta['name']} not found", 404, "NotFound")
        if self.objects[key]["metadata"]["resourceVersion"] != meta.get("resourceVersion"):
            raise Conflict(f"{resource.plural} {meta['name']}: the object has been modified", 409, "Conflict")
        body = copy.deepcopy(dict(obj))
        body["metadata"]["resourceVersion"] = str(next(self._rv))
        self.objects[key] = body
        self.writes.append(("replace", resource.plural, meta["name"]))
        return copy.deepcopy(body)

    def delete(self, resource: Resource, namespace: str | None, name: str, *, resource_version: str | None = None,
               uid: str | None = None) -> bool:
        self._maybe_fail("delete", resource.plural, name)
        key = (resource.plural, namespace if resource.namespaced else None, name)
        if key not in self.objects:
            return False
        if resource_version and self.objects[key]["metadata"]["resourceVersion"] != resource_version:
            raise Conflict(f"{resource.plural} {name}: precondition failed", 409, "Conflict")
        if uid and self.objects[key]["metadata"]["uid"] != uid:
            raise Conflict(f"{resource.plural} {name}: precondition failed: uid", 409, "Conflict")
        del self.objects[key]
        self.writes.append(("delete", resource.plural, name))
        return True

    def emit_event(self, regarding: Any, *, reason: str, note: str, type_: str = "Normal", action: str = "Schedule",
                   controller: str = api.ADMISSION_CHECK_CONTROLLER, instance: str = "") -> JSON:
        event = {"regarding": dict(regarding), "reason": reason, "note": note, "type": type_}
        self.events.append(event)
        return event

    def _maybe_fail(self, verb: str, plural: str, name: str) -> None:
        for i, (when, exc) in enumerate(self.failures):
            if when(verb, plural, name):
                del self.failures[i]
                raise exc

    # -- the read side
    def store(self, resource: Resource, selector: Callable[[JSON], bool] | None = None) -> "FakeStore":
        self.resources.setdefault(resource.plural, resource)
        return FakeStore(self, resource, selector)

    def stores(self) -> dict[str, "FakeStore"]:
        """Stores named like the controller's sources."""
        from volcano_metronome.controller.loop import BOUND_PODS

        def managed(pod: JSON) -> bool:
            return (pod["metadata"].get("labels") or {}).get(api.MANAGED_LABEL) == "true"

        def bound(pod: JSON) -> bool:
            return bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") not in (
                "Succeeded", "Failed")

        return {
            "nodes": self.store(kube.NODES), "pods": self.store(kube.PODS, managed),
            BOUND_PODS: self.store(kube.PODS, bound), "podgroups": self.store(kube.PODGROUPS),
            "workloads": self.store(kube.WORKLOADS), "admissionchecks": self.store(kube.ADMISSION_CHECKS),
            "clusterqueues": self.store(kube.CLUSTER_QUEUES), "resourceflavors": self.store(kube.RESOURCE_FLAVORS),
            api.CLAIMS: self.store(kube.CLAIMS),
            api.CAPACITIES: self.store(kube.CAPACITIES), "hypernodes": self.store(kube.HYPERNODES),
            api.QUEUE_POLICIES: self.store(kube.QUEUE_POLICIES),
        }


class FakeStore:
    """An informer-like read view of one resource."""

    def __init__(self, api_: FakeApi, resource: Resource, selector: Callable[[JSON], bool] | None) -> None:
        self.api = api_
        self.resource = resource
        self.selector = selector or (lambda _: True)

    def items(self) -> list[JSON]:
        source: Iterable[JSON]
        if self.api.frozen_views is not None:
            source = self.api.frozen_views.get(self.resource.plural, [])
        else:
            source = self.api.all(self.resource)
        return [copy.deepcopy(o) for o in source if self.selector(o)]

    def get(self, namespace: str | None, name: str) -> JSON | None:
        for o in self.items():
            if o["metadata"]["name"] == name and (o["metadata"].get("namespace") or None) == (namespace or None):
                return o
        return None


def _validate_pod_update(old: JSON, new: JSON) -> None:
    old_gates = [g["name"] for g in old["spec"].get("schedulingGates") or []]
    new_gates = [g["name"] for g in new["spec"].get("schedulingGates") or []]
    if any(g not in old_gates for g in new_gates):
        raise Invalid("pods: scheduling gates can only be removed", 422, "Invalid")
    if old["spec"].get("affinity") != new["spec"].get("affinity") and not old_gates:
        raise Invalid("pods: spec.affinity may only change while the pod is gated", 422, "Invalid")
    if old["spec"].get("nodeName") != new["spec"].get("nodeName") and old["spec"].get("nodeName"):
        raise Invalid("pods: spec.nodeName is immutable", 422, "Invalid")
    terms = (((new["spec"].get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    old_terms = (((old["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    for term in terms:
        for field in term.get("matchFields") or []:
            if field.get("operator") in ("In", "NotIn") and len(field.get("values") or []) != 1:
                raise Invalid("pods: matchFields values: must be only one value when `operator` is 'In' or 'NotIn' "
                              "for node field selector", 422, "Invalid")
    if old_terms and len(terms) != len(old_terms):
        raise Invalid("pods: a gated pod's node selector terms may only gain requirements", 422, "Invalid")
