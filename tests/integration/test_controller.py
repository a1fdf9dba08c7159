"""The controller against a real kube-apiserver + etcd, run as a subprocess like in production.

There is no kube-scheduler here: pods stay unbound, and the controller's job ends at ungating them
(with node affinity, annotations and a claim). Each test has its own nodes (selected by a label the
controller is configured with), namespace and Lease, so tests do not see each other's objects.
"""

from __future__ import annotations

import pathlib
import threading
import time
from typing import Iterator

import pytest

from tests.agent.process import free_port, scrape, start_agent, start_paced_sender
from tests.agent.process import stop as stop_processes
from tests.controller import builders as b
from tests.controller.cluster import Cluster, ControllerProcess, claim_timing, start_controller, timing, wait_until
from volcano_metronome import api, kube
from volcano_metronome.controller import objects
from volcano_metronome.devtools.controlplane import ControlPlane
from volcano_metronome.shapes.slots import number_text
from volcano_metronome.shapes.times import parse_time

# Short enough that a standby takes over in seconds, long enough to survive a loaded CI machine.
FAST_LEASE = {"leaseDurationSeconds": 6, "renewDeadlineSeconds": 5, "retryPeriodSeconds": 1}


def test_gated_pods_get_affinity_annotations_and_are_ungated(cluster: Cluster, tmp_path: pathlib.Path,
                                                             controllers: list[ControllerProcess]) -> None:
    cluster.nodes(8)
    ns = cluster.namespace()
    cluster.gang(ns, "a", 4)
    cluster.gang(ns, "b", 2)
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    wait_until(lambda: cluster.ungated(ns), 60, lambda: f"ungated pods\n{ctl.logs()}")
    claims = cluster.check_consistent(ns)
    assert set(claims) == {"podgroup-a", "podgroup-b"}
    for claim in claims.values():
        assert objects.condition_true(claim, "Placed") and claim["status"]["periodMs"] == 200
    for p in cluster.pods(ns):
        assert objects.gates(p) == () and objects.pinned_node(p) is not None
    # Events go out after the pod writes (writer order): waited for, not read at once.
    events = wait_until(lambda: [e for e in cluster.k.list(kube.EVENTS, ns)["items"] if e["reason"] == "Placed"],
                        10, "the Placed events")
    assert {e["reason"] for e in events} >= {"Placed"}
    assert wait_until(lambda: ctl.metric("metronome_controller_placements_total"), 10, "metrics") == 2


def test_priorities_are_respected(cluster: Cluster, tmp_path: pathlib.Path,
                                  controllers: list[ControllerProcess]) -> None:
    cluster.nodes(8)
    ns = cluster.namespace()
    low, high = cluster.priority_class(10), cluster.priority_class(1000)
    # Each gang needs 6 of the 8 nodes: only one fits; the later, higher-priority one must win.
    cluster.gang(ns, "low", 6, priority_class=low)
    cluster.gang(ns, "high", 6, priority_class=high)
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    wait_until(lambda: cluster.ungated(ns, ["high"]), 60, lambda: f"the high-priority gang\n{ctl.logs()}")
    claims = wait_until(lambda: (c := cluster.claims(ns)).get("podgroup-low", {}).get("status", {}).get(
        "conditions") and c, 30, "the low-priority gang's NoFit")
    assert objects.condition(claims["podgroup-low"], "NoFit")["reason"] == "InsufficientGPUs"
    assert all(objects.gated_by_us(p) for p in cluster.pods(ns)
               if objects.annotations_of(p)[api.GANG_NAME] == "low")
    # When the high-priority gang completes, the low one gets its turn.
    # (Volcano's PodGroup CRD has no status subresource: status is part of the object.)
    cluster.k.patch(kube.PODGROUPS, ns, "high", {"status": {"phase": "Completed"}})
    wait_until(lambda: cluster.ungated(ns, ["low"]), 60, lambda: f"the low-priority gang after release\n{ctl.logs()}")
    released = cluster.claims(ns)["podgroup-high"]
    assert objects.condition(released, "Placed")["reason"] == "Released"
    cluster.check_consistent(ns)


@pytest.mark.parametrize("kill_after", [1, 3, 9])
def test_killed_between_writes_and_restarted_converges_without_double_placement(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess], kill_after: int) -> None:
    cluster.nodes(8)
    ns = cluster.namespace()
    for g in ("a", "b", "c"):
        cluster.gang(ns, g, 2)
    first = start_controller(cluster, tmp_path, controllers, ns, extra_settings={"leaderElection": {
        "leaseName": "metronome", **FAST_LEASE}}, args=["--exit-after-writes", str(kill_after)])
    assert first.wait(60) == -9, first.logs()  # it SIGKILLed itself right after write number kill_after
    recorded = {name: c.get("status", {}) for name, c in cluster.claims(ns).items()}
    second = start_controller(cluster, tmp_path, controllers, ns, extra_settings={"leaderElection": {
        "leaseName": "metronome", **FAST_LEASE}})
    wait_until(lambda: cluster.ungated(ns), 60, lambda: f"convergence after the restart\n{second.logs()}")
    claims = cluster.check_consistent(ns)
    assert len(claims) == 3
    for name, status in recorded.items():
        if status.get("nodes"):  # a decision recorded before the kill is the one that stands
            for key in ("nodes", "members", "offsetMs", "epoch", "decidedAt"):
                assert claims[name]["status"][key] == status[key], (name, key)


