"""Kueue preempting a Workload held by our AdmissionCheck, end to end: the preempted gang gives its nodes back.

Two gangs of five whole nodes on the 8-node fabric, in one ClusterQueue whose quota (every GPU of the fabric)
cannot hold both, preempting ``withinClusterQueue: LowerPriority``; the priorities are Kueue's upstream
WorkloadPriorityClasses (``kueueviz-07-workload-priority-classes.yaml``). The low one runs until Kueue preempts
it, so it is a PyTorchJob (through Kueue's ``kubeflow.org/pytorchjob`` integration and the real
training-operator): kwok completes at once the pods of a batch/v1 Job (volcano_metronome/devtools/components.py
``kwok_stage``), and nothing else in the stack keeps them running, but a PyTorchJob's pods run until deleted.
The high one is Kueue's ``sample-job.yaml``, a batch/v1 Job, whose pods kwok completes once bound: it then
finishes, and Kueue reserves quota for the low one again.

Before the fix the preempted Workload kept its claim: five nodes held for a gang without quota, so the
preemptor (five nodes of eight) could not be placed, and its check was set Ready again without a reservation.
Until 7da3f54 the preemptor's check then went to Retry while the evicted job's pods were still running (Kueue
reserves its quota as soon as it evicts), so Kueue gave the reservation back and requeued it; it now waits Pending.
"""

from __future__ import annotations

import pathlib
from typing import Any, Callable, Iterator

import pytest

from tests.controller.cluster import wait_until
from tests.e2e import manifests
from tests.e2e.checks import assert_bound_as_decided, bound, check_state, decided, running, set_up_kueue
from tests.e2e.history import History
from tests.e2e.manifests import LAYOUT
from tests.e2e.test_pytorchjob import PYTORCHJOBS, pytorch_simple
from volcano_metronome import api, kube
from volcano_metronome.controller import objects
from volcano_metronome.devtools.apply import ApiClient
from volcano_metronome.devtools.operators import KUEUE_TRAINING_NAMESPACE
from volcano_metronome.devtools.stack import Stack

pytestmark = pytest.mark.upstream_examples("training-operator", "kueue")

# The only namespace the Kueue-side training-operator watches; Kueue's sample Job is in it as well.
NAMESPACE = KUEUE_TRAINING_NAMESPACE
CLUSTER_QUEUE = "preempting-cluster-queue"
LOCAL_QUEUE = "preempting-user-queue"
LOW, HIGH = "long-term-research", "business-impacting"  # upstream WorkloadPriorityClasses: values 1 and 1000
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# One 8-GPU pod a node: two gangs of 5 are more than the 8 nodes (and the 64-GPU quota) can hold at once.
GANG = 5
TIMEOUT = 90.0
WORKLOAD_PRIORITY_CLASSES = kube.Resource("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", False,
                                          "WorkloadPriorityClass")


def owned_workload(k: kube.Kube, uid: str) -> dict[str, Any] | None:
    """The Kueue Workload of the job with ``uid``, if Kueue made it."""
    return next((w for w in k.list(kube.WORKLOADS, NAMESPACE)["items"]
                 if any(ref.get("uid") == uid for ref in w["metadata"].get("ownerReferences") or [])), None)


def reserved(workload: dict[str, Any]) -> bool:
    """Kueue reserves quota for ``workload`` and is not taking it back. Kueue evicts in two steps: Evicted=True
    (our check reset to Pending) while QuotaReserved stays True until the job is stopped, then QuotaReserved=False."""
    return objects.condition_true(workload, "QuotaReserved") and not objects.condition_true(workload, "Evicted")


def assert_ready_only_when_reserved(versions: list[dict[str, Any]]) -> int:
    """No version of a Workload shows our check Ready without a reservation Kueue keeps; returns how many
    times the check turned Ready."""
    shown = [(check_state(v), objects.condition_true(v, "QuotaReserved"), objects.condition_true(v, "Evicted"))
             for v in versions]
    for version in versions:
        assert check_state(version) != "Ready" or reserved(version), (
            f"our check Ready on {objects.name(version)} without a reservation (resourceVersion "
            f"{version['metadata'].get('resourceVersion')}); (check, QuotaReserved, Evicted) by version: {shown}")
    return sum(1 for before, after in zip([None, *shown], shown)
               if after[0] == "Ready" and (before is None or before[0] != "Ready"))


