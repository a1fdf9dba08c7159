"""Which nodes a gang's pods may run on, as kube-scheduler would judge it. PURE.

The controller pins every member to a node with required node affinity, which is *added* to the
pod's own constraints; a node the pod's ``nodeSelector``, required node affinity or tolerations
rule out would leave the pod pending forever. So the nodes a decision may use are filtered first by:

- ``nodeSelector``: every label equal;
- ``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution``: any term matches
  (a term: all its ``matchExpressions`` on labels and ``matchFields`` on ``metadata.name``; an empty
  term matches nothing), operators ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt``;
- taints with effect ``NoSchedule`` or ``NoExecute``: each tolerated (``PreferNoSchedule`` is a
  preference, not a rule).

For a gang decided before it has pods the specs come from its object (``gangs.member_specs``): a Kueue
Workload's podSets' templates with what Kueue will add from the assigned ResourceFlavors, a Volcano
PodGroup's ``metronome.dev/pod-constraints`` copied from its Job; a node must admit every spec.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence

from volcano_metronome.controller import objects
from volcano_metronome.shapes.selectors import term_matches

HARD_EFFECTS = ("NoSchedule", "NoExecute")


def admits(node: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """Whether a pod with ``spec`` may be scheduled on ``node`` (selector, required affinity, taints)."""
    labels = objects.meta(node).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    terms = _required_terms(spec)
    if terms is not None and not any(term_matches(t, labels, objects.name(node)) for t in terms):
        return False
    tolerations = spec.get("tolerations") or []
    return all(any(_tolerates(tol, taint) for tol in tolerations)
               for taint in (node.get("spec") or {}).get("taints") or [] if taint.get("effect") in HARD_EFFECTS)


def eligible_nodes(nodes: Sequence[Mapping[str, Any]], specs: Iterable[Mapping[str, Any]],
                   memo: dict[str, frozenset[str] | None] | None = None) -> frozenset[str] | None:
    """Names of the nodes that admit every spec; None when every node does (nothing to restrict).

    ``memo`` (keyed by the specs' constraints) lets one cycle judge the gangs of one template once.
    """
    unique = {json.dumps([s.get("nodeSelector"), _required_terms(s), s.get("tolerations")], sort_keys=True,
                         default=str): s for s in specs}
    key = "\n".join(sorted(unique))
    if memo is not None and key in memo:
        return memo[key]
    specs = list(unique.values())
    names = [objects.name(n) for n in nodes if all(admits(n, s) for s in specs)]
    result = None if len(names) == len(nodes) else frozenset(names)
    if memo is not None:
        memo[key] = result
    return result


def _required_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return None
    return list(required.get("nodeSelectorTerms") or [])


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if toleration.get("operator") == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")
