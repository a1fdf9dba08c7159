"""Kueue's own example, end to end: held by our AdmissionCheck, admitted, gated, placed, bound, timed.

``examples/kueue/single-clusterqueue-setup.yaml`` and ``sample-job.yaml`` from shared/upstream,
adapted as tests/e2e/manifests.py says (GPUs, our check, a profile annotation). Everything that
acts is the real thing: Kueue's webhooks and manager, kube-controller-manager's Job controller,
our webhook and controller, kube-scheduler, kwok.
"""

from __future__ import annotations

import pathlib
from typing import Any, Callable

import pytest

from tests.e2e import manifests
from tests.e2e.manifests import LAYOUT
from tests.e2e.checks import (assert_bound_as_decided, bound, created_gated, decided,
                             held_then_ready_then_admitted, set_up_kueue)
from tests.controller.cluster import wait_until
from tests.e2e.history import History
from volcano_metronome import api, kube
from volcano_metronome.controller import objects
from volcano_metronome.devtools.stack import Stack
from volcano_metronome.shapes.times import parse_time

pytestmark = pytest.mark.upstream_examples("kueue")  # reads examples/kueue (tests/e2e/manifests.py)

NAMESPACE = "default"  # where the upstream example puts its LocalQueue and Job
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def test_sample_job_is_held_by_our_check_then_admitted_placed_bound_and_timed(
        stack: Stack, k: kube.Kube, upstream: pathlib.Path, history: Callable[..., History]) -> None:
    def logs() -> str:
        return "\n".join(stack.logs(name) for name in ("controller", "kueue", "webhook", "kube-scheduler"))

    workloads = history(kube.WORKLOADS, NAMESPACE)
    claims = history(kube.CLAIMS, NAMESPACE)
    pods = history(kube.PODS, NAMESPACE)
    set_up_kueue(stack, k, upstream, logs)

    job = k.create(kube.BATCH_JOBS, manifests.kueue_sample_job(upstream, gpus_per_pod=LAYOUT.gpus_per_node), NAMESPACE)
    name, uid = objects.name(job), job["metadata"]["uid"]
    # Kueue's webhook suspended it; ours resolved the profile onto the Job and its pod template.
    assert job["spec"]["suspend"] is True
    assert objects.annotations_of(job)[api.PROFILE_SOURCE] == "catalog"
    template_meta = job["spec"]["template"]["metadata"]
    assert template_meta["annotations"][api.PROFILE] == objects.annotations_of(job)[api.PROFILE]
    assert template_meta["labels"][api.MANAGED_LABEL] == "true"  # what the chart's podSelection=managed selects

    def own_workload() -> dict[str, Any] | None:
        return next((w for w in k.list(kube.WORKLOADS, NAMESPACE)["items"]
                     if any(ref.get("uid") == uid for ref in w["metadata"].get("ownerReferences") or [])), None)

    workload = wait_until(lambda: (w := own_workload()) and objects.condition_true(w, "Admitted") and w,
                          90, lambda: f"the Job's Workload admitted\n{logs()}")
    wl_name = objects.name(workload)
    assert objects.annotations_of(workload)[api.GANG_SIZE] == "3"  # our webhook, on Kueue's Workload

    _, ready, admitted = held_then_ready_then_admitted(workloads, wl_name, logs)

    # The decision, as recorded before the job finished (kwok completes a Job's pods at once, and
    # the claim is then released).
    claim_name = f"workload-{wl_name}"
    claim = wait_until(lambda: claims.first(decided, claim_name), 60, lambda: f"claim {claim_name} placed\n{logs()}")
    assert claim["status"]["feasible"] is True
    assert len(claim["status"]["nodes"]) == 3  # one 8-GPU pod per node: a multi-node gang

    def job_pods() -> list[dict[str, Any]]:
        return list(k.list(kube.PODS, NAMESPACE, label_selector=f"{JOB_NAME_LABEL}={name}")["items"])

    wait_until(lambda: len(job_pods()) == 3 and bound(job_pods()), 90, lambda: f"the Job's pods bound\n{logs()}")
    current = job_pods()
    # The Job controller created the pods only after Kueue admitted the Workload.
    admitted_at = parse_time(objects.condition(admitted, "Admitted")["lastTransitionTime"])  # type: ignore[index]
    for pod in current:
        assert objects.created_s(pod) >= (admitted_at or 0), objects.name(pod)
        first = pods.first(lambda p: True, objects.name(pod))
        assert first is not None and created_gated(first), f"{objects.name(pod)} was not created gated"
        scheduled = objects.condition(pod, "PodScheduled")
        assert scheduled is not None and scheduled["status"] == "True"
    assert_bound_as_decided(current, claim)
    # Kueue passed our check's podSetUpdates (the timing annotations) into the pod template.
    update = next(e for e in (ready["status"]["admissionChecks"]) if e["name"] == manifests.CHECK_NAME)["podSetUpdates"][0]
    for pod in current:
        for key, value in update["annotations"].items():
            assert objects.annotations_of(pod)[key] == value

    # kwok completes the pods; Kueue finishes the Workload; the controller releases the claim.
    wait_until(lambda: objects.condition_true(k.get(kube.WORKLOADS, NAMESPACE, wl_name) or {}, "Finished"),
               90, lambda: f"the Workload finished\n{logs()}")
    released = wait_until(lambda: (c := k.get(kube.CLAIMS, NAMESPACE, claim_name)) is not None
                          and (objects.condition(c, "Placed") or {}).get("reason") == "Released" and c,
                          60, lambda: f"claim {claim_name} released\n{logs()}")
    assert not released["status"].get("nodes")

    k.request("DELETE", kube.BATCH_JOBS.path(NAMESPACE, name), body={"propagationPolicy": "Background"})
    wait_until(lambda: not job_pods() and own_workload() is None, 90, "the garbage collector removing pods and Workload")
