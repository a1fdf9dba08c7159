"""Admission of Kubeflow training jobs: the training-operator's ``kubeflow.org/v1`` PyTorchJob and the
mpi-operator's ``kubeflow.org/v2beta1`` MPIJob.

Shapes read::

    metadata: {labels: {kueue.x-k8s.io/queue-name: Q}, annotations: {metronome.dev/...}}   # Kueue
    spec:
      runPolicy: {schedulingPolicy: {queue: VQ, minAvailable: N}}                           # Volcano
      pytorchReplicaSpecs:            # MPIJob: mpiReplicaSpecs {Launcher, Worker}
        Master: {replicas: 1, template: {metadata: {annotations: ...}, spec: ...}}
        Worker: {replicas: 3, template: ...}

The gang is every replica of every type (``replicas`` defaults to 1), the podSet counts Kueue gives the
job's Workload and the ``minMember`` its operator gives a Volcano PodGroup unless
``schedulingPolicy.minAvailable`` says less. Without the Kueue label the job is taken to be ganged by Volcano:
its queue is ``schedulingPolicy.queue``, else the ``scheduling.volcano.sh/queue-name`` annotation (as the
operators read it), else ``default``. The checks are those of the operators' own validation that decide the
gang's shape: the replica types each operator knows, one master (launcher), whole replica counts, a
``minAvailable`` the replicas can meet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from volcano_metronome import api
from volcano_metronome.admission.gangs import integer
from volcano_metronome.admission.outcome import Outcome, annotations_at, string_or_none
from volcano_metronome.admission.patches import Path, mapping_at
from volcano_metronome.admission.resolve import Context
from volcano_metronome.admission.training import admit_training_job
from volcano_metronome.core.errors import InvalidInput

VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"


@dataclass(frozen=True)
class TrainingKind:
    """One Kubeflow job kind: where its replica specs are, which replica types it knows, which one leads."""

    kind: str
    replica_specs: str  # key under spec
    replica_types: tuple[str, ...]
    single: str  # the type of which there is at most one (master, launcher)


PYTORCH = TrainingKind(api.PYTORCH_JOB, "pytorchReplicaSpecs", ("Master", "Worker"), "Master")
MPI = TrainingKind(api.MPI_JOB, "mpiReplicaSpecs", ("Launcher", "Worker"), "Launcher")


def admit_pytorch_job(obj: Mapping[str, Any], namespace: str, ctx: Context) -> Outcome:
    """A ``kubeflow.org/v1`` PyTorchJob."""
    return _admit(obj, namespace, ctx, PYTORCH)


def admit_mpi_job(obj: Mapping[str, Any], namespace: str, ctx: Context) -> Outcome:
    """A ``kubeflow.org/v2beta1`` MPIJob."""
    return _admit(obj, namespace, ctx, MPI)


def _admit(obj: Mapping[str, Any], namespace: str, ctx: Context, kind: TrainingKind) -> Outcome:
    spec = mapping_at(obj, ("spec",)) or {}
    replicas = spec.get(kind.replica_specs)
    types = [t for t in replicas if isinstance(replicas.get(t), dict)] if isinstance(replicas, dict) else []
    templates: list[Path] = [("spec", kind.replica_specs, t, "template") for t in types]
    policy = mapping_at(obj, ("spec", "runPolicy", "schedulingPolicy")) or {}
    queue = (string_or_none(policy.get("queue")) or string_or_none(annotations_at(obj).get(VOLCANO_QUEUE_ANNOTATION))
             or "default")
    return admit_training_job(obj, namespace, ctx, kind=kind.kind, templates=templates,
                              sizer=lambda: training_size(spec, kind), volcano_queue=queue)


def training_size(spec: Mapping[str, Any], kind: TrainingKind) -> tuple[int, Sequence[str]]:
    """The pods of a Kubeflow job (and warnings); :class:`InvalidInput` naming the field for a malformed one."""
    where = f"spec.{kind.replica_specs}"
    replicas = spec.get(kind.replica_specs)
    if not isinstance(replicas, dict) or not replicas:
        raise InvalidInput(where, replicas, f"a mapping of replica type ({', '.join(kind.replica_types)}) to replica "
                                            "spec")
    total = 0
    for replica_type, replica in replicas.items():
        at = f"{where}.{replica_type}"
        if replica_type not in kind.replica_types:
            raise InvalidInput(where, replica_type, f"replica types among {', '.join(kind.replica_types)} "
                                                    f"({kind.kind})")
        if not isinstance(replica, dict):
            raise InvalidInput(at, replica, "a replica spec mapping with replicas and template")
        if mapping_at(replica, ("template",)) is None:
            raise InvalidInput(f"{at}.template", None, "the pod template of the replica type")
        count = integer(replica.get("replicas", 1), f"{at}.replicas", 0)
        if replica_type == kind.single and count > 1:
            raise InvalidInput(f"{at}.replicas", count, f"at most 1 (a {kind.kind} has one {kind.single.lower()})")
        total += count
    if total < 1:
        raise InvalidInput(f"{where}[*].replicas", total, f"at least one pod in a {kind.kind} with a bandwidth profile")
    minimum = (mapping_at(spec, ("runPolicy", "schedulingPolicy")) or {}).get("minAvailable")
    if minimum is not None:
        minimum = integer(minimum, "spec.runPolicy.schedulingPolicy.minAvailable", 1)
        if minimum > total:
            raise InvalidInput("spec.runPolicy.schedulingPolicy.minAvailable", minimum,
                               f"at most the total replicas ({total})")
    warnings = []
    if spec.get("elasticPolicy") is not None:
        warnings.append(f"spec.elasticPolicy: an elastic {kind.kind} may change its worker count; the gang size "
                        f"recorded is the replicas given now ({total})")
    return total, warnings
