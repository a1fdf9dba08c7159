"""Observed state: Kubernetes objects (plain dicts) in, the values a cycle works on out. PURE.

- Gangs come from managed pods (annotations ``metronome.dev/gang-kind`` / ``gang-name``, or Volcano's
  ``scheduling.k8s.io/group-name``), from PodGroups, and from Kueue Workloads held by our
  AdmissionCheck (those are decided before they have pods). Pods of a batch Job that Kueue manages
  belong to the Job's Workload (its owner reference).
- A gang's STBandwidthClaim is the durable record of its decision: the claim whose ``gangRef``
  names the gang, else the claim the gang object names in ``metronome.dev/claim`` (when that claim
  is not bound to another gang), else one the controller will create (:func:`claim_name_for`).
  Whether the gang's runtime aligns its bursts (``Running.locked``) is the claim's
  ``status.locked``; a claim without it was written before lock on demand existed, when every
  placed gang aligned, so it reads as locked.
- Free GPUs per node = allocatable - requests of bound, non-terminal pods - GPUs of placed gangs
  whose pods are not bound yet (from their claims), so nothing is ever booked twice.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from volcano_metronome import api
from volcano_metronome.controller import eligibility, network, objects, owners, queuepolicy as policies, \
    ranks as ranking, vanished
from volcano_metronome.controller.gpus import node_gpus, pod_usage, reservation
from volcano_metronome.shapes import JSON
from volcano_metronome.controller.queuepolicy import QueuePolicyView
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.shapes.slots import scheduled_by_volcano
from volcano_metronome.controller.gangs import cluster_queue_checks, find_claim, gang_view, member_specs, owning_workload, pod_gang_ref, workload_check
from volcano_metronome.controller.views import PODGROUP, WORKLOAD, Changed, ClaimView, GangKey, GangView, Inputs, PodView, World
from volcano_metronome.shapes.profiles import profile_from_spec



# ------------------------------------------------------------------------------------------- building
def observe(inputs: Inputs, settings: Settings, observer: Observer | None = None) -> World:
    """The world as the objects describe it: built by ``observer`` (which keeps what it derived for the next
    cycle), else from scratch (a fresh :class:`Observer`'s first world: the same code path)."""
    return (observer or Observer(settings)).world(inputs)


_Key = tuple[str, str]


class Observer:
    """Builds each cycle's World and keeps what it derived for the next one.

    With ``inputs.changed`` (the keys the informers reported since the last cycle) only the changed pods
    and nodes are read; without it, or when the node set, node labels, hostnames or the Kueue job owners
    changed, every pod and node is walked and an object whose resourceVersion is unchanged is not parsed
    again. A gang none of whose inputs changed (its object, its pods, its claim, the policies and checks,
    the node names and hostnames) keeps its view; the network is rebuilt only when node labels, capacities
    or HyperNodes change; the pending gangs' eligible nodes are kept per constraint until a node's labels
    or taints change. Objects without a resourceVersion are always read afresh on a full walk.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._net_sig: tuple[object, ...] | None = None
        self._net: network.Network | None = None
        self._hostnames: dict[str, str] = {}
        self._by_hostname: dict[str, str] = {}
        self._live: frozenset[str] = frozenset()
        self._generation = 0  # bumped when hostnames or the node names change: pod and gang views depend on them
        self._labels: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {}
        self._nodes: dict[str, tuple[str, int, bool]] = {}  # name -> (rv, allocatable GPUs, usable)
        self._taints: dict[str, str] = {}  # name -> its taints as JSON (eligibility depends on them)
        # -> (rv, generation, its gang by its annotations (None: terminal or no gang's), view)
        self._pods: dict[_Key, tuple[str, int, GangKey | None, PodView | None]] = {}
        self._gang_of: dict[_Key, GangKey] = {}  # pod -> the gang it counts for
        self._members: dict[GangKey, dict[str, PodView]] = {}
        self._sorted: dict[GangKey, tuple[int, tuple[PodView, ...], bool]] = {}  # (token, pods by name, all have rv)
        self._token = 0
        self._owned: Mapping[tuple[str, str, str], str] | None = None
        self._contrib: dict[_Key, tuple[int, int]] = {}  # pod -> (node index, GPUs it holds there)
        self._pod_used: list[int] = []
        self._alloc: list[int] = []
        self._usable: list[bool] = []
        self._reserved: dict[GangKey, tuple[GangView, tuple[tuple[int, int], ...]]] = {}
        self._eligible: dict[str, frozenset[str] | None] = {}  # constraint key -> eligible nodes, while nodes hold
        self._claims: dict[_Key, tuple[str, ClaimView]] = {}
        self._gangs: dict[GangKey, tuple[tuple[object, ...], GangView]] = {}
        self._pols: tuple[tuple[str, ...], tuple[QueuePolicyView, ...]] | None = None
        self._pols_generation = 0

    def world(self, inputs: Inputs) -> World:
        """The world the objects describe now."""
        try:
            return self._world(inputs)
        except BaseException:
            self._net = None  # what was kept may be half updated: the next cycle reads everything
            raise

    def _world(self, inputs: Inputs) -> World:
        settings = self.settings
        warnings: list[str] = []
        changed = inputs.changed if self._net is not None else None
        before = self._net
        net = self._network(inputs, changed)
        warnings += net.warnings
        pols = self._policies(inputs.queue_policies)
        warnings += [p.error for p in pols if p.error]
        claims = {}
        cached_claims: dict[_Key, tuple[str, ClaimView]] = {}
        for obj in inputs.claims:
            ns, name, rv = _ident(obj)
            claim_hit = self._claims.get((ns, name))
            view = claim_hit[1] if claim_hit is not None and rv and claim_hit[0] == rv else claim_view(obj)
            if rv:
                cached_claims[(ns, name)] = (rv, view)
            claims[view.key] = view
        self._claims = cached_claims
        by_ref: dict[GangKey, list[ClaimView]] = {}
        for c in claims.values():
            if c.gang_ref is not None:
                by_ref.setdefault(c.gang_ref, []).append(c)
        our_checks = frozenset(objects.name(ac) for ac in inputs.admission_checks
                               if (ac.get("spec") or {}).get("controllerName") == api.ADMISSION_CHECK_CONTROLLER)
        cq_checks = {objects.name(cq): cluster_queue_checks(cq) for cq in inputs.cluster_queues}
        workloads = {(objects.namespace(w), objects.name(w)): w for w in inputs.workloads}
        owned_by_job = owners.workload_owners(inputs.workloads)
        podgroups = {(objects.namespace(p), objects.name(p)): p for p in inputs.podgroups}

        full = changed is None or net is not before or owned_by_job != self._owned
        self._owned = owned_by_job
        if full:
            self._eligible = {}
            self._reserved = {}
            touched = self._walk_pods(inputs.pods, owned_by_job)
        else:
            assert changed is not None
            touched = self._pods_changed(changed, owned_by_job)
        for g in touched:
            members = self._members.get(g)
            if members:
                self._token += 1
                ordered = tuple(sorted(members.values(), key=lambda p: p.name))
                self._sorted[g] = (self._token, ordered, all(p.resource_version for p in ordered))
            else:
                self._members.pop(g, None)
                self._sorted.pop(g, None)

        hostnames, live, generation = self._hostnames, self._live, self._generation
        keys: set[GangKey] = set(self._sorted)
        for (ns, wname), wl in workloads.items():
            if workload_check(wl, our_checks, cq_checks) is not None:
                keys.add(GangKey(ns, WORKLOAD, wname))
        for ref in by_ref:  # placed gangs whose pods are gone still need their claims looked after
            if ref.kind == PODGROUP and (ref.namespace, ref.name) in podgroups:
                keys.add(ref)
            if ref.kind == WORKLOAD and (ref.namespace, ref.name) in workloads:
                keys.add(ref)

        gangs: list[GangView] = []
        memo = self._eligible
        flavors = {objects.name(f): f.get("spec") or {} for f in inputs.resource_flavors}
        shared = (generation, self._pols_generation, our_checks, tuple(sorted(cq_checks.items())))
        cached_gangs: dict[GangKey, tuple[tuple[object, ...], GangView]] = {}
        no_pods: tuple[int, tuple[PodView, ...], bool] = (0, (), True)
        for key in sorted(keys, key=lambda k: (k.namespace, k.kind, k.name)):  # GangKey's order, faster
            found: JSON | None = podgroups.get((key.namespace, key.name)) if key.kind == PODGROUP else (
                workloads.get((key.namespace, key.name)) if key.kind == WORKLOAD else None)
            token, pods, all_rv = self._sorted.get(key, no_pods)
            claim_name, claim = find_claim(key, found, claims, by_ref)
            found_rv = objects.resource_version(found) if found is not None else None
            deps = (shared, found_rv, token, claim_name, claim.resource_version if claim is not None else None)
            gang_hit = self._gangs.get(key)
            if gang_hit is not None and gang_hit[0] == deps and found_rv != "" and all_rv and (
                    claim is None or claim.resource_version):
                gang = gang_hit[1]
            else:
                gang = gang_view(key, found, pods, claims, by_ref, pols, our_checks, cq_checks, settings)
                gang = replace(gang, hostnames=hostnames)
                stuck = vanished.stranded(gang.pods, live)
                if stuck and not gang.waiting_for:  # decided again once their owners have replaced them
                    gang = replace(gang, waiting_for=f"{len(stuck)} pod(s) pinned to vanished nodes to be replaced")
            cached_gangs[key] = (deps, gang)
            if gang.pending:  # only a decision needs it; placed gangs keep the nodes they have
                # Pods we already pinned (a gang decided again after a node vanished) carry our old decision's
                # affinity, not constraints of their own: the gated ones speak for the gang.
                waiting = tuple(p for p in gang.pods if p.gated) or gang.pods
                gang = replace(gang, nodes=eligibility.eligible_nodes(
                    inputs.nodes, member_specs(key, found, waiting, flavors), memo))
            gangs.append(gang)
        self._gangs = cached_gangs

        claimed = {g.claim.key for g in gangs if g.claim is not None and not g.finished}
        orphans = tuple(c for c in sorted(claims.values(), key=lambda c: c.key) if c.placed and c.key not in claimed)
        allocatable, free = self._free_gpus(inputs, gangs, net.topology.nodes, None if full else changed)
        return World(net.topology, net.source, allocatable, free, tuple(gangs), orphans, claims, pols, our_checks,
                     tuple(inputs.admission_checks), tuple(warnings))

    def _pod_entry(self, pod: JSON, hit: tuple[str, int, GangKey | None, PodView | None] | None,
                   rv: str) -> tuple[str, int, GangKey | None, PodView | None]:
        if hit is None or not rv or hit[0] != rv or hit[1] != self._generation:
            raw = None if objects.pod_terminal(pod) else pod_gang_ref(pod)  # jobs' Workloads by their owner
            hit = (rv, self._generation, raw,
                   pod_view(pod, self.settings.gpu_resource, self._by_hostname) if raw else None)
        return hit

    def _walk_pods(self, pods: Sequence[JSON], owned_by_job: Mapping[tuple[str, str, str], str]) -> set[GangKey]:
        """Every managed pod read (unchanged ones from the cache); the gangs whose members changed."""
        cached: dict[_Key, tuple[str, int, GangKey | None, PodView | None]] = {}
        gang_of: dict[_Key, GangKey] = {}
        members: dict[GangKey, dict[str, PodView]] = {}
        for pod in pods:
            ns, name, rv = _ident(pod)
            pk = (ns, name)
            hit = self._pod_entry(pod, self._pods.get(pk), rv)
            if rv:
                cached[pk] = hit
            key, pview = hit[2], hit[3]
            if key is None or pview is None:
                continue
            key = owning_workload(key, owned_by_job)
            if key is None:
                continue
            gang_of[pk] = key
            members.setdefault(key, {})[pview.name] = pview
        old = self._members
        touched = {g for g in set(old) | set(members) if old.get(g) != members.get(g)}
        self._pods, self._gang_of, self._members = cached, gang_of, members
        return touched

    def _pods_changed(self, changed: Changed, owned_by_job: Mapping[tuple[str, str, str], str]) -> set[GangKey]:
        """The changed managed pods read; the gangs whose members changed."""
        touched: set[GangKey] = set()
        for pk, (pod, _) in changed.pods.items():
            old = self._gang_of.pop(pk, None)
            if old is not None:
                self._members.get(old, {}).pop(pk[1], None)
                touched.add(old)
            if pod is None:
                self._pods.pop(pk, None)
                continue
            hit = self._pod_entry(pod, self._pods.get(pk), _ident(pod)[2])
            self._pods[pk] = hit
            key, pview = hit[2], hit[3]
            key = owning_workload(key, owned_by_job) if key is not None and pview is not None else None
            if key is None or pview is None:
                continue
            self._gang_of[pk] = key
            self._members.setdefault(key, {})[pview.name] = pview
            touched.add(key)
        return touched

    def _network(self, inputs: Inputs, changed: Changed | None) -> network.Network:
        if self._net is not None and changed is not None and self._same_nodes(changed) and self._net_sig is not None \
                and self._net_sig[1] == tuple(objects.resource_version(o)
                                              for o in (*inputs.capacities, *inputs.hypernodes)):
            return self._net
        settings = self.settings
        cached: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {}
        nodes = []
        for n in inputs.nodes:
            _, name, rv = _ident(n)
            labels = _reuse(self._labels, cached, name, rv, lambda: tuple(sorted(objects.labels(n).items())))
            nodes.append((name, labels))
        self._labels = cached
        extra = tuple(objects.resource_version(o) for o in (*inputs.capacities, *inputs.hypernodes))
        sig: tuple[object, ...] | None = (tuple(nodes), extra)
        if not all(extra) or not all(rv for _, rv in cached.values()) or len(cached) != len(nodes):
            sig = None
        if self._net is None or sig is None or sig != self._net_sig:
            self._net = network.build(inputs.nodes, inputs.capacities, inputs.hypernodes,
                                      settings.default_capacities, settings.rack_label, settings.zone_label)
            self._net_sig = sig
            hostnames = {name: str(dict(labels)[objects.HOSTNAME_LABEL]) for name, labels in nodes
                         if dict(labels).get(objects.HOSTNAME_LABEL)}
            live = frozenset(name for name, _ in nodes)
            if hostnames != self._hostnames or live != self._live:
                self._hostnames, self._live = hostnames, live
                self._by_hostname = {h: n for n, h in hostnames.items()}
                self._generation += 1
        return self._net

    def _same_nodes(self, changed: Changed) -> bool:
        """Whether the changed nodes kept their names and labels (then the network stands); notes their rv."""
        for name, node in changed.nodes.items():
            hit = self._labels.get(name)
            if node is None or hit is None:
                return False
            rv = objects.resource_version(node)
            labels = tuple(sorted(objects.labels(node).items()))
            if not rv or labels != hit[1]:
                return False
            self._labels[name] = (rv, labels)
            taints = _taints(node)
            if taints != self._taints.get(name):
                self._taints[name] = taints
                self._eligible.clear()  # the pending gangs are judged again against the new taints
        return True

    def _policies(self, objs: Sequence[JSON]) -> tuple[QueuePolicyView, ...]:
        sig = tuple(objects.resource_version(p) for p in objs)
        if self._pols is None or self._pols[0] != sig or not all(sig):
            grid, nic = self.settings.grid, self.settings.default_capacities.nic_gbps
            self._pols = (sig, tuple(policies.parse(p, grid, nic) for p in objs))
            self._pols_generation += 1
        return self._pols[1]

    def _free_gpus(self, inputs: Inputs, gangs: Sequence[GangView], names: Sequence[str],
                   changed: Changed | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """:func:`free_gpus`, reading only the nodes and pods that changed (all of them without ``changed``)."""
        resource = self.settings.gpu_resource
        index = self._net.topology.node_index if self._net is not None else {n: i for i, n in enumerate(names)}
        if changed is None:
            self._alloc, self._usable = [0] * len(names), [True] * len(names)
            cached_nodes: dict[str, tuple[str, int, bool]] = {}
            taints: dict[str, str] = {}
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
                taints[name] = _taints(node_obj)
            self._nodes, self._taints = cached_nodes, taints
            self._walk_usage(inputs, index)
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
        used = list(self._pod_used)
        self._reserve(used, index, gangs)
        free = tuple(max(0, a - u) if ok else 0 for a, u, ok in zip(self._alloc, used, self._usable))
        return tuple(self._alloc), free

    def _walk_usage(self, inputs: Inputs, index: Mapping[str, int]) -> None:
        resource = self.settings.gpu_resource
        contrib: dict[_Key, tuple[int, int]] = {}
        used = [0] * len(index)
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

    def _reserve(self, used: list[int], index: Mapping[str, int], gangs: Sequence[GangView]) -> None:
        """:func:`_reserve`, each gang's share worked out again only when its view changed."""
        kept: dict[GangKey, tuple[GangView, tuple[tuple[int, int], ...]]] = {}
        for gang in gangs:
            if not gang.placed or gang.finished or gang.claim is None:
                continue
            hit = self._reserved.get(gang.key)
            if hit is None or hit[0] is not gang:
                hit = (gang, reservation(gang, index))
            kept[gang.key] = hit
            for i, amount in hit[1]:
                used[i] += amount
        self._reserved = kept


def _taints(node: Mapping[str, Any]) -> str:
    return json.dumps((node.get("spec") or {}).get("taints") or [], sort_keys=True, default=str)


def _ident(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """(namespace, name, resourceVersion) in one look at the metadata (a cycle reads tens of thousands)."""
    m = obj.get("metadata") or {}
    return str(m.get("namespace") or ""), str(m.get("name", "")), str(m.get("resourceVersion", ""))


def _reuse(cache: Mapping[Any, tuple[str, Any]], fresh: dict[Any, tuple[str, Any]], key: Any, rv: str,
           build: Callable[[], Any]) -> Any:
    """The value cached for ``key`` at resourceVersion ``rv``, else a new one (kept in ``fresh`` for next time)."""
    hit = cache.get(key)
    value = hit[1] if hit is not None and rv and hit[0] == rv else build()
    if rv:
        fresh[key] = (rv, value)
    return value


def pod_view(pod: Mapping[str, Any], gpu_resource: str, by_hostname: Mapping[str, str] | None = None) -> PodView:
    """The parts of a pod a cycle uses (``by_hostname``: hostname label -> node name)."""
    spec = pod.get("spec") or {}
    ann = objects.annotations_of(pod)
    return PodView(
        namespace=objects.namespace(pod), name=objects.name(pod), resource_version=objects.resource_version(pod),
        gated=objects.gated_by_us(pod), gates=objects.gates(pod), node_name=spec.get("nodeName") or None,
        pinned=objects.pinned_node(pod), gpus=objects.pod_gpus(pod, gpu_resource),
        priority=int(spec.get("priority") or 0), created_s=objects.created_s(pod),
        annotations={k: ann[k] for k in (api.OFFSET_MS, api.PERIOD_MS, api.EPOCH) if k in ann},
        obj=dict(pod), allowed=objects.pinned_nodes(pod, by_hostname), ranks=ranking.rank_keys(pod),
        volcano_role=ranking.volcano_role(pod) if scheduled_by_volcano(pod) else "")


def claim_view(obj: Mapping[str, Any]) -> ClaimView:
    """An STBandwidthClaim's spec and status as values (a broken profile reads as None)."""
    spec = obj.get("spec") or {}
    status = dict(obj.get("status") or {})
    ns, cname = objects.namespace(obj), objects.name(obj)
    ref = spec.get("gangRef") or {}
    gang_ref = GangKey(ns, str(ref["kind"]), str(ref["name"])) if ref.get("kind") and ref.get("name") else None
    try:
        profile = profile_from_spec(spec["profile"], "spec.profile") if spec.get("profile") else None
    except InvalidInput:
        profile = None
    nodes = tuple(str(n) for n in status.get("nodes") or [])
    members = tuple(int(m) for m in status.get("members") or [])
    conditions = tuple(dict(c) for c in status.get("conditions") or [])
    placed_cond = next((c for c in conditions if c.get("type") == "Placed"), None)
    released = placed_cond is not None and placed_cond.get("status") != "True"
    prio = spec.get("priority")
    return ClaimView(
        namespace=ns, name=cname, resource_version=objects.resource_version(obj),
        generation=int(objects.meta(obj).get("generation") or 0), gang_ref=gang_ref,
        ours=objects.labels(obj).get(api.MANAGED_LABEL) == "true", profile=profile,
        priority=int(prio) if isinstance(prio, int) and not isinstance(prio, bool) else None,
        queue_policy=spec.get("queuePolicy") or None,
        placed=bool(nodes) and len(nodes) == len(members) and not released,
        nodes=nodes, members=members, offset_ms=float(status.get("offsetMs") or 0.0),
        period_ms=float(status.get("periodMs") or 0.0), epoch_ms=int(status.get("epoch") or 0),
        conditions=conditions, status=status, locked=status.get("locked") is not False)
