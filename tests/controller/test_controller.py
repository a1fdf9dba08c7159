"""Cycles of the controller against the in-memory API: what it writes, in which order, and when it stops."""

from __future__ import annotations

import itertools

import pytest

from tests.controller import builders as b
from tests.controller.fake import FakeApi
from volcano_metronome import api, kube
from volcano_metronome.controller import objects
from volcano_metronome.controller.loop import Controller
from volcano_metronome.controller.settings import Settings
from volcano_metronome.kube import Unavailable

NS = "team-a"
NOW = 1_700_000_000.0


def controller(fake: FakeApi, **kw: object) -> Controller:
    clock = kw.pop("clock", lambda: NOW)
    return Controller(fake, fake.stores(), Settings(write_concurrency=4), identity="test", clock=clock, **kw)


def converge(ctl: Controller, limit: int = 10) -> int:
    """Run cycles until one writes nothing; the number of cycles that wrote."""
    for n in range(limit):
        plan, _ = ctl.cycle()
        if not plan.writes:
            return n
    raise AssertionError(f"no fixed point after {limit} cycles")


def add_gang(fake: FakeApi, name: str, members: int, **kw: object) -> None:
    fake.put(kube.PODGROUPS, b.podgroup(NS, name, members))
    for p in b.gang_pods(NS, name, members, **kw):
        fake.put(kube.PODS, p)


def pods_of(fake: FakeApi, gang: str) -> list[dict]:
    return [p for p in fake.all(kube.PODS) if objects.annotations_of(p).get(api.GANG_NAME) == gang]


def claim_of(fake: FakeApi, gang: str) -> dict:
    return fake.obj(kube.CLAIMS, NS, f"podgroup-{gang}")


def test_gated_pods_get_pinned_annotated_and_ungated(fake: FakeApi) -> None:
    add_gang(fake, "a", 4)
    ctl = controller(fake)
    converge(ctl)
    claim = claim_of(fake, "a")
    status = claim["status"]
    assert sum(status["members"]) == 4 and status["periodMs"] == 200 and status["epoch"] % 25200 == 0
    assert objects.condition_true(claim, "Placed")
    assert claim["spec"]["gangRef"] == {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "name": "a"}
    assert claim["metadata"]["ownerReferences"][0]["name"] == "a"
    used: dict[str, int] = {}
    for p in pods_of(fake, "a"):
        assert not objects.gates(p)
        node = objects.pinned_node(p)
        assert node in status["nodes"]
        used[node] = used.get(node, 0) + 1
        ann = objects.annotations_of(p)
        # Alone on its links: locking would only pad, so its runtime gets the period and runs free.
        assert ann[api.PERIOD_MS] == "200" and api.OFFSET_MS not in ann and api.EPOCH not in ann
    assert status["locked"] is False
    assert used == dict(zip(status["nodes"], status["members"]))
    assert [e["reason"] for e in fake.events] == ["Placed"]


def test_writes_claim_before_pods_and_only_removes_our_gate(fake: FakeApi) -> None:
    add_gang(fake, "a", 2, gates=(api.SCHEDULING_GATE, api.KUEUE_TOPOLOGY_GATE))
    converge(controller(fake))
    verbs = [(v, p) for v, p, _ in fake.writes]
    first_pod = verbs.index(("patch", "pods"))
    assert ("create", api.CLAIMS) in verbs[:first_pod] and ("patch/status", api.CLAIMS) in verbs[:first_pod]
    for p in pods_of(fake, "a"):
        assert objects.gates(p) == (api.KUEUE_TOPOLOGY_GATE,)


def test_a_second_pass_writes_nothing(fake: FakeApi) -> None:
    add_gang(fake, "a", 4)
    ctl = controller(fake)
    assert converge(ctl) == 1
    before = len(fake.writes)
    plan, _ = controller(fake).cycle()  # a fresh controller (a restart) agrees
    assert plan.writes == 0 and len(fake.writes) == before


def test_waits_for_every_member(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, b.podgroup(NS, "a", 4))
    for p in b.gang_pods(NS, "a", 4)[:3]:
        fake.put(kube.PODS, p)
    ctl = controller(fake)
    plan, _ = ctl.cycle()
    assert plan.writes == 0
    fake.put(kube.PODS, b.gang_pods(NS, "a", 4)[3])
    converge(ctl)
    assert all(not objects.gates(p) for p in pods_of(fake, "a"))


