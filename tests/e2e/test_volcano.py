"""Real Volcano in the loop: its webhook manager, controller-manager and scheduler (v1.15.1, the chart's
default scheduler configuration), with our webhook and controller, on kwok GPU nodes in racks.

The upstream examples are those of the pinned Volcano, adapted as tests/e2e/manifests.py says (a profile
annotation, GPUs). Volcano's controller-manager makes the PodGroup and the pods of each Job; our
webhook annotates the PodGroup and gates the pods; our controller chooses the node set and the slot and
lifts the gate (or, when it decided the PodGroup before Volcano enqueued it, our webhook creates the pods
already placed); the Volcano scheduler binds every pod, and must bind each where our controller pinned it.
"""

from __future__ import annotations

import pathlib
import time
from typing import Any, Callable

import pytest
import yaml

from tests.controller.cluster import wait_until
from tests.e2e import manifests
from tests.e2e.checks import (assert_bound_as_decided, bound, created_gated, created_placed, decided, held_claims,
                              running)
from tests.e2e.history import History
from volcano_metronome import api, kube
from volcano_metronome.controller import objects
from volcano_metronome.devtools import volcano
from volcano_metronome.devtools.stack import Stack

pytestmark = pytest.mark.upstream_examples("volcano")  # reads examples/volcano (tests/e2e/manifests.py)

MODEL = {api.MODEL: "resnet50"}
# The examples whose Jobs request resources (mpi-example and tf-dist-mnist request none).
EXAMPLES = ("job.yaml", "job-plugin.yaml")
TIMEOUT = 120.0


def _logs(stack: Stack) -> Callable[[], str]:
    return lambda: "\n".join(stack.logs(name, 25) for name in
                             ("controller", "volcano-scheduler", "volcano-controller-manager", "webhook"))


def podgroup_of(k: kube.Kube, namespace: str, job: str) -> dict[str, Any] | None:
    """The PodGroup vc-controller-manager made for Volcano Job ``job`` (it owns it)."""
    for group in k.list(kube.PODGROUPS, namespace)["items"]:
        if any(ref.get("kind") == "Job" and ref.get("name") == job for ref in group["metadata"].get("ownerReferences") or []):
            return dict(group)
    return None


def pods_of(k: kube.Kube, namespace: str, job: str) -> list[dict[str, Any]]:
    """The pods of Volcano Job ``job``."""
    return list(k.list(kube.PODS, namespace, label_selector=f"{manifests.VOLCANO_JOB_NAME}={job}")["items"])


def claim_of(k: kube.Kube, namespace: str, group: dict[str, Any]) -> dict[str, Any] | None:
    """Our claim for a Volcano PodGroup."""
    return k.get(kube.CLAIMS, namespace, f"podgroup-{objects.name(group)}")


