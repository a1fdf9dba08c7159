"""Reading Kubernetes objects given as plain dicts (API JSON form): small, pure accessors."""

from __future__ import annotations

import datetime
import json
import math
import re
from typing import Any, Iterable, Mapping, Sequence

from volcano_metronome import api
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile

JSON = dict[str, Any]
NODE_NAME_FIELD = "metadata.name"
TERMINAL_PHASES = ("Succeeded", "Failed")


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``metadata`` (empty when absent)."""
    return obj.get("metadata") or {}


def name(obj: Mapping[str, Any]) -> str:
    """``metadata.name``."""
    return str(meta(obj).get("name", ""))


def namespace(obj: Mapping[str, Any]) -> str:
    """``metadata.namespace`` ("" for cluster-scoped objects)."""
    return str(meta(obj).get("namespace") or "")


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """``metadata.annotations``."""
    return meta(obj).get("annotations") or {}


def labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """``metadata.labels``."""
    return meta(obj).get("labels") or {}


def resource_version(obj: Mapping[str, Any]) -> str:
    """``metadata.resourceVersion``."""
    return str(meta(obj).get("resourceVersion", ""))


def created_s(obj: Mapping[str, Any]) -> float:
    """``metadata.creationTimestamp`` in Unix seconds (0 when absent)."""
    return parse_time(meta(obj).get("creationTimestamp")) or 0.0


def parse_time(value: Any) -> float | None:
    """Unix seconds of a Kubernetes Time / MicroTime string."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_time(unix_s: float) -> str:
    """A Kubernetes ``Time`` string (RFC 3339, seconds, UTC)."""
    return datetime.datetime.fromtimestamp(unix_s, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The ``status.conditions`` entry of type ``kind``."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    """Whether condition ``kind`` is ``True``."""
    cond = condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


def set_condition(conditions: Iterable[Mapping[str, Any]], kind: str, status: str, reason: str, message: str,
                  now_s: float, generation: int | None = None) -> list[JSON]:
    """``conditions`` with ``kind`` set; lastTransitionTime moves only when the status changes."""
    out: list[JSON] = []
    found = False
    for cond in conditions:
        if cond.get("type") != kind:
            out.append(dict(cond))
            continue
        found = True
        same = cond.get("status") == status
        new = {"type": kind, "status": status, "reason": reason, "message": message[:32768],
               "lastTransitionTime": cond.get("lastTransitionTime") if same and cond.get("lastTransitionTime")
               else format_time(now_s)}
        if generation is not None:
            new["observedGeneration"] = generation
        out.append(new)
    if not found:
        new = {"type": kind, "status": status, "reason": reason, "message": message[:32768],
               "lastTransitionTime": format_time(now_s)}
        if generation is not None:
            new["observedGeneration"] = generation
        out.append(new)
    return out


def same_conditions(a: Iterable[Mapping[str, Any]], b: Iterable[Mapping[str, Any]]) -> bool:
    """Equal apart from ``lastTransitionTime`` (so rewriting identical conditions is skipped)."""
    def strip(conds: Iterable[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message"),
                       c.get("observedGeneration")) for c in conds)
    return strip(a) == strip(b)


# ------------------------------------------------------------------------------------------- quantities
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {"": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}


def quantity(value: Any) -> float:
    """A Kubernetes resource quantity ("8", "500m", "1Ki", 4) as a number; 0 for garbage."""
    if isinstance(value, bool):
        return 0.0
    if isinstance(value, (int, float)):
        return float(value)
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIX:
        return 0.0
    try:
        return float(match.group(1)) * _SUFFIX[match.group(2)]
    except ValueError:
        return 0.0


def whole(value: float) -> int:
    """Whole units of an extended resource (GPUs come in integers; round fractions up)."""
    return int(math.ceil(value - 1e-9)) if value > 0 else 0


# ----------------------------------------------------------------------------------------------- pods
def container_gpus(spec: Mapping[str, Any], resource: str) -> int:
    """GPUs a pod spec asks for: the sum over containers, or the largest init container if larger.

    Extended resources may be given as a limit alone (the request then equals it).
    """
    def one(container: Mapping[str, Any]) -> float:
        res = container.get("resources") or {}
        req = (res.get("requests") or {}).get(resource)
        if req is None:
            req = (res.get("limits") or {}).get(resource)
        return quantity(req) if req is not None else 0.0

    main = sum(one(c) for c in spec.get("containers") or [])
    init = max((one(c) for c in spec.get("initContainers") or []), default=0.0)
    return whole(max(main, init))


def pod_gpus(pod: Mapping[str, Any], resource: str) -> int:
    """GPUs a pod asks for."""
    return container_gpus(pod.get("spec") or {}, resource)


def pod_terminal(pod: Mapping[str, Any]) -> bool:
    """Succeeded, Failed, or being deleted: it will not (any longer) hold its node."""
    return ((pod.get("status") or {}).get("phase") in TERMINAL_PHASES) or bool(meta(pod).get("deletionTimestamp"))


def gates(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the pod's scheduling gates."""
    return tuple(str(g.get("name", "")) for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def gated_by_us(pod: Mapping[str, Any]) -> bool:
    """Whether our gate is still on the pod."""
    return api.SCHEDULING_GATE in gates(pod)


def _affinity_terms(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
                  .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []))


def pinned_nodes(pod: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The node set our required node affinity confines the pod to (``metadata.name In [...]`` in every
    term, the same in each), if any."""
    terms = _affinity_terms(pod)
    found: set[tuple[str, ...]] = set()
    for term in terms:
        hit = None
        for req in term.get("matchFields") or []:
            values = req.get("values") or []
            if req.get("key") == NODE_NAME_FIELD and req.get("operator") == "In" and values:
                hit = tuple(str(v) for v in values)
        if hit is None:
            return None  # a term we did not narrow: not pinned by us
        found.add(hit)
    return found.pop() if len(found) == 1 else None


def pinned_node(pod: Mapping[str, Any]) -> str | None:
    """The node our required node affinity pins the pod to (``metadata.name In [node]``), if any."""
    nodes = pinned_nodes(pod)
    return nodes[0] if nodes is not None and len(nodes) == 1 else None


def pinned_terms(pod: Mapping[str, Any], nodes: str | Sequence[str]) -> list[JSON]:
    """The pod's required node-selector terms narrowed to ``nodes`` (one node, or a node set).

    On a gated pod the API server allows required node affinity only to be added or narrowed: with
    no terms we set one; otherwise we add our requirement to every existing term (terms are ORed,
    requirements within a term ANDed), never changing what is there.
    """
    values = [nodes] if isinstance(nodes, str) else list(nodes)
    ours = {"key": NODE_NAME_FIELD, "operator": "In", "values": values}
    terms = _affinity_terms(pod)
    if not terms:
        return [{"matchFields": [ours]}]
    out = []
    for term in terms:
        new = dict(term)
        fields = [dict(f) for f in term.get("matchFields") or []]
        if ours not in fields:
            fields.append(ours)
        new["matchFields"] = fields
        out.append(new)
    return out


# ------------------------------------------------------------------------------------------- profiles
def profile_from_annotation(text: str, where: str) -> Profile:
    """The webhook's ``metronome.dev/profile`` annotation (compact JSON of ``Profile.to_dict()``)."""
    try:
        data = json.loads(text)
    except ValueError:
        raise InvalidInput(where, text, "compact JSON of a profile {period_ms, windows, jitter_ms}") from None
    return Profile.from_mapping(data, where)


_CAMEL = {"periodMs": "period_ms", "jitterMs": "jitter_ms", "startMs": "start_ms", "lenMs": "len_ms"}


def profile_from_spec(data: Any, where: str) -> Profile:
    """A CRD profile ``{periodMs, windows: [{startMs, lenMs, gbps}], jitterMs}`` (snake_case accepted too)."""
    if not isinstance(data, Mapping):
        raise InvalidInput(where, data, "a mapping {periodMs, windows: [{startMs, lenMs, gbps}], jitterMs}")

    def snake(m: Mapping[str, Any]) -> JSON:
        return {_CAMEL.get(k, k): v for k, v in m.items()}

    converted = snake(data)
    if isinstance(converted.get("windows"), list):
        converted["windows"] = [snake(w) if isinstance(w, Mapping) else w for w in converted["windows"]]
    return Profile.from_mapping(converted, where)


def profile_to_spec(profile: Profile) -> JSON:
    """A profile in the CRD's camelCase form."""
    d = profile.to_dict()
    return {"periodMs": d["period_ms"],
            "windows": [{"startMs": w["start_ms"], "lenMs": w["len_ms"], "gbps": w["gbps"]} for w in d["windows"]],
            "jitterMs": d["jitter_ms"]}


def number_text(x: float) -> str:
    """A number as an annotation value: integral values without a decimal point."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))