def test_sigkill_at_a_random_moment_under_load_converges(cluster: Cluster, tmp_path: pathlib.Path,
                                                         controllers: list[ControllerProcess]) -> None:
    cluster.nodes(24)
    ns = cluster.namespace()
    for i in range(12):
        cluster.gang(ns, f"g{i}", 2)
    first = start_controller(cluster, tmp_path, controllers, ns, extra_settings={"leaderElection": {
        "leaseName": "metronome", **FAST_LEASE}})
    wait_until(lambda: any(not objects.gated_by_us(p) for p in cluster.pods(ns)), 60, "the first ungated pod",
               interval=0.01)
    first.kill()
    recorded = {name: c.get("status", {}) for name, c in cluster.claims(ns).items()}
    second = start_controller(cluster, tmp_path, controllers, ns, extra_settings={"leaderElection": {
        "leaseName": "metronome", **FAST_LEASE}})
    wait_until(lambda: cluster.ungated(ns), 60, lambda: f"convergence\n{second.logs()}")
    claims = cluster.check_consistent(ns)
    for name, status in recorded.items():
        if status.get("nodes"):
            assert claims[name]["status"]["decidedAt"] == status["decidedAt"], name


def test_api_server_restart_under_load(control_plane: ControlPlane, cluster: Cluster, tmp_path: pathlib.Path,
                                       controllers: list[ControllerProcess]) -> None:
    cluster.nodes(16)
    ns = cluster.namespace()
    # A lease that outlasts the API server's restart, so that the same process must ride it out: its
    # watches re-establish and its failed writes are planned again (with the default 10 s renew
    # deadline it would exit instead, and its Deployment would restart it).
    ctl = start_controller(cluster, tmp_path, controllers, ns, extra_settings={"leaderElection": {
        "leaseName": "metronome", "leaseDurationSeconds": 180, "renewDeadlineSeconds": 170}})
    wait_until(lambda: ctl.metric("metronome_controller_leader") == 1, 30, lambda: f"leadership\n{ctl.logs()}")
    errors: list[BaseException] = []

    def create() -> None:
        creator = Cluster(cluster.kubeconfig, tag=cluster.tag)
        try:
            for i in range(16):
                creator.gang(ns, f"g{i}", 2, gpus=4, patient=True)  # 32 pods, 2 per node
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            creator.close()

    thread = threading.Thread(target=create)
    thread.start()
    wait_until(lambda: cluster.claims(ns), 30, "a first claim")  # the controller is busy writing
    control_plane.restart_apiserver()
    thread.join(180)
    assert not errors, errors
    wait_until(lambda: len(cluster.pods(ns)) >= 32 and cluster.ungated(ns), 90,
               lambda: f"all pods ungated after the restart\n{ctl.logs()}")
    cluster.check_consistent(ns)
    assert ctl.alive(), ctl.logs()
    restarts = wait_until(lambda: ctl.metric("metronome_controller_watch_restarts_total"), 10, "restart metric")
    assert restarts >= 1


def test_two_replicas_exactly_one_acts_and_the_other_takes_over(cluster: Cluster, tmp_path: pathlib.Path,
                                                                controllers: list[ControllerProcess]) -> None:
    cluster.nodes(8)
    ns = cluster.namespace()
    settings = {"leaderElection": {"leaseName": "metronome", **FAST_LEASE}}
    one = start_controller(cluster, tmp_path, controllers, ns, identity="replica-one", extra_settings=settings)
    two = start_controller(cluster, tmp_path, controllers, ns, identity="replica-two", extra_settings=settings)
    holder = wait_until(lambda: (cluster.k.get(kube.LEASES, ns, "metronome") or {}).get("spec", {}).get(
        "holderIdentity"), 30, "a lease holder")
    leader, standby = (one, two) if holder == one.identity else (two, one)
    wait_until(lambda: leader.metric("metronome_controller_leader") == 1, 20, "the leader's metric")
    wait_until(lambda: standby.metric("metronome_controller_leader") is not None, 20, "the standby's metrics")
    assert standby.metric("metronome_controller_leader") == 0
    cluster.gang(ns, "a", 2)
    wait_until(lambda: cluster.ungated(ns, ["a"]), 60, lambda: f"gang a\n{leader.logs()}")
    events = wait_until(lambda: cluster.k.list(kube.EVENTS, ns)["items"], 10, "the leader's events")
    assert {e.get("reportingInstance") for e in events} == {leader.identity}
    assert standby.metric("metronome_controller_placements_total") == 0
    leader.kill()
    cluster.gang(ns, "b", 2)
    wait_until(lambda: cluster.ungated(ns, ["b"]), 60, lambda: f"gang b by the standby\n{standby.logs()}")
    lease = cluster.k.get(kube.LEASES, ns, "metronome")
    assert lease is not None and lease["spec"]["holderIdentity"] == standby.identity
    cluster.check_consistent(ns)


