"""The upstream example manifests, read from ``shared/upstream/examples`` and adapted only as needed.

Every adaptation is spelled out here, next to the reason for it; nothing is copied into the repo.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import yaml

from volcano_metronome import api
from volcano_metronome.devtools.fabric import GPU_RESOURCE, Layout

JSON = dict[str, Any]
# The e2e fabric: 2 racks (one zone) of 4 nodes of 8 GPUs, 64 GPUs in all.
LAYOUT = Layout(racks=2, nodes_per_rack=4, gpus_per_node=8)
CHECK_NAME = "metronome-placement"
VOLCANO_JOB_NAME = "volcano.sh/job-name"
VOLCANO_TASK_SPEC = "volcano.sh/task-spec"
VOLCANO_QUEUE_NAME = "volcano.sh/queue-name"


def _documents(path: pathlib.Path) -> list[JSON]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def admission_check() -> JSON:
    """Our AdmissionCheck: Kueue holds a Workload of a ClusterQueue listing it until the controller decides."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": CHECK_NAME},
        "spec": {"controllerName": api.ADMISSION_CHECK_CONTROLLER},
    }


def kueue_setup(upstream: pathlib.Path, *, gpus: int) -> list[JSON]:
    """``examples/kueue/single-clusterqueue-setup.yaml`` (ResourceFlavor, ClusterQueue, LocalQueue).

    Adapted: the ClusterQueue also covers ``nvidia.com/gpu`` (quota: every GPU of the fabric) and
    lists our AdmissionCheck.
    """
    docs = _documents(upstream / "examples" / "kueue" / "single-clusterqueue-setup.yaml")
    for doc in docs:
        if doc["kind"] == "ClusterQueue":
            group = doc["spec"]["resourceGroups"][0]
            group["coveredResources"].append(GPU_RESOURCE)
            group["flavors"][0]["resources"].append({"name": GPU_RESOURCE, "nominalQuota": gpus})
            doc["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": CHECK_NAME}]}
    return docs


def kueue_preemption_setup(upstream: pathlib.Path, *, gpus: int, cluster_queue: str, local_queue: str) -> list[JSON]:
    """``kueue_setup`` as a second pair of queues, for preemption: the ClusterQueue and LocalQueue renamed
    ``cluster_queue`` / ``local_queue`` (the shared ``cluster-queue`` keeps its upstream behaviour) and the
    ClusterQueue preempting ``withinClusterQueue: LowerPriority`` (what ``kueueviz-01-cluster-queues.yaml``
    sets on its emergency queue); the ResourceFlavor is the same ``default-flavor``.
    """
    docs = kueue_setup(upstream, gpus=gpus)
    for doc in docs:
        if doc["kind"] == "ClusterQueue":
            doc["metadata"]["name"] = cluster_queue
            doc["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
        elif doc["kind"] == "LocalQueue":
            doc["metadata"]["name"] = local_queue
            doc["spec"]["clusterQueue"] = cluster_queue
    return docs


def workload_priority_classes(upstream: pathlib.Path) -> dict[str, JSON]:
    """``examples/kueue/kueueviz-07-workload-priority-classes.yaml``, by name (``long-term-research``: 1,
    ``business-impacting``: 1000, ``human-critical``: 1000000). Unchanged."""
    docs = _documents(upstream / "examples" / "kueue" / "kueueviz-07-workload-priority-classes.yaml")
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "WorkloadPriorityClass"}


def kueue_sample_job(upstream: pathlib.Path, *, gpus_per_pod: int) -> JSON:
    """``examples/kueue/sample-job.yaml`` (3 pods in parallel, queue ``user-queue``).

    Adapted: the profile annotation ``metronome.dev/model: resnet50`` on the Job, and
    ``nvidia.com/gpu`` requested by its container (``gpus_per_pod`` = a whole node makes the gang
    span three nodes).
    """
    (job,) = _documents(upstream / "examples" / "kueue" / "sample-job.yaml")
    job["metadata"].setdefault("annotations", {})[api.MODEL] = "resnet50"
    container = job["spec"]["template"]["spec"]["containers"][0]
    resources = container.setdefault("resources", {})
    # An extended resource cannot be overcommitted: its request must equal its limit.
    resources.setdefault("requests", {})[GPU_RESOURCE] = str(gpus_per_pod)
    resources.setdefault("limits", {})[GPU_RESOURCE] = str(gpus_per_pod)
    return job


