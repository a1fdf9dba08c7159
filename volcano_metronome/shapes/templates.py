"""The node constraints of a gang's pod templates, carried on its gang object. PURE (shared by admission and
the controller).

A Volcano PodGroup does not hold its pods' template, so a gang decided before its pods exist could
pick nodes its pods' ``nodeSelector``, required node affinity or tolerations rule out. The webhook
therefore writes, on a Volcano Job it admits with a profile, ``metronome.dev/pod-constraints``: a
JSON list of the distinct constraint fragments of its task templates (pod-spec shaped, only those
three keys and ``priorityClassName``; ``{}`` for a template without any). Volcano copies the Job's annotations to the PodGroup
it creates, where the controller reads them (``controller.gangs``).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from volcano_metronome.core.errors import InvalidInput

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
#: Longest annotation written: a quarter of the 256 KiB Kubernetes allows an object's annotations in all.
MAX_BYTES = 64 * 1024
KEYS = ("nodeSelector", "affinity", "tolerations", "priorityClassName")


def node_constraints(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a pod spec that decide which nodes admit it (nodeSelector, required node affinity, tolerations),
    and its priority class."""
    out: dict[str, Any] = {}
    if spec.get("nodeSelector"):
        out["nodeSelector"] = spec["nodeSelector"]
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = node.get(REQUIRED) if isinstance(node, Mapping) else None
    if required is not None:
        out["affinity"] = {"nodeAffinity": {REQUIRED: required}}
    if spec.get("tolerations"):
        out["tolerations"] = spec["tolerations"]
    if spec.get("priorityClassName"):  # resolved to a priority only on the pods: the controller waits for them
        out["priorityClassName"] = spec["priorityClassName"]
    return out


def encode(specs: Sequence[Mapping[str, Any]]) -> str:
    """The annotation's text: each spec's constraints once, in first-seen order, as compact JSON."""
    seen: list[str] = []
    for spec in specs:
        text = json.dumps(node_constraints(spec), sort_keys=True, separators=(",", ":"), default=str)
        if text not in seen:
            seen.append(text)
    return "[" + ",".join(seen) + "]"


def decode(text: str, where: str) -> list[dict[str, Any]]:
    """The constraint fragments an annotation holds (InvalidInput naming ``where`` when it is not such a list)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(where, text[:200], f"a JSON list of pod-spec fragments ({exc})") from None
    if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
        raise InvalidInput(where, text[:200], "a non-empty JSON list of objects (pod-spec fragments)")
    extra = sorted({k for v in value for k in v} - set(KEYS))
    if extra:
        raise InvalidInput(where, ", ".join(extra), "only the keys " + ", ".join(KEYS))
    return [dict(v) for v in value]
