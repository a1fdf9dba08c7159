"""Gang rules: which gang a pod belongs to, which claim records it, its profile, size, priority, whether it is
finished or may be decided now, and the state of our Kueue AdmissionCheck on its Workload. PURE.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from volcano_metronome import api
from volcano_metronome.controller import objects, queuepolicy as policies
from volcano_metronome.shapes import JSON, templates
from volcano_metronome.controller.queuepolicy import QueuePolicyView
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile
from volcano_metronome.shapes.refs import claim_name
from volcano_metronome.controller.views import (GANG_KINDS, PODGROUP, PODS_TIMEOUT, WORKLOAD, AdmissionCheckState,
                                                ClaimView, GangKey, GangView, PodView)
from volcano_metronome.shapes.profiles import profile_from_annotation


def member_specs(key: GangKey, obj: Mapping[str, Any] | None, pods: Sequence[PodView],
                 flavors: Mapping[str, Mapping[str, Any]] = {}) -> list[Mapping[str, Any]]:
    """The pod specs whose node constraints a gang's members carry: its pods', else its podSets' templates.

    A Workload's pods will also carry what Kueue adds from the ResourceFlavors it was assigned
    (``nodeLabels`` as node selector, ``tolerations``); a template gets them here. A flavor not seen
    (yet) adds nothing.
    """
    if pods:
        return [p.obj.get("spec") or {} for p in pods]
    if key.kind == PODGROUP and obj is not None:
        fragments, _ = podgroup_templates(obj)
        return list(fragments or [])
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


#: PodGroup phases in which Volcano has not created the gang's pods yet (it does once the group is enqueued).
BEFORE_PODS = ("", "Pending", "Inqueue")
VOLCANO_JOB_API = "batch.volcano.sh/v1alpha1"


def podgroup_templates(obj: Mapping[str, Any]) -> tuple[list[dict[str, Any]] | None, str]:
    """A PodGroup's pod-template node constraints (``metronome.dev/pod-constraints``) when it may be decided before
    its pods exist, else None and why not.

    Only a PodGroup a Volcano Job controls carries the annotation our webhook wrote on that Job (a PodGroup
    of its own has no template to speak for its pods: it waits for them).
    """
    owners = objects.meta(obj).get("ownerReferences") or []
    if not any(isinstance(o, dict) and o.get("controller") is True and o.get("kind") == "Job"
               and o.get("apiVersion") == VOLCANO_JOB_API for o in owners):
        return None, "no pods yet (not created by a Volcano Job: waiting for its pods)"
    text = objects.annotations_of(obj).get(api.POD_CONSTRAINTS)
    if text is None:
        return None, f"no pods yet (no {api.POD_CONSTRAINTS}: waiting for its pods)"
    try:
        specs = templates.decode(text, f"PodGroup {objects.namespace(obj)}/{objects.name(obj)}: annotation "
                                       f"{api.POD_CONSTRAINTS}")
    except InvalidInput as exc:
        return None, f"no pods yet, and {exc}: waiting for its pods"
    classes = sorted({str(c) for c in [(obj.get("spec") or {}).get("priorityClassName"),
                                       *(s.get("priorityClassName") for s in specs)] if c})
    if classes:  # only the pods carry the priority it resolves to
        return None, f"no pods yet (priority class {', '.join(classes)}: waiting for its pods' priority)"
    return specs, ""


def decidable_before_pods(obj: Mapping[str, Any]) -> bool:
    """Whether a PodGroup is a gang to list although none of its pods exists: it carries a profile and the
    node constraints of its pods, and Volcano has not created them yet (cheap: read every cycle per PodGroup)."""
    ann = objects.annotations_of(obj)
    return (api.POD_CONSTRAINTS in ann and (api.PROFILE in ann or api.PROFILE_ERROR in ann)
            and _before_pods(obj) == "")


def before_pods(obj: Mapping[str, Any]) -> bool:
    """Whether a PodGroup's pods are still to come: Volcano has not run any (its phase is one before pods)."""
    return _before_pods(obj) == ""


def _before_pods(obj: Mapping[str, Any]) -> str:
    """Why a PodGroup without pods is not one whose pods are still to come ("" when it is).

    Volcano's scheduler turns a group whose pods are gone (deleted with their namespace or a restarting
    Job) back to Pending; one that ever ran, or is being deleted, is left to its pods, as before.
    """
    status = obj.get("status") or {}
    phase = str(status.get("phase") or "")
    if phase not in BEFORE_PODS:
        return f"no pods (PodGroup phase {phase})"
    if objects.meta(obj).get("deletionTimestamp"):
        return "no pods (PodGroup being deleted)"
    if any(status.get(k) for k in ("running", "succeeded", "failed")) or any(
            isinstance(c, dict) and c.get("type") == "Scheduled" for c in status.get("conditions") or []):
        return "no pods (its pods ran before: waiting for new ones)"
    return ""


def gang_key_of_pod(pod: Mapping[str, Any], owned_by_job: Mapping[tuple[str, str, str], str]) -> GangKey | None:
    """The gang a pod belongs to (a Kueue-managed job's pods belong to its Workload: :mod:`.owners`)."""
    key = pod_gang_ref(pod)
    if key is None:
        return None
    return owning_workload(key, owned_by_job)


