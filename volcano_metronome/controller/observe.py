"""Observed state: Kubernetes objects (plain dicts) in, the values a cycle works on out. PURE.

- Gangs come from managed pods (annotations ``metronome.dev/gang-kind`` / ``gang-name``, or Volcano's
  ``scheduling.k8s.io/group-name``), from PodGroups of Volcano Jobs whose pods Volcano has not created
  yet (``gangs.decidable_before_pods``), and from Kueue Workloads held by our AdmissionCheck (these
  two are decided before they have pods). Pods of a job that Kueue manages (a batch Job, JobSet,
  PyTorchJob or MPIJob) belong to the job's Workload (its owner reference, ``owners.OWNER_KINDS``).
- A gang's STBandwidthClaim is the durable record of its decision: the claim whose ``gangRef``
  names the gang, else the claim the gang object names in ``metronome.dev/claim`` (when that claim
  is not bound to another gang), else one the controller will create (one lookup rule:
  ``gangs.find_claim`` over ``gangs.claim_names``).
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
from volcano_metronome.controller.gpuledger import GpuLedger
from volcano_metronome.controller.claimset import Claims
from volcano_metronome.shapes import JSON
from volcano_metronome.controller.queuepolicy import QueuePolicyView
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.shapes.slots import scheduled_by_volcano, traffic_class
from volcano_metronome.controller.gangs import claim_names, cluster_queue_checks, decidable_before_pods, find_claim, gang_view, member_specs, owning_workload, pod_gang_ref, workload_check
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
        self._gpus = GpuLedger(settings.gpu_resource)
        self._eligible: dict[str, frozenset[str] | None] = {}  # constraint key -> eligible nodes, while nodes hold
        self._claims = Claims(claim_view)
        self._podgroups: dict[_Key, JSON] = {}
        self._workloads: dict[_Key, JSON] = {}
        self._base: dict[GangKey, tuple[tuple[object, ...], GangView]] = {}  # gang -> (its inputs, view before nodes)
        self._views: dict[GangKey, GangView] = {}  # the gangs of the last world, by key
        self._order: list[GangKey] = []  # their keys in GangKey order
        self._gangs: tuple[GangView, ...] = ()
        self._volatile: set[GangKey] = set()  # views built from objects without a resourceVersion: built afresh
        self._pending: set[GangKey] = set()  # their eligible nodes are worked out every cycle
        self._claimed: dict[_Key, set[GangKey]] = {}  # claim key -> unfinished gangs it records
        self._orphans: tuple[ClaimView, ...] = ()
        self._shared: tuple[object, ...] | None = None
        self._serial = 0
        self._pols: tuple[tuple[str, ...], tuple[QueuePolicyView, ...]] | None = None
        self._pols_generation = 0

    def world(self, inputs: Inputs) -> World:
        """The world the objects describe now."""
        try:
            return self._world(inputs)
        except BaseException:
            self._net = None  # what was kept may be half updated: the next cycle reads everything
            self._shared = None  # and derives every gang afresh
            self._serial += 1  # whoever kept state from the last world starts over from the next one
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
        tracked = changed if changed is not None and changed.claims is not None else None
        dirty, changed_claims = (self._claims.apply(tracked.claims) if tracked is not None and tracked.claims is not None
                                 else self._claims.replace_all(inputs.claims))
        claims, by_ref = self._claims.views, self._claims.by_ref
        our_checks = frozenset(objects.name(ac) for ac in inputs.admission_checks
                               if (ac.get("spec") or {}).get("controllerName") == api.ADMISSION_CHECK_CONTROLLER)
        cq_checks = {objects.name(cq): cluster_queue_checks(cq) for cq in inputs.cluster_queues}
        dirty |= _objects(self._podgroups, PODGROUP, inputs.podgroups, changed.podgroups if changed else None)
        moved_workloads = _objects(self._workloads, WORKLOAD, inputs.workloads, changed.workloads if changed else None)
        dirty |= moved_workloads
        podgroups, workloads = self._podgroups, self._workloads
        owned_by_job = owners.workload_owners(inputs.workloads) if (
            moved_workloads or self._owned is None or changed is None or changed.workloads is None) else self._owned

        full = changed is None or net is not before or owned_by_job != self._owned
        self._owned = owned_by_job
        if full:
            self._eligible = {}
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
        dirty |= touched

        hostnames, live, generation = self._hostnames, self._live, self._generation
        shared = (generation, self._pols_generation, our_checks, tuple(sorted(cq_checks.items())))
        if shared != self._shared:  # every gang's view depends on these: all derived again (unchanged ones kept)
            dirty |= set(self._views) | set(self._sorted) | set(by_ref) | {
                GangKey(ns, WORKLOAD, name) for ns, name in workloads}
            self._shared = shared
        dirty |= self._volatile

        memo = self._eligible
        flavors = {objects.name(f): f.get("spec") or {} for f in inputs.resource_flavors}
        no_pods: tuple[int, tuple[PodView, ...], bool] = (0, (), True)
        seen: set[GangKey] = set()
        reorder = False
        for key in dirty | self._pending:
            found: JSON | None = podgroups.get((key.namespace, key.name)) if key.kind == PODGROUP else (
                workloads.get((key.namespace, key.name)) if key.kind == WORKLOAD else None)
            old = self._views.get(key)
            if not self._listed(key, found, our_checks, cq_checks):
                if old is not None:
                    changed_claims |= self._forget(key, old)
                    seen.add(key)
                    reorder = True
                continue
            if key in dirty:
                token, pods, all_rv = self._sorted.get(key, no_pods)
                claim_name, claim = find_claim(key, found, claims, by_ref)
                found_rv = objects.resource_version(found) if found is not None else None
                deps = (shared, found_rv, token, claim_name, claim.resource_version if claim is not None else None)
                hit = self._base.get(key)
                if hit is not None and hit[0] == deps:
                    base = hit[1]
                else:
                    base = gang_view(key, found, pods, claims, by_ref, pols, our_checks, cq_checks, settings)
                    base = replace(base, hostnames=hostnames)
                    stuck = vanished.stranded(base.pods, live)
                    if stuck and not base.waiting_for:  # decided again once their owners have replaced them
                        base = replace(base, waiting_for=f"{len(stuck)} pod(s) pinned to vanished nodes to be replaced")
                self._base[key] = (deps, base)
                self._claims.looked_up(key, claim_names(key, found))
                if found_rv == "" or not all_rv or (claim is not None and not claim.resource_version):
                    self._volatile.add(key)
                else:
                    self._volatile.discard(key)
            else:
                base = self._base[key][1]
            gang = base
            if gang.pending:  # only a decision needs it; placed gangs keep the nodes they have
                # Pods we already pinned (a gang decided again after a node vanished) carry our old decision's
                # affinity, not constraints of their own: the gated ones speak for the gang.
                waiting = tuple(p for p in gang.pods if p.gated) or gang.pods
                gang = replace(gang, nodes=eligibility.eligible_nodes(
                    inputs.nodes, member_specs(key, found, waiting, flavors), memo))
                self._pending.add(key)
            else:
                self._pending.discard(key)
            if gang is not old:
                seen.add(key)
                if old is None:
                    reorder = True
                else:
                    changed_claims |= self._unclaim(key, old)
                self._views[key] = gang
                if gang.claim is not None and not gang.finished:
                    self._claimed.setdefault(gang.claim.key, set()).add(key)
                    changed_claims.add(gang.claim.key)
        if reorder:
            self._order = sorted(self._views, key=lambda k: (k.namespace, k.kind, k.name))  # GangKey's order, faster
        if seen or reorder:
            self._gangs = tuple(map(self._views.__getitem__, self._order))
        gangs = self._gangs

        orphans = self._orphaned(changed_claims, claims)
        if full:
            index = net.topology.node_index
            self._taints = {objects.name(n): _taints(n) for n in inputs.nodes if objects.name(n) in index}
        allocatable, free = self._gpus.update(inputs, net.topology.node_index, self._views, seen,
                                              None if full else changed)
        self._serial += 1
        return World(net.topology, net.source, allocatable, free, gangs, orphans, dict(claims), pols, our_checks,
                     tuple(inputs.admission_checks), tuple(warnings), serial=self._serial,
                     changed=frozenset(seen) if self._serial > 1 else None, index=dict(self._views),
                     pending=frozenset(self._pending), overflow=self._claims.overflow, capacities=net.capacities)

    def _listed(self, key: GangKey, found: JSON | None, our_checks: frozenset[str],
                cq_checks: Mapping[str, frozenset[str]]) -> bool:
        """Whether ``key`` is a gang of this cycle: it has pods, or is a Workload held by our AdmissionCheck, or a
        PodGroup decided before Volcano creates its pods, or a claim names it and its object exists (placed gangs
        whose pods are gone still need their claims looked after)."""
        if key in self._sorted:
            return True
        if key.kind == WORKLOAD and found is not None and workload_check(found, our_checks, cq_checks) is not None:
            return True
        if key.kind == PODGROUP and found is not None and decidable_before_pods(found):
            return True
        return key.kind in (PODGROUP, WORKLOAD) and found is not None and key in self._claims.by_ref

    def _forget(self, key: GangKey, old: GangView) -> set[_Key]:
        del self._views[key]
        self._base.pop(key, None)
        self._volatile.discard(key)
        self._pending.discard(key)
        self._claims.looked_up(key, ())
        return self._unclaim(key, old)

    def _unclaim(self, key: GangKey, old: GangView) -> set[_Key]:
        """Drop ``old`` from the gangs its claim records; the claim to judge again (as an orphan)."""
        if old.claim is None or old.finished:
            return set()
        users = self._claimed.get(old.claim.key)
        if users is not None:
            users.discard(key)
            if not users:
                del self._claimed[old.claim.key]
        return {old.claim.key}

    def _orphaned(self, keys: set[_Key], claims: Mapping[_Key, ClaimView]) -> tuple[ClaimView, ...]:
        """Claims holding nodes that no unfinished gang records, judged again only for the claims in ``keys``."""
        current = {c.key: c for c in self._orphans}
        moved = False
        for k in keys:
            claim = claims.get(k)
            if claim is not None and claim.placed and k not in self._claimed:
                moved = moved or current.get(k) is not claim
                current[k] = claim
            elif current.pop(k, None) is not None:
                moved = True
        if moved:
            self._orphans = tuple(current[k] for k in sorted(current))
        return self._orphans

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

def _objects(kept: dict[_Key, JSON], kind: str, objs: Sequence[JSON],
             changed: Mapping[_Key, JSON | None] | None) -> set[GangKey]:
    """Keep ``kept`` (PodGroups or Workloads by key) current; the gangs whose object changed."""
    if changed is not None:
        for k, obj in changed.items():
            if obj is None:
                kept.pop(k, None)
            else:
                kept[k] = obj
        return {GangKey(ns, kind, name) for ns, name in changed}
    fresh = {}
    dirty = set()
    for obj in objs:
        ns, name, rv = _ident(obj)
        fresh[(ns, name)] = obj
        old = kept.get((ns, name))
        if old is None or not rv or objects.resource_version(old) != rv:
            dirty.add(GangKey(ns, kind, name))
    dirty.update(GangKey(ns, kind, name) for ns, name in kept.keys() - fresh.keys())
    kept.clear()
    kept.update(fresh)
    return dirty


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
        annotations={k: ann[k] for k in api.SLOT_ANNOTATIONS if k in ann},
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
    klass, env = traffic_class(status) or (None, {})
    return ClaimView(
        namespace=ns, name=cname, resource_version=objects.resource_version(obj),
        generation=int(objects.meta(obj).get("generation") or 0), gang_ref=gang_ref,
        ours=objects.labels(obj).get(api.MANAGED_LABEL) == "true", profile=profile,
        priority=int(prio) if isinstance(prio, int) and not isinstance(prio, bool) else None,
        queue_policy=spec.get("queuePolicy") or None,
        placed=bool(nodes) and len(nodes) == len(members) and not released,
        nodes=nodes, members=members, offset_ms=float(status.get("offsetMs") or 0.0),
        period_ms=float(status.get("periodMs") or 0.0), epoch_ms=int(status.get("epoch") or 0),
        conditions=conditions, status=status, locked=status.get("locked") is not False, traffic_class=klass,
        traffic_class_env=tuple(sorted(env.items())))
