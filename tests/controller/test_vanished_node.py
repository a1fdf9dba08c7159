"""A node that vanishes under a decided gang before its pods are bound: the gang is re-decided (in-memory
API; the real-API twin is in tests/faults/test_controller_faults.py)."""

from __future__ import annotations

import copy
from typing import Any

from tests.controller import builders as b
from tests.controller.fake import FakeApi
from tests.controller.test_controller import NOW, NS, claim_of, controller, converge, pods_of
from volcano_metronome import api, kube
from volcano_metronome.controller import objects, vanished
from volcano_metronome.controller.loop import Controller
from volcano_metronome.controller.settings import Settings

JSON = dict[str, Any]
OWNER = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "v", "uid": "job-uid", "controller": True}


def _fake(nodes: int = 4) -> FakeApi:
    f = FakeApi()
    for i in range(nodes):
        f.put(kube.NODES, b.node(f"n{i}", gpus=8, rack="r0"))
    return f


def _volcano_gang(fake: FakeApi, name: str = "v", workers: int = 2, owned: bool = True,
                  scheduler: str = "volcano") -> list[JSON]:
    """A Volcano Job's PodGroup and pods (one role), as vc-controller-manager makes them."""
    fake.put(kube.PODGROUPS, b.podgroup(NS, name, workers))
    pods = b.volcano_task_pods(NS, name, [("worker", workers, 8)], scheduler=scheduler)
    for p in pods:
        if owned:
            p["metadata"]["ownerReferences"] = [{**OWNER, "name": name}]
        fake.put(kube.PODS, p)
    return pods


def _recreate(fake: FakeApi, templates: list[JSON]) -> None:
    """What the owner does: recreate each missing pod under its name, gated (the webhook's gate)."""
    have = {objects.name(p) for p in fake.all(kube.PODS)}
    for p in templates:
        if objects.name(p) not in have:
            fake.put(kube.PODS, copy.deepcopy(p))


def _vanish(fake: FakeApi, node: str) -> None:
    del fake.objects[("nodes", None, node)]


def test_a_vanished_node_under_an_unbound_gang_re_decides_it_on_live_nodes() -> None:
    fake = _fake()
    templates = _volcano_gang(fake)
    ctl = controller(fake)
    converge(ctl)
    old = tuple(claim_of(fake, "v")["status"]["nodes"])
    assert len(old) == 2 and all(objects.pinned_nodes(p) == old for p in pods_of(fake, "v"))
    _vanish(fake, old[0])
    fake.events.clear()

    _, released = ctl.cycle()  # first the claim (and the Events), then the deletes
    assert released.redecided == [f"{NS}/PodGroup/v"] and len(pods_of(fake, "v")) == 2
    _, outcome = ctl.cycle()
    claim = claim_of(fake, "v")
    assert claim["status"]["nodes"] == [] and claim["status"]["members"] == []
    placed = objects.condition(claim, "Placed")
    assert placed is not None and placed["status"] == "False" and placed["reason"] == vanished.VANISHED
    cond = objects.condition(claim, vanished.VANISHED)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == vanished.REDECIDING
    assert f"node {old[0]} vanished before the gang was bound; re-deciding" in cond["message"]
    # Both pods share the role's node set, which names the vanished node: both deleted, preconditioned.
    assert pods_of(fake, "v") == []
    assert sorted(w for w in fake.writes if w[0] == "delete") == [("delete", "pods", "v-worker-0"),
                                                                  ("delete", "pods", "v-worker-1")]
    warnings = [e for e in fake.events if e["reason"] == vanished.VANISHED]
    assert {e["regarding"]["kind"] for e in warnings} == {"PodGroup", "STBandwidthClaim"}
    assert all(e["type"] == "Warning" for e in warnings)
    assert outcome.deleted_pods == 2
    text = ctl.metrics.exposition().decode()
    assert "metronome_controller_vanished_node_redecisions_total 1.0" in text
    assert "metronome_controller_stranded_pods_deleted_total 2.0" in text

    assert not ctl.cycle()[0].writes  # nothing to do until the owner has recreated them
    _recreate(fake, templates)
    converge(ctl)
    claim = claim_of(fake, "v")
    new = tuple(claim["status"]["nodes"])
    assert len(new) == 2 and old[0] not in new
    live = {objects.name(n) for n in fake.all(kube.NODES)}
    for p in pods_of(fake, "v"):
        assert not objects.gates(p) and objects.pinned_nodes(p) == new and set(new) <= live
    cond = objects.condition(claim, vanished.VANISHED)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == vanished.REDECIDED
    assert objects.condition_true(claim, "Placed")
    assert len([e for e in fake.events if e["reason"] == vanished.VANISHED]) == 2  # announced once


