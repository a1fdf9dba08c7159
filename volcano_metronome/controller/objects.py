"""Reading Kubernetes objects given as plain dicts (API JSON form): small, pure accessors."""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping, Sequence

from volcano_metronome import api
from volcano_metronome.shapes import JSON, times
from volcano_metronome.shapes.selectors import NODE_NAME_FIELD

HOSTNAME_LABEL = "kubernetes.io/hostname"
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
    return times.parse_time(meta(obj).get("creationTimestamp")) or 0.0


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
               else times.format_time(now_s)}
        if generation is not None:
            new["observedGeneration"] = generation
        out.append(new)
    if not found:
        new = {"type": kind, "status": status, "reason": reason, "message": message[:32768],
               "lastTransitionTime": times.format_time(now_s)}
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
#: Most GPUs counted on one node or asked by one pod: far beyond any machine, and within the int64
#: arrays the ledger and the core keep (a quantity such as "1e40" would not be).
MAX_COUNT = 2**31 - 1
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {"": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}


def quantity(value: Any) -> float:
    """A Kubernetes resource quantity ("8", "500m", "1Ki", 4) as a number; 0 for garbage or beyond a float."""
    if isinstance(value, bool):
        return 0.0
    try:
        if isinstance(value, (int, float)):
            number = float(value)
        else:
            match = _QUANTITY.match(str(value).strip())
            if not match or match.group(2) not in _SUFFIX:
                return 0.0
            number = float(match.group(1)) * _SUFFIX[match.group(2)]
    except (ValueError, OverflowError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def whole(value: float) -> int:
    """Whole units of an extended resource (GPUs come in integers; round fractions up), at most ``MAX_COUNT``."""
    return min(int(math.ceil(value - 1e-9)), MAX_COUNT) if value > 0 else 0


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


def _named(term: Mapping[str, Any]) -> str | None:
    """The node a term's ``metadata.name In [node]`` requirement names (the API allows one value only)."""
    hit = None
    for req in term.get("matchFields") or []:
        values = req.get("values") or []
        if req.get("key") == NODE_NAME_FIELD and req.get("operator") == "In" and len(values) == 1:
            hit = str(values[0])
    return hit


def _hostnames_in(term: Mapping[str, Any]) -> tuple[str, ...] | None:
    hit = None
    for req in term.get("matchExpressions") or []:
        if req.get("key") == HOSTNAME_LABEL and req.get("operator") == "In" and req.get("values"):
            hit = tuple(str(v) for v in req["values"])
    return hit


def pinned_nodes(pod: Mapping[str, Any], by_hostname: Mapping[str, str] | None = None) -> tuple[str, ...] | None:
    """The node set the pod's required node affinity confines it to, in the forms the controller writes:
    ``metadata.name In [node]`` in every term (one node, or one term per node of a set), or a
    ``kubernetes.io/hostname In [...]`` requirement in every term (a set next to the pod's own terms;
    hostnames are mapped back to node names with ``by_hostname``). None when the terms say neither.
    """
    terms = _affinity_terms(pod)
    if not terms:
        return None
    named = [_named(t) for t in terms]
    if all(n is not None for n in named):
        return tuple(dict.fromkeys(str(n) for n in named))
    hosts = {_hostnames_in(t) for t in terms}
    if len(hosts) == 1 and None not in hosts:
        values = next(iter(hosts))
        assert values is not None
        return tuple((by_hostname or {}).get(h, h) for h in values)
    return None


def pinned_node(pod: Mapping[str, Any]) -> str | None:
    """The node our required node affinity pins the pod to (``metadata.name In [node]``), if it names one."""
    nodes = pinned_nodes(pod)
    return nodes[0] if nodes is not None and len(nodes) == 1 else None


def has_own_terms(pod: Mapping[str, Any]) -> bool:
    """Whether the pod has required node-selector terms besides ours (they can then only be narrowed)."""
    ours = [{"key": NODE_NAME_FIELD, "operator": "In"}]
    return any(set(t) != {"matchFields"} or [{k: v for k, v in f.items() if k != "values"}
                                             for f in t.get("matchFields") or []] != ours
               for t in _affinity_terms(pod))


def pinned_terms(pod: Mapping[str, Any], nodes: str | Sequence[str],
                 hostnames: Mapping[str, str] | None = None) -> list[JSON] | None:
    """The pod's required node-selector terms narrowed to ``nodes`` (one node, or a node set).

    On a gated pod the API server allows required node affinity only to be added or narrowed, and a
    ``metadata.name`` requirement may hold one value. With no terms we set one per node (terms are
    ORed); otherwise we add a requirement to every existing term (requirements within a term are
    ANDed), never changing what is there: ``metadata.name In [node]`` for one node, for a set
    ``kubernetes.io/hostname In [...]`` from ``hostnames`` (node name -> its hostname label). None when
    a node of the set has no hostname label to name it by.
    """
    names = [nodes] if isinstance(nodes, str) else list(nodes)
    terms = _affinity_terms(pod)
    if not terms:
        return [{"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [n]}]} for n in names]
    if len(names) == 1:
        ours = {"key": NODE_NAME_FIELD, "operator": "In", "values": names}
        where = "matchFields"
    else:
        if any(n not in (hostnames or {}) for n in names):
            return None
        ours = {"key": HOSTNAME_LABEL, "operator": "In", "values": [(hostnames or {})[n] for n in names]}
        where = "matchExpressions"
    out = []
    for term in terms:
        new = dict(term)
        reqs = [dict(f) for f in term.get(where) or []]
        if ours not in reqs:
            reqs.append(ours)
        new[where] = reqs
        out.append(new)
    return out


