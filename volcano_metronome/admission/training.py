"""Admission shared by training jobs whose operator makes the pods: JobSet, Kubeflow PyTorchJob and MPIJob.

Such a job reaches a gang scheduler one of two ways, and the profile has to reach the gang either way:

* **Kueue** (the job carries the label ``kueue.x-k8s.io/queue-name``): Kueue makes a Workload whose podSet
  templates are copies of the job's pod templates, so the profile written on those templates reaches the
  Workload (where the Workload hook records it with the gang size) and every pod. The templates also get
  ``metronome.dev/gang-kind: <kind>``: it tells the pod hook that the pods belong to the Workload their job
  owns (the controller finds it by its ownerReference), so they are gated.
* **Volcano** (the operator started with ``--gang-scheduler-name=volcano``): the operator makes a PodGroup
  and names it on every pod (``scheduling.k8s.io/group-name``); the training operator copies the job's
  annotations onto that PodGroup, so the profile and gang size written on the job reach it too.

The gang size written is the number of pods the job runs, counted as Kueue counts its podSets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from volcano_metronome import api
from volcano_metronome.admission.outcome import UNMANAGED, Outcome, annotations_at, labels_at, profile_entries
from volcano_metronome.admission.patches import Op, Path, describe, set_children, set_entries
from volcano_metronome.admission.resolve import Context, Place, resolve

ANNOTATIONS = ("metadata", "annotations")
#: ``() -> (gang size, warnings)``, called only once the object is known to be managed (unmanaged objects are
#: never checked).
Sizer = Callable[[], tuple[int, Sequence[str]]]


def admit_training_job(obj: Mapping[str, Any], namespace: str, ctx: Context, *, kind: str, templates: Sequence[Path],
                       sizer: Sizer, volcano_queue: str | None) -> Outcome:
    """Profile and gang size on the job, profile and managed label on its pod ``templates``.

    ``volcano_queue``: the Volcano queue its PodGroup would get, or None when only Kueue can gang it (JobSet):
    then a job without the Kueue label is not managed.
    """
    kueue_queue = labels_at(obj).get(api.KUEUE_QUEUE_NAME)
    kueue = isinstance(kueue_queue, str) and bool(kueue_queue)
    if not kueue and volcano_queue is None:
        return UNMANAGED  # nothing would gang its pods
    places = [Place("", annotations_at(obj))]
    places += [Place(describe(path), annotations_at(obj, (*path, "metadata"))) for path in templates]
    resolved = resolve(places, namespace=namespace, queue=kueue_queue if kueue else volcano_queue, ctx=ctx)
    if resolved is None:
        return UNMANAGED
    size, warnings = sizer()
    entries = profile_entries(resolved, size)
    ops: list[Op] = set_entries(obj, ANNOTATIONS, entries)
    on_templates = {**entries, api.GANG_KIND: kind} if kueue else entries
    for path in templates:
        ops += pod_template_ops(obj, path, on_templates)
    return Outcome(tuple(ops), tuple(warnings))


def pod_template_ops(obj: Mapping[str, Any], template: Path, entries: Mapping[str, str]) -> list[Op]:
    """Ops putting ``entries`` and the pod-selection label on the pod template at ``template``."""
    return set_children(obj, (*template, "metadata"), {"labels": {api.MANAGED_LABEL: "true"}, "annotations": entries})
