"""What the ``pipeline`` benchmark submits and how it reads the API server's and the controller's metrics.

Pure functions (manifests in, manifests out; metric text in, numbers out), so the fast tier tests them
without a cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families

from volcano_metronome import api
from volcano_metronome.devtools.fabric import GPU_RESOURCE

JSON = dict[str, Any]
SCHEDULERS = ("volcano", "kueue")
ARMS = ("alone", "metronome")
CHECK_NAME = "metronome-placement"
FLAVOR = "bench-flavor"
LOCAL_QUEUE = "bench"
# The label that names a pod's gang: vc-controller-manager sets the first, the Job controller the second.
GANG_LABEL = {"volcano": "volcano.sh/job-name", "kueue": "batch.kubernetes.io/job-name"}
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})
# Written at a steady rate whatever is submitted (kwok's node heartbeats and leases, leader
# elections): counted, but left out of the per-pod figure, which is about the workload.
BACKGROUND_RESOURCES = frozenset({"leases", "nodes"})


@dataclass(frozen=True)
class Shape:
    """The workload: ``gangs`` gangs of ``size`` pods of ``gpus_per_pod`` GPUs."""

    scheduler: str
    gangs: int
    size: int
    gpus_per_pod: int

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler: got {self.scheduler!r}, expected one of {', '.join(SCHEDULERS)}")
        for name in ("gangs", "size", "gpus_per_pod"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: got {getattr(self, name)}, expected an integer >= 1")

    @property
    def pods(self) -> int:
        """Pods of one arm."""
        return self.gangs * self.size

    def nodes_needed(self, gpus_per_node: int) -> int:
        """Nodes whose GPUs hold one arm's gangs all at once (each gang on whole nodes, as the controller packs)."""
        per_node = max(1, gpus_per_node // self.gpus_per_pod)
        return self.gangs * math.ceil(self.size / per_node)


def gang(shape: Shape, arm: str, namespace: str, index: int) -> JSON:
    """Gang ``index`` of ``arm``: a Volcano Job, or a batch Job for Kueue; the metronome arm's carries a profile."""
    annotations = {api.MODEL: "resnet50"} if arm == "metronome" else {}
    name = f"gang-{index:04d}"
    resources = {"requests": {"cpu": "1", "memory": "1Gi", GPU_RESOURCE: str(shape.gpus_per_pod)},
                 "limits": {GPU_RESOURCE: str(shape.gpus_per_pod)}}
    container = {"name": "trainer", "image": "registry.example/trainer:1", "resources": resources}
    metadata: JSON = {"name": name, "namespace": namespace, "annotations": annotations}
    if shape.scheduler == "volcano":
        template = {"spec": {"restartPolicy": "Never", "containers": [container]}}
        return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": metadata,
                "spec": {"schedulerName": "volcano", "queue": "default", "minAvailable": shape.size,
                         "tasks": [{"name": "worker", "replicas": shape.size, "template": template}]}}
    metadata["labels"] = {api.KUEUE_QUEUE_NAME: LOCAL_QUEUE}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
            "spec": {"parallelism": shape.size, "completions": shape.size, "completionMode": "Indexed",
                     "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}


def kueue_queues(arm: str, namespace: str, gpus: int) -> tuple[list[JSON], JSON]:
    """The cluster-scoped objects of an arm (flavor, check, ClusterQueue) and its LocalQueue.

    Each arm has its own ClusterQueue, quota = every GPU; the metronome arm's lists our AdmissionCheck.
    """
    cluster_queue: JSON = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"bench-{arm}"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory", GPU_RESOURCE],
            "flavors": [{"name": FLAVOR, "resources": [
                {"name": "cpu", "nominalQuota": gpus * 8}, {"name": "memory", "nominalQuota": f"{gpus * 8}Gi"},
                {"name": GPU_RESOURCE, "nominalQuota": gpus}]}]}]},
    }
    if arm == "metronome":
        cluster_queue["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": CHECK_NAME}]}
    shared = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": CHECK_NAME},
         "spec": {"controllerName": api.ADMISSION_CHECK_CONTROLLER}},
        cluster_queue,
    ]
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": LOCAL_QUEUE, "namespace": namespace}, "spec": {"clusterQueue": f"bench-{arm}"}}
    return shared, local


# ------------------------------------------------------------------------------------------ metrics
def samples(text: str, metric: str) -> list[tuple[Mapping[str, str], float]]:
    """Every sample of ``metric`` (its full sample name, e.g. ``apiserver_request_total``) in exposition text."""
    found: list[tuple[Mapping[str, str], float]] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == metric:
                found.append((sample.labels, float(sample.value)))
    return found


