"""Kueue AdmissionCheck handling and re-optimisation, against the in-memory API."""

from __future__ import annotations

from tests.controller import builders as b
from tests.controller.fake import FakeApi
from volcano_metronome import api, kube
from volcano_metronome.controller import objects
from volcano_metronome.controller.loop import Controller
from volcano_metronome.controller.settings import Settings
from volcano_metronome.shapes.slots import number_text

NS = "ml"
NOW = 1_700_000_000.0


def kueue_cluster(nodes: int = 4) -> FakeApi:
    f = FakeApi()
    for i in range(nodes):
        f.put(kube.NODES, b.node(f"n{i}", gpus=8, rack="r0"))
    f.put(kube.ADMISSION_CHECKS, b.admission_check("metronome"))
    f.put(kube.CLUSTER_QUEUES, b.cluster_queue("cq", "metronome"))
    return f


def run(ctl: Controller, cycles: int = 5) -> None:
    for _ in range(cycles):
        plan, _ = ctl.cycle()
        if not plan.writes:
            return


def our_entry(f: FakeApi, name: str) -> dict:
    wl = f.obj(kube.WORKLOADS, NS, name)
    return next(e for e in wl["status"]["admissionChecks"] if e["name"] == "metronome")


def evict(f: FakeApi, name: str) -> dict:
    """Kueue's first step of an eviction (what Kueue v0.18 writes): Evicted=True and our check reset to Pending,
    the reservation kept until the job has stopped; returns the condition."""
    evicted = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "preempted",
               "lastTransitionTime": "2025-01-01T00:00:01Z"}
    current = f.obj(kube.WORKLOADS, NS, name)
    current["status"]["conditions"] = [*current["status"]["conditions"], evicted]
    current["status"]["admissionChecks"] = [{"name": "metronome", "state": "Pending", "message": "",
                                             "lastTransitionTime": "2025-01-01T00:00:01Z"}]
    f.put(kube.WORKLOADS, current)
    return evicted


def test_workload_is_held_until_quota_then_released_ready_with_pod_set_updates() -> None:
    f = kueue_cluster()
    wl = b.workload(NS, "job-a", 2, priority=5)
    f.put(kube.WORKLOADS, wl)
    ctl = f.controller(NOW)
    run(ctl)
    assert "admissionChecks" not in (f.obj(kube.WORKLOADS, NS, "job-a").get("status") or {})
    assert objects.condition_true(f.obj(kube.ADMISSION_CHECKS, None, "metronome"), "Active")
    # Kueue lists our check as Pending as soon as it knows the ClusterQueue, before any reservation:
    # still held, no claim (a Workload Kueue has not reserved quota for must hold no nodes).
    current = f.obj(kube.WORKLOADS, NS, "job-a")
    current["status"] = {"admissionChecks": [{"name": "metronome", "state": "Pending", "message": "",
                                              "lastTransitionTime": "2025-01-01T00:00:00Z"}]}
    f.put(kube.WORKLOADS, current)
    run(ctl)
    assert our_entry(f, "job-a")["state"] == "Pending"
    assert f.get(kube.CLAIMS, NS, "workload-job-a") is None

    current = f.obj(kube.WORKLOADS, NS, "job-a")
    current["status"] = {**b.quota_reserved_status("cq", 2), "admissionChecks": current["status"]["admissionChecks"]}
    f.put(kube.WORKLOADS, current)
    run(ctl)
    entry = our_entry(f, "job-a")
    assert entry["state"] == "Ready"
    claim = f.obj(kube.CLAIMS, NS, "workload-job-a")
    assert claim["spec"]["gangRef"]["kind"] == "Workload" and claim["spec"]["priority"] == 5
    update = entry["podSetUpdates"][0]
    assert update["name"] == "main"
    # Alone on its links, the gang runs free: Kueue passes only the period into the pod template.
    assert claim["status"]["locked"] is False
    # ... and the claim's name, with which our webhook admits the pods placed (admission.placed).
    assert update["annotations"] == {api.PERIOD_MS: number_text(claim["status"]["periodMs"]),
                                     api.PLACEMENT_CLAIM: "workload-job-a"}