def test_losing_the_lease_exits_the_process(cluster: Cluster, tmp_path: pathlib.Path,
                                            controllers: list[ControllerProcess]) -> None:
    cluster.nodes(1)
    ns = cluster.namespace()
    ctl = start_controller(cluster, tmp_path, controllers, ns, extra_settings={"leaderElection": {
        "leaseName": "metronome", **FAST_LEASE}})
    wait_until(lambda: ctl.metric("metronome_controller_leader") == 1, 30, lambda: f"leadership\n{ctl.logs()}")
    lease = cluster.k.get(kube.LEASES, ns, "metronome")
    assert lease is not None
    lease["spec"]["holderIdentity"] = "usurper"  # someone else holds it now: renewals must fail
    lease["spec"]["renewTime"] = kube.now_micro()
    cluster.k.replace(kube.LEASES, lease)

    def keep_usurping() -> None:
        for _ in range(40):
            current = cluster.k.get(kube.LEASES, ns, "metronome")
            if current is not None:
                current["spec"]["holderIdentity"] = "usurper"
                current["spec"]["renewTime"] = kube.now_micro()
                try:
                    cluster.k.replace(kube.LEASES, current)
                except kube.Conflict:
                    pass
            if not ctl.alive():
                return
            time.sleep(0.5)

    thread = threading.Thread(target=keep_usurping)
    thread.start()
    code = ctl.wait(30)
    thread.join()
    assert code == 1, ctl.logs()
    assert "lease lost" in ctl.logs()


def test_kueue_workload_is_held_by_our_admission_check_and_released(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess]) -> None:
    cluster.nodes(4)
    ns = cluster.namespace()
    check, cq = f"metronome-{cluster.tag}", f"cq-{cluster.tag}"
    cluster.k.create(kube.ADMISSION_CHECKS, b.admission_check(check))
    cluster.k.create(kube.CLUSTER_QUEUES, b.cluster_queue(cq, check))
    cluster.k.create(kube.WORKLOADS, b.workload(ns, "wl", 2, priority=7), ns)
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    wait_until(lambda: objects.condition_true(cluster.k.get(kube.ADMISSION_CHECKS, None, check) or {}, "Active"),
               30, lambda: f"our AdmissionCheck Active\n{ctl.logs()}")
    time.sleep(1.5)  # no quota reserved yet: the Workload is held, untouched
    wl = cluster.k.get(kube.WORKLOADS, ns, "wl")
    assert wl is not None and not (wl.get("status") or {}).get("admissionChecks")
    assert "workload-wl" not in cluster.claims(ns)
    # What Kueue's workload controller does as soon as it knows the ClusterQueue, before any reservation:
    # lists our check as Pending. Still held: no quota, no claim.
    pending = {"name": check, "state": "Pending", "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}
    cluster.k.patch(kube.WORKLOADS, ns, "wl", {"status": {"admissionChecks": [pending]}}, subresource="status")
    time.sleep(1.5)
    wl = cluster.k.get(kube.WORKLOADS, ns, "wl")
    assert wl is not None and wl["status"]["admissionChecks"][0]["state"] == "Pending"
    assert "workload-wl" not in cluster.claims(ns)
    # What Kueue's scheduler does when it reserves quota:
    cluster.k.patch(kube.WORKLOADS, ns, "wl", {"status": b.quota_reserved_status(cq, 2)}, subresource="status")

    def ready() -> dict | None:
        current = cluster.k.get(kube.WORKLOADS, ns, "wl") or {}
        entries = (current.get("status") or {}).get("admissionChecks") or []
        return next((e for e in entries if e["name"] == check and e["state"] == "Ready"), None)

    entry = wait_until(ready, 30, lambda: f"the check Ready\n{ctl.logs()}")
    claim = cluster.claims(ns)["workload-wl"]
    assert claim["spec"]["priority"] == 7 and objects.condition_true(claim, "Placed")
    # Alone on its links, the gang is not locked: Kueue gets the period for the pods, no offset.
    assert claim["status"]["locked"] is False
    assert entry["podSetUpdates"][0]["annotations"] == {**claim_timing(claim), api.PLACEMENT_CLAIM: "workload-wl"}
    assert claim_timing(claim) == {api.PERIOD_MS: number_text(claim["status"]["periodMs"])}

    # What Kueue writes when it evicts the Workload (preemption): no reservation, our check Pending again.
    # The claim gives its nodes back; the check is not set Ready again until Kueue reserves quota again.
    evicted = {"conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "evicted",
         "lastTransitionTime": "2025-01-01T00:00:01Z"},
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "preempted",
         "lastTransitionTime": "2025-01-01T00:00:01Z"}],
        "admission": None, "admissionChecks": [pending]}
    cluster.k.patch(kube.WORKLOADS, ns, "wl", {"status": evicted}, subresource="status")
    released = wait_until(lambda: (c := cluster.claims(ns)["workload-wl"]) and not c["status"].get("nodes") and c,
                          30, lambda: f"the claim released\n{ctl.logs()}")
    assert (objects.condition(released, "Placed") or {}).get("reason") == "Released"
    time.sleep(1.5)
    wl = cluster.k.get(kube.WORKLOADS, ns, "wl")
    assert wl is not None and wl["status"]["admissionChecks"][0]["state"] == "Pending"
    cluster.k.patch(kube.WORKLOADS, ns, "wl", {"status": b.quota_reserved_status(cq, 2)}, subresource="status")
    wait_until(ready, 30, lambda: f"the check Ready again on the next reservation\n{ctl.logs()}")
    assert objects.condition_true(cluster.claims(ns)["workload-wl"], "Placed")


