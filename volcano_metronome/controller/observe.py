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

import hashlib
import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from volcano_metronome import api
from volcano_metronome.controller import eligibility, network, objects, owners, queuepolicy as policies, \
    ranks as ranking, vanished
from volcano_metronome.controller.objects import JSON
from volcano_metronome.controller.queuepolicy import QueuePolicyView
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.model import ClusterState, Gang, Running
from volcano_metronome.core.profile import Profile
from volcano_metronome.core.topology import Topology

PODGROUP, WORKLOAD, JOB = "PodGroup", "Workload", "Job"
GANG_KINDS = (PODGROUP, WORKLOAD, JOB)
GANG_API_VERSIONS = {PODGROUP: "scheduling.volcano.sh/v1beta1", WORKLOAD: "kueue.x-k8s.io/v1beta2", JOB: "batch/v1"}
RELEASED = "Released"
DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True, order=True)
class GangKey:
    """A gang's identity: the namespace, kind (PodGroup, Workload or Job) and name of its object."""

    namespace: str
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


@dataclass(frozen=True)
class PodView:
    """What a cycle needs of one pod of a gang."""

    namespace: str
    name: str
    resource_version: str
    gated: bool  # our gate is still on it
    gates: tuple[str, ...]
    node_name: str | None  # bound to
    pinned: str | None  # the node our affinity pins it to (when it names one node)
    gpus: int
    priority: int
    created_s: float
    annotations: Mapping[str, str]
    obj: JSON = field(compare=False, repr=False)
    allowed: tuple[str, ...] | None = None  # the node set our affinity confines it to
    ranks: Mapping[str, ranking.Key] = field(default_factory=dict)  # rank sort keys by source (controller.ranks)
    volcano_role: str = ""  # its Volcano task role when Volcano schedules it ("" otherwise)


@dataclass(frozen=True)
class ClaimView:
    """An STBandwidthClaim as the cycle reads it."""

    namespace: str
    name: str
    resource_version: str
    generation: int
    gang_ref: GangKey | None
    ours: bool  # created by the controller (label metronome.dev/managed=true)
    profile: Profile | None
    priority: int | None
    queue_policy: str | None
    placed: bool  # holds nodes (status.nodes non-empty and not released)
    nodes: tuple[str, ...]
    members: tuple[int, ...]
    offset_ms: float
    period_ms: float
    epoch_ms: int
    conditions: tuple[JSON, ...]
    status: JSON = field(compare=False, repr=False)
    locked: bool = True  # status.locked: its pods carry the offset and epoch, its runtime aligns bursts

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name)."""
        return self.namespace, self.name

    def origin_offset_ms(self) -> float:
        """The offset relative to the Unix epoch, modulo the period: every claim on one time axis."""
        if self.period_ms <= 0:
            return 0.0
        return math.fmod(math.fmod(float(self.epoch_ms), self.period_ms) + self.offset_ms, self.period_ms)


@dataclass(frozen=True)
class AdmissionCheckState:
    """Our AdmissionCheck on one Workload."""

    name: str  # the AdmissionCheck's name
    state: str | None  # Pending, Ready, Retry, Rejected (None: Kueue has not listed it yet)
    message: str
    quota_reserved: bool
    entries: tuple[JSON, ...]  # the workload's whole status.admissionChecks list
    pod_sets: tuple[JSON, ...]  # spec.podSets


@dataclass(frozen=True)
class GangView:
    """A gang: where its numbers come from, its pods, its claim, and whether it may be decided now."""

    key: GangKey
    obj: JSON | None = field(compare=False, repr=False)
    claim_name: str
    claim: ClaimView | None
    profile: Profile | None
    profile_error: str
    size: int
    gpus_per_member: int
    priority: int
    created_s: float
    pods: tuple[PodView, ...]  # live (non-terminal) pods
    policy: str  # QueuePolicy name ("" for the built-in default)
    volcano_queue: str | None = None
    cluster_queue: str | None = None
    check: AdmissionCheckState | None = None
    finished: bool = False
    waiting_for: str = ""  # why it is not decidable yet ("" when it is)
    nodes: frozenset[str] | None = None  # the nodes its pods' selectors, affinity and tolerations admit
    hostnames: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)  # node -> hostname label

    @property
    def uid(self) -> str:
        """The core's id for this gang: the claim's namespace/name (unique, stable across restarts)."""
        return f"{self.key.namespace}/{self.claim_name}"

    @property
    def placed(self) -> bool:
        """Its claim holds nodes."""
        return self.claim is not None and self.claim.placed

    @property
    def pending(self) -> bool:
        """Not placed, not finished, and everything needed for a decision is there."""
        return not self.placed and not self.finished and not self.waiting_for and self.profile is not None

    def core_gang(self) -> Gang:
        """The core's value for this gang (requires a profile)."""
        assert self.profile is not None
        return Gang(uid=self.uid, name=str(self.key), size=self.size, gpus_per_member=self.gpus_per_member,
                    profile=self.profile, priority=self.priority, created_s=self.created_s, nodes=self.nodes)


