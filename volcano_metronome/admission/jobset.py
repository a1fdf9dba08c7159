"""Admission of a JobSet (``jobset.x-k8s.io/v1alpha2``) submitted to Kueue.

Shape read::

    metadata: {labels: {kueue.x-k8s.io/queue-name: Q}, annotations: {metronome.dev/...}}
    spec:
      replicatedJobs:
      - name: workers
        replicas: 2                  # Jobs of this template (default 1)
        template:                    # a batch/v1 JobTemplateSpec
          spec:
            parallelism: 4           # default 1
            completions: 4           # default: parallelism
            template: {metadata: {annotations: {metronome.dev/...}}, spec: ...}   # the pod template

The gang is every pod of every replicated Job: ``sum(replicas x min(parallelism, completions))``, Kueue's
podSet counts. Without Kueue nothing gangs a JobSet's pods, so an unlabelled JobSet is not managed. A JobSet
made by a controller (Kubeflow Trainer's TrainJob) is not labelled either: Kueue manages its owner.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from volcano_metronome import api
from volcano_metronome.admission.gangs import INT32_MAX, integer
from volcano_metronome.admission.outcome import Outcome
from volcano_metronome.admission.patches import Path, mapping_at
from volcano_metronome.admission.resolve import Context
from volcano_metronome.admission.training import admit_training_job
from volcano_metronome.core.errors import InvalidInput


def admit_jobset(obj: Mapping[str, Any], namespace: str, ctx: Context) -> Outcome:
    """A JobSet labelled ``kueue.x-k8s.io/queue-name``: profile on it, profile and managed label on every pod template."""
    spec = mapping_at(obj, ("spec",)) or {}
    jobs = spec.get("replicatedJobs")
    count = len(jobs) if isinstance(jobs, list) else 0
    templates: list[Path] = [("spec", "replicatedJobs", i, "template", "spec", "template") for i in range(count)]
    return admit_training_job(obj, namespace, ctx, kind=api.JOBSET, templates=templates,
                              sizer=lambda: (jobset_size(jobs), ()), volcano_queue=None)


def jobset_size(jobs: Any) -> int:
    """Pods of a JobSet as Kueue counts them; :class:`InvalidInput` naming the field for a malformed one."""
    if not isinstance(jobs, list) or not jobs:
        raise InvalidInput("spec.replicatedJobs", jobs, "a non-empty list of replicated jobs")
    total = 0
    names: set[str] = set()
    for i, job in enumerate(jobs):
        where = f"spec.replicatedJobs[{i}]"
        if not isinstance(job, dict):
            raise InvalidInput(where, job, "a replicated job mapping with name, replicas and template")
        name = job.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"{where}.name", name, "a non-empty string")
        if name in names:
            raise InvalidInput(f"{where}.name", name, "a name no other replicated job of the JobSet has")
        names.add(name)
        replicas = integer(job.get("replicas", 1), f"{where}.replicas", 0)
        total += replicas * pods_per_job(job, where)
        if total > INT32_MAX:
            raise InvalidInput("spec.replicatedJobs[*]", total, f"at most {INT32_MAX} pods")
    if total < 1:
        raise InvalidInput("spec.replicatedJobs[*].replicas", total,
                           "at least one pod in a JobSet with a bandwidth profile")
    return total


def pods_per_job(job: Mapping[str, Any], where: str) -> int:
    """Pods one Job of a replicated job runs at once: ``parallelism`` (default 1) capped by ``completions``."""
    template_spec = mapping_at(job, ("template", "spec"))
    if template_spec is None or mapping_at(template_spec, ("template",)) is None:
        raise InvalidInput(f"{where}.template.spec.template", None, "the pod template of the replicated job")
    parallelism = integer(template_spec.get("parallelism", 1), f"{where}.template.spec.parallelism", 0)
    completions = template_spec.get("completions")
    if completions is None:
        return parallelism
    return min(parallelism, integer(completions, f"{where}.template.spec.completions", 0))

