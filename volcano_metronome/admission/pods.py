"""Pods of managed gangs: created behind the scheduling gate, with their gang named and the timing env wired.

A pod's gang is, in this order: the Volcano PodGroup its ``scheduling.k8s.io/group-name`` annotation
names; the training job (JobSet, PyTorchJob, MPIJob) its template was admitted for under Kueue (the
template's ``metronome.dev/gang-kind``; the name from the operator's ``jobset.sigs.k8s.io/jobset-name`` or
``training.kubeflow.org/job-name`` label); the batch/v1 Job that controls it (Kueue batch Job), unless it
is the child Job of a training job; the Kueue plain-pod group its ``kueue.x-k8s.io/pod-group-name`` label
names (gang kind ``Workload``). The gang is managed when the
pod carries a resolved profile (inherited from a template the webhook annotated), else when its
PodGroup (from the watch-fed cache) was admitted with one, else (PodGroup and plain-pod groups only)
when the pod's own annotations ask for one; plain-pod groups also take the queue and namespace
defaults, because no other object of theirs passes the webhook before the pods.

A pod of a gang whose claim is already decided is admitted placed instead of gated when the pod
alone says which member it is (``admission.placed``). A gated pod gets the gate ``metronome.dev/placement``, the label ``metronome.dev/managed=true``, the
annotations ``metronome.dev/gang-kind`` and ``gang-name`` (and the profile, if it came from
elsewhere), and on every container and init container the env vars ``METRONOME_PERIOD_MS``,
``METRONOME_OFFSET_MS``, ``METRONOME_EPOCH``, ``METRONOME_TRAFFIC_CLASS`` and ``METRONOME_TRAFFIC_CLASS_ENV``
read through the downward API from the annotations the controller writes before it lifts the gate
(the last two only when the cluster's QueuePolicy lists traffic classes; else they are empty, and
``volcano_metronome.runtime.apply_traffic_class`` does nothing).

Env vars are fixed when a container starts, but the controller rewrites those annotations on running
pods (a re-optimisation move, a lock, an unlock). So the pod also gets a downwardAPI volume
``metronome-slot`` with the files ``period-ms``, ``offset-ms`` and ``epoch`` (the kubelet keeps them
equal to the annotations, swapping them atomically), mounted read-only at ``/etc/metronome`` in every
container and init container; ``volcano_metronome.runtime.Metronome.from_dir`` follows them. A user
volume of that name, or a mount of another volume at that path, is left alone: the volume (or that
container's mount) is not added, and a warning says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from volcano_metronome import api
from volcano_metronome.admission.annotations import has_user_keys, read_resolved
from volcano_metronome.admission.gangs import inherited_size
from volcano_metronome.admission.outcome import (
    UNMANAGED,
    Outcome,
    annotations_at,
    labels_at,
    profile_entries,
    string_or_none,
)
from volcano_metronome.admission.patches import Op, ensure_all_in_list, ensure_in_list, list_at, mapping_at, set_entries
from volcano_metronome.admission.placed import placement
from volcano_metronome.admission.resolve import Context, Place, Resolved, resolve
from volcano_metronome.core.errors import InvalidInput


#: Most containers plus init containers a gated pod may have. Each gets five env vars and a mount
#: (about 900 bytes of patch and 0.2 ms of work), so this bounds the patch and the time and memory of
#: one review whatever its size: a 3 MiB pod of 100,000 tiny containers would otherwise cost ~80 MB
#: of patch and ~20 s of a worker (issue 13). Real training pods have a handful.
MAX_CONTAINERS = 128

#: (env var, annotation) pairs every container gets through the downward API. The traffic class is
#: fixed for the gang's life and NCCL reads it once, so unlike the timing it needs no file.
ENV_SOURCES = ((api.ENV_PERIOD_MS, api.PERIOD_MS), (api.ENV_OFFSET_MS, api.OFFSET_MS), (api.ENV_EPOCH, api.EPOCH),
               (api.ENV_TRAFFIC_CLASS, api.TRAFFIC_CLASS), (api.ENV_TRAFFIC_CLASS_ENV, api.TRAFFIC_CLASS_ENV))


@dataclass(frozen=True)
class GangRef:
    """The object a pod's gang is recorded on: kind ``PodGroup``, ``Job`` or ``Workload``, in the pod's namespace."""

    kind: str
    name: str


def gang_of(pod: Mapping[str, Any]) -> GangRef | None:
    """The gang a pod belongs to, ``None`` for a pod outside any gang we know."""
    group = string_or_none(annotations_at(pod).get(api.VOLCANO_GROUP_NAME))
    if group is not None:
        return GangRef("PodGroup", group)
    labels = labels_at(pod)
    kind = annotations_at(pod).get(api.GANG_KIND)
    if kind in api.OWNER_GANG_KINDS:  # from the template of a training job admitted for Kueue
        job = string_or_none(labels.get(api.JOBSET_NAME_LABEL if kind == api.JOBSET else api.KUBEFLOW_JOB_NAME_LABEL))
        return GangRef(str(kind), job) if job is not None else None
    if string_or_none(labels.get(api.JOBSET_NAME_LABEL)) or string_or_none(labels.get(api.KUBEFLOW_JOB_NAME_LABEL)):
        return None  # a training job's pod neither Kueue nor Volcano gangs (its child Job is no gang of its own)
    metadata = pod.get("metadata")
    owners = metadata.get("ownerReferences") if isinstance(metadata, dict) else None
    for owner in owners if isinstance(owners, list) else ():
        if (isinstance(owner, dict) and owner.get("controller") is True and owner.get("apiVersion") == "batch/v1"
                and owner.get("kind") == "Job" and string_or_none(owner.get("name"))):
            return GangRef("Job", owner["name"])
    pod_group = string_or_none(labels_at(pod).get(api.KUEUE_POD_GROUP_NAME))
    if pod_group is not None:
        return GangRef("Workload", pod_group)
    return None


def env_vars() -> list[dict[str, Any]]:
    """The downward-API env vars every container of a gated pod gets (``apiVersion`` as the API server defaults it)."""
    return [{"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                      "fieldPath": f"metadata.annotations['{annotation}']"}}}
            for name, annotation in ENV_SOURCES]


def slot_volume() -> dict[str, Any]:
    """The downwardAPI volume of the timing files (``defaultMode``, ``apiVersion`` as the API server defaults them)."""
    return {"name": api.SLOT_VOLUME, "downwardAPI": {"defaultMode": 0o644, "items": [
        {"path": path, "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{annotation}']"}}
        for path, annotation in api.SLOT_FILES]}}


def slot_mount() -> dict[str, Any]:
    """The read-only mount of :func:`slot_volume` every container gets."""
    return {"name": api.SLOT_VOLUME, "mountPath": api.SLOT_DIR, "readOnly": True}


def slot_ops(pod: Mapping[str, Any]) -> tuple[list[Op], list[str]]:
    """Ops adding the timing volume and its mounts where they collide with nothing, and warnings where they would."""
    volumes = list_at(pod, ("spec", "volumes")) or []
    theirs = next((v for v in volumes if isinstance(v, dict) and v.get("name") == api.SLOT_VOLUME), None)
    if theirs is not None and theirs != slot_volume():
        return [], [f"spec.volumes already has a volume named {api.SLOT_VOLUME}: the live timing files are not "
                    f"mounted at {api.SLOT_DIR} (the METRONOME_* env vars still carry the values at container start)"]
    ops: list[Op] = []
    warnings: list[str] = []
    mounted = False
    for key in ("containers", "initContainers"):
        for i, container in enumerate(list_at(pod, ("spec", key)) or ()):
            path = ("spec", key, i, "volumeMounts")
            clash = next((m for m in list_at(pod, path) or () if isinstance(m, dict) and m != slot_mount() and (
                m.get("name") == api.SLOT_VOLUME or _same_dir(m.get("mountPath"), api.SLOT_DIR))), None)
            if clash is not None:
                warnings.append(f"spec.{key}[{i}] ({container.get('name')}) already mounts {clash.get('name')!r} at "
                                f"{clash.get('mountPath')!r}: the live timing files are not mounted at {api.SLOT_DIR} "
                                f"in it (its METRONOME_* env vars still carry the values at container start)")
                continue
            mounted = True
            ops += ensure_in_list(pod, path, slot_mount(),
                                  lambda mount: isinstance(mount, dict) and mount.get("name") == api.SLOT_VOLUME)
    if not mounted:
        return [], warnings  # no container would see the volume
    volume_ops = ensure_in_list(pod, ("spec", "volumes"), slot_volume(),
                                lambda volume: isinstance(volume, dict) and volume.get("name") == api.SLOT_VOLUME)
    return volume_ops + ops, warnings


def _same_dir(path: Any, directory: str) -> bool:
    return isinstance(path, str) and path.rstrip("/") == directory.rstrip("/")


def admit_pod(pod: Mapping[str, Any], namespace: str, ctx: Context) -> Outcome:
    """A ``v1`` Pod: gate it when it belongs to a managed gang, else leave it alone."""
    annotations = annotations_at(pod)
    gang = gang_of(pod)
    if gang is None:
        if has_user_keys(annotations) or api.PROFILE in annotations:
            return Outcome(warnings=(
                "pod carries metronome.dev profile annotations but belongs to no Volcano PodGroup, Kueue batch Job, "
                "training job submitted to Kueue (JobSet, PyTorchJob, MPIJob) or Kueue pod group: it is not gated",))
        return UNMANAGED
    resolved, size = _profile(pod, annotations, gang, namespace, ctx)
    if resolved is None:
        if gang.kind == "Job" and has_user_keys(annotations):
            return Outcome(warnings=(
                f"pod of Job {gang.name} carries metronome.dev profile annotations but its Job was not admitted with "
                f"a profile (only Jobs labelled {api.KUEUE_QUEUE_NAME} are managed): it is not gated",))
        return UNMANAGED
    if not list_at(pod, ("spec", "containers")):
        raise InvalidInput("spec.containers", None, "a non-empty list of containers")
    count = sum(len(list_at(pod, ("spec", key)) or ()) for key in ("containers", "initContainers"))
    if count > MAX_CONTAINERS:
        raise InvalidInput("spec.containers + spec.initContainers", count,
                           f"at most {MAX_CONTAINERS} containers in a pod of a managed gang (each gets the "
                           f"METRONOME_* env vars and the timing mount)")
    entries = profile_entries(resolved, size)
    entries.update({api.GANG_KIND: gang.kind, api.GANG_NAME: gang.name})
    placed = placement(pod, gang.kind, gang.name, namespace, ctx)
    if placed is not None:  # decided before this pod existed: placed now, nothing left for the controller
        entries.update({k: v for k, v in placed.annotations.items() if v is not None})
    ops: list[Op] = set_entries(pod, ("metadata", "labels"), {api.MANAGED_LABEL: "true"})
    ops += set_entries(pod, ("metadata", "annotations"), entries)
    if placed is None:
        ops += ensure_in_list(pod, ("spec", "schedulingGates"), {"name": api.SCHEDULING_GATE},
                              lambda gate: isinstance(gate, dict) and gate.get("name") == api.SCHEDULING_GATE)
    else:
        ops += set_entries(pod, ("spec",), {"affinity": {**(mapping_at(pod, ("spec", "affinity")) or {}),
                                                         **placed.affinity()}})
    for key in ("containers", "initContainers"):
        containers = list_at(pod, ("spec", key))
        for i, container in enumerate(containers or ()):
            if not isinstance(container, dict):
                raise InvalidInput(f"spec.{key}[{i}]", container, "a container mapping")
            ops += ensure_all_in_list(pod, ("spec", key, i, "env"), env_vars(), lambda var: var["name"])
    slot, warnings = slot_ops(pod)
    return Outcome(tuple(ops + slot), tuple(warnings))


def _profile(pod: Mapping[str, Any], annotations: Mapping[str, Any], gang: GangRef, namespace: str,
             ctx: Context) -> tuple[Resolved | None, int | None]:
    """The gang's profile as the pod should carry it, and the gang size when known."""
    size = inherited_size(annotations, api.GANG_SIZE)
    inherited = read_resolved(annotations)  # from a template we annotated: the gang's profile, never re-derived
    if inherited is not None:
        return Resolved(inherited.profile, inherited.source), size
    if gang.kind == "PodGroup" and ctx.lookups.pod_group is not None:
        group = ctx.lookups.pod_group(namespace, gang.name)
        if isinstance(group, dict):
            group_annotations = annotations_at(group)
            from_group = read_resolved(group_annotations, f"PodGroup {gang.name}")
            if from_group is not None:
                return Resolved(from_group.profile, from_group.source), size or inherited_size(group_annotations,
                                                                                               api.GANG_SIZE)
    if gang.kind == "Job" or gang.kind in api.OWNER_GANG_KINDS:
        return None, size  # the pods of a Kueue job inherit the profile from its template, or are unmanaged
    plain_pods = gang.kind == "Workload"
    queue = string_or_none(labels_at(pod).get(api.KUEUE_QUEUE_NAME)) if plain_pods else None
    resolved = resolve([Place("", annotations)], namespace=namespace, queue=queue, ctx=ctx, defaults=plain_pods)
    if plain_pods and size is None:
        size = inherited_size(annotations, api.KUEUE_POD_GROUP_TOTAL_COUNT)
    return resolved, size