@dataclass(frozen=True)
class Inputs:
    """Every object a cycle reads, as the informers hold them."""

    nodes: Sequence[JSON] = ()
    pods: Sequence[JSON] = ()  # managed pods (label metronome.dev/managed=true)
    bound_pods: Sequence[JSON] = ()  # every non-terminal pod bound to a node
    podgroups: Sequence[JSON] = ()
    workloads: Sequence[JSON] = ()
    admission_checks: Sequence[JSON] = ()
    cluster_queues: Sequence[JSON] = ()
    resource_flavors: Sequence[JSON] = ()
    claims: Sequence[JSON] = ()
    capacities: Sequence[JSON] = ()
    hypernodes: Sequence[JSON] = ()
    queue_policies: Sequence[JSON] = ()


@dataclass(frozen=True)
class World:
    """The observed cluster, ready for the core."""

    topology: Topology
    topology_source: str
    allocatable: tuple[int, ...]
    free_gpus: tuple[int, ...]  # already net of placed gangs' reservations
    gangs: tuple[GangView, ...]
    orphans: tuple[ClaimView, ...]  # claims holding nodes whose gang is gone or finished
    claims: Mapping[tuple[str, str], ClaimView]
    policies: tuple[QueuePolicyView, ...]
    our_checks: frozenset[str]
    admission_checks: tuple[JSON, ...]
    warnings: tuple[str, ...] = ()

    def running(self) -> tuple[Running, ...]:
        """Gangs holding nodes (placed claims, orphans included until released) as the core's values."""
        out: list[Running] = []
        index = self.topology.node_index
        for gang in self.gangs:
            if gang.placed and not gang.finished and gang.profile is not None and gang.claim is not None:
                r = _running(gang.claim, gang.profile, gang.priority, gang.gpus_per_member, gang.created_s,
                             index, str(gang.key))
                if r is not None:
                    out.append(r)
        for claim in self.orphans:
            if claim.profile is not None:
                r = _running(claim, claim.profile, claim.priority or 0, 0, 0.0, index, f"{claim.namespace}/{claim.name}")
                if r is not None:
                    out.append(r)
        return tuple(out)

    def state(self) -> ClusterState:
        """The core's cluster state."""
        return ClusterState(self.topology, self.free_gpus, self.running())


def _running(claim: ClaimView, profile: Profile, priority: int, gpm: int, created: float,
             index: Mapping[str, int], label: str) -> Running | None:
    # Nodes that left the cluster no longer carry this gang's traffic.
    kept = [(n, m) for n, m in zip(claim.nodes, claim.members) if n in index and m > 0]
    if not kept:
        return None
    gang = Gang(uid=f"{claim.namespace}/{claim.name}", name=label, size=sum(m for _, m in kept),
                gpus_per_member=gpm, profile=profile, priority=priority, created_s=created)
    return Running(gang, tuple(n for n, _ in kept), tuple(m for _, m in kept), claim.origin_offset_ms(),
                   locked=claim.locked)


