"""A Kubeflow PyTorchJob ganged by Volcano, end to end: the training-operator (v1.9.3, started with
``--gang-scheduler-name=volcano``) makes a PodGroup carrying our annotations and the pods, which are created
gated, placed by our controller and bound by the real Volcano scheduler where we decided.

The job is the training-operator's upstream ``examples/pytorch/simple.yaml``, adapted: in the namespace the
stack's training-operator watches, ``metronome.dev/model: resnet50``, two workers, 8 ``nvidia.com/gpu`` a pod.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any, Callable

import pytest
import yaml

from tests.controller.cluster import wait_until
from tests.e2e.checks import assert_bound_as_decided, bound, created_gated, decided, running
from tests.e2e.history import History
from tests.e2e.manifests import GPU_RESOURCE, LAYOUT
from volcano_metronome import api, kube
from volcano_metronome.controller import objects
from volcano_metronome.devtools import volcano
from volcano_metronome.devtools.operators import VOLCANO_TRAINING_NAMESPACE
from volcano_metronome.devtools.stack import Stack

pytestmark = pytest.mark.upstream_examples("training-operator")

PYTORCHJOBS = kube.Resource("kubeflow.org", "v1", "pytorchjobs", True, "PyTorchJob")
TIMEOUT = 150.0


def pytorch_simple(upstream: pathlib.Path, *, workers: int, gpus_per_pod: int) -> dict[str, Any]:
    (job,) = [d for d in yaml.safe_load_all((upstream / "examples" / "training-operator" / "pytorch-simple.yaml")
                                            .read_text()) if d]
    job = copy.deepcopy(job)
    job["metadata"].update(name="pytorch-e2e", namespace=VOLCANO_TRAINING_NAMESPACE)
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