def test_priorities_decide_who_gets_scarce_gpus(fake: FakeApi) -> None:
    # 64 GPUs; each gang wants 6 x 8 = 48: only one fits. The higher priority one must win
    # although it is created later.
    add_gang(fake, "low", 6, priority=10)
    add_gang(fake, "high", 6, priority=1000)
    ctl = controller(fake)
    converge(ctl)
    assert all(not objects.gates(p) for p in pods_of(fake, "high"))
    assert all(objects.gated_by_us(p) for p in pods_of(fake, "low"))
    low = claim_of(fake, "low")
    assert objects.condition_true(low, "NoFit")
    assert objects.condition(low, "NoFit")["reason"] == "InsufficientGPUs"
    assert ("NoFit", "Warning") in {(e["reason"], e["type"]) for e in fake.events}
    # No repeated NoFit events while nothing changes.
    n = len(fake.events)
    converge(ctl)
    assert len(fake.events) == n


def test_events_false_emits_no_event_not_even_no_fit(fake: FakeApi) -> None:
    add_gang(fake, "low", 6, priority=10)
    add_gang(fake, "high", 6, priority=1000)
    ctl = Controller(fake, fake.stores(), Settings(write_concurrency=4, events=False), identity="test",
                     clock=lambda: NOW)
    converge(ctl)
    assert objects.condition(claim_of(fake, "low"), "NoFit")["reason"] == "InsufficientGPUs"  # still reported
    assert fake.events == []


def test_capacities_get_a_status_once_and_again_when_it_changes(fake: FakeApi) -> None:
    nodes = [objects.name(n) for n in fake.all(kube.NODES)]
    fake.put(kube.CAPACITIES, {"apiVersion": api.API_VERSION, "kind": "STBandwidthCapacity",
                               "metadata": {"name": "leaf", "generation": 1},
                               "spec": {"capacityGbps": 100, "tier": 1, "nodes": nodes[:2]}})
    ctl = controller(fake)
    converge(ctl)
    status = fake.get(kube.CAPACITIES, None, "leaf")["status"]
    assert status["matchedNodes"] == 2 and status["observedGeneration"] == 1
    assert (objects.condition(fake.get(kube.CAPACITIES, None, "leaf"), "Ready") or {}).get("status") == "True"
    plan, _ = ctl.cycle()
    assert plan.writes == 0  # said once
    fake.put(kube.CAPACITIES, {**fake.get(kube.CAPACITIES, None, "leaf"),
                               "metadata": {"name": "leaf", "generation": 2}, "spec": {
                                   "capacityGbps": 100, "tier": 1, "nodes": ["nowhere"]}})
    converge(ctl)
    gone = fake.get(kube.CAPACITIES, None, "leaf")
    assert gone["status"]["matchedNodes"] == 0 and gone["status"]["observedGeneration"] == 2
    assert objects.condition(gone, "Ready")["reason"] == "NoNodes"


def test_gpus_of_placed_but_unbound_gangs_are_not_booked_twice(fake: FakeApi) -> None:
    add_gang(fake, "a", 5)
    ctl = controller(fake)
    converge(ctl)
    add_gang(fake, "b", 5)  # 5 + 5 nodes of 8 > 8 nodes: b must wait although no pod is bound
    converge(ctl)
    assert all(objects.gated_by_us(p) for p in pods_of(fake, "b"))


def test_bound_pods_of_other_workloads_take_gpus(fake: FakeApi) -> None:
    for i in range(8):
        other = b.pod("other", f"x{i}", "x", gpus=8, gates=(), with_profile=False)
        other["metadata"]["labels"] = {}
        other["spec"]["nodeName"] = f"n{i}"
        other["status"] = {"phase": "Running"}
        fake.put(kube.PODS, other)
    add_gang(fake, "a", 1)
    converge(controller(fake))
    assert objects.condition(claim_of(fake, "a"), "NoFit")["reason"] == "InsufficientGPUs"


@pytest.mark.parametrize("crash_after", [1, 2, 3, 4, 5])
def test_a_crash_between_any_two_writes_converges_without_deciding_twice(fake: FakeApi, crash_after: int) -> None:
    add_gang(fake, "a", 4)
    ctl = controller(fake)
    count = itertools.count(1)
    ctl.writer.after_write = lambda: (_ for _ in ()).throw(SystemExit) if next(count) == crash_after else None
    with pytest.raises(SystemExit):
        ctl.cycle()
    ctl.close()
    decided = fake.get(kube.CLAIMS, NS, "podgroup-a")
    restarted = controller(fake, clock=lambda: NOW + 3600)  # a later clock: a new decision would differ
    converge(restarted)
    claim = claim_of(fake, "a")
    if decided is not None and decided.get("status", {}).get("nodes"):
        assert claim["status"] == decided["status"], "the recorded decision was replaced"
    assert len(fake.all(kube.CLAIMS)) == 1
    for p in pods_of(fake, "a"):
        assert not objects.gates(p) and objects.pinned_node(p) in claim["status"]["nodes"]