def test_a_kueue_workload_is_placed_on_its_resource_flavors_nodes(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess]) -> None:
    """The flavor Kueue assigned (a real ResourceFlavor, read by the controller's informer) restricts the
    nodes: its nodeLabels select two of four nodes."""
    nodes = cluster.nodes(4)
    flavor = f"h100-{cluster.tag}"
    for n in nodes[2:]:
        cluster.k.patch(kube.NODES, None, n, {"metadata": {"labels": {"gpu-type": flavor}}})
    cluster.k.create(kube.RESOURCE_FLAVORS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                             "metadata": {"name": flavor}, "spec": {"nodeLabels": {"gpu-type": flavor}}})
    ns = cluster.namespace()
    check, cq = f"metronome-{cluster.tag}", f"cq-{cluster.tag}"
    cluster.k.create(kube.ADMISSION_CHECKS, b.admission_check(check))
    cluster.k.create(kube.CLUSTER_QUEUES, b.cluster_queue(cq, check))
    cluster.k.create(kube.WORKLOADS, b.workload(ns, "wl", 2), ns)
    cluster.k.patch(kube.WORKLOADS, ns, "wl", {"status": b.quota_reserved_status(cq, 2, flavor=flavor)},
                    subresource="status")
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    def placed() -> dict | None:
        claim = cluster.claims(ns).get("workload-wl")
        return claim if claim is not None and objects.condition_true(claim, "Placed") else None

    claim = wait_until(placed, 30, lambda: f"a placement\n{ctl.logs()}")
    assert sorted(claim["status"]["nodes"]) == sorted(nodes[2:])


# ----------------------------------------------------------------------------- lock on demand
# Three nodes of 8 GPUs, gangs of 3 members of 4 GPUs: a gang takes two nodes (2 + 1 members) and
# loads their NICs; a second gang can only take the 12 GPUs left, on the node the first half fills
# and the free node, so the two share a NIC. Bursts of 80 Gbps for 24 ms of 200 ms on 100 Gbps NICs.
LOCK_MEMBERS, LOCK_GPUS, WINDOW_MS, PERIOD_MS = 3, 4, 24.0, 200.0


@pytest.fixture
def lock_queue(cluster: Cluster) -> Iterator[str]:
    """A Volcano queue governed by a QueuePolicy of its own that re-optimises every 10 s (the minimum)."""
    queue, name = f"q-{cluster.tag}", f"lock-{cluster.tag}"
    cluster.k.create(kube.QUEUE_POLICIES, b.queue_policy(name, volcanoQueues=[queue], reoptimization={
        "enabled": True, "intervalSeconds": 10}))
    yield queue
    try:
        cluster.k.delete(kube.QUEUE_POLICIES, None, name)
    except kube.KubeError:
        pass


def lock_gang(cluster: Cluster, ns: str, name: str, queue: str, profile: dict | None = None,
              priority_class: str | None = None) -> None:
    cluster.k.create(kube.PODGROUPS, b.podgroup(ns, name, LOCK_MEMBERS, queue=queue, gpus=LOCK_GPUS,
                                                profile=profile), ns)
    for p in b.gang_pods(ns, name, LOCK_MEMBERS, gpus=LOCK_GPUS, profile=profile, priority_class=priority_class):
        cluster.k.create(kube.PODS, p, ns)


def gang_pods(cluster: Cluster, ns: str, gang: str) -> list[dict]:
    return [p for p in cluster.pods(ns) if objects.annotations_of(p).get(api.GANG_NAME) == gang]


def claim_status(cluster: Cluster, ns: str, gang: str) -> dict:
    return (cluster.claims(ns).get(f"podgroup-{gang}") or {}).get("status") or {}


def follows_claim(cluster: Cluster, ns: str, gang: str, locked: bool) -> bool:
    """The claim records a placement with ``locked``, and every pod of the gang is ungated with its timing."""
    claim = cluster.claims(ns).get(f"podgroup-{gang}")
    if claim is None or not (claim.get("status") or {}).get("nodes") or claim["status"].get("locked") is not locked:
        return False
    pods = gang_pods(cluster, ns, gang)
    return bool(pods) and all(not objects.gated_by_us(p) and timing(p) == claim_timing(claim) for p in pods)


def assert_interleaved(a: dict, c: dict, period_ms: float = PERIOD_MS) -> None:
    assert set(a["nodes"]) & set(c["nodes"]), "the fabric arithmetic is wrong: the gangs share no node"
    gap = ((c["epoch"] + c["offsetMs"]) - (a["epoch"] + a["offsetMs"])) % period_ms
    assert WINDOW_MS <= gap <= period_ms - WINDOW_MS, (a, c)


def locked_beside(cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess], queue: str,
                  first: dict | None, second: dict | None, grid_ms: float) -> tuple[str, dict, dict]:
    """Gang a (``first``; None: ``builders.PROFILE``) placed alone, free on its grid period ``grid_ms``, then gang b
    (``second``), until b is placed and a locked: the namespace and both claims' status."""
    cluster.nodes(3)
    ns = cluster.namespace()
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    lock_gang(cluster, ns, "a", queue, first)
    wait_until(lambda: follows_claim(cluster, ns, "a", locked=False), 60, lambda: f"gang a placed free\n{ctl.logs()}")
    assert claim_status(cluster, ns, "a")["periodMs"] == grid_ms  # alone: free, on the grid
    lock_gang(cluster, ns, "b", queue, second)
    wait_until(lambda: follows_claim(cluster, ns, "b", locked=True) and follows_claim(cluster, ns, "a", locked=True),
               60, lambda: f"gang b placed and gang a locked\n{ctl.logs()}")
    return ns, claim_status(cluster, ns, "a"), claim_status(cluster, ns, "b")


