"""Pods created after their gang was decided: admitted already placed, without the gate. PURE.

Volcano creates a Job's pods once its PodGroup is enqueued and Kueue a Job's once its Workload is
admitted, so a gang's STBandwidthClaim is often decided before its pods exist. Such a pod is
admitted with what the controller would otherwise patch onto it (``controller.constraints``,
``controller.reconcile``): the required node affinity of its member's node (or, for a Volcano task
role, the role's node set), the annotations ``metronome.dev/period-ms``, ``offset-ms`` and
``epoch``, and no ``metronome.dev/placement`` gate. The controller then finds it ungated with our
affinity and matching annotations and writes nothing for it: one pod write per pod saved.

Only where the pod alone (plus the watch-fed claim and PodGroup caches) determines the answer the
controller's assignment would give; everywhere else the pod is gated as before (the fallback):

* the claim ``<kind>-<name>`` of the gang (hashed when too long: ``shapes.refs.claim_name``; for a Kueue job's pods: the Workload's claim, which the
  controller names in the pod set's ``metronome.dev/placement-claim`` through Kueue's
  ``podSetUpdates``) is in the cache, names the gang and holds nodes;
* the pod has no required node affinity of its own, no ``spec.nodeName``, and no timing annotation
  the claim would withdraw (an unlocked gang's ``offset-ms``/``epoch``);
* the pod's rank source (``shapes.ranks``, the first it carries) is a Job completion index, or a
  Volcano task index of a gang with one task role (its PodGroup's ``minTaskMember``): then its rank
  is its position, and the member slots are taken in the claim's node order (``shapes.slots.slot_node``);
* a pod Volcano schedules, of a gang with one task role, gets every node of the claim (the role's
  node set, which is what ``constraints.assign`` gives every pod of a role).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from volcano_metronome import api
from volcano_metronome.admission.outcome import annotations_at, string_or_none
from volcano_metronome.admission.resolve import Context
from volcano_metronome.shapes import ranks
from volcano_metronome.shapes.refs import claim_name as shapes_claim_name
from volcano_metronome.shapes.selectors import NODE_NAME_FIELD
from volcano_metronome.shapes.slots import (class_annotations, scheduled_by_volcano, slot_node, timing_annotations,
                                            traffic_class)


@dataclass(frozen=True)
class Placement:
    """Where a pod of a decided gang goes and the timing annotations it carries (None: absent)."""

    nodes: tuple[str, ...]
    annotations: Mapping[str, str | None]
    claim: str

    def affinity(self) -> dict[str, Any]:
        """The ``spec.affinity`` the controller would write: one ``metadata.name In [node]`` term per node."""
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [n]}]} for n in self.nodes]}}}


def placement(pod: Mapping[str, Any], kind: str, name: str, namespace: str, ctx: Context) -> Placement | None:
    """The placement of a pod of gang ``kind``/``name`` whose claim is decided; None when it must be gated."""
    if ctx.lookups.claim is None:
        return None
    carried = string_or_none(annotations_at(pod).get(api.PLACEMENT_CLAIM))
    if carried is not None:  # a Kueue pod set: the claim is the Workload's, named by the controller
        claim_name, claim = carried, ctx.lookups.claim(namespace, carried)
        ref = _part(_part(claim, "spec"), "gangRef")
        decided = _decided(claim, "Workload", str(ref.get("name"))) if kind != "PodGroup" else None
    else:
        claim_name = shapes_claim_name(kind, name)
        decided = _decided(ctx.lookups.claim(namespace, claim_name), kind, name)
    if decided is None:
        return None
    nodes, members, ann = decided
    spec = pod.get("spec")
    if not isinstance(spec, dict) or spec.get("nodeName"):
        return None
    pinned = _pinned_by_us(spec)
    if pinned is not None and set(pinned) <= set(nodes) and not spec.get("schedulingGates"):
        # Placed at an earlier admission of this pod (reinvocation after another webhook changed it): kept as it is.
        return Placement(pinned, ann, claim_name)
    if _own_terms(spec):
        return None
    present = annotations_at(pod)
    if any(value is None and key in present for key, value in ann.items()):
        return None  # the controller would withdraw it: leave that to the fallback
    role = ranks.volcano_role(pod)
    single = bool(role) and kind == "PodGroup" and _only_role(role, name, namespace, ctx)
    if scheduled_by_volcano(pod) and role:
        if not single:
            return None
        return Placement(tuple(n for n, m in zip(nodes, members) if m > 0), ann, claim_name)
    keys = ranks.rank_keys(pod)
    source = next((s for s in ranks.SOURCES if s in keys), None)
    if source == "completion-index" or (source == "volcano" and single):
        node = slot_node(nodes, members, keys[source][-1][1])
        return Placement((node,), ann, claim_name) if node is not None else None
    return None


def _decided(claim: Any, kind: str, name: str) -> tuple[tuple[str, ...], tuple[int, ...],
                                                        dict[str, str | None]] | None:
    """A claim's nodes, members and pod annotations when it names this gang and holds nodes."""
    if not isinstance(claim, dict):
        return None
    ref = _part(_part(claim, "spec"), "gangRef")
    if ref.get("kind") != kind or ref.get("name") != name:
        return None
    status = _part(claim, "status")
    nodes, members = status.get("nodes"), status.get("members")
    conditions = status.get("conditions")
    placed = next((c for c in conditions if isinstance(c, dict) and c.get("type") == "Placed"), None) \
        if isinstance(conditions, list) else None
    if (not isinstance(nodes, list) or not isinstance(members, list) or not nodes or len(nodes) != len(members)
            or (placed is not None and placed.get("status") != "True")):
        return None
    try:
        period, offset = float(status.get("periodMs") or 0.0), float(status.get("offsetMs") or 0.0)
        epoch, counts = int(status.get("epoch") or 0), tuple(int(m) for m in members)
    except (TypeError, ValueError, OverflowError):
        return None  # not as the controller writes it: the fallback will read it (and report it) instead
    if (not (math.isfinite(period) and math.isfinite(offset)) or period <= 0 or not 0 <= epoch < 2**63
            or not all(isinstance(n, str) and n for n in nodes)):
        return None
    klass, env = traffic_class(status) or (None, {})
    return tuple(nodes), counts, {**timing_annotations(period, offset, epoch, status.get("locked") is not False),
                                  **class_annotations(klass, env.items())}


def _part(obj: Any, key: str) -> Mapping[str, Any]:
    """``obj[key]`` where both are mappings, else empty: cached objects are read, never trusted to be well-formed."""
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _pinned_by_us(spec: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The nodes of a node affinity that is exactly what ``Placement.affinity`` writes; else None."""
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    try:
        terms = node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # type: ignore[index]
        nodes = tuple(str(term["matchFields"][0]["values"][0]) for term in terms)
    except (TypeError, KeyError, IndexError):
        return None
    return nodes if nodes and node == Placement(nodes, {}, "").affinity()["nodeAffinity"] else None


def _own_terms(spec: Mapping[str, Any]) -> bool:
    affinity = spec.get("affinity") or {}
    node = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    return isinstance(node, dict) and bool(node.get("requiredDuringSchedulingIgnoredDuringExecution"))


def _only_role(role: str, group: str, namespace: str, ctx: Context) -> bool:
    """Whether the PodGroup (from the cache) declares this task role and no other."""
    if ctx.lookups.pod_group is None:
        return False
    obj = ctx.lookups.pod_group(namespace, group)
    tasks = _part(obj, "spec").get("minTaskMember")
    return isinstance(tasks, dict) and set(tasks) == {role} and string_or_none(role) is not None

