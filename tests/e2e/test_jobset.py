"""A JobSet of two replicated jobs through Kueue, end to end: held by our AdmissionCheck, decided as one gang,
admitted, its pods created gated and bound in rank order on the nodes the controller chose.

Everything that acts is the real thing: the JobSet controller (v0.12.0) and its webhooks, Kueue's manager and
webhooks (its ``jobset.x-k8s.io/jobset`` integration), kube-controller-manager's Job controller, our webhook and
controller, kube-scheduler, kwok. The JobSet's shape is Kubeflow Trainer's upstream torch runtime
(tests/admission/builders.trainer_jobsets), given two replicated jobs and whole-node GPU requests.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any, Callable

import pytest

from tests.admission.builders import trainer_jobsets
from tests.controller.cluster import wait_until
from tests.e2e.checks import (assert_bound_as_decided, bound, created_gated, decided,
                             held_then_ready_then_admitted, set_up_kueue)
from tests.e2e.history import History
from tests.e2e.manifests import GPU_RESOURCE, LAYOUT
from volcano_metronome import api, kube
from volcano_metronome.controller import objects, ranks
from volcano_metronome.devtools.stack import Stack

pytestmark = pytest.mark.upstream_examples("kueue", "trainer")

NAMESPACE = "default"  # where the upstream Kueue example puts its LocalQueue
JOBSETS = kube.Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", True, "JobSet")


def two_replicated_jobs(gpus_per_pod: int) -> dict[str, Any]:
    """Trainer's torch runtime as a JobSet: ``leader`` (1 Job of 1 pod) and ``workers`` (2 Jobs of 1 pod)."""
    _, jobset = next(c for c in trainer_jobsets("user-queue") if "torch" in c[0])
    jobset["metadata"]["name"] = "e2e-jobset"
    jobset["metadata"]["annotations"] = {api.MODEL: "resnet50"}
    (node,) = jobset["spec"]["replicatedJobs"]
    pod_spec = node["template"]["spec"]["template"]["spec"]
    pod_spec["restartPolicy"] = "Never"
    for container in pod_spec["containers"]:
        container["resources"] = {"requests": {GPU_RESOURCE: str(gpus_per_pod)}, "limits": {GPU_RESOURCE: str(gpus_per_pod)}}
    leader = copy.deepcopy(node)
    leader.update({"name": "leader", "replicas": 1})
    node.update({"name": "workers", "replicas": 2})
    jobset["spec"]["replicatedJobs"] = [leader, node]
    return jobset


def test_a_jobset_is_held_decided_as_one_gang_admitted_and_bound_in_rank_order(
        stack: Stack, k: kube.Kube, upstream: pathlib.Path, history: Callable[..., History]) -> None:
    def logs() -> str:
        return "\n".join(stack.logs(name) for name in ("controller", "kueue", "jobset", "webhook", "kube-scheduler"))

    workloads = history(kube.WORKLOADS, NAMESPACE)
    claims = history(kube.CLAIMS, NAMESPACE)
    pods = history(kube.PODS, NAMESPACE)
    set_up_kueue(stack, k, upstream, logs)

    jobset = k.create(JOBSETS, two_replicated_jobs(LAYOUT.gpus_per_node), NAMESPACE)
    name, uid = objects.name(jobset), jobset["metadata"]["uid"]
    # Kueue's webhook suspended it; ours put the profile on it and on both pod templates.
    assert jobset["spec"]["suspend"] is True
    assert objects.annotations_of(jobset)[api.GANG_SIZE] == "3"
    for job in jobset["spec"]["replicatedJobs"]:
        meta = job["template"]["spec"]["template"]["metadata"]
        assert meta["annotations"][api.GANG_KIND] == "JobSet" and meta["labels"][api.MANAGED_LABEL] == "true"

    def own_workload() -> dict[str, Any] | None:
        return next((w for w in k.list(kube.WORKLOADS, NAMESPACE)["items"]
                     if any(ref.get("uid") == uid for ref in w["metadata"].get("ownerReferences") or [])), None)

    workload = wait_until(lambda: (w := own_workload()) and objects.condition_true(w, "Admitted") and w,
                          120, lambda: f"the JobSet's Workload admitted\n{logs()}")
    wl_name = objects.name(workload)
    assert [ps["name"] for ps in workload["spec"]["podSets"]] == ["leader", "workers"]
    assert objects.annotations_of(workload)[api.GANG_SIZE] == "3"
    held_then_ready_then_admitted(workloads, wl_name, logs)

    claim_name = f"workload-{wl_name}"  # one gang, one claim, for both podSets
    claim = wait_until(lambda: claims.first(decided, claim_name), 90, lambda: f"claim {claim_name} placed\n{logs()}")
    assert sum(claim["status"]["members"]) == 3 and len(claim["status"]["nodes"]) == 3

    def jobset_pods() -> list[dict[str, Any]]:
        return list(k.list(kube.PODS, NAMESPACE, label_selector=f"{api.JOBSET_NAME_LABEL}={name}")["items"])

    wait_until(lambda: len(jobset_pods()) == 3 and bound(jobset_pods()), 120, lambda: f"the JobSet's pods bound\n{logs()}")
    current = jobset_pods()
    for pod in current:
        first = pods.first(lambda p: True, objects.name(pod))
        assert first is not None and created_gated(first), f"{objects.name(pod)} was not created gated"
        assert objects.annotations_of(pod)[api.GANG_NAME] == name
    assert_bound_as_decided(current, claim)
    # Rank order: JobSet's global job index (leader, then the workers' Jobs) follows the claim's node order.
    by_rank = sorted(current, key=lambda p: int(objects.labels(p)[ranks.JOBSET_GLOBAL_INDEX]))
    assert [objects.labels(p)[ranks.JOBSET_REPLICATED_JOB] for p in by_rank] == ["leader", "workers", "workers"]
    assert [p["spec"]["nodeName"] for p in by_rank] == claim["status"]["nodes"]

    k.request("DELETE", JOBSETS.path(NAMESPACE, name), body={"propagationPolicy": "Background"})
    wait_until(lambda: not jobset_pods() and own_workload() is None, 120, "the garbage collector removing pods and Workload")