def run_to_completion_of_placement(stack: Stack, k: kube.Kube, namespace: str, job: dict[str, Any],
                                   pods: History) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create ``job``; wait until Volcano has bound all its pods where our claim says; (PodGroup, claim)."""
    logs = _logs(stack)
    name = job["metadata"]["name"]
    created = k.create(kube.VOLCANO_JOBS, job, namespace)
    # Ours: the profile resolved on the Job. Volcano's: every task's minAvailable defaulted by /jobs/mutate.
    assert api.PROFILE in objects.annotations_of(created), f"{name}: our webhook did not annotate the Job"
    assert all("minAvailable" in task for task in created["spec"]["tasks"]), f"{name}: Volcano's webhook did not run"
    group = wait_until(lambda: podgroup_of(k, namespace, name), TIMEOUT, lambda: f"the PodGroup of {name}\n{logs()}")
    annotations = objects.annotations_of(group)
    assert api.PROFILE in annotations and api.GANG_SIZE in annotations, f"{objects.name(group)}: {annotations}"
    size = sum(int(task["replicas"]) for task in job["spec"]["tasks"])
    wait_until(lambda: len(pods_of(k, namespace, name)) == size and bound(pods_of(k, namespace, name))
               and running(pods_of(k, namespace, name)), TIMEOUT,
               lambda: f"the {size} pods of {name} bound by Volcano and running\n{logs()}")
    claim = claim_of(k, namespace, group)
    assert claim is not None and decided(claim)
    members = pods_of(k, namespace, name)
    assert_bound_as_decided(members, claim)
    for pod in members:
        assert pod["spec"]["schedulerName"] == volcano.SCHEDULER_NAME
        first = pods.versions(objects.name(pod))[0]
        # Gated (the fallback), or placed at creation when our controller decided the PodGroup before Volcano
        # enqueued it and created the pods.
        assert created_gated(first) or created_placed(first, claim), f"{objects.name(pod)} created neither gated " \
                                                                     "nor placed"
    group = wait_until(lambda: (g := podgroup_of(k, namespace, name)) and (g.get("status") or {}).get("phase") == "Running" and g,
                       TIMEOUT, lambda: f"the PodGroup of {name} Running\n{logs()}")
    return group, claim


@pytest.mark.parametrize("example", EXAMPLES)
def test_upstream_example_runs_on_real_volcano_where_our_controller_placed_it(
        stack: Stack, k: kube.Kube, upstream: pathlib.Path, namespace: str, history: Callable[..., History],
        example: str) -> None:
    pods = history(kube.PODS, namespace)
    for job in manifests.volcano_jobs(upstream, example, namespace=namespace, gpus_per_pod=8, annotations=MODEL):
        run_to_completion_of_placement(stack, k, namespace, job, pods)
        k.delete(kube.VOLCANO_JOBS, namespace, job["metadata"]["name"])


def _job(upstream: pathlib.Path, namespace: str, name: str, pods: int, gpus: int, **extra: str) -> dict[str, Any]:
    """``job-plugin.yaml`` (one task) named ``name`` with ``pods`` pods of ``gpus`` GPUs."""
    (job,) = manifests.volcano_jobs(upstream, "job-plugin.yaml", namespace=namespace, gpus_per_pod=gpus,
                                    annotations=MODEL, name=name, **extra)
    job["spec"]["minAvailable"] = job["spec"]["tasks"][0]["replicas"] = pods
    return job


def _phase(k: kube.Kube, namespace: str, job: str) -> str | None:
    group = podgroup_of(k, namespace, job)
    return None if group is None else (group.get("status") or {}).get("phase")


def test_gang_waits_whole_then_binds_whole_and_a_deleted_job_releases_its_claim(
        stack: Stack, k: kube.Kube, upstream: pathlib.Path, namespace: str, history: Callable[..., History]) -> None:
    """Volcano holds a gang that does not fit whole in its enqueue action: its PodGroup stays Pending and
    vc-controller-manager creates none of its pods, so nothing of it can bind. Once a running Job is
    deleted mid-flight (its claim released), the gang is enqueued, placed by us and bound whole."""
    logs = _logs(stack)
    pods = history(kube.PODS, namespace)
    big_group, big_claim = run_to_completion_of_placement(
        stack, k, namespace, _job(upstream, namespace, "big", manifests.LAYOUT.nodes - 2, 8), pods)
    k.create(kube.VOLCANO_JOBS, _job(upstream, namespace, "waiting", 4, 8), namespace)  # 2 nodes free
    wait_until(lambda: _phase(k, namespace, "waiting") == "Pending", TIMEOUT, lambda: f"the PodGroup of waiting\n{logs()}")
    deadline = time.monotonic() + 15  # Volcano schedules every second: fifteen chances to start a part
    while time.monotonic() < deadline:
        assert not any(p["spec"].get("nodeName") for p in pods_of(k, namespace, "waiting")), "a part of the gang was bound"
        assert _phase(k, namespace, "waiting") == "Pending"
        time.sleep(0.5)

    k.delete(kube.VOLCANO_JOBS, namespace, "big")  # mid-flight: its pods run
    wait_until(lambda: f"{namespace}/{objects.name(big_claim)}" not in held_claims(k), TIMEOUT,
               lambda: f"the claim of the deleted Job released\n{logs()}")
    wait_until(lambda: len(pods_of(k, namespace, "waiting")) == 4 and bound(pods_of(k, namespace, "waiting"))
               and running(pods_of(k, namespace, "waiting")), TIMEOUT,
               lambda: f"the waiting gang bound whole once room appeared\n{logs()}")
    group = podgroup_of(k, namespace, "waiting")
    assert group is not None
    claim = claim_of(k, namespace, group)
    assert claim is not None and decided(claim)
    assert_bound_as_decided(pods_of(k, namespace, "waiting"), claim)
    assert all(created_gated(first := pods.versions(objects.name(p))[0]) or created_placed(first, claim)
               for p in pods_of(k, namespace, "waiting"))
    assert objects.name(big_group) not in {objects.name(g) for g in k.list(kube.PODGROUPS, namespace)["items"]}


def test_higher_priority_gang_is_placed_first_across_two_volcano_queues(
        stack: Stack, k: kube.Kube, upstream: pathlib.Path, namespace: str, history: Callable[..., History]) -> None:
    """Both gangs must be past Volcano's enqueue (their pods exist, gated) and wait for the same GPUs; our
    controller then orders them by the QueuePolicy governing their two Volcano queues.

    Sizes: 64 GPUs; Volcano's enqueue admits gangs up to 1.2 x capacity (its default overcommit factor).
    Blockers hold 7 nodes and half of the eighth (60 GPUs); the low and the high gang (2 pods of 4 GPUs
    each) are both enqueued (60 + 16 <= 76.8) and neither fits in the 4 free GPUs. Once the half-node
    blocker is deleted 8 GPUs are free on one node: room for one gang, which must be the high one."""
    logs = _logs(stack)
    pods = history(kube.PODS, namespace)
    suffix = namespace.rsplit("-", 1)[-1]
    queues = [f"research-{suffix}", f"research-low-{suffix}"]
    for queue in queues:
        k.create(kube.VOLCANO_QUEUES, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                                       "metadata": {"name": queue}, "spec": {"weight": 1}})
    policy: dict[str, Any] = {"apiVersion": f"{api.GROUP}/{api.VERSION}", "kind": "QueuePolicy",
                              "metadata": {"name": f"research-{suffix}"},
                              "spec": {"volcanoQueues": queues, "ordering": "StrictPriority"}}
    k.create(kube.QUEUE_POLICIES, policy)
    classes = {}
    for level, value in (("low", 10), ("high", 1000)):
        classes[level] = f"{suffix}-{level}"
        k.create(kube.PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                         "metadata": {"name": classes[level]}, "value": value})
    try:
        run_to_completion_of_placement(stack, k, namespace, _job(upstream, namespace, "blocker", manifests.LAYOUT.nodes - 1, 8), pods)
        run_to_completion_of_placement(stack, k, namespace, _job(upstream, namespace, "half", 1, 4), pods)
        for level, queue in (("low", queues[1]), ("high", queues[0])):
            k.create(kube.VOLCANO_JOBS, _job(upstream, namespace, level, 2, 4, queue=queue,
                                             priority_class=classes[level]), namespace)
        for level in ("low", "high"):
            wait_until(lambda: len(pods_of(k, namespace, level)) == 2, TIMEOUT,
                       lambda: f"the pods of {level} (enqueued by Volcano)\n{logs()}")
        time.sleep(3)  # a few controller cycles: neither fits
        assert all(objects.gated_by_us(p) for level in ("low", "high") for p in pods_of(k, namespace, level))
        k.delete(kube.VOLCANO_JOBS, namespace, "half")
        wait_until(lambda: bound(pods_of(k, namespace, "high")) and running(pods_of(k, namespace, "high")), TIMEOUT,
                   lambda: f"the high-priority gang bound first\n{logs()}")
        assert not any(p["spec"].get("nodeName") for p in pods_of(k, namespace, "low"))
        assert all(objects.gated_by_us(p) for p in pods_of(k, namespace, "low"))
    finally:
        for level in ("low", "high", "half", "blocker"):
            k.delete(kube.VOLCANO_JOBS, namespace, level)
        wait_until(lambda: not k.list(kube.PODS, namespace)["items"], TIMEOUT, "the pods of the test deleted")
        k.delete(kube.QUEUE_POLICIES, None, policy["metadata"]["name"])
        for name in classes.values():
            k.delete(kube.PRIORITY_CLASSES, None, name)
        for queue in queues:
            k.delete(kube.VOLCANO_QUEUES, None, queue)


def _scheduler_conf(stack: Stack) -> pathlib.Path:
    return stack.directory / "volcano-scheduler" / "conf" / "volcano-scheduler.conf"


def _reloaded(stack: Stack, before: int) -> bool:
    return stack.log_path("volcano-scheduler").read_text(errors="replace").count("Finished loading scheduler config") > before


def test_with_volcanos_predicate_error_cache_off_an_example_runs(
        stack: Stack, k: kube.Kube, upstream: pathlib.Path, namespace: str, history: Callable[..., History]) -> None:
    """The default configuration with one allocate argument changed, ``predicateErrorCacheEnable: false``:
    Volcano then predicates each pod on its own instead of reusing the failures of the first pod of its
    task role (whose node affinity pins it elsewhere). The scheduler reloads the file on change."""
    conf = _scheduler_conf(stack)
    default = conf.read_text()
    changed = yaml.safe_load(default)
    changed["configurations"] = [{"name": "allocate", "arguments": {"predicateErrorCacheEnable": False}}]
    log = stack.log_path("volcano-scheduler")
    loads = log.read_text(errors="replace").count("Finished loading scheduler config")
    conf.write_text(yaml.safe_dump(changed, sort_keys=False))
    try:
        wait_until(lambda: _reloaded(stack, loads), 30, "the Volcano scheduler reloading its configuration")
        pods = history(kube.PODS, namespace)
        (job,) = manifests.volcano_jobs(upstream, "job-plugin.yaml", namespace=namespace, gpus_per_pod=8, annotations=MODEL)
        run_to_completion_of_placement(stack, k, namespace, job, pods)
        k.delete(kube.VOLCANO_JOBS, namespace, job["metadata"]["name"])
    finally:
        loads = log.read_text(errors="replace").count("Finished loading scheduler config")
        conf.write_text(default)
        wait_until(lambda: _reloaded(stack, loads), 30, "the Volcano scheduler reloading its default configuration")


def test_a_job_decided_before_volcano_enqueues_it_has_its_pods_created_placed(
        stack: Stack, k: kube.Kube, upstream: pathlib.Path, namespace: str, history: Callable[..., History]) -> None:
    """Issue 14: our controller decides a Volcano Job's PodGroup while it has no pods (its queue's capability
    holds it Pending in Volcano's enqueue, so the order is certain here); once the queue lets it in,
    vc-controller-manager creates the pods, our webhook admits them placed and ungated, and Volcano binds
    them where the claim says: our controller never writes a pod."""
    logs = _logs(stack)
    pods = history(kube.PODS, namespace)
    queue = f"hold-{namespace.rsplit('-', 1)[-1]}"
    k.create(kube.VOLCANO_QUEUES, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                                   "metadata": {"name": queue},
                                   "spec": {"weight": 1, "capability": {manifests.GPU_RESOURCE: "4"}}})
    try:
        wait_until(lambda: ((k.get(kube.VOLCANO_QUEUES, None, queue) or {}).get("status") or {}).get("state") == "Open",
                   TIMEOUT, lambda: f"queue {queue} Open (Volcano's webhook refuses Jobs to other queues)\n{logs()}")
        k.create(kube.VOLCANO_JOBS, _job(upstream, namespace, "early", 2, 8, queue=queue), namespace)
        group = wait_until(lambda: podgroup_of(k, namespace, "early"), TIMEOUT, lambda: f"the PodGroup\n{logs()}")
        assert api.POD_CONSTRAINTS in objects.annotations_of(group)
        claim = wait_until(lambda: (c := claim_of(k, namespace, group)) is not None and decided(c) and c, TIMEOUT,
                           lambda: f"the PodGroup decided before its pods\n{logs()}")
        assert _phase(k, namespace, "early") in (None, "", "Pending") and not pods_of(k, namespace, "early")
        time.sleep(3)  # Volcano's enqueue (every second) keeps it out of the queue: still no pods
        assert _phase(k, namespace, "early") == "Pending" and not pods_of(k, namespace, "early")
        k.patch(kube.VOLCANO_QUEUES, None, queue, {"spec": {"capability": {manifests.GPU_RESOURCE: "1000"}}})
        wait_until(lambda: len(pods_of(k, namespace, "early")) == 2 and bound(pods_of(k, namespace, "early"))
                   and running(pods_of(k, namespace, "early")), TIMEOUT,
                   lambda: f"the pods of early created placed and bound\n{logs()}")
        members = pods_of(k, namespace, "early")
        assert_bound_as_decided(members, claim_of(k, namespace, group) or {})
        for pod in members:
            versions = pods.versions(objects.name(pod))
            assert created_placed(versions[0], claim), objects.name(pod)
            managers = {m.get("manager") for v in versions for m in v["metadata"].get("managedFields") or []
                        if m.get("operation") != "Create"}
            assert kube.FIELD_MANAGER not in managers, f"{objects.name(pod)} written by our controller: {managers}"
    finally:
        k.delete(kube.VOLCANO_JOBS, namespace, "early")
        wait_until(lambda: not k.list(kube.PODS, namespace)["items"], TIMEOUT, "the pods of the test deleted")
        k.delete(kube.VOLCANO_QUEUES, None, queue)
