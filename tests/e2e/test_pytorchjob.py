"""Kubeflow PyTorchJobs end to end, on the real training-operator (v1.9.3), one for each way they are ganged:

* through **Volcano** (the operator started with ``--gang-scheduler-name=volcano``): it makes a PodGroup
  carrying our annotations and the pods, which are created gated, placed by our controller and bound by the
  real Volcano scheduler where we decided; the job is the training-operator's upstream
  ``examples/pytorch/simple.yaml``;
* through **Kueue** (an operator without a gang scheduler): Kueue's ``sample-pytorchjob.yaml`` is held by our
  AdmissionCheck, decided as one gang for its master and worker podSets, admitted, and its pods bound by
  kube-scheduler in rank order (the operator's ``RANK``) on the nodes we chose.

Both adapted: ``metronome.dev/model: resnet50``, two workers, 8 ``nvidia.com/gpu`` a pod (one node each).
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any, Callable

import pytest
import yaml

from tests.controller.cluster import wait_until
from tests.e2e.checks import (assert_bound_as_decided, bound, created_gated, decided,
                             held_then_ready_then_admitted, running, set_up_kueue)
from tests.e2e.history import History
from tests.e2e.manifests import GPU_RESOURCE, LAYOUT
from volcano_metronome import api, kube
from volcano_metronome.controller import objects
from volcano_metronome.devtools import volcano
from volcano_metronome.devtools.operators import KUEUE_TRAINING_NAMESPACE, VOLCANO_TRAINING_NAMESPACE
from volcano_metronome.devtools.stack import Stack

pytestmark = pytest.mark.upstream_examples("training-operator", "kueue")

PYTORCHJOBS = kube.Resource("kubeflow.org", "v1", "pytorchjobs", True, "PyTorchJob")
TIMEOUT = 150.0


def pytorch_simple(upstream: pathlib.Path, *, workers: int, gpus_per_pod: int, project: str = "training-operator",
                   file: str = "pytorch-simple.yaml", namespace: str = VOLCANO_TRAINING_NAMESPACE) -> dict[str, Any]:
    (job,) = [d for d in yaml.safe_load_all((upstream / "examples" / project / file).read_text()) if d]
    job = copy.deepcopy(job)
    job["metadata"].update(name="pytorch-e2e", namespace=namespace)
    job["metadata"]["annotations"] = {api.MODEL: "resnet50"}
    specs = job["spec"]["pytorchReplicaSpecs"]
    specs["Worker"]["replicas"] = workers
    for replica in specs.values():
        for container in replica["template"]["spec"]["containers"]:
            container["resources"] = {"requests": {GPU_RESOURCE: str(gpus_per_pod)},
                                      "limits": {GPU_RESOURCE: str(gpus_per_pod)}}
    return job


def test_a_pytorchjob_ganged_by_volcano_gets_our_podgroup_and_is_bound_where_we_decided(
        stack: Stack, k: kube.Kube, upstream: pathlib.Path, history: Callable[..., History]) -> None:
    def logs() -> str:
        return "\n".join(stack.logs(name, 25) for name in ("controller", "training-operator", "volcano-scheduler",
                                                           "webhook"))

    namespace = VOLCANO_TRAINING_NAMESPACE
    pods = history(kube.PODS, namespace)
    job = k.create(PYTORCHJOBS, pytorch_simple(upstream, workers=2, gpus_per_pod=LAYOUT.gpus_per_node), namespace)
    name = objects.name(job)
    # Ours: profile and gang size on the job and its replica templates (no gang-kind: this is Volcano's gang).
    assert objects.annotations_of(job)[api.GANG_SIZE] == "3"
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        assert api.PROFILE in replica["template"]["metadata"]["annotations"]
        assert api.GANG_KIND not in replica["template"]["metadata"]["annotations"]

    # The training-operator's PodGroup, named after the job, carries the job's annotations: our profile.
    group = wait_until(lambda: k.get(kube.PODGROUPS, namespace, name), TIMEOUT, lambda: f"the PodGroup\n{logs()}")
    assert any(ref.get("kind") == "PyTorchJob" for ref in group["metadata"]["ownerReferences"])
    assert objects.annotations_of(group)[api.PROFILE] == objects.annotations_of(job)[api.PROFILE]
    assert objects.annotations_of(group)[api.GANG_SIZE] == "3" and group["spec"]["minMember"] == 3

    def job_pods() -> list[dict[str, Any]]:
        return list(k.list(kube.PODS, namespace, label_selector=f"{api.KUBEFLOW_JOB_NAME_LABEL}={name}")["items"])

    wait_until(lambda: len(job_pods()) == 3 and bound(job_pods()) and running(job_pods()), TIMEOUT,
               lambda: f"the 3 pods bound by Volcano and running\n{logs()}")
    claim = k.get(kube.CLAIMS, namespace, f"podgroup-{name}")
    assert claim is not None and decided(claim) and len(claim["status"]["nodes"]) == 3
    current = job_pods()
    assert_bound_as_decided(current, claim)
    for pod in current:
        assert pod["spec"]["schedulerName"] == volcano.SCHEDULER_NAME
        assert objects.annotations_of(pod)[api.GANG_KIND] == "PodGroup"
        assert created_gated(pods.versions(objects.name(pod))[0]), f"{objects.name(pod)} was not created gated"

    k.request("DELETE", PYTORCHJOBS.path(namespace, name), body={"propagationPolicy": "Background"})
    wait_until(lambda: not job_pods(), TIMEOUT, "the garbage collector removing the pods")
    released = wait_until(lambda: (c := k.get(kube.CLAIMS, namespace, f"podgroup-{name}")) is None or
                          not (c.get("status") or {}).get("nodes"), TIMEOUT, lambda: f"the claim released\n{logs()}")
    assert released


def test_a_pytorchjob_through_kueue_is_held_decided_as_one_gang_and_bound_in_rank_order(
        stack: Stack, k: kube.Kube, upstream: pathlib.Path, history: Callable[..., History]) -> None:
    def logs() -> str:
        return "\n".join(stack.logs(name, 25) for name in ("controller", "training-operator-kueue", "kueue", "webhook",
                                                           "kube-scheduler"))

    namespace = KUEUE_TRAINING_NAMESPACE
    workloads = history(kube.WORKLOADS, namespace)
    pods = history(kube.PODS, namespace)
    set_up_kueue(stack, k, upstream, logs)
    spec = pytorch_simple(upstream, workers=2, gpus_per_pod=LAYOUT.gpus_per_node, project="kueue",
                          file="sample-pytorchjob.yaml", namespace=namespace)
    job = k.create(PYTORCHJOBS, spec, namespace)
    name, uid = objects.name(job), job["metadata"]["uid"]
    assert job["spec"]["runPolicy"]["suspend"] is True  # Kueue's webhook
    for replica in job["spec"]["pytorchReplicaSpecs"].values():  # ours: the pods will belong to the Workload
        assert replica["template"]["metadata"]["annotations"][api.GANG_KIND] == "PyTorchJob"

    def own_workload() -> dict[str, Any] | None:
        return next((w for w in k.list(kube.WORKLOADS, namespace)["items"]
                     if any(ref.get("uid") == uid for ref in w["metadata"].get("ownerReferences") or [])), None)

    workload = wait_until(lambda: (w := own_workload()) and objects.condition_true(w, "Admitted") and w,
                          TIMEOUT, lambda: f"the PyTorchJob's Workload admitted\n{logs()}")
    wl_name = objects.name(workload)
    assert sorted(ps["name"] for ps in workload["spec"]["podSets"]) == ["master", "worker"]
    assert objects.annotations_of(workload)[api.GANG_SIZE] == "3"
    held_then_ready_then_admitted(workloads, wl_name, logs)

    def job_pods() -> list[dict[str, Any]]:
        return list(k.list(kube.PODS, namespace, label_selector=f"{api.KUBEFLOW_JOB_NAME_LABEL}={name}")["items"])

    wait_until(lambda: len(job_pods()) == 3 and bound(job_pods()), TIMEOUT, lambda: f"the 3 pods bound\n{logs()}")
    claim = k.get(kube.CLAIMS, namespace, f"workload-{wl_name}")
    assert claim is not None and decided(claim) and len(claim["status"]["nodes"]) == 3
    current = job_pods()
    assert_bound_as_decided(current, claim)
    for pod in current:
        assert (objects.annotations_of(pod)[api.GANG_KIND], objects.annotations_of(pod)[api.GANG_NAME]) == \
            ("PyTorchJob", name)
        assert created_gated(pods.versions(objects.name(pod))[0]), f"{objects.name(pod)} was not created gated"

    def rank(pod: dict[str, Any]) -> int:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}
        return int(env["RANK"])  # the training-operator's: master 0, workers 1..n

    assert [p["spec"]["nodeName"] for p in sorted(current, key=rank)] == claim["status"]["nodes"]
    k.request("DELETE", PYTORCHJOBS.path(namespace, name), body={"propagationPolicy": "Background"})
    wait_until(lambda: not job_pods() and own_workload() is None, TIMEOUT, "the garbage collector removing pods and Workload")
