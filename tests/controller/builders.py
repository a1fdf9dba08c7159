"""Kubernetes objects (as plain dicts) for the controller's tests: nodes, gated pods, PodGroups, Workloads.

Shared by the unit tests (in-memory API) and the integration tests (real API server), so both tiers
exercise the same objects.
"""

from __future__ import annotations

import json
from typing import Any

from volcano_metronome import api

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"
# 200 ms iterations, an 80 Gbps all-reduce burst in the last 24 ms (the catalog's resnet50 on 100G NICs).
PROFILE = {"period_ms": 200, "windows": [{"start_ms": 176, "len_ms": 24, "gbps": 80}], "jitter_ms": 0}


def node(name: str, gpus: int = 8, rack: str | None = None, labels: dict[str, str] | None = None) -> JSON:
    lab = {"kubernetes.io/hostname": name, **(labels or {})}
    if rack:
        lab["metronome.dev/rack"] = rack
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": lab},
            "status": {"allocatable": {GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"},
                       "capacity": {GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}}}


def profile_text(profile: dict[str, Any] | None = None) -> str:
    return json.dumps(profile or PROFILE, separators=(",", ":"))


def pod(namespace: str, name: str, gang: str, *, kind: str = "PodGroup", gpus: int = 8, priority: int | None = None,
        size: int | None = None, profile: dict[str, Any] | None = None, gates: tuple[str, ...] = (api.SCHEDULING_GATE,),
        with_profile: bool = True, priority_class: str | None = None) -> JSON:
    ann = {api.GANG_KIND: kind, api.GANG_NAME: gang}
    if kind == "PodGroup":
        ann[api.VOLCANO_GROUP_NAME] = gang
    if with_profile:
        ann[api.PROFILE] = profile_text(profile)
        ann[api.PROFILE_SOURCE] = "annotation"
    if size is not None:
        ann[api.GANG_SIZE] = str(size)
    spec: JSON = {
        "schedulingGates": [{"name": g} for g in gates],
        "containers": [{"name": "train", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}],
    }
    if priority is not None:
        spec["priority"] = priority
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {api.MANAGED_LABEL: "true"},
                         "annotations": ann},
            "spec": spec}


def gang_pods(namespace: str, gang: str, members: int, **kw: Any) -> list[JSON]:
    return [pod(namespace, f"{gang}-{i}", gang, size=members, **kw) for i in range(members)]


def podgroup(namespace: str, name: str, members: int, *, queue: str = "default", gpus: int = 8,
             profile: dict[str, Any] | None = None) -> JSON:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {api.PROFILE: profile_text(profile), api.PROFILE_SOURCE: "annotation",
                                         api.GANG_SIZE: str(members)}},
            "spec": {"minMember": members, "queue": queue, "minResources": {GPU: str(gpus * members)}}}


def workload(namespace: str, name: str, members: int, *, gpus: int = 8, priority: int = 0,
             queue: str = "lq", profile: dict[str, Any] | None = None) -> JSON:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {api.PROFILE: profile_text(profile), api.PROFILE_SOURCE: "annotation"}},
            "spec": {"queueName": queue, "priority": priority, "podSets": [{
                "name": "main", "count": members,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": "train", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}}}]}}


def quota_reserved_status(cluster_queue: str, members: int, *, flavor: str = "default", gpus: int = 8) -> JSON:
    """What Kueue writes when it reserves quota (enough for the Workload CRD's validation rules)."""
    now = "2025-01-01T00:00:00Z"
    return {"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                            "message": "Quota reserved", "lastTransitionTime": now}],
            "admission": {"clusterQueue": cluster_queue, "podSetAssignments": [{
                "name": "main", "count": members, "flavors": {GPU: flavor},
                "resourceUsage": {GPU: str(gpus * members)}}]}}


def admission_check(name: str = "metronome") -> JSON:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": name},
            "spec": {"controllerName": api.ADMISSION_CHECK_CONTROLLER}}


def cluster_queue(name: str = "cq", check: str = "metronome") -> JSON:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {}, "admissionChecksStrategy": {"admissionChecks": [{"name": check}]},
                     "resourceGroups": [{"coveredResources": [GPU], "flavors": [{
                         "name": "default", "resources": [{"name": GPU, "nominalQuota": "1000"}]}]}]}}


def queue_policy(name: str, **spec: Any) -> JSON:
    return {"apiVersion": "metronome.dev/v1alpha1", "kind": "QueuePolicy", "metadata": {"name": name}, "spec": spec}


def volcano_task_pods(namespace: str, job: str, tasks: list[tuple[str, int, int]], *,
                      scheduler: str = "volcano") -> list[JSON]:
    """Pods as Volcano's job controller makes them for a Job with ``tasks`` = [(name, replicas, gpus)]: named
    ``<job>-<task>-<i>``, with ``volcano.sh/task-spec`` and ``task-index`` (annotation and label), in PodGroup ``job``."""
    size = sum(replicas for _, replicas, _ in tasks)
    out = []
    for task, replicas, gpus in tasks:
        for i in range(replicas):
            p = pod(namespace, f"{job}-{task}-{i}", job, gpus=gpus, size=size)
            volcano = {"volcano.sh/task-spec": task, "volcano.sh/task-index": str(i), "volcano.sh/job-name": job}
            p["metadata"]["annotations"].update(volcano)
            p["metadata"]["labels"].update(volcano)
            p["spec"]["schedulerName"] = scheduler
            out.append(p)
    return out