# ------------------------------------------------------------------------------------------- building
def observe(inputs: Inputs, settings: Settings) -> World:
    """The world as the objects describe it."""
    warnings: list[str] = []
    net = network.build(inputs.nodes, inputs.capacities, inputs.hypernodes, settings.default_capacities,
                        settings.rack_label, settings.zone_label)
    warnings += net.warnings
    grid = settings.grid
    nic = settings.default_capacities.nic_gbps
    pols = tuple(policies.parse(p, grid, nic) for p in inputs.queue_policies)
    warnings += [p.error for p in pols if p.error]
    claims = {}
    for obj in inputs.claims:
        view = claim_view(obj)
        claims[view.key] = view
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

    hostnames = {objects.name(n): str(objects.labels(n)[objects.HOSTNAME_LABEL]) for n in inputs.nodes
                 if objects.labels(n).get(objects.HOSTNAME_LABEL)}
    by_hostname = {h: n for n, h in hostnames.items()}
    live = frozenset(objects.name(n) for n in inputs.nodes)
    pods_by_gang: dict[GangKey, list[PodView]] = {}
    for pod in inputs.pods:
        key = gang_key_of_pod(pod, owned_by_job)
        if key is None or objects.pod_terminal(pod):
            continue
        pods_by_gang.setdefault(key, []).append(pod_view(pod, settings.gpu_resource, by_hostname))

    keys: set[GangKey] = set(pods_by_gang)
    for (ns, wname), wl in workloads.items():
        if workload_check(wl, our_checks, cq_checks) is not None:
            keys.add(GangKey(ns, WORKLOAD, wname))
    for ref in by_ref:  # placed gangs whose pods are gone still need their claims looked after
        if ref.kind == PODGROUP and (ref.namespace, ref.name) in podgroups:
            keys.add(ref)
        if ref.kind == WORKLOAD and (ref.namespace, ref.name) in workloads:
            keys.add(ref)

    gangs: list[GangView] = []
    memo: dict[str, frozenset[str] | None] = {}
    flavors = {objects.name(f): f.get("spec") or {} for f in inputs.resource_flavors}
    for key in sorted(keys):
        found: JSON | None = podgroups.get((key.namespace, key.name)) if key.kind == PODGROUP else (
            workloads.get((key.namespace, key.name)) if key.kind == WORKLOAD else None)
        gang = gang_view(key, found, tuple(sorted(pods_by_gang.get(key, ()), key=lambda p: p.name)), claims, by_ref,
                         pols, our_checks, cq_checks, settings)
        gang = replace(gang, hostnames=hostnames)
        stuck = vanished.stranded(gang.pods, live)
        if stuck and not gang.waiting_for:  # decided again once their owners have replaced them
            gang = replace(gang, waiting_for=f"{len(stuck)} pod(s) pinned to vanished nodes to be replaced")
        if gang.pending:  # only a decision needs it; placed gangs keep the nodes they have
            # Pods we already pinned (a gang decided again after a node vanished) carry our old decision's
            # affinity, not constraints of their own: the gated ones speak for the gang.
            waiting = tuple(p for p in gang.pods if p.gated) or gang.pods
            gang = replace(gang, nodes=eligibility.eligible_nodes(
                inputs.nodes, member_specs(key, found, waiting, flavors), memo))
        gangs.append(gang)

    claimed = {g.claim.key for g in gangs if g.claim is not None and not g.finished}
    orphans = tuple(c for c in sorted(claims.values(), key=lambda c: c.key) if c.placed and c.key not in claimed)

    names = net.topology.nodes
    allocatable, free = free_gpus(inputs.nodes, inputs.bound_pods, inputs.pods, gangs, orphans, names,
                                  settings.gpu_resource)
    return World(net.topology, net.source, allocatable, free, tuple(gangs), orphans, claims, pols, our_checks,
                 tuple(inputs.admission_checks), tuple(warnings))


def member_specs(key: GangKey, obj: Mapping[str, Any] | None, pods: Sequence[PodView],
                 flavors: Mapping[str, Mapping[str, Any]] = {}) -> list[Mapping[str, Any]]:
    """The pod specs whose node constraints a gang's members carry: its pods', else its podSets' templates.

    A Workload's pods will also carry what Kueue adds from the ResourceFlavors it was assigned
    (``nodeLabels`` as node selector, ``tolerations``); a template gets them here. A flavor not seen
    (yet) adds nothing.
    """
    if pods:
        return [p.obj.get("spec") or {} for p in pods]
    if key.kind != WORKLOAD or obj is None:
        return []
    assigned = {a.get("name"): a for a in (((obj.get("status") or {}).get("admission") or {})
                                            .get("podSetAssignments") or [])}
    specs: list[Mapping[str, Any]] = []
    for ps in (obj.get("spec") or {}).get("podSets") or []:
        spec = dict((ps.get("template") or {}).get("spec") or {})
        for name in sorted(set(((assigned.get(ps.get("name")) or {}).get("flavors") or {}).values())):
            flavor = flavors.get(name) or {}
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **(flavor.get("nodeLabels") or {})}
            spec["tolerations"] = [*(spec.get("tolerations") or []), *(flavor.get("tolerations") or [])]
        specs.append(spec)
    return specs


