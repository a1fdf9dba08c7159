"""Label selectors and node-selector terms, judged as the API server and kube-scheduler judge them. PURE.

One requirement rule serves both shapes: a ``metav1.LabelSelector``'s ``matchExpressions`` and a
``NodeSelectorTerm``'s ``matchExpressions`` / ``matchFields``. Operators ``In``, ``NotIn``, ``Exists``,
``DoesNotExist``, and (node selectors only, the API refuses them in label selectors) ``Gt`` / ``Lt``;
an operator the API server would have refused matches nothing.
"""

from __future__ import annotations

from typing import Any, Mapping

NODE_NAME_FIELD = "metadata.name"


def requirement_matches(requirement: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    """Whether one ``{key, operator, values}`` requirement holds for ``values`` (labels or fields)."""
    key, op = str(requirement.get("key") or ""), requirement.get("operator")
    wanted = [str(v) for v in requirement.get("values") or []]
    present = key in values
    if op == "In":
        return present and values[key] in wanted
    if op == "NotIn":
        return not present or values[key] not in wanted
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            have, bound = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False  # an operator the API server would have refused, or Gt/Lt without an integer


def term_matches(term: Mapping[str, Any], labels: Mapping[str, str], node_name: str) -> bool:
    """A ``NodeSelectorTerm``: all its label expressions and ``metadata.name`` fields hold; an empty term matches nothing."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return (all(requirement_matches(e, labels) for e in expressions)
            and all(requirement_matches(f, {NODE_NAME_FIELD: node_name}) for f in fields))


def label_selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` ({matchLabels, matchExpressions}) or a plain label map, against labels."""
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        return all(labels.get(k) == v for k, v in selector.items())
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(requirement_matches(e, labels) for e in selector.get("matchExpressions") or [])