def pod_gang_ref(pod: Mapping[str, Any]) -> GangKey | None:
    """The gang object a pod names (its job's kind and name, or its Volcano PodGroup), before ownership."""
    ann = objects.annotations_of(pod)
    kind, gname = ann.get(api.GANG_KIND), ann.get(api.GANG_NAME)
    if not kind or not gname:
        group = ann.get(api.VOLCANO_GROUP_NAME)
        if not group:
            return None
        kind, gname = PODGROUP, group
    return GangKey(objects.namespace(pod), kind, gname)


def owning_workload(key: GangKey, owned_by_job: Mapping[tuple[str, str, str], str]) -> GangKey | None:
    """The Workload owning the job ``key`` names, else ``key`` itself when it is a gang kind (else None)."""
    owner = owned_by_job.get((key.namespace, key.kind, key.name))
    if owner is not None:
        return GangKey(key.namespace, WORKLOAD, owner)
    if key.kind not in GANG_KINDS:
        return None  # a training job's pods whose Workload is not (yet) seen wait gated
    return key


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
    # Kueue evicts in two steps: Evicted=True (our check reset to Pending) while the job stops, QuotaReserved=False
    # once it has: the reservation is being taken away from the first.
    quota = objects.condition_true(workload, "QuotaReserved") and not objects.condition_true(workload, "Evicted")
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
    """The name of the claim the controller creates for a gang (the rule the webhook follows too)."""
    return claim_name(key.kind, key.name)


def claim_names(key: GangKey, obj: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """The claims (namespace, name) a gang is looked up by name, in order: the one its object names in
    ``metronome.dev/claim`` (if any), the derived name, then the derived ``-gang`` name (:func:`find_claim`)."""
    named = objects.annotations_of(obj).get(api.CLAIM) if obj is not None else None
    names = [str(named)] if named else []
    names += [claim_name_for(key), claim_name_for(GangKey(key.namespace, key.kind, key.name + "-gang"))]
    return tuple((key.namespace, n) for n in names)


def find_claim(key: GangKey, obj: Mapping[str, Any] | None, claims: Mapping[tuple[str, str], ClaimView],
               by_ref: Mapping[GangKey, list[ClaimView]]) -> tuple[str, ClaimView | None]:
    """The claim recording a gang and its name: one whose ``gangRef`` names the gang (placed and ours first),
    else by name (:func:`claim_names`): the named claim when bound to no gang, else the derived one, or the
    derived ``-gang`` one when the derived claim is bound to another gang (the name to create if none exists)."""
    refs = sorted(by_ref.get(key, ()), key=lambda c: (not c.placed, not c.ours, c.name))
    if refs:
        return refs[0].name, refs[0]
    *named, derived, fallback = claim_names(key, obj)
    for k in named:
        claim = claims.get(k)
        if claim is not None and claim.gang_ref is None:
            return k[1], claim
    claim = claims.get(derived)
    if claim is not None and claim.gang_ref not in (None, key):
        derived = fallback
        claim = claims.get(fallback)
    return derived[1], claim


def gang_view(key: GangKey, obj: JSON | None, pods: tuple[PodView, ...], claims: Mapping[tuple[str, str], ClaimView],
              by_ref: Mapping[GangKey, list[ClaimView]], pols: Sequence[QueuePolicyView], our_checks: frozenset[str],
              cq_checks: Mapping[str, frozenset[str]], settings: Settings) -> GangView:
    """Everything a cycle needs to know about one gang."""
    claim_name, claim = find_claim(key, obj, claims, by_ref)
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
    waiting = _waiting(key, obj, pods, size, check, claim)
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
                return profile_from_annotation(text, f"{where}: annotation {api.PROFILE}"), ""
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


def _pods_timed_out(claim: ClaimView | None) -> str:
    """Why a PodGroup whose claim was released for want of pods is not decided again before they come."""
    if claim is None or claim.placed:
        return ""
    placed = next((c for c in claim.conditions if c.get("type") == "Placed"), None)
    if placed is None or placed.get("reason") != PODS_TIMEOUT:
        return ""
    return "no pods yet (its claim was released: none came within podsTimeoutSeconds): waiting for its pods"


def _waiting(key: GangKey, obj: Mapping[str, Any] | None, pods: Sequence[PodView], size: int,
             check: AdmissionCheckState | None, claim: ClaimView | None = None) -> str:
    if check is not None:
        if check.state in ("Ready", "Retry", "Rejected"):
            return f"admission check {check.name} is {check.state}"
        if not check.quota_reserved:  # Kueue lists our check as Pending before it reserves quota; a check is
            return "waiting for Kueue to reserve quota"  # run on a reservation (as Kueue's own checks are)
        return ""
    if not pods and key.kind == PODGROUP and obj is not None:
        # Decided now, before Volcano creates its pods: they are created placed. Unless its claim was released
        # because they did not come in time (controller.podless): then it waits for them.
        return _before_pods(obj) or podgroup_templates(obj)[1] or _pods_timed_out(claim)
    if not any(p.gated for p in pods):
        return "no gated pods"
    if len(pods) < size:
        return f"{len(pods)} of {size} members created"
    return ""