def test_only_the_pods_pinned_to_the_vanished_node_are_deleted_bound_ones_never() -> None:
    fake = _fake(5)  # worker-0's node stays full of it: the re-decision needs three more
    templates = _volcano_gang(fake, workers=3, scheduler="default-scheduler")  # pinned one node per pod
    ctl = controller(fake)
    converge(ctl)
    pinned = {objects.name(p): objects.pinned_node(p) for p in pods_of(fake, "v")}
    # worker-0 is bound (running); worker-1 waits on a live node; worker-2's node vanishes.
    bound = fake.obj(kube.PODS, NS, "v-worker-0")
    bound["spec"]["nodeName"] = pinned["v-worker-0"]
    fake.put(kube.PODS, bound)
    _vanish(fake, pinned["v-worker-2"])
    ctl.cycle()
    ctl.cycle()
    assert sorted(objects.name(p) for p in pods_of(fake, "v")) == ["v-worker-0", "v-worker-1"]
    assert claim_of(fake, "v")["status"]["nodes"] == []
    _recreate(fake, templates)
    converge(ctl)
    new = claim_of(fake, "v")["status"]["nodes"]
    assert pinned["v-worker-2"] not in new
    again = fake.obj(kube.PODS, NS, "v-worker-2")
    assert not objects.gates(again) and objects.pinned_node(again) in new
    assert fake.obj(kube.PODS, NS, "v-worker-0")["spec"]["nodeName"] == pinned["v-worker-0"]  # never touched


def test_a_gang_whose_members_are_all_bound_keeps_its_claim() -> None:
    fake = _fake()
    _volcano_gang(fake, scheduler="default-scheduler")
    ctl = controller(fake)
    converge(ctl)
    for p in pods_of(fake, "v"):
        p["spec"]["nodeName"] = objects.pinned_node(p)
        fake.put(kube.PODS, p)
    nodes = claim_of(fake, "v")["status"]["nodes"]
    _vanish(fake, nodes[0])
    ctl.cycle()
    assert claim_of(fake, "v")["status"]["nodes"] == nodes
    assert len(pods_of(fake, "v")) == 2 and not any(w[0] == "delete" for w in fake.writes)


def test_bare_pods_are_reported_not_deleted() -> None:
    fake = _fake()
    _volcano_gang(fake, owned=False)
    ctl = controller(fake)
    converge(ctl)
    node = claim_of(fake, "v")["status"]["nodes"][0]
    _vanish(fake, node)
    fake.events.clear()
    converge(ctl)
    assert len(pods_of(fake, "v")) == 2 and not any(w[0] == "delete" for w in fake.writes)
    claim = claim_of(fake, "v")
    cond = objects.condition(claim, vanished.VANISHED)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == vanished.OWNERLESS
    assert "NOT deleted" in cond["message"] and "v-worker-0" in cond["message"]
    assert claim["status"]["nodes"] == []
    assert len([e for e in fake.events if e["reason"] == vanished.VANISHED]) == 2  # once, on gang and claim
    # The user deletes and recreates them: the gang is decided again, on live nodes.
    for p in b.volcano_task_pods(NS, "v", [("worker", 2, 8)]):
        fake.objects.pop(("pods", NS, objects.name(p)))
        fake.put(kube.PODS, p)
    converge(ctl)
    new = claim_of(fake, "v")["status"]["nodes"]
    assert len(new) == 2 and node not in new


def test_a_node_outside_the_cache_but_present_in_the_api_server_deletes_nothing() -> None:
    fake = _fake()
    _volcano_gang(fake)
    ctl = controller(fake)
    converge(ctl)
    node = claim_of(fake, "v")["status"]["nodes"][0]
    # The node cache no longer has it (e.g. it lost the nodeSelector label), the API server does.
    stores = {**fake.stores(), "nodes": fake.store(kube.NODES, lambda n: objects.name(n) != node)}
    _, outcome = Controller(fake, stores, Settings(), identity="test", clock=lambda: NOW).cycle()
    assert outcome.by_kind.get(("node-check", "exists")) == 1
    assert len(pods_of(fake, "v")) == 2 and claim_of(fake, "v")["status"]["nodes"]


