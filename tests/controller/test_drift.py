"""The Drifted condition: pods bound outside the decided node set are reported on the claim and by a
Warning Event, once, and the condition clears when they are gone."""

from __future__ import annotations

import pytest

from tests.controller import builders as b
from tests.controller.fake import FakeApi
from volcano_metronome import api, kube
from volcano_metronome.controller import objects
from volcano_metronome.controller.reconcile import AS_DECIDED, DRIFTED, OUTSIDE_NODE_SET
from volcano_metronome.controller.settings import Settings

NS = "drift"
NOW = 1_700_000_000.0
PROFILE = {"period_ms": 200.0, "windows": [{"start_ms": 176, "len_ms": 24, "gbps": 80.0}], "jitter_ms": 0}


@pytest.fixture
def fake() -> FakeApi:
    f = FakeApi()
    for i in range(3):
        f.put(kube.NODES, b.node(f"n{i}", gpus=8, rack="r0"))
    f.put(kube.PODGROUPS, b.podgroup(NS, "a", 3, gpus=4, profile=PROFILE))
    for p in b.gang_pods(NS, "a", 3, gpus=4, profile=PROFILE):
        f.put(kube.PODS, p)
    return f


SETTINGS = Settings(write_concurrency=4)


def cycle(f: FakeApi, at: float = NOW) -> int:
    plan, _ = f.controller(at, SETTINGS, monotonic=lambda: 0.0).cycle()
    return plan.writes


def claim(f: FakeApi) -> dict:
    return f.obj(kube.CLAIMS, NS, "podgroup-a")


def bind(f: FakeApi, pod: str, node: str) -> None:
    obj = f.obj(kube.PODS, NS, pod)
    obj["spec"]["nodeName"] = node
    f.put(kube.PODS, obj)


def warnings(f: FakeApi) -> list[str]:
    return [e["note"] for e in f.events if e["reason"] == DRIFTED]


def test_a_pod_bound_outside_the_node_set_is_reported_once_then_cleared(fake: FakeApi) -> None:
    while cycle(fake):
        pass
    nodes = claim(fake)["status"]["nodes"]
    assert len(nodes) == 2 and objects.condition(claim(fake), DRIFTED) is None
    members = sorted(objects.name(p) for p in fake.all(kube.PODS))
    for m in members:  # bound where the affinity pins them, as a scheduler would
        pod = fake.obj(kube.PODS, NS, m)
        assert not objects.gated_by_us(pod) and objects.annotations_of(pod).get(api.PERIOD_MS)
        node = objects.pinned_node(pod)
        assert node in nodes
        bind(fake, m, node)
    assert cycle(fake) == 0

    outside = next(f"n{i}" for i in range(3) if f"n{i}" not in nodes)
    bind(fake, members[0], outside)
    assert cycle(fake, NOW + 5) > 0
    cond = objects.condition(claim(fake), DRIFTED)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == OUTSIDE_NODE_SET
    assert f"{members[0]} on {outside}" in cond["message"] and ", ".join(nodes) in cond["message"]
    assert warnings(fake) == [cond["message"]]
    assert [e["type"] for e in fake.events if e["reason"] == DRIFTED] == ["Warning"]
    assert cycle(fake, NOW + 10) == 0  # reported once, not every cycle
    ctl = fake.controller(NOW + 12, SETTINGS, monotonic=lambda: 0.0)
    plan, _ = ctl.cycle()
    assert plan.drifted == 1 and ctl.metrics.registry.get_sample_value("metronome_controller_drifted_gangs") == 1
    assert objects.condition_true(claim(fake), "Placed")  # the decision itself stands

    fake.delete(kube.PODS, NS, members[0])
    assert cycle(fake, NOW + 15) > 0
    cleared = objects.condition(claim(fake), DRIFTED)
    assert cleared is not None and cleared["status"] == "False" and cleared["reason"] == AS_DECIDED
    assert len(warnings(fake)) == 1
    plan, _ = ctl.cycle()
    assert plan.writes == 0 and plan.drifted == 0


def test_a_drift_visible_at_placement_is_written_with_the_decision(fake: FakeApi) -> None:
    early = objects.name(fake.all(kube.PODS)[0])
    pod = fake.obj(kube.PODS, NS, early)
    pod["spec"]["schedulingGates"] = []  # bound by other means before any decision
    pod["spec"]["nodeName"] = "n2"
    fake.put(kube.PODS, pod)
    fake.put(kube.NODES, b.node("n2", gpus=8, rack="r1"))  # another rack: not a node the decision wants
    while cycle(fake):
        pass
    status = claim(fake)["status"]
    cond = objects.condition(claim(fake), DRIFTED)
    assert "n2" not in status["nodes"]  # one rack holds the whole gang: the decision packs it there
    assert cond is not None and cond["status"] == "True" and f"{early} on n2" in cond["message"]
    assert len(warnings(fake)) == 1
    # One status write carried both the decision and the drift: no second write, no second Event.
    assert [n for verb, plural, n in fake.writes if (verb, plural) == ("patch/status", api.CLAIMS)] == ["podgroup-a"]