def test_a_workload_kueue_evicts_gives_its_nodes_back_and_is_decided_again_on_its_next_reservation() -> None:
    f = kueue_cluster(nodes=2)
    wl = b.workload(NS, "job-a", 2)
    wl["status"] = b.quota_reserved_status("cq", 2)
    f.put(kube.WORKLOADS, wl)
    ctl = f.controller(NOW)
    run(ctl)
    assert our_entry(f, "job-a")["state"] == "Ready"
    assert f.obj(kube.CLAIMS, NS, "workload-job-a")["status"]["nodes"] == ["n0", "n1"]
    # Kueue preempts it in two steps (what Kueue v0.18 writes): Evicted=True and our check reset to Pending while
    # the reservation stays until the job has stopped; then QuotaReserved=False. The claim goes at the first.
    evicted = evict(f, "job-a")
    run(ctl)
    assert f.obj(kube.CLAIMS, NS, "workload-job-a")["status"]["nodes"] == []
    assert our_entry(f, "job-a")["state"] == "Pending"  # not set Ready again while Kueue stops the job
    current = f.obj(kube.WORKLOADS, NS, "job-a")
    current["status"] = {
        "conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "evicted",
                        "lastTransitionTime": "2025-01-01T00:00:02Z"}, evicted],
        "admissionChecks": current["status"]["admissionChecks"]}
    f.put(kube.WORKLOADS, current)
    run(ctl)
    claim = f.obj(kube.CLAIMS, NS, "workload-job-a")
    placed = next(c for c in claim["status"]["conditions"] if c["type"] == "Placed")
    assert claim["status"]["nodes"] == [] and placed["status"] == "False" and placed["reason"] == "Released"
    assert "Kueue no longer reserves quota" in placed["message"]
    assert our_entry(f, "job-a")["state"] == "Pending"  # not set Ready again without a reservation
    assert any(e["reason"] == "Released" and "evicted" in e["note"] for e in f.events)
    # Both nodes are free again: a Workload Kueue admits meanwhile gets them.
    other = b.workload(NS, "job-b", 2)
    other["status"] = b.quota_reserved_status("cq", 2)
    f.put(kube.WORKLOADS, other)
    run(ctl)
    assert our_entry(f, "job-b")["state"] == "Ready"
    assert f.obj(kube.CLAIMS, NS, "workload-job-b")["status"]["nodes"] == ["n0", "n1"]
    # The evicted Workload's next reservation: decided again, and it waits (Retry) while job-b holds the nodes.
    current = f.obj(kube.WORKLOADS, NS, "job-a")
    current["status"] = {**b.quota_reserved_status("cq", 2), "admissionChecks": current["status"]["admissionChecks"]}
    f.put(kube.WORKLOADS, current)
    run(ctl)
    assert our_entry(f, "job-a")["state"] == "Retry"