def period_notes(cluster: Cluster, ns: str, gang: str) -> str:
    """The notes of ``gang``'s Reconfigured and Locked Events, once one names a period (the Events go out after
    the pod writes, in writer order: waited for)."""
    def notes() -> str:
        return " ".join(e.get("note", "") for e in cluster.k.list(kube.EVENTS, ns)["items"]
                        if e["regarding"]["name"] == gang and e["reason"] in ("Reconfigured", "Locked"))

    return str(wait_until(lambda: "period" in notes() and notes(), 10, f"{gang}'s period event"))


def delete_gang(cluster: Cluster, ns: str, gang: str) -> None:
    for p in gang_pods(cluster, ns, gang):
        cluster.delete_pod(ns, objects.name(p))
    cluster.k.delete(kube.PODGROUPS, ns, gang)


def test_a_lone_gang_runs_free_is_locked_by_a_gang_sharing_its_nics_and_unlocked_when_alone_again(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess], lock_queue: str) -> None:
    cluster.nodes(3)
    ns = cluster.namespace()
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    lock_gang(cluster, ns, "a", lock_queue)
    wait_until(lambda: follows_claim(cluster, ns, "a", locked=False), 60, lambda: f"gang a placed free\n{ctl.logs()}")
    first = claim_status(cluster, ns, "a")
    assert all(timing(p) == {api.PERIOD_MS: "200"} for p in gang_pods(cluster, ns, "a"))  # no offset: runs free

    before_ms = time.time() * 1000
    lock_gang(cluster, ns, "b", lock_queue)
    wait_until(lambda: follows_claim(cluster, ns, "b", locked=True) and follows_claim(cluster, ns, "a", locked=True),
               60, lambda: f"gang b placed and gang a locked\n{ctl.logs()}")
    a, c = claim_status(cluster, ns, "a"), claim_status(cluster, ns, "b")
    assert a["offsetMs"] == first["offsetMs"] and a["decidedAt"] == first["decidedAt"]  # locked where it was
    assert a["epoch"] > before_ms and a["epoch"] > c["epoch"]  # from a future epoch; b aligns at once
    assert_interleaved(a, c)
    cluster.check_consistent(ns)
    # The Events go out after the pod writes (writer order), so they are waited for, not read at once.
    def regarding(reason: str) -> list[str]:
        return [e["regarding"]["name"] for e in cluster.k.list(kube.EVENTS, ns)["items"] if e["reason"] == reason]

    assert wait_until(lambda: regarding("Locked"), 10, "the Locked event") == ["a"]
    assert wait_until(lambda: ctl.metric("metronome_controller_locks_total"), 10, "the locks metric") == 1

    delete_gang(cluster, ns, "b")
    wait_until(lambda: "podgroup-b" not in cluster.claims(ns) and follows_claim(cluster, ns, "a", locked=False), 60,
               lambda: f"gang a unlocked by a re-optimisation pass\n{ctl.logs()}")
    assert all(timing(p) == {api.PERIOD_MS: "200"} for p in gang_pods(cluster, ns, "a"))
    assert wait_until(lambda: regarding("Unlocked"), 10, "the Unlocked event") == ["a"]
    assert wait_until(lambda: ctl.metric("metronome_controller_unlocks_total"), 10, "the unlocks metric") == 1


def test_the_node_agent_fits_no_profile_for_a_locked_gang_and_fits_one_once_it_runs_free(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess], lock_queue: str) -> None:
    """The node agent (a subprocess sampling ``lo``, where a real sender bursts 30 ms every 300 ms) on the node
    gang a has to itself writes no measured profile while gang b keeps a locked (a's bursts leave at its slots,
    so the NIC would show the published period, padding counted as compute), and fits and writes one once b
    is gone and a runs free: the claim's ``locked`` is the only switch."""
    ns, a, c = locked_beside(cluster, tmp_path, controllers, lock_queue, None, None, grid_ms=200)
    ctl = controllers[-1]
    (node,) = set(a["nodes"]) - set(c["nodes"])

    sender = start_paced_sender(300.0, 30.0, max_bursts=400)
    port = free_port()
    agent = start_agent(cluster.kubeconfig, node, tmp_path / "agent.log", port)
    logs = lambda: f"{(tmp_path / 'agent.log').read_text()}\n{ctl.logs()}"  # noqa: E731

    def fits(result: str) -> float:
        try:
            return scrape(f"http://127.0.0.1:{port}/metrics").get(("metronome_agent_fits_total", (("result", result),)), 0)
        except OSError:  # the agent's server is not up yet
            return 0

    try:
        wait_until(lambda: fits("aligned") >= 2, 60, lambda: f"two rounds that find gang a locked\n{logs()}")
        assert "measuredProfile" not in claim_status(cluster, ns, "a") and fits("written") == 0
        delete_gang(cluster, ns, "b")
        wait_until(lambda: follows_claim(cluster, ns, "a", locked=False), 60, lambda: f"gang a unlocked\n{logs()}")
        measured = wait_until(lambda: claim_status(cluster, ns, "a").get("measuredProfile"), 60,
                              lambda: f"a measured profile for the free gang a\n{logs()}")
    finally:
        stop_processes(agent, sender)
    assert measured["source"] == "node-agent" and measured["node"] == node
    assert measured["periodMs"] == pytest.approx(300.0, rel=0.05), measured


