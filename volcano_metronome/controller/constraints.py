"""From a decided claim (nodes, members per node) to the node constraint of each gated pod. PURE.

Ranks: gated pods take the claim's free member slots in rank order (``controller.ranks``), the
claim's nodes in ring order (those of a rack consecutive), so the ring crosses each node and rack
boundary once. Pods already bound, or ungated with our affinity, keep what they have. The first pins
wait until every member exists (a Workload is decided before its pods, which operators create in no
particular order); after that a replacement pod takes the slot its predecessor left.

kube-scheduler and Kueue: each pod is pinned to the one node of its slot.

Volcano: its allocate action keeps a predicate error cache per job and task role (``taskGroupID`` =
``job/role`` in ``pkg/scheduler/util/predicate_helper.go``, on by default; a role is the pod's
``volcano.sh/task-spec``): the nodes that failed the predicates for one pod of a role are not tried
for the next pod of that role, and once one pod of a role fits nowhere the role's other pods are
skipped for the session (``JobInfo.TaskHasFitErrors``). Pinning pods of one role to different nodes
therefore leaves all but the first unplaced and the gang pending. So every pod of one Volcano task
role gets the same constraint: the nodes the claim's slots give that role (roles whose node sets
overlap are merged into one pool with the union). Which pod of the role lands on which of those
nodes is then Volcano's choice: the node set, and so the links the decision accounted for, holds;
the order of ranks inside a role does not. Any placement Volcano finds fits the claim's members
per node when the pool's pods ask for equal GPUs (each node of the claim is full with its members,
but for the last one the core filled); pods asking for different numbers of GPUs could strand one,
so such a pool is pinned per pod, and the claim says how to turn the cache off
(:func:`cache_advice`); so is a pool whose set cannot be written next to the pods' own required node
affinity terms (a node without a ``kubernetes.io/hostname`` label, ``objects.pinned_terms``). Pods
without a task role, or scheduled by kube-scheduler, are pinned per pod: Volcano does not use the
cache for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from volcano_metronome.controller import objects, ranks
from volcano_metronome.controller.views import ClaimView, PodView

CACHE_ARGUMENT = "predicateErrorCacheEnable"


@dataclass(frozen=True)
class Target:
    """A live pod and the node set its affinity confines it to; () when the claim has no slot left for it."""

    pod: PodView
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Assignment:
    """Every live pod's target, and why Volcano's predicate error cache could hold the gang ("" if it cannot)."""

    targets: tuple[Target, ...]
    blocked: str = ""


def cache_advice(reasons: Sequence[str]) -> str:
    """What the claim and the Event say when pods of one Volcano task role need different node constraints."""
    return ("pods of one Volcano task role need different node constraints (" + "; ".join(reasons) + "). "
            "Volcano's allocate action reuses one pod's predicate failures for the other pods of its role "
            "(its predicate error cache, on by default) and can leave the gang pending. Turn the cache off: in "
            "volcano-scheduler.conf add `configurations: [{name: allocate, arguments: "
            f"{{{CACHE_ARGUMENT}: false}}}}]` (the scheduler reloads the file)")


def assign(claim: ClaimView, pods: Sequence[PodView], hostnames: Mapping[str, str] = {}) -> Assignment:
    """Each live pod's node set (see the module docstring); the same every time it is computed.

    ``hostnames`` (node name -> ``kubernetes.io/hostname`` label) names a node set next to a pod's own
    required node affinity terms (``objects.pinned_terms``); a pool that needs it and lacks it is pinned per pod.
    """
    slots = dict(zip(claim.nodes, claim.members))
    fixed: dict[str, tuple[str, ...]] = {}
    pooled: list[PodView] = []
    loose: list[PodView] = []
    for pod in pods:
        if pod.node_name is not None:
            fixed[pod.name] = (pod.node_name,)
            slots[pod.node_name] = slots.get(pod.node_name, 0) - 1
        elif not pod.gated and pod.allowed:
            fixed[pod.name] = pod.allowed
            if len(pod.allowed) == 1:
                slots[pod.allowed[0]] = slots.get(pod.allowed[0], 0) - 1
            else:
                pooled.append(pod)
        else:
            loose.append(pod)
    if not fixed and len(loose) < sum(claim.members):
        # A gang decided before its pods existed (a Kueue Workload) gets its first pins once every member
        # exists: then ranks, not the order its operator happened to create the pods in, choose the slots.
        return Assignment(tuple(Target(p, ()) for p in pods))
    for pod in pooled:  # not bound yet: count it against the first node of its set with a slot
        assert pod.allowed is not None
        _take(slots, [n for n in claim.nodes if n in pod.allowed])
    ordered = ranks.ring_order(loose, [p.ranks for p in loose], [p.name for p in loose])
    slot_of = {p.name: _take(slots, claim.nodes) for p in ordered}
    targets: dict[str, tuple[str, ...]] = {}
    for p in ordered:
        slot = slot_of[p.name]
        targets[p.name] = (slot,) if slot is not None else ()
    blocked = _volcano_roles(claim, pods, ordered, slot_of, targets, hostnames)
    out = tuple(Target(p, fixed.get(p.name) or targets.get(p.name, ())) for p in pods)
    return Assignment(out, blocked)


def _take(slots: dict[str, int], nodes: Sequence[str]) -> str | None:
    node = next((n for n in nodes if slots.get(n, 0) > 0), None)
    if node is not None:
        slots[node] -= 1
    return node


def _volcano_roles(claim: ClaimView, pods: Sequence[PodView], ordered: Sequence[PodView],
                   slot_of: dict[str, str | None], targets: dict[str, tuple[str, ...]],
                   hostnames: Mapping[str, str]) -> str:
    """Give the gated pods of each Volcano task role one node set (in ``targets``); why that fails, if it does."""
    placed = [p for p in ordered if p.volcano_role and slot_of[p.name]]
    unbound = [p for p in pods if p.volcano_role and p.node_name is None]
    if not unbound:
        return ""
    existing: dict[str, set[tuple[str, ...]]] = {}
    for p in unbound:
        if not p.gated and p.allowed:
            existing.setdefault(p.volcano_role, set()).add(p.allowed)
    kept = {role: next(iter(sets)) for role, sets in existing.items() if len(sets) == 1}
    wanted: dict[str, set[str]] = {}
    for p in placed:
        wanted.setdefault(p.volcano_role, set()).add(str(slot_of[p.name]))
    order = {n: i for i, n in enumerate(claim.nodes)}
    gpus = sorted({p.gpus for p in unbound if p.gpus > 0})
    for roles, nodes in _pools({role: nodes for role, nodes in wanted.items() if role not in existing}):
        if len({p.gpus for p in unbound if p.volcano_role in roles and p.gpus > 0}) > 1:
            continue  # a free choice inside the pool could strand a pod: the per-pod pins stay
        shared = tuple(sorted(nodes, key=lambda n: order.get(n, len(order))))
        if len(shared) > 1 and any(n not in hostnames for n in shared) and any(
                objects.has_own_terms(p.obj) for p in placed if p.volcano_role in roles):
            continue  # the set cannot be named next to the pods' own terms: the per-pod pins stay
        for p in placed:
            if p.volcano_role in roles:
                targets[p.name] = shared
    for role, have in kept.items():  # a replacement joins its role's set (grown by its slot if that lies outside)
        grown = set(have) | wanted.get(role, set())
        joined = have if grown == set(have) else tuple(sorted(grown, key=lambda n: order.get(n, len(order))))
        for p in placed:
            if p.volcano_role == role:
                targets[p.name] = joined
    final: dict[str, set[tuple[str, ...]]] = {}
    for p in unbound:
        current = targets.get(p.name) or (p.allowed if not p.gated else None)
        if current:
            final.setdefault(p.volcano_role, set()).add(current)
    reasons = [f"role {role}: its waiting pods are pinned to " + ", ".join("[" + " ".join(s) + "]" for s in sorted(sets))
               for role, sets in sorted(final.items()) if len(sets) > 1]
    if not reasons:
        return ""
    if len(gpus) > 1:
        reasons.append(f"they ask for different numbers of GPUs ({', '.join(map(str, gpus))}), so a node set shared "
                       "by the role could strand one")
    split = {role for role, sets in final.items() if len(sets) > 1}
    unnamed = sorted({n for role in split for s in final[role] for n in s if n not in hostnames}, key=ranks.natural)
    if unnamed and any(objects.has_own_terms(p.obj) for p in unbound if p.volcano_role in split):
        reasons.append(f"node(s) {', '.join(unnamed)} have no {objects.HOSTNAME_LABEL} label to name them in a node "
                       "set next to the pods' own required node affinity terms")
    return cache_advice(reasons)


def _pools(wanted: dict[str, set[str]]) -> list[tuple[frozenset[str], set[str]]]:
    """Roles whose node sets overlap, merged (transitively), with the union of their nodes."""
    pools: list[tuple[frozenset[str], set[str]]] = []
    for role in sorted(wanted):
        roles, nodes = frozenset({role}), set(wanted[role])
        rest = []
        for other_roles, other_nodes in pools:
            if other_nodes & nodes:
                roles, nodes = roles | other_roles, nodes | other_nodes
            else:
                rest.append((other_roles, other_nodes))
        pools = rest + [(roles, nodes)]
    return pools
