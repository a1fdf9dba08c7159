"""Which Kueue Workload a job's pods belong to: the Workload whose ownerReference names the job. PURE.

Kueue makes one Workload per job it manages and owns it by the job (``ownerReferences[].kind`` and
``name``): a batch/v1 Job, a JobSet, a Kubeflow PyTorchJob or MPIJob. The webhook names the job on each
pod (``metronome.dev/gang-kind`` / ``gang-name``); the pods then form the gang of that Workload, one gang
for all its podSets (a JobSet's replicated jobs, a PyTorchJob's master and workers, an MPI launcher and
its workers).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from volcano_metronome import api

JOB = "Job"
#: Gang kinds a pod may name that stand for the Workload their job owns.
OWNER_KINDS = (JOB, *api.OWNER_GANG_KINDS)


def owning_jobs(workload: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(kind, name)`` of each job of ``OWNER_KINDS`` that owns ``workload`` (Kueue makes one)."""
    refs = (workload.get("metadata") or {}).get("ownerReferences") or []
    return [(str(ref["kind"]), str(ref["name"])) for ref in refs
            if isinstance(ref, Mapping) and ref.get("kind") in OWNER_KINDS and ref.get("name")]


def workload_owners(workloads: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], str]:
    """``(namespace, owner kind, owner name) -> Workload name`` for the Workloads owned by a job of ``OWNER_KINDS``."""
    owned: dict[tuple[str, str, str], str] = {}
    for workload in workloads:
        meta = workload.get("metadata") or {}
        for kind, name in owning_jobs(workload):
            owned[(str(meta.get("namespace") or ""), kind, name)] = str(meta.get("name", ""))
    return owned