def gang_key_of_pod(pod: Mapping[str, Any], owned_by_job: Mapping[tuple[str, str, str], str]) -> GangKey | None:
    """The gang a pod belongs to (a Kueue-managed job's pods belong to its Workload: :mod:`.owners`)."""
    ann = objects.annotations_of(pod)
    ns = objects.namespace(pod)
    kind, gname = ann.get(api.GANG_KIND), ann.get(api.GANG_NAME)
    if not kind or not gname:
        group = ann.get(api.VOLCANO_GROUP_NAME)
        if not group:
            return None
        kind, gname = PODGROUP, group
    if (ns, kind, gname) in owned_by_job:
        return GangKey(ns, WORKLOAD, owned_by_job[(ns, kind, gname)])
    if kind not in GANG_KINDS:
        return None  # a training job's pods whose Workload is not (yet) seen wait gated
    return GangKey(ns, kind, gname)


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


def scheduled_by_volcano(pod: Mapping[str, Any]) -> bool:
    """Whether a scheduler other than kube-scheduler places the pod (Volcano's name is configurable)."""
    return (pod.get("spec") or {}).get("schedulerName") not in (None, "", DEFAULT_SCHEDULER)


def claim_view(obj: Mapping[str, Any]) -> ClaimView:
    """An STBandwidthClaim's spec and status as values (a broken profile reads as None)."""
    spec = obj.get("spec") or {}
    status = dict(obj.get("status") or {})
    ns, cname = objects.namespace(obj), objects.name(obj)
    ref = spec.get("gangRef") or {}
    gang_ref = GangKey(ns, str(ref["kind"]), str(ref["name"])) if ref.get("kind") and ref.get("name") else None
    try:
        profile = objects.profile_from_spec(spec["profile"], "spec.profile") if spec.get("profile") else None
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


def cluster_queue_checks(cq: Mapping[str, Any]) -> frozenset[str]:
    """AdmissionCheck names a ClusterQueue requires (v1beta1 ``admissionChecks`` or the strategy form)."""
    spec = cq.get("spec") or {}
    names = set(spec.get("admissionChecks") or [])
    for rule in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []:
        if rule.get("name"):
            names.add(str(rule["name"]))
    return frozenset(names)


def workload_check(workload: Mapping[str, Any], our_checks: frozenset[str],
                   cq_checks: Mapping[str, frozenset[str]]) -> AdmissionCheckState | None:
    """Our AdmissionCheck on a Workload: listed in its status, or required by its ClusterQueue."""
    status = workload.get("status") or {}
    entries = tuple(dict(e) for e in status.get("admissionChecks") or [])
    quota = objects.condition_true(workload, "QuotaReserved")
    pod_sets = tuple(dict(p) for p in (workload.get("spec") or {}).get("podSets") or [])
    for entry in entries:
        if entry.get("name") in our_checks:
            return AdmissionCheckState(str(entry["name"]), entry.get("state"), str(entry.get("message") or ""),
                                       quota, entries, pod_sets)
    cq = (status.get("admission") or {}).get("clusterQueue")
    if cq and cq in cq_checks:
        ours = sorted(cq_checks[cq] & our_checks)
        if ours:
            return AdmissionCheckState(ours[0], None, "", quota, entries, pod_sets)
    return None


def claim_name_for(key: GangKey) -> str:
    """The name of the claim the controller creates for a gang: ``<kind>-<name>``, hashed if too long."""
    base = f"{key.kind.lower()}-{key.name}"
    if len(base) <= 253:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:10]
    return f"{base[:242]}-{digest}"


def _find_claim(key: GangKey, obj: Mapping[str, Any] | None, claims: Mapping[tuple[str, str], ClaimView],
                by_ref: Mapping[GangKey, list[ClaimView]]) -> tuple[str, ClaimView | None]:
    refs = sorted(by_ref.get(key, ()), key=lambda c: (not c.placed, not c.ours, c.name))
    if refs:
        return refs[0].name, refs[0]
    named = objects.annotations_of(obj).get(api.CLAIM) if obj is not None else None
    if named:
        claim = claims.get((key.namespace, named))
        if claim is not None and claim.gang_ref is None:
            return named, claim
    derived = claim_name_for(key)
    claim = claims.get((key.namespace, derived))
    if claim is not None and claim.gang_ref not in (None, key):
        derived = claim_name_for(GangKey(key.namespace, key.kind, key.name + "-gang"))
        claim = claims.get((key.namespace, derived))
    return derived, claim


