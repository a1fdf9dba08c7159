"""Admission of gang objects: Volcano Jobs and PodGroups, Kueue Workloads, batch/v1 Jobs submitted to Kueue.

A managed object gets ``metronome.dev/profile``, ``profile-source`` and ``gang-size`` on its metadata
(a Volcano Job also ``metronome.dev/pod-constraints``, its defaulted ``minAvailable`` and, when configured,
the tier limit),
and on every pod template it owns (so the pods it creates carry them). Those templates also get the
label ``metronome.dev/managed=true``: it is what the chart's pod hook selects on (``webhook.podSelection:
managed``), so without it the pods of a managed Job would never be gated. Each function returns an
:class:`Outcome` or raises :class:`InvalidInput`; whether that denies the object or only warns is
decided by the caller from who created it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from volcano_metronome import api
from volcano_metronome.admission.gangs import (
    batch_job_size,
    inherited_size,
    pod_group_size,
    tier_limit_ops,
    volcano_job_gang,
    workload_size,
)
from volcano_metronome.admission.outcome import (
    UNMANAGED,
    Outcome,
    annotations_at,
    created_by_controller,
    labels_at,
    profile_entries,
    string_or_none,
)
from volcano_metronome.admission.patches import Op, Path, mapping_at, set_children, set_entries, set_value
from volcano_metronome.admission.resolve import Context, Place, resolve
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.shapes import templates

ANNOTATIONS = ("metadata", "annotations")


def admit_volcano_job(obj: Mapping[str, Any], namespace: str, ctx: Context) -> Outcome:
    """A ``batch.volcano.sh/v1alpha1`` Job: profile and its templates' node constraints on the job, profile and
    managed label on every task template; minAvailable; tier limit."""
    spec = mapping_at(obj, ("spec",)) or {}
    tasks = _items(spec, "tasks", "spec.tasks")
    places = [Place("", annotations_at(obj))]
    places += [Place(f"spec.tasks[{i}].template", annotations_at(obj, ("spec", "tasks", i, "template", "metadata")))
               for i in range(len(tasks))]
    resolved = resolve(places, namespace=namespace, queue=_volcano_queue(spec), ctx=ctx)
    if resolved is None:
        return UNMANAGED
    gang = volcano_job_gang(spec)
    entries = profile_entries(resolved, gang.size)
    # The PodGroup Volcano creates copies the Job's annotations: with its pods' node constraints the controller
    # can decide the gang before the pods exist (shapes.templates).
    specs = [(mapping_at(obj, ("spec", "tasks", i, "template", "spec")) or {}) for i in range(len(tasks))]
    constraints = templates.encode(specs)
    on_job = dict(entries)
    warnings: tuple[str, ...] = ()
    if len(constraints) <= templates.MAX_BYTES:
        on_job[api.POD_CONSTRAINTS] = constraints
    else:  # Kubernetes caps an object's annotations at 256 KiB in all; the controller reads the pods instead
        warnings = (f"{api.POD_CONSTRAINTS} not written: the node constraints of the {len(tasks)} task templates "
                    f"take {len(constraints):,} bytes, above {templates.MAX_BYTES:,}; the gang is decided once its "
                    f"pods exist",)
    ops = set_entries(obj, ANNOTATIONS, on_job)
    for i in range(len(tasks)):
        ops += _pod_template_ops(obj, ("spec", "tasks", i, "template"), entries)
    if gang.default_min_available is not None:
        ops += set_value(obj, ("spec", "minAvailable"), gang.default_min_available)
    ops += tier_limit_ops(obj, ("spec",), resolved.profile, gang.size, ctx.settings.tier_limit)
    return Outcome(tuple(ops), warnings)


def admit_pod_group(obj: Mapping[str, Any], namespace: str, ctx: Context) -> Outcome:
    """A ``scheduling.volcano.sh/v1beta1`` PodGroup: profile and gang size (minMember, or inherited from its Job)."""
    spec = mapping_at(obj, ("spec",)) or {}
    annotations = annotations_at(obj)
    resolved = resolve([Place("", annotations)], namespace=namespace, queue=_volcano_queue(spec), ctx=ctx)
    if resolved is None:
        return UNMANAGED
    size = inherited_size(annotations, api.GANG_SIZE) if created_by_controller(obj) else None
    if size is None:
        try:
            size = pod_group_size(spec)
        except InvalidInput as exc:
            if created_by_controller(obj) and api.GANG_SIZE in annotations:  # say why the inherited size was not used
                raise InvalidInput(api.GANG_SIZE, annotations[api.GANG_SIZE], f"a gang size of ASCII digits in [1, "
                                   f"2147483647] (else {exc.field} {exc.expected}, got {exc.value!r})") from None
            raise
    ops = set_entries(obj, ANNOTATIONS, profile_entries(resolved, size))
    ops += tier_limit_ops(obj, ("spec",), resolved.profile, size, ctx.settings.tier_limit)
    return Outcome(tuple(ops))


def admit_workload(obj: Mapping[str, Any], namespace: str, ctx: Context) -> Outcome:
    """A Kueue Workload (``v1beta2`` or ``v1beta1``): profile from itself or its podSet templates; gang size."""
    spec = mapping_at(obj, ("spec",)) or {}
    pod_sets = _items(spec, "podSets", "spec.podSets")
    places = [Place("", annotations_at(obj))]
    places += [Place(f"spec.podSets[{i}].template", annotations_at(obj, ("spec", "podSets", i, "template", "metadata")))
               for i in range(len(pod_sets))]
    resolved = resolve(places, namespace=namespace, queue=string_or_none(spec.get("queueName")), ctx=ctx)
    if resolved is None:
        return UNMANAGED
    size, warnings = workload_size(spec)
    return Outcome(tuple(set_entries(obj, ANNOTATIONS, profile_entries(resolved, size))), tuple(warnings))


def admit_batch_job(obj: Mapping[str, Any], namespace: str, ctx: Context) -> Outcome:
    """A ``batch/v1`` Job labelled ``kueue.x-k8s.io/queue-name``: profile on the job, profile and managed label on
    its pod template."""
    queue = string_or_none(labels_at(obj).get(api.KUEUE_QUEUE_NAME))
    if queue is None:
        return UNMANAGED  # not submitted to Kueue: its pods would form no gang anyone schedules
    if annotations_at(obj, ("spec", "template", "metadata")).get(api.GANG_KIND) in api.OWNER_GANG_KINDS:
        return UNMANAGED  # the child Job of a training job: its pods belong to the job's gang, sized there
    spec = mapping_at(obj, ("spec",)) or {}
    places = [Place("", annotations_at(obj)), Place("spec.template", annotations_at(obj, ("spec", "template", "metadata")))]
    resolved = resolve(places, namespace=namespace, queue=queue, ctx=ctx)
    if resolved is None:
        return UNMANAGED
    entries = profile_entries(resolved, batch_job_size(spec))
    ops: list[Op] = set_entries(obj, ANNOTATIONS, entries)
    ops += _pod_template_ops(obj, ("spec", "template"), entries)
    return Outcome(tuple(ops))


def _pod_template_ops(obj: Mapping[str, Any], template: Path, entries: Mapping[str, str]) -> list[Op]:
    """Ops putting the profile ``entries`` and the pod-selection label on the pod template at ``template``."""
    return set_children(obj, (*template, "metadata"),
                        {"labels": {api.MANAGED_LABEL: "true"}, "annotations": entries})


def _volcano_queue(spec: Mapping[str, Any]) -> str:
    # Volcano's own webhook puts jobs and pod groups without a queue into "default".
    return string_or_none(spec.get("queue")) or "default"


def _items(spec: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput(where, value, "a list")
    return value