def test_a_policy_s_traffic_classes_reach_the_claims_and_pods_through_a_real_api_server(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess]) -> None:
    # The CRDs keep what the controller writes (an unknown status field would be pruned without a word), and a
    # newcomer on a gang's NICs is given the class after it, from before its pods' gate is removed. In another
    # class than the gang beside it, it locks nobody: the priority interleaves their bursts.
    queue, name = f"q-{cluster.tag}", f"classes-{cluster.tag}"
    classes = [{"env": {"NCCL_IB_TC": "106"}}, {"env": {"NCCL_IB_TC": "74"}}]
    cluster.k.create(kube.QUEUE_POLICIES, b.queue_policy(name, volcanoQueues=[queue], trafficClasses=classes))
    try:
        cluster.nodes(3)
        ns = cluster.namespace()
        ctl = start_controller(cluster, tmp_path, controllers, ns)
        lock_gang(cluster, ns, "a", queue)
        wait_until(lambda: follows_claim(cluster, ns, "a", locked=False), 60, lambda: f"gang a placed\n{ctl.logs()}")
        lock_gang(cluster, ns, "b", queue)
        wait_until(lambda: follows_claim(cluster, ns, "b", locked=False), 60, lambda: f"gang b placed\n{ctl.logs()}")
        assert claim_status(cluster, ns, "a")["locked"] is False
        assert wait_until(lambda: ctl.metric('metronome_controller_traffic_class_placements_total{traffic_class="1"}'),
                          10, "the class metric") == 1
        for gang, klass in (("a", 0), ("b", 1)):
            status = claim_status(cluster, ns, gang)
            assert (status["trafficClass"], status["trafficClassEnv"]) == (klass, classes[klass]["env"])
            for p in gang_pods(cluster, ns, gang):
                ann = objects.annotations_of(p)
                assert ann[api.TRAFFIC_CLASS] == str(klass)
                assert ann[api.TRAFFIC_CLASS_ENV] == f'{{"NCCL_IB_TC":"{classes[klass]["env"]["NCCL_IB_TC"]}"}}'
    finally:
        cluster.k.delete(kube.QUEUE_POLICIES, None, name)


def test_identical_gangs_off_the_grid_are_locked_at_their_exact_period(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess], lock_queue: str) -> None:
    # 24 ms bursts every 190 ms: held to the grid's 200 ms a lock pads 10 ms per iteration each, more than the
    # collisions it saves; at their exact period (38 slots, off the grid) it pads nothing, so it is taken.
    profile = {"period_ms": 190, "windows": [{"start_ms": 166, "len_ms": 24, "gbps": 80}], "jitter_ms": 0}
    ns, a, c = locked_beside(cluster, tmp_path, controllers, lock_queue, profile, profile, grid_ms=200)
    assert a["periodMs"] == c["periodMs"] == 190
    assert all(timing(p)[api.PERIOD_MS] == "190" for g in ("a", "b") for p in gang_pods(cluster, ns, g))
    # 190 ms does not divide the lattice step (25,200 ms): the offsets are written relative to their epochs.
    assert_interleaved(a, c, 190.0)
    cluster.check_consistent(ns)
    assert "period 200 -> 190 ms" in period_notes(cluster, ns, "a")


def test_gangs_whose_periods_nearly_divide_are_locked_in_step(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess], lock_queue: str) -> None:
    # 100 ms bursts every 250 and every 465 ms: their grid snaps (280 and 525 ms) do not divide, so the bursts
    # would sweep every relative phase; b held to 500 ms (7.5 % longer) is twice a's exact 250 ms, a re-laid there.
    short = {"period_ms": 250, "windows": [{"start_ms": 150, "len_ms": 100, "gbps": 80}], "jitter_ms": 0}
    long = {"period_ms": 465, "windows": [{"start_ms": 365, "len_ms": 100, "gbps": 80}], "jitter_ms": 0}
    ns, a, c = locked_beside(cluster, tmp_path, controllers, lock_queue, short, long, grid_ms=280)
    assert (a["periodMs"], c["periodMs"]) == (250, 500)
    assert all(timing(p)[api.PERIOD_MS] == "250" for p in gang_pods(cluster, ns, "a"))
    assert all(timing(p)[api.PERIOD_MS] == "500" for p in gang_pods(cluster, ns, "b"))
    # b's burst starts 365 ms into its period, a's 150 ms into its: b's falls in a's 150 ms gap every time.
    gap = ((c["epoch"] + c["offsetMs"] + 365) - (a["epoch"] + a["offsetMs"] + 150)) % 250
    assert 100 <= gap <= 150, (a, c)
    cluster.check_consistent(ns)
    assert f"period 280 -> 250 ms, in step with {ns}/PodGroup/b's" in period_notes(cluster, ns, "a")