def gang_view(key: GangKey, obj: JSON | None, pods: tuple[PodView, ...], claims: Mapping[tuple[str, str], ClaimView],
              by_ref: Mapping[GangKey, list[ClaimView]], pols: Sequence[QueuePolicyView], our_checks: frozenset[str],
              cq_checks: Mapping[str, frozenset[str]], settings: Settings) -> GangView:
    """Everything a cycle needs to know about one gang."""
    claim_name, claim = _find_claim(key, obj, claims, by_ref)
    spec = (obj or {}).get("spec") or {}
    check = workload_check(obj, our_checks, cq_checks) if obj is not None and key.kind == WORKLOAD else None
    volcano_queue = str(spec.get("queue") or "default") if key.kind == PODGROUP and obj is not None else None
    cluster_queue = ((obj or {}).get("status") or {}).get("admission", {}).get("clusterQueue") if key.kind == WORKLOAD \
        else None
    pol = policies.select(pols, volcano_queue=volcano_queue, cluster_queue=cluster_queue,
                          named=claim.queue_policy if claim is not None else None)

    profile, profile_error = _profile(key, obj, pods, claim)
    if profile is None and not profile_error and pol is not None and pol.default_profile is not None:
        profile = pol.default_profile
    if profile is None and not profile_error:
        profile_error = "no bandwidth profile: none on the gang, its pods, its claim or its QueuePolicy"

    size, gpm = _size(key, obj, pods, settings.gpu_resource)
    priority = _priority(key, obj, pods, claim)
    created = objects.created_s(obj) if obj is not None else min((p.created_s for p in pods), default=0.0)
    finished = _finished(key, obj, pods)
    waiting = _waiting(key, obj, pods, size, check)
    return GangView(key=key, obj=obj, claim_name=claim_name, claim=claim, profile=profile,
                    profile_error=profile_error, size=size, gpus_per_member=gpm, priority=priority,
                    created_s=created, pods=pods, policy=pol.name if pol is not None else policies.DEFAULT_NAME,
                    volcano_queue=volcano_queue, cluster_queue=cluster_queue, check=check, finished=finished,
                    waiting_for=waiting)


def _profile(key: GangKey, obj: Mapping[str, Any] | None, pods: Sequence[PodView],
             claim: ClaimView | None) -> tuple[Profile | None, str]:
    sources: list[tuple[str, Mapping[str, str]]] = []
    if obj is not None:
        sources.append((f"{key.kind} {key.namespace}/{key.name}", objects.annotations_of(obj)))
        for ps in (obj.get("spec") or {}).get("podSets") or [] if key.kind == WORKLOAD else []:
            sources.append((f"{key} podSet {ps.get('name')}", ((ps.get("template") or {}).get("metadata") or {})
                            .get("annotations") or {}))
    for pod in pods[:1]:
        sources.append((f"pod {pod.namespace}/{pod.name}", objects.annotations_of(pod.obj)))
    for where, ann in sources:
        if ann.get(api.PROFILE_ERROR) and not ann.get(api.PROFILE):
            return None, f"{where}: {ann[api.PROFILE_ERROR]}"
        text = ann.get(api.PROFILE)
        if text:
            try:
                return objects.profile_from_annotation(text, f"{where}: annotation {api.PROFILE}"), ""
            except InvalidInput as exc:
                return None, str(exc)
    if claim is not None and claim.profile is not None:
        return claim.profile, ""
    return None, ""


def _count(text: Any) -> bool:
    """Whether ``text`` is a gang size: ASCII digits only (``"２００".isdigit()`` is true), of sane length."""
    return isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= 10