def test_a_lagging_informer_does_not_cause_a_second_decision(fake: FakeApi) -> None:
    add_gang(fake, "a", 4)
    fake.freeze_views()  # the informers never see our writes: only the overlay does
    ctl = controller(fake)
    ctl.cycle()
    plan, _ = ctl.cycle()
    assert plan.writes == 0
    assert [w for w in fake.writes if w[0] == "create"] == [("create", api.CLAIMS, "podgroup-a")]


def test_conflicts_and_outages_are_retried(fake: FakeApi) -> None:
    add_gang(fake, "a", 2)
    fake.fail(lambda verb, plural, name: plural == "pods", Unavailable("connection refused"))
    ctl = controller(fake)
    _, outcome = ctl.cycle()
    assert outcome.errors == 1
    converge(ctl)
    assert all(not objects.gates(p) for p in pods_of(fake, "a"))
    assert len([w for w in fake.writes if w[1] == api.CLAIMS and w[0] == "patch/status"]) == 1


def test_completed_podgroup_releases_its_links(fake: FakeApi) -> None:
    add_gang(fake, "a", 8)
    ctl = controller(fake)
    converge(ctl)
    pg = fake.obj(kube.PODGROUPS, NS, "a")
    pg["status"] = {"phase": "Completed"}
    fake.put(kube.PODGROUPS, pg)
    add_gang(fake, "b", 8)
    converge(ctl)
    released = claim_of(fake, "a")
    assert released["status"]["nodes"] == [] and objects.condition(released, "Placed")["reason"] == "Released"
    assert all(not objects.gates(p) for p in pods_of(fake, "b"))


def test_deleted_gang_claim_is_deleted(fake: FakeApi) -> None:
    add_gang(fake, "a", 2)
    ctl = controller(fake)
    converge(ctl)
    for p in pods_of(fake, "a"):
        fake.delete(kube.PODS, NS, p["metadata"]["name"])
    fake.delete(kube.PODGROUPS, NS, "a")
    converge(ctl)
    assert fake.get(kube.CLAIMS, NS, "podgroup-a") is None


def test_replacement_pod_takes_the_free_member_slot(fake: FakeApi) -> None:
    add_gang(fake, "a", 4)
    ctl = controller(fake)
    converge(ctl)
    victim = pods_of(fake, "a")[0]
    node = objects.pinned_node(victim)
    fake.delete(kube.PODS, NS, victim["metadata"]["name"])
    fake.put(kube.PODS, b.pod(NS, "a-new", "a", size=4))
    converge(ctl)
    assert objects.pinned_node(fake.obj(kube.PODS, NS, "a-new")) == node
    assert len([w for w in fake.writes if w[1] == api.CLAIMS and w[0] == "patch/status"]) == 1


def test_pod_without_profile_anywhere_is_reported_not_placed(fake: FakeApi) -> None:
    for p in b.gang_pods(NS, "a", 2, with_profile=False):
        fake.put(kube.PODS, p)
    converge(controller(fake))
    assert all(objects.gated_by_us(p) for p in pods_of(fake, "a"))
    assert any(e["reason"] == "NoFit" and "profile" in e["note"] for e in fake.events)
    assert fake.all(kube.CLAIMS) == []


def test_queue_policy_default_profile_and_status(fake: FakeApi) -> None:
    fake.put(kube.QUEUE_POLICIES, b.queue_policy("default", defaultProfile={"model": "resnet50"}))
    for p in b.gang_pods(NS, "a", 2, with_profile=False):
        fake.put(kube.PODS, p)
    converge(controller(fake))
    assert all(not objects.gates(p) for p in pods_of(fake, "a"))
    status = fake.obj(kube.QUEUE_POLICIES, None, "default")["status"]
    assert status["placedGangs"] == 1 and status["pendingGangs"] == 0
    assert objects.condition_true({"status": status}, "Ready")


def test_offsets_interleave_gangs_sharing_links(fake: FakeApi) -> None:
    # Two 2-node gangs forced onto the same rack uplink: 1 rack of 4 nodes, and 4 GPUs per node so a
    # 8-GPU member fills a node. The second gang must get a different offset (bursts interleaved).
    f = FakeApi()
    for i in range(4):
        f.put(kube.NODES, b.node(f"m{i}", gpus=8, rack="r0"))
    f.put(kube.PODGROUPS, b.podgroup(NS, "a", 2))
    f.put(kube.PODGROUPS, b.podgroup(NS, "b", 2))
    for p in b.gang_pods(NS, "a", 2) + b.gang_pods(NS, "b", 2):
        f.put(kube.PODS, p)
    converge(controller(f))
    a, c = f.obj(kube.CLAIMS, NS, "podgroup-a")["status"], f.obj(kube.CLAIMS, NS, "podgroup-b")["status"]
    assert a["feasible"] and c["feasible"]
    assert set(a["nodes"]).isdisjoint(c["nodes"]) or a["offsetMs"] != c["offsetMs"]