@pytest.mark.parametrize("kill_after", [1, 2, 3])
def test_killed_between_the_lock_writes_and_restarted_converges(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess], lock_queue: str,
        kill_after: int) -> None:
    cluster.nodes(3)
    ns = cluster.namespace()
    single = ["--no-leader-elect"]  # one controller at a time here: no Lease to wait out after the kill
    first = start_controller(cluster, tmp_path, controllers, ns, args=single)
    lock_gang(cluster, ns, "a", lock_queue)
    wait_until(lambda: follows_claim(cluster, ns, "a", locked=False), 60, lambda: f"gang a placed\n{first.logs()}")
    assert first.stop() == 0
    placed = claim_status(cluster, ns, "a")
    lock_gang(cluster, ns, "b", lock_queue)
    # Its first cycle writes a's claim (1: locked), then b's claim (2: create, 3: status), then the pods:
    # the deciding gang's claim waits for the lock it takes, so no decision is ever recorded without it.
    killed = start_controller(cluster, tmp_path, controllers, ns, args=[*single, "--exit-after-writes", str(kill_after)])
    assert killed.wait(60) == -9, killed.logs()
    recorded = {gang: claim_status(cluster, ns, gang) for gang in ("a", "b")}
    assert recorded["a"]["locked"] is True and recorded["b"].get("locked") is (True if kill_after == 3 else None)
    assert all(api.OFFSET_MS not in timing(p) for p in gang_pods(cluster, ns, "a"))  # the pods were not reached
    restarted = start_controller(cluster, tmp_path, controllers, ns, args=single)
    wait_until(lambda: follows_claim(cluster, ns, "a", locked=True) and follows_claim(cluster, ns, "b", locked=True),
               60, lambda: f"convergence after the restart\n{restarted.logs()}")
    cluster.check_consistent(ns)
    a, c = claim_status(cluster, ns, "a"), claim_status(cluster, ns, "b")
    if kill_after == 3:
        for key in ("nodes", "members", "offsetMs", "epoch", "decidedAt"):
            assert c[key] == recorded["b"][key], key  # b's recorded decision stands
    assert a["offsetMs"] == placed["offsetMs"] and a["decidedAt"] == placed["decidedAt"]
    assert a["epoch"] == recorded["a"]["epoch"]  # the recorded lock stands
    assert_interleaved(a, c)


def test_a_pod_bound_outside_its_node_set_marks_the_claim_drifted(cluster: Cluster, tmp_path: pathlib.Path,
                                                                  controllers: list[ControllerProcess]) -> None:
    """A real Binding (what a scheduler ignoring our affinity would write) puts one pod on a node the
    decision did not choose: the claim says Drifted, a Warning Event names the pod, and deleting the
    pod clears it."""
    nodes = cluster.nodes(4)
    ns = cluster.namespace()
    cluster.gang(ns, "a", 2)
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    wait_until(lambda: cluster.ungated(ns), 60, lambda: f"ungated pods\n{ctl.logs()}")
    chosen = cluster.claims(ns)["podgroup-a"]["status"]["nodes"]
    outside = next(n for n in nodes if n not in chosen)
    pod = objects.name(sorted(cluster.pods(ns), key=objects.name)[0])
    cluster.k.request("POST", kube.PODS.path(ns, pod, "binding"), body={
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod, "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": outside}})

    def drifted() -> dict | None:
        cond = objects.condition(cluster.claims(ns)["podgroup-a"], "Drifted")
        return cond if cond is not None and cond["status"] == "True" else None

    cond = wait_until(drifted, 30, lambda: f"a Drifted condition\n{ctl.logs()}")
    assert cond["reason"] == "BoundOutsideNodeSet" and f"{pod} on {outside}" in cond["message"]
    # The Event follows the claim's status write: wait for it too.
    warnings = wait_until(lambda: [e for e in cluster.k.list(kube.EVENTS, ns)["items"] if e["reason"] == "Drifted"],
                          30, lambda: f"a Drifted Event\n{ctl.logs()}")
    assert [e["type"] for e in warnings] == ["Warning"] and pod in warnings[0]["note"]

    cluster.delete_pod(ns, pod)
    wait_until(lambda: (objects.condition(cluster.claims(ns)["podgroup-a"], "Drifted") or {}).get("status") == "False",
               30, lambda: f"the Drifted condition cleared\n{ctl.logs()}")