def _size(key: GangKey, obj: Mapping[str, Any] | None, pods: Sequence[PodView], resource: str) -> tuple[int, int]:
    pod_gpm = max((p.gpus for p in pods), default=None)
    declared: int | None = None
    ann = objects.annotations_of(obj) if obj is not None else {}
    if _count(ann.get(api.GANG_SIZE)):
        declared = int(ann[api.GANG_SIZE])
    if key.kind == WORKLOAD and obj is not None:
        sets = (obj.get("spec") or {}).get("podSets") or []
        count = sum(int(ps.get("count") or 0) for ps in sets)
        gpm = max((objects.container_gpus((ps.get("template") or {}).get("spec") or {}, resource) for ps in sets),
                  default=0)
        return max(1, declared or count or len(pods)), pod_gpm if pod_gpm is not None else gpm
    if key.kind == PODGROUP and obj is not None:
        spec = obj.get("spec") or {}
        members = int(spec.get("minMember") or 0)
        declared = declared or members or None
        if pod_gpm is None and members:
            total = objects.quantity((spec.get("minResources") or {}).get(resource, 0))
            pod_gpm = objects.whole(total / members)
    if declared is None:
        sizes = [int(p.obj["metadata"]["annotations"][api.GANG_SIZE]) for p in pods
                 if _count(objects.annotations_of(p.obj).get(api.GANG_SIZE))]
        declared = max(sizes) if sizes else len(pods)
    return max(1, declared, len(pods)), pod_gpm or 0


def _priority(key: GangKey, obj: Mapping[str, Any] | None, pods: Sequence[PodView], claim: ClaimView | None) -> int:
    """The Workload's priority, else the highest of the pods' (resolved from their PriorityClass), else the claim's."""
    if key.kind == WORKLOAD and obj is not None:
        prio = (obj.get("spec") or {}).get("priority")
        if isinstance(prio, int) and not isinstance(prio, bool):
            return prio
    if pods:
        return max(p.priority for p in pods)
    return claim.priority if claim is not None and claim.priority is not None else 0


def _finished(key: GangKey, obj: Mapping[str, Any] | None, pods: Sequence[PodView]) -> bool:
    if obj is None:
        return False
    if key.kind == PODGROUP:
        return (obj.get("status") or {}).get("phase") == "Completed"
    if key.kind == WORKLOAD:
        return objects.condition_true(obj, "Finished") or (obj.get("spec") or {}).get("active") is False
    return False


def _waiting(key: GangKey, obj: Mapping[str, Any] | None, pods: Sequence[PodView], size: int,
             check: AdmissionCheckState | None) -> str:
    if check is not None:
        if check.state in ("Ready", "Retry", "Rejected"):
            return f"admission check {check.name} is {check.state}"
        if not check.quota_reserved and check.state is None:
            return "waiting for Kueue to reserve quota"
        return ""
    if not any(p.gated for p in pods):
        return "no gated pods"
    if len(pods) < size:
        return f"{len(pods)} of {size} members created"
    return ""


def free_gpus(nodes: Sequence[Mapping[str, Any]], bound_pods: Iterable[Mapping[str, Any]],
              managed_pods: Iterable[Mapping[str, Any]], gangs: Sequence[GangView], orphans: Sequence[ClaimView],
              names: Sequence[str], resource: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(allocatable, free) GPUs per node in ``names`` order; see the module docstring."""
    index = {n: i for i, n in enumerate(names)}
    alloc = [0] * len(names)
    usable = [True] * len(names)
    for node_obj in nodes:
        i = index.get(objects.name(node_obj))
        if i is None:
            continue
        alloc[i] = int(objects.quantity(((node_obj.get("status") or {}).get("allocatable") or {}).get(resource, 0)))
        ready = objects.condition(node_obj, "Ready")
        usable[i] = not (node_obj.get("spec") or {}).get("unschedulable") and (
            ready is None or ready.get("status") == "True")
    used = [0] * len(names)
    seen: set[tuple[str, str]] = set()
    for pod in [*bound_pods, *managed_pods]:
        k = (objects.namespace(pod), objects.name(pod))
        node = (pod.get("spec") or {}).get("nodeName")
        if k in seen or not node or node not in index or objects.pod_terminal(pod):
            continue
        seen.add(k)
        used[index[node]] += objects.pod_gpus(pod, resource)
    for gang in gangs:
        if not gang.placed or gang.finished or gang.claim is None:
            continue
        bound_here: dict[str, int] = {}
        for p in gang.pods:
            if p.node_name:
                bound_here[p.node_name] = bound_here.get(p.node_name, 0) + p.gpus
        for claimed, members in zip(gang.claim.nodes, gang.claim.members):
            if claimed in index:
                used[index[claimed]] += max(0, members * gang.gpus_per_member - bound_here.get(claimed, 0))
    free = tuple(max(0, a - u) if ok else 0 for a, u, ok in zip(alloc, used, usable))
    return tuple(alloc), free