def request_counts(text: str) -> dict[tuple[str, str, str, bool], float]:
    """``apiserver_request_total`` summed by (verb, resource, subresource, answered 2xx), dry runs left out."""
    counts: dict[tuple[str, str, str, bool], float] = {}
    for labels, value in samples(text, "apiserver_request_total"):
        if labels.get("dry_run"):
            continue
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""),
               labels.get("code", "").startswith("2"))
        counts[key] = counts.get(key, 0.0) + value
    return counts


def writes(before: Mapping[tuple[str, str, str, bool], float], after: Mapping[tuple[str, str, str, bool], float]) -> JSON:
    """The writes between two ``request_counts``: total, workload (background resources left out), by resource.

    Only writes the API server carried out (2xx) are counted; refused ones are listed apart under ``rejected``.
    Most of those are a previous arm's leftovers: Volcano's scheduler keeps sending the Events of the gangs of
    a namespace already deleted (404), which would otherwise be charged to the next arm.
    """
    by_resource: dict[str, int] = {}
    rejected: dict[str, int] = {}
    for key, value in after.items():
        verb, resource, subresource, ok = key
        delta = int(round(value - before.get(key, 0.0)))
        if verb in WRITE_VERBS and delta:
            name = f"{resource}/{subresource}" if subresource else resource
            into = by_resource if ok else rejected
            into[name] = into.get(name, 0) + delta
    workload = sum(n for name, n in by_resource.items() if name.split("/")[0] not in BACKGROUND_RESOURCES)
    return {"total": sum(by_resource.values()), "workload": workload,
            "by_resource": dict(sorted(by_resource.items(), key=lambda item: -item[1])),
            "rejected": dict(sorted(rejected.items(), key=lambda item: -item[1]))}


def histogram_totals(text: str, metric: str) -> tuple[float, float]:
    """(sum, count) of histogram ``metric`` (its base name), summed over labels; (0, 0) when absent."""
    total = sum(value for _, value in samples(text, f"{metric}_sum"))
    count = sum(value for _, value in samples(text, f"{metric}_count"))
    return total, count


def webhook_admission(text: str) -> dict[str, tuple[float, float]]:
    """(seconds, calls) per admission webhook name, from the API server's
    ``apiserver_admission_webhook_admission_duration_seconds`` (summed over operation, type, rejected)."""
    found: dict[str, tuple[float, float]] = {}
    metric = "apiserver_admission_webhook_admission_duration_seconds"
    for suffix, index in (("_sum", 0), ("_count", 1)):
        for labels, value in samples(text, metric + suffix):
            name = labels.get("name", "")
            pair = list(found.get(name, (0.0, 0.0)))
            pair[index] += value
            found[name] = (pair[0], pair[1])
    return found


def webhook_calls(before: Mapping[str, tuple[float, float]], after: Mapping[str, tuple[float, float]]) -> JSON:
    """The calls to each admission webhook between two ``webhook_admission`` readings and their mean latency."""
    calls: JSON = {}
    for name, (seconds, count) in sorted(after.items()):
        was_seconds, was_count = before.get(name, (0.0, 0.0))
        n = int(round(count - was_count))
        if n > 0:
            calls[name] = {"calls": n, "mean_s": round((seconds - was_seconds) / n, 4),
                           "total_s": round(seconds - was_seconds, 3)}
    return calls


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (linear interpolation, as numpy's default), None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ratios(alone: Mapping[str, Any], metronome: Mapping[str, Any], pods: int, cycle_s: float) -> JSON:
    """The issue's three ratios of one round, each with its target and whether it was met."""
    def divide(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or b == 0 else round(a / b, 3)

    throughput = divide(metronome.get("gangs_per_s"), alone.get("gangs_per_s"))
    a99, m99 = alone.get("p99_s"), metronome.get("p99_s")
    limit = None if a99 is None else round(1.25 * a99 + cycle_s, 3)
    extra = round((metronome["writes"]["workload"] - alone["writes"]["workload"]) / pods, 3)
    return {
        "throughput": {"ratio": throughput, "target": ">= 0.8", "met": throughput is not None and throughput >= 0.8},
        "p99": {"ratio": divide(m99, a99), "limit_s": limit, "metronome_s": m99,
                "target": "<= 1.25 x alone + one controller cycle", "cycle_s": round(cycle_s, 3),
                "met": limit is not None and m99 is not None and m99 <= limit},
        "extra_writes_per_pod": {"value": extra, "target": "<= 1.1", "met": extra <= 1.1},
    }
