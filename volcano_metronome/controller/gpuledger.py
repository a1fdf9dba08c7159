"""Free GPUs per node, kept from cycle to cycle by the Observer. PURE.

Free GPUs per node = allocatable - requests of bound, non-terminal pods - GPUs of placed gangs whose pods
are not bound yet (from their claims), as :func:`gpus.free_gpus` works them out from scratch; here only
the nodes, pods and gangs that changed are read again.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from volcano_metronome.controller import objects
from volcano_metronome.controller.gpus import node_gpus, pod_usage, reservation
from volcano_metronome.controller.views import Changed, GangKey, GangView, Inputs

_Key = tuple[str, str]


class GpuLedger:
    """Allocatable GPUs, what pods use and what placed gangs hold, per node; see the module docstring."""

    def __init__(self, resource: str) -> None:
        self.resource = resource
        self._nodes: dict[str, tuple[str, int, bool]] = {}  # name -> (rv, allocatable GPUs, usable)
        self._contrib: dict[_Key, tuple[int, int]] = {}  # pod -> (node index, GPUs it holds there)
        self._pod_used = np.zeros(0, np.int64)
        self._alloc = np.zeros(0, np.int64)
        self._usable = np.zeros(0, bool)
        self._reserved: dict[GangKey, tuple[tuple[int, int], ...]] = {}  # placed gang -> GPUs it holds unbound
        self._held = np.zeros(0, np.int64)  # per node: the sum of those

    def update(self, inputs: Inputs, index: Mapping[str, int], views: Mapping[GangKey, GangView], seen: set[GangKey],
               changed: Changed | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Allocatable and free GPUs per node (``index``: node -> position), reading only the nodes, pods and gangs
        (``seen``) that changed; all of them without ``changed``."""
        resource = self.resource
        if changed is None:
            self._alloc, self._usable = np.zeros(len(index), np.int64), np.ones(len(index), bool)
            cached_nodes: dict[str, tuple[str, int, bool]] = {}
            for node_obj in inputs.nodes:
                _, name, rv = _ident(node_obj)
                i = index.get(name)
                if i is None:
                    continue
                node_hit = self._nodes.get(name)
                if node_hit is None or not rv or node_hit[0] != rv:
                    node_hit = (rv, *node_gpus(node_obj, resource))
                if rv:
                    cached_nodes[name] = node_hit
                self._alloc[i], self._usable[i] = node_hit[1], node_hit[2]
            self._nodes = cached_nodes
            self._walk_usage(inputs, index)
            self._held, self._reserved = np.zeros(len(index), np.int64), {}
            seen = set(views)
        else:
            for name, changed_node in changed.nodes.items():
                i = index.get(name)
                if i is None or changed_node is None:
                    continue
                rv = objects.resource_version(changed_node)
                node_hit = (rv, *node_gpus(changed_node, resource))
                self._nodes[name] = node_hit
                self._alloc[i], self._usable[i] = node_hit[1], node_hit[2]
            for pk, (managed, bound) in changed.pods.items():
                old = self._contrib.pop(pk, None)
                if old is not None:
                    self._pod_used[old[0]] -= old[1]
                new = pod_usage(bound, index, resource) or pod_usage(managed, index, resource)
                if new is not None:
                    self._contrib[pk] = new
                    self._pod_used[new[0]] += new[1]
        self._reserve(index, views, seen)
        free = np.where(self._usable, np.maximum(self._alloc - self._pod_used - self._held, 0), 0)
        return tuple(self._alloc.tolist()), tuple(free.tolist())

    def _walk_usage(self, inputs: Inputs, index: Mapping[str, int]) -> None:
        resource = self.resource
        contrib: dict[_Key, tuple[int, int]] = {}
        used = np.zeros(len(index), np.int64)
        for pod in [*inputs.bound_pods, *inputs.pods]:
            ns, name, _ = _ident(pod)
            k = (ns, name)
            if k in contrib:
                continue
            c = pod_usage(pod, index, resource)
            if c is not None:
                contrib[k] = c
                used[c[0]] += c[1]
        self._contrib, self._pod_used = contrib, used

    def _reserve(self, index: Mapping[str, int], views: Mapping[GangKey, GangView], keys: set[GangKey]) -> None:
        """The GPUs placed gangs hold where their pods are not bound yet (:func:`reserve`), for the gangs in ``keys``."""
        for key in keys:
            for i, amount in self._reserved.pop(key, ()):
                self._held[i] -= amount
            gang = views.get(key)
            if gang is None or not gang.placed or gang.finished or gang.claim is None:
                continue
            held = reservation(gang, index)
            self._reserved[key] = held
            for i, amount in held:
                self._held[i] += amount


def _ident(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    m = obj.get("metadata") or {}
    return str(m.get("namespace") or ""), str(m.get("name", "")), str(m.get("resourceVersion", ""))