def test_a_pod_changed_since_it_was_read_is_not_deleted() -> None:
    fake = _fake()
    _volcano_gang(fake)
    ctl = controller(fake)
    converge(ctl)
    _vanish(fake, claim_of(fake, "v")["status"]["nodes"][0])
    ctl.cycle()  # the claim released
    fake.freeze_views()  # the informer still serves the pods as they were
    changed = fake.obj(kube.PODS, NS, "v-worker-0")
    fake.put(kube.PODS, changed)  # a new resourceVersion (bound by now, say)
    _, outcome = ctl.cycle()
    fake.thaw_views()
    assert outcome.by_kind.get(("pod-delete", "conflict")) == 1
    assert {objects.name(p) for p in pods_of(fake, "v")} == {"v-worker-0"}


def test_no_nodes_at_all_is_never_a_reason_to_delete() -> None:
    fake = _fake()
    _volcano_gang(fake)
    ctl = controller(fake)
    converge(ctl)
    for i in range(4):
        _vanish(fake, f"n{i}")
    ctl.cycle()
    assert len(pods_of(fake, "v")) == 2 and claim_of(fake, "v")["status"]["nodes"]


def test_stranded_ignores_bound_gated_and_terminating_pods() -> None:
    from volcano_metronome.controller.observe import pod_view

    def view(**spec: Any) -> Any:
        p = b.pod(NS, "p", "g", gates=())
        p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gone"]}]}]}}}
        p["spec"].update(spec)
        return p

    live = frozenset({"n0"})
    stuck = view()
    bound = view(nodeName="gone")
    gated = view(schedulingGates=[{"name": api.SCHEDULING_GATE}])
    going = view()
    going["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    views = [pod_view(p, b.GPU) for p in (stuck, bound, gated, going)]
    assert vanished.stranded(views, live) == (views[0],)
    assert vanished.stranded(views, frozenset()) == ()


def test_a_kueue_workload_is_sent_back_to_kueue_not_stripped_of_pods() -> None:
    from tests.controller.test_kueue_and_reoptimisation import NS as KNS, kueue_cluster, our_entry, run

    f = kueue_cluster()
    wl = b.workload(KNS, "job-a", 2)
    wl["status"] = b.quota_reserved_status("cq", 2)
    f.put(kube.WORKLOADS, wl)
    ctl = f.controller(NOW)
    run(ctl)
    assert our_entry(f, "job-a")["state"] == "Ready"
    nodes = f.obj(kube.CLAIMS, KNS, "workload-job-a")["status"]["nodes"]
    _vanish(f, nodes[0])
    run(ctl)
    entry = our_entry(f, "job-a")
    assert entry["state"] == "Retry" and f"{nodes[0]} vanished before the gang was bound" in entry["message"]
    claim = f.obj(kube.CLAIMS, KNS, "workload-job-a")
    assert claim["status"]["nodes"] == [] and objects.condition_true(claim, vanished.VANISHED)
    assert not any(w[0] == "delete" for w in f.writes)
    # Kueue evicts, requeues and reserves again (our check back to Pending): decided again on live nodes.
    current = f.obj(kube.WORKLOADS, KNS, "job-a")
    current["status"]["admissionChecks"] = [{**our_entry(f, "job-a"), "state": "Pending", "message": ""}]
    f.put(kube.WORKLOADS, current)
    run(ctl)
    assert our_entry(f, "job-a")["state"] == "Ready"
    again = f.obj(kube.CLAIMS, KNS, "workload-job-a")["status"]["nodes"]
    assert len(again) == 2 and nodes[0] not in again


def test_a_failed_delete_converges_without_a_second_announcement() -> None:
    fake = _fake()
    templates = _volcano_gang(fake)
    ctl = controller(fake)
    converge(ctl)
    old = claim_of(fake, "v")["status"]["nodes"]
    _vanish(fake, old[0])
    fake.events.clear()
    fake.fail(lambda verb, plural, name: verb == "delete" and plural == "pods", kube.Unavailable("down", 503))
    ctl.cycle()
    assert claim_of(fake, "v")["status"]["nodes"] == []
    assert len([e for e in fake.events if e["reason"] == vanished.VANISHED]) == 2
    _, outcome = ctl.cycle()
    assert len(pods_of(fake, "v")) == 1 and outcome.deleted_pods == 1
    # A new leader (no memory of that cycle) finishes the job from what the API server holds.
    successor = controller(fake)
    successor.cycle()
    assert pods_of(fake, "v") == []
    assert len([e for e in fake.events if e["reason"] == vanished.VANISHED]) == 2
    _recreate(fake, templates)
    converge(successor)
    new = claim_of(fake, "v")["status"]["nodes"]
    assert len(new) == 2 and old[0] not in new
    assert all(objects.pinned_nodes(p) == tuple(new) for p in pods_of(fake, "v"))