def podgroup(upstream: pathlib.Path, *, namespace: str, name: str | None = None, members: int,
             annotations: dict[str, str]) -> JSON:
    """``examples/volcano/podgroup.yaml`` (PodGroup ``test-pg``, queue ``default``).

    Adapted: the given profile annotations, ``minMember`` (the upstream 1 would be a one-pod
    gang), the namespace, and optionally the name.
    """
    (group,) = _documents(upstream / "examples" / "volcano" / "podgroup.yaml")
    group["metadata"]["namespace"] = namespace
    if name:
        group["metadata"]["name"] = name
    group["metadata"].setdefault("annotations", {}).update(annotations)
    group["spec"]["minMember"] = members
    return group


def volcano_pods(group: JSON, *, gpus_per_pod: int, task: str = "worker") -> list[JSON]:
    """The pods of ``group`` as vc-controller-manager creates a Volcano Job's task pods.

    Each carries ``scheduling.k8s.io/group-name`` (what makes it a member of the PodGroup) and
    Volcano's job, task and queue keys, and asks for the default scheduler: this is the stand-in
    for the Volcano scheduler, which cannot be built here. There is no owner reference, since no
    Volcano Job exists to own them (the garbage collector would delete pods of a missing owner).
    """
    meta = group["metadata"]
    pods = []
    for index in range(int(group["spec"]["minMember"])):
        keys = {
            VOLCANO_JOB_NAME: meta["name"],
            VOLCANO_TASK_SPEC: task,
            VOLCANO_QUEUE_NAME: str(group["spec"].get("queue", "default")),
        }
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{meta['name']}-{task}-{index}",
                    "namespace": meta["namespace"],
                    "labels": dict(keys),
                    "annotations": {api.VOLCANO_GROUP_NAME: meta["name"], **keys},
                },
                "spec": {
                    "restartPolicy": "OnFailure",
                    "containers": [
                        {
                            "name": task,
                            "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                            "command": ["/bin/sh", "-c", "sleep 3600"],
                            "resources": {
                                "requests": {"cpu": "1", "memory": "200Mi", GPU_RESOURCE: str(gpus_per_pod)},
                                "limits": {GPU_RESOURCE: str(gpus_per_pod)},
                            },
                        }
                    ],
                },
            }
        )
    return pods


def with_namespace(obj: JSON, namespace: str) -> JSON:
    """A copy of ``obj`` in ``namespace``."""
    result = copy.deepcopy(obj)
    result["metadata"]["namespace"] = namespace
    return result


def volcano_jobs(upstream: pathlib.Path, example: str, *, namespace: str, gpus_per_pod: int,
                 annotations: dict[str, str], name: str | None = None, queue: str | None = None,
                 priority_class: str | None = None) -> list[JSON]:
    """The Volcano Jobs of ``examples/volcano/<example>``, as the pinned Volcano ships them.

    Adapted: the namespace, the given profile annotations on the Job, and ``gpus_per_pod``
    ``nvidia.com/gpu`` (request = limit) added to every container's resources beside what the
    example asks (a whole node per pod makes each gang span as many nodes as it has pods);
    optionally the name (one Job), the queue and a priority class.
    """
    jobs = [doc for doc in _documents(upstream / "examples" / "volcano" / example) if doc.get("kind") == "Job"]
    for job in jobs:
        job["metadata"]["namespace"] = namespace
        job["metadata"].setdefault("annotations", {}).update(annotations)
        if name:
            job["metadata"]["name"] = name
        if queue:
            job["spec"]["queue"] = queue
        if priority_class:
            job["spec"]["priorityClassName"] = priority_class
        for task in job["spec"]["tasks"]:
            for container in task["template"]["spec"]["containers"]:
                resources = container.setdefault("resources", {})
                resources.setdefault("requests", {})[GPU_RESOURCE] = str(gpus_per_pod)
                resources.setdefault("limits", {})[GPU_RESOURCE] = str(gpus_per_pod)
    return jobs