@pytest.fixture
def preempting_queue(stack: Stack, k: kube.Kube, upstream: pathlib.Path) -> Iterator[None]:
    """Our check, the priority classes and the preempting queues; afterwards, whatever jobs went to the
    queue and the queues themselves are deleted, so that no gang of this test holds nodes after it (even failed)."""
    apply = ApiClient.from_kubeconfig(stack.kubeconfig_path)
    set_up_kueue(stack, k, upstream, lambda: stack.logs("kueue"))
    classes = manifests.workload_priority_classes(upstream)
    for name in (LOW, HIGH):
        apply.apply(classes[name])
    setup = manifests.kueue_preemption_setup(upstream, gpus=LAYOUT.nodes * LAYOUT.gpus_per_node,
                                             cluster_queue=CLUSTER_QUEUE, local_queue=LOCAL_QUEUE)
    for obj in setup:
        apply.apply(obj)
    wait_until(lambda: objects.condition_true(k.get(kube.CLUSTER_QUEUES, None, CLUSTER_QUEUE) or {}, "Active"),
               60, lambda: f"{CLUSTER_QUEUE} Active\n{stack.logs('kueue')}")
    yield
    selector = f"{api.KUEUE_QUEUE_NAME}={LOCAL_QUEUE}"
    jobs = [(resource, job) for resource in (PYTORCHJOBS, kube.BATCH_JOBS)
            for job in k.list(resource, NAMESPACE, label_selector=selector)["items"]]
    owners = {job["metadata"]["uid"] for _, job in jobs}
    # Their claims are owned by the Workloads: waited out too, so that no write of ours on them (the controller
    # releasing or deleting them) lands in the next test, which may count the API server's writes.
    owners |= {w["metadata"]["uid"] for w in k.list(kube.WORKLOADS, NAMESPACE)["items"]
               if any(ref.get("uid") in owners for ref in w["metadata"].get("ownerReferences") or [])}
    for resource, job in jobs:
        k.request("DELETE", resource.path(NAMESPACE, objects.name(job)), body={"propagationPolicy": "Background"})

    def left() -> list[str]:
        return [objects.name(o) for resource in (kube.WORKLOADS, kube.PODS, kube.CLAIMS)
                for o in k.list(resource, NAMESPACE)["items"]
                if any(ref.get("uid") in owners for ref in o["metadata"].get("ownerReferences") or [])]

    wait_until(lambda: not left(), TIMEOUT, lambda: f"the garbage collector removing the jobs' Workloads, pods and "
                                                    f"claims: {left()}")
    k.delete(kube.LOCAL_QUEUES, NAMESPACE, LOCAL_QUEUE)
    k.delete(kube.CLUSTER_QUEUES, None, CLUSTER_QUEUE)
    for name in (LOW, HIGH):
        k.delete(WORKLOAD_PRIORITY_CLASSES, None, name)


