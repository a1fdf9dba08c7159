"""GPUs per node: allocatable, held by bound pods, reserved by placed gangs. PURE.

Free GPUs per node = allocatable - requests of bound, non-terminal pods - GPUs of placed gangs whose pods
are not bound yet (from their claims), so nothing is ever booked twice.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from volcano_metronome.controller import objects
from volcano_metronome.shapes import JSON
from volcano_metronome.controller.views import ClaimView, GangView


def pod_usage(pod: JSON | None, index: Mapping[str, int], resource: str) -> tuple[int, int] | None:
    """(node index, GPUs) a pod holds, when it is bound to a known node and not terminal."""
    if pod is None:
        return None
    node = (pod.get("spec") or {}).get("nodeName")
    if not node or node not in index or objects.pod_terminal(pod):
        return None
    return index[node], objects.pod_gpus(pod, resource)


def reservation(gang: GangView, index: Mapping[str, int]) -> tuple[tuple[int, int], ...]:
    """(node index, GPUs) a placed gang holds on its claim's nodes where its pods are not bound yet."""
    assert gang.claim is not None
    bound_here: dict[str, int] = {}
    for p in gang.pods:
        if p.node_name:
            bound_here[p.node_name] = bound_here.get(p.node_name, 0) + p.gpus
    return tuple((index[claimed], max(0, members * gang.gpus_per_member - bound_here.get(claimed, 0)))
                 for claimed, members in zip(gang.claim.nodes, gang.claim.members) if claimed in index)


def node_gpus(node_obj: Mapping[str, Any], resource: str) -> tuple[int, bool]:
    """A node's allocatable GPUs and whether new pods may run there (schedulable and Ready)."""
    alloc = min(int(objects.quantity(((node_obj.get("status") or {}).get("allocatable") or {}).get(resource, 0))),
                objects.MAX_COUNT)
    ready = objects.condition(node_obj, "Ready")
    return alloc, not (node_obj.get("spec") or {}).get("unschedulable") and (
        ready is None or ready.get("status") == "True")


def reserve(used: list[int], index: Mapping[str, int], gangs: Sequence[GangView]) -> None:
    """Add the GPUs placed gangs hold on their claims' nodes where their pods are not bound yet."""
    for gang in gangs:
        if gang.placed and not gang.finished and gang.claim is not None:
            for i, amount in reservation(gang, index):
                used[i] += amount


def free_gpus(nodes: Sequence[Mapping[str, Any]], bound_pods: Iterable[Mapping[str, Any]],
              managed_pods: Iterable[Mapping[str, Any]], gangs: Sequence[GangView], orphans: Sequence[ClaimView],
              names: Sequence[str], resource: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(allocatable, free) GPUs per node in ``names`` order; see the module docstring."""
    index = {n: i for i, n in enumerate(names)}
    alloc = [0] * len(names)
    usable = [True] * len(names)
    for node_obj in nodes:
        i = index.get(objects.name(node_obj))
        if i is not None:
            alloc[i], usable[i] = node_gpus(node_obj, resource)
    used = [0] * len(names)
    seen: set[tuple[str, str]] = set()
    for pod in [*bound_pods, *managed_pods]:
        k = (objects.namespace(pod), objects.name(pod))
        node = (pod.get("spec") or {}).get("nodeName")
        if k in seen or not node or node not in index or objects.pod_terminal(pod):
            continue
        seen.add(k)
        used[index[node]] += objects.pod_gpus(pod, resource)
    reserve(used, index, gangs)
    free = tuple(max(0, a - u) if ok else 0 for a, u, ok in zip(alloc, used, usable))
    return tuple(alloc), free