def test_a_preemptor_waits_pending_not_retry_while_the_evicted_jobs_pods_leave() -> None:
    # Kueue reserves quota for a preemptor as soon as it evicts the preempted Workload, while that job's pods
    # still run until Kueue has stopped it. A Retry then would make Kueue give the reservation back and requeue
    # the preemptor behind its own preemption; the check stays Pending, saying why, until the pods are gone.
    f = kueue_cluster(nodes=2)
    low = b.workload(NS, "low-1", 2)
    low["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "low", "uid": "u1"}]
    low["status"] = b.quota_reserved_status("cq", 2)
    f.put(kube.WORKLOADS, low)
    ctl = f.controller(NOW)
    run(ctl)
    for p in b.gang_pods(NS, "low", 2, kind="Job"):
        f.put(kube.PODS, p)
    run(ctl)
    for p in f.all(kube.PODS):  # the scheduler binds them where they are pinned
        p["spec"]["nodeName"] = objects.pinned_node(p)
        f.put(kube.PODS, p)
    run(ctl)
    evict(f, "low-1")
    high = b.workload(NS, "high-1", 2, priority=1000)
    high["status"] = {**b.quota_reserved_status("cq", 2), "admissionChecks": [
        {"name": "metronome", "state": "Pending", "message": "", "lastTransitionTime": "2025-01-01T00:00:01Z"}]}
    f.put(kube.WORKLOADS, high)
    run(ctl)
    entry = our_entry(f, "high-1")
    assert entry["state"] == "Pending", entry
    assert "waiting for the 16 GPUs that pods of Workloads Kueue evicted still hold" in entry["message"]
    assert f.obj(kube.CLAIMS, NS, "workload-low-1")["status"]["nodes"] == []
    # Kueue has stopped the job: its pods are gone, and the preemptor is decided on the nodes they left.
    for p in list(f.all(kube.PODS)):
        f.delete(kube.PODS, NS, objects.name(p))
    run(ctl)
    assert our_entry(f, "high-1")["state"] == "Ready"
    assert f.obj(kube.CLAIMS, NS, "workload-high-1")["status"]["nodes"] == ["n0", "n1"]


def test_pods_of_an_admitted_job_follow_the_workload_claim() -> None:
    f = kueue_cluster()
    wl = b.workload(NS, "job-b-1234", 2)
    wl["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "job-b", "uid": "u1"}]
    wl["status"] = b.quota_reserved_status("cq", 2)
    f.put(kube.WORKLOADS, wl)
    ctl = f.controller(NOW)
    run(ctl)
    claim = f.obj(kube.CLAIMS, NS, "workload-job-b-1234")
    # The job its pods name, for the node agent to match their runtime reports (agent.reports.gangs_of).
    assert claim["metadata"]["annotations"] == {api.GANG_KIND: "Job", api.GANG_NAME: "job-b"}
    # Kueue admits, the Job's pods are created (gated by the webhook, gang-kind Job).
    for p in b.gang_pods(NS, "job-b", 2, kind="Job"):
        f.put(kube.PODS, p)
    run(ctl)
    for p in f.all(kube.PODS):
        assert not objects.gates(p)
        assert objects.pinned_node(p) in claim["status"]["nodes"]
    assert f.obj(kube.CLAIMS, NS, "workload-job-b-1234")["status"] == claim["status"]


def test_workload_that_does_not_fit_gets_retry_and_one_that_never_fits_rejected() -> None:
    f = kueue_cluster(nodes=2)
    for name, members in (("big", 2), ("huge", 3)):
        wl = b.workload(NS, name, members)
        wl["status"] = b.quota_reserved_status("cq", members)
        f.put(kube.WORKLOADS, wl)
    blocker = b.pod("other", "x", "x", gpus=8, gates=(), with_profile=False)
    blocker["spec"]["nodeName"] = "n0"
    blocker["status"] = {"phase": "Running"}
    f.put(kube.PODS, blocker)
    ctl = f.controller(NOW)
    run(ctl)
    assert our_entry(f, "big")["state"] == "Retry"  # both nodes, one busy: not now
    assert our_entry(f, "huge")["state"] == "Rejected"  # more than the whole cluster: never
    assert "insufficient GPUs" in our_entry(f, "big")["message"]


def placed_claim(name: str, nodes: list[str], members: list[int], offset: float, priority: int) -> dict:
    return {"apiVersion": api.API_VERSION, "kind": "STBandwidthClaim",
            "metadata": {"name": f"podgroup-{name}", "namespace": NS, "labels": {api.MANAGED_LABEL: "true"}},
            "spec": {"profile": {"periodMs": 200, "windows": [{"startMs": 176, "lenMs": 24, "gbps": 80}],
                                 "jitterMs": 0},
                     "gangRef": {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "name": name},
                     "priority": priority},
            "status": {"nodes": nodes, "members": members, "offsetMs": offset, "periodMs": 200,
                       "epoch": 1_699_999_992_000 - (1_699_999_992_000 % 25200),
                       "conditions": [{"type": "Placed", "status": "True", "reason": "Placed", "message": "x",
                                       "lastTransitionTime": "2025-01-01T00:00:00Z"}]}}


def test_reoptimisation_moves_colliding_gangs_with_a_future_epoch() -> None:
    f = FakeApi()
    for i in range(2):
        f.put(kube.NODES, b.node(f"n{i}", gpus=8, rack="r0"))
    f.put(kube.QUEUE_POLICIES, b.queue_policy("default", reoptimization={
        "enabled": True, "intervalSeconds": 60, "maxMovesPerCycle": 4}))
    for name, prio in (("a", 100), ("c", 1)):
        f.put(kube.PODGROUPS, b.podgroup(NS, name, 2, gpus=4))
        f.put(kube.CLAIMS, placed_claim(name, ["n0", "n1"], [1, 1], 0.0, prio))
        for i, p in enumerate(b.gang_pods(NS, name, 2, gpus=4, gates=(), priority=prio)):
            p["spec"]["nodeName"] = f"n{i}"
            p["status"] = {"phase": "Running"}
            f.put(kube.PODS, p)
    mono = [0.0]
    ctl = f.controller(NOW, monotonic=lambda: mono[0])
    plan, _ = ctl.cycle()
    assert not plan.moves  # the first interval has not passed yet
    mono[0] = 61.0
    plan, _ = ctl.cycle()
    assert plan.moves
    claims = {c["metadata"]["name"]: c for c in f.all(kube.CLAIMS)}
    moved = [c for c in claims.values() if objects.condition_true(c, "Reconfigured")]
    assert moved
    for c in moved:
        assert c["status"]["epoch"] >= NOW * 1000 + Settings().reconfigure_lead_ms
        assert c["status"]["epoch"] % 25200 == 0
    offsets = sorted(c["status"]["offsetMs"] for c in claims.values())
    assert offsets[0] != offsets[1]
    run(ctl)  # pods follow their claims' new offsets and epochs
    for p in f.all(kube.PODS):
        claim = claims[f"podgroup-{objects.annotations_of(p)[api.GANG_NAME]}"]
        assert objects.annotations_of(p)[api.OFFSET_MS] == number_text(claim["status"]["offsetMs"])
        assert objects.annotations_of(p)[api.EPOCH] == str(claim["status"]["epoch"])
    assert any(e["reason"] == "Reconfigured" for e in f.events)