def test_kueue_preempts_a_placed_workload_whose_claim_gives_its_nodes_to_the_preemptor(
        stack: Stack, k: kube.Kube, upstream: pathlib.Path, history: Callable[..., History],
        preempting_queue: None) -> None:
    def logs() -> str:
        return "\n".join(stack.logs(name, 30) for name in ("controller", "kueue", "training-operator-kueue",
                                                           "webhook", "kube-scheduler"))

    workloads = history(kube.WORKLOADS, NAMESPACE)
    claims = history(kube.CLAIMS, NAMESPACE)

    # The low-priority gang: a PyTorchJob of a master and GANG - 1 workers, a whole node each.
    spec = pytorch_simple(upstream, workers=GANG - 1, gpus_per_pod=LAYOUT.gpus_per_node, project="kueue",
                          file="sample-pytorchjob.yaml", namespace=NAMESPACE)
    spec["metadata"]["name"] = "pytorch-preempted"
    spec["metadata"]["labels"] = {api.KUEUE_QUEUE_NAME: LOCAL_QUEUE, PRIORITY_LABEL: LOW}
    low_job = k.create(PYTORCHJOBS, spec, NAMESPACE)
    low_name = objects.name(low_job)

    def low_pods() -> list[dict[str, Any]]:
        return list(k.list(kube.PODS, NAMESPACE, label_selector=f"{api.KUBEFLOW_JOB_NAME_LABEL}={low_name}")["items"])

    low = wait_until(lambda: (w := owned_workload(k, low_job["metadata"]["uid"]))
                     and objects.condition_true(w, "Admitted") and w,
                     TIMEOUT, lambda: f"the low-priority Workload admitted\n{logs()}")
    low_wl = objects.name(low)
    assert low["spec"]["priority"] == 1 and check_state(low) == "Ready"
    low_claim = f"workload-{low_wl}"
    wait_until(lambda: len(low_pods()) == GANG and bound(low_pods()) and running(low_pods()), TIMEOUT,
               lambda: f"the low-priority gang's pods bound and running\n{logs()}")
    placed = k.get(kube.CLAIMS, NAMESPACE, low_claim)
    assert placed is not None and decided(placed) and len(placed["status"]["nodes"]) == GANG
    assert_bound_as_decided(low_pods(), placed)

    # The high-priority gang: Kueue's sample Job, GANG pods of a whole node each. Its quota is only there
    # if Kueue preempts the low one, and its nodes only if our controller gives the low one's back.
    job = manifests.kueue_sample_job(upstream, gpus_per_pod=LAYOUT.gpus_per_node)
    job["spec"]["parallelism"] = job["spec"]["completions"] = GANG
    job["metadata"]["labels"] = {api.KUEUE_QUEUE_NAME: LOCAL_QUEUE, PRIORITY_LABEL: HIGH}
    high_job = k.create(kube.BATCH_JOBS, job, NAMESPACE)
    high_name = objects.name(high_job)

    def high_pods() -> list[dict[str, Any]]:
        return list(k.list(kube.PODS, NAMESPACE, label_selector=f"{JOB_NAME_LABEL}={high_name}")["items"])

    # Kueue preempts the low Workload: evicted, its reservation and admission gone, our check Pending again.
    wait_until(lambda: workloads.first(lambda w: objects.condition_true(w, "Preempted"), low_wl), TIMEOUT,
               lambda: f"Kueue preempting the low-priority Workload\n{logs()}")
    released = wait_until(lambda: claims.first(lambda c: (objects.condition(c, "Placed") or {}).get("reason")
                                               == "Released", low_claim),
                          TIMEOUT, lambda: f"claim {low_claim} released\n{logs()}")
    assert not released["status"].get("nodes") and not released["status"].get("members")
    assert not objects.condition_true(released, "Placed")
    event = wait_until(lambda: next((e for e in k.list(kube.EVENTS, NAMESPACE)["items"]
                                     if e["reason"] == "Released" and e["regarding"]["name"] == low_wl), None),
                       30, lambda: f"a Released Event on {low_wl}\n{logs()}")
    assert "Kueue no longer reserves quota" in event.get("note", ""), event
    # Kueue reset our check to Pending when it evicted; it stays so while the low one has no reservation.
    evicted = workloads.first(lambda w: objects.condition_true(w, "Evicted"), low_wl)
    assert evicted is not None and check_state(evicted) == "Pending", evicted
    assert_ready_only_when_reserved(workloads.versions(low_wl))

    # The preemptor: admitted through our check, placed (on nodes the low gang had: 5 + 5 > 8), its pods bound
    # where we decided. kwok completes them at once, so its decision is read from the claim's history.
    high = wait_until(lambda: (w := owned_workload(k, high_job["metadata"]["uid"]))
                      and objects.condition_true(w, "Admitted") and w,
                      TIMEOUT, lambda: f"the high-priority Workload admitted\n{logs()}")
    high_wl = objects.name(high)
    assert high["spec"]["priority"] == 1000
    assert workloads.first(lambda w: check_state(w) == "Ready" and reserved(w), high_wl) is not None
    # Kueue reserved its quota while the preempted job's pods still ran: our check waited Pending for them,
    # never Retry (which would have made Kueue give the reservation back and requeue the preemptor).
    states = [check_state(w) for w in workloads.versions(high_wl)]
    assert "Retry" not in states, states
    high_claim = wait_until(lambda: claims.first(decided, f"workload-{high_wl}"), 60,
                            lambda: f"claim workload-{high_wl} placed\n{logs()}")
    assert len(high_claim["status"]["nodes"]) == GANG
    assert set(high_claim["status"]["nodes"]) & set(placed["status"]["nodes"])
    wait_until(lambda: len(high_pods()) == GANG and bound(high_pods()), TIMEOUT,
               lambda: f"the high-priority gang's pods bound\n{logs()}")
    assert_bound_as_decided(high_pods(), high_claim)

    # The high Job finishes (kwok), Kueue reserves quota for the low one again: only then is it decided
    # again and its check set Ready; its pods run again.
    def admitted_again() -> dict[str, Any] | None:
        versions = workloads.versions(low_wl)
        preempted = next(i for i, w in enumerate(versions) if objects.condition_true(w, "Preempted"))
        unreserved = next((i for i in range(preempted, len(versions))
                           if not objects.condition_true(versions[i], "QuotaReserved")), len(versions))
        return next((w for w in versions[unreserved:] if objects.condition_true(w, "Admitted")), None)

    again = wait_until(admitted_again, TIMEOUT, lambda: f"the low-priority Workload admitted again\n{logs()}")
    assert check_state(again) == "Ready"
    # Set Ready on the first reservation and on the one after the preemption, never in between.
    assert assert_ready_only_when_reserved(workloads.versions(low_wl)) == 2
    wait_until(lambda: (c := k.get(kube.CLAIMS, NAMESPACE, low_claim)) and decided(c), 60,
               lambda: f"claim {low_claim} placed again\n{logs()}")
    wait_until(lambda: len(low_pods()) == GANG and bound(low_pods()) and running(low_pods()), TIMEOUT,
               lambda: f"the low-priority gang's pods running again\n{logs()}")
    assert_bound_as_decided(low_pods(), k.get(kube.CLAIMS, NAMESPACE, low_claim) or {})