def test_a_gang_is_pinned_only_to_nodes_its_pods_select_and_tolerate(cluster: Cluster, tmp_path: pathlib.Path,
                                                                      controllers: list[ControllerProcess]) -> None:
    """Pods with a nodeSelector and a toleration: the controller pins them to nodes that carry the label
    and whose hard taints they tolerate, never to the untainted-but-unlabelled or labelled-but-tainted."""
    nodes = cluster.nodes(6)
    labelled, tainted = nodes[2:5], nodes[4:]
    for n in labelled:
        cluster.k.patch(kube.NODES, None, n, {"metadata": {"labels": {"gpu-type": "h100"}}})
    for n in tainted:
        cluster.k.patch(kube.NODES, None, n, {"spec": {"taints": [{"key": "dedicated", "value": "other",
                                                                    "effect": "NoSchedule"}]}})
    ns = cluster.namespace()
    cluster.k.create(kube.PODGROUPS, b.podgroup(ns, "a", 2), ns)
    for p in b.gang_pods(ns, "a", 2):
        p["spec"]["nodeSelector"] = {"gpu-type": "h100"}
        p["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
        cluster.k.create(kube.PODS, p, ns)
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    wait_until(lambda: cluster.ungated(ns), 60, lambda: f"ungated pods\n{cluster.claims(ns)}\n{ctl.logs()}")
    pinned = sorted(objects.pinned_node(p) or "" for p in cluster.pods(ns))
    assert pinned == sorted(nodes[2:4]), pinned  # labelled and untainted: nodes 2 and 3
    for p in cluster.pods(ns):  # the API server kept the pod's own selector beside our pin
        assert p["spec"]["nodeSelector"] == {"gpu-type": "h100"}


# ----------------------------------------------------------------------------- held back (core.holding)
# The lock-on-demand fabric with bursts that fill 180 ms of every 200 at a NIC's full 100 Gbps: the second gang can
# only share a NIC with the first, where they collide at every phase, so it is held back (maxHoldSeconds).
HOLD_S = 12
COLLIDING = {"period_ms": 200.0, "windows": [{"start_ms": 10, "len_ms": 180, "gbps": 100}], "jitter_ms": 0}


def test_a_held_gang_keeps_its_hold_across_a_leader_change(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess]) -> None:
    """The claim records when the hold began (status.heldSince); a new leader counts maxHoldSeconds from there,
    not from its own start, and the record is cleared with the placement."""
    queue, policy = f"q-{cluster.tag}", f"hold-{cluster.tag}"
    cluster.k.create(kube.QUEUE_POLICIES, b.queue_policy(policy, volcanoQueues=[queue], maxHoldSeconds=HOLD_S))
    try:
        cluster.nodes(3)
        ns = cluster.namespace()
        first = start_controller(cluster, tmp_path, controllers, ns)
        lock_gang(cluster, ns, "a", queue, COLLIDING)
        wait_until(lambda: claim_status(cluster, ns, "a").get("nodes"), 60, lambda: f"gang a placed\n{first.logs()}")
        lock_gang(cluster, ns, "b", queue, COLLIDING)
        status = wait_until(lambda: (s := claim_status(cluster, ns, "b")).get("heldSince") and s, 60,
                            lambda: f"gang b held back\n{first.logs()}")
        held_since = parse_time(status["heldSince"])
        no_fit = objects.condition({"status": status}, "NoFit")
        assert held_since is not None and not status.get("nodes")
        assert no_fit is not None and no_fit["reason"] == "HeldForContention", no_fit

        # The leader goes (releasing its Lease) two thirds into the hold; a new one takes over.
        time.sleep(max(0.0, held_since + HOLD_S * 2 / 3 - time.time()))
        assert first.stop() == 0 and not claim_status(cluster, ns, "b").get("nodes")
        second = start_controller(cluster, tmp_path, controllers, ns)
        status = wait_until(lambda: (s := claim_status(cluster, ns, "b")).get("nodes") and s, 60,
                            lambda: f"gang b placed\n{second.logs()}")
        decided_at = parse_time(status["decidedAt"])
        assert decided_at is not None and "heldSince" not in status
        # Not before its hold ran out, and soon after: counted from the new leader's first cycle it would end 8 s later.
        assert held_since + HOLD_S - 1 <= decided_at <= held_since + HOLD_S + 4, (held_since, decided_at)
    finally:
        cluster.k.delete(kube.QUEUE_POLICIES, None, policy)


def test_a_lower_priority_that_takes_a_held_gangs_room_is_announced(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess]) -> None:
    """Gang b (priority 1000) is held beside a; gang c (priority 10, light bursts) then takes the GPUs b waits for.
    b's PodGroup gets a Warning Event HoldOvertaken naming c, written to the API server like every Event."""
    queue, policy = f"q-{cluster.tag}", f"overtaken-{cluster.tag}"
    cluster.k.create(kube.QUEUE_POLICIES, b.queue_policy(policy, volcanoQueues=[queue], maxHoldSeconds=600))
    try:
        cluster.nodes(3)
        ns = cluster.namespace()
        ctl = start_controller(cluster, tmp_path, controllers, ns)
        high, low = cluster.priority_class(1000), cluster.priority_class(10)
        lock_gang(cluster, ns, "a", queue, COLLIDING)
        wait_until(lambda: claim_status(cluster, ns, "a").get("nodes"), 60, lambda: f"gang a placed\n{ctl.logs()}")
        lock_gang(cluster, ns, "b", queue, COLLIDING, priority_class=high)
        wait_until(lambda: claim_status(cluster, ns, "b").get("heldSince"), 60, lambda: f"gang b held\n{ctl.logs()}")
        light = {"period_ms": 200.0, "windows": [{"start_ms": 10, "len_ms": 10, "gbps": 10}], "jitter_ms": 0}
        lock_gang(cluster, ns, "c", queue, light, priority_class=low)
        wait_until(lambda: claim_status(cluster, ns, "c").get("nodes"), 60, lambda: f"gang c placed\n{ctl.logs()}")
        events = wait_until(lambda: [e for e in cluster.k.list(kube.EVENTS, ns)["items"]
                                     if e["reason"] == "HoldOvertaken"], 30, lambda: f"the Event\n{ctl.logs()}")
        [event] = events
        assert event["regarding"]["kind"] == "PodGroup" and event["regarding"]["name"] == "b"
        assert event["type"] == "Warning" and f"{ns}/podgroup-c of priority 10 was placed" in event["note"]
        assert event["note"].startswith("held back for contention at priority 1000")
        assert not claim_status(cluster, ns, "b").get("nodes")  # still held: a lower priority passing never places it
    finally:
        cluster.k.delete(kube.QUEUE_POLICIES, None, policy)
