"""A Volcano Job's gang decided at its PodGroup, before Volcano creates its pods (issue 14), on the in-memory API.

The webhook writes the Job's task templates' node constraints on the Job (``metronome.dev/pod-constraints``),
Volcano copies them to the PodGroup, the controller decides the PodGroup while it has no pods, and the pods
Volcano then creates pass the webhook already placed: the controller writes nothing for them. Pods created
before the decision are gated and patched as before (the fallback).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.admission.builders import patched, review
from tests.controller import builders as b
from tests.controller.fake import FakeApi
from volcano_metronome import api, kube
from volcano_metronome.admission import Context, Lookups, admit
from volcano_metronome.controller import gangs, objects
from volcano_metronome.controller.loop import Controller
from volcano_metronome.controller.observe import Observer
from volcano_metronome.controller.settings import Settings
from volcano_metronome.controller.views import PODGROUP, GangKey
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.shapes import templates

NS = "team-a"
NOW = 1_700_000_000.0
JSON = dict[str, Any]
VCJOB = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "vj", "uid": "u-vj", "controller": True}


def group(name: str = "vj", members: int = 16, *, gpus: int = 1, constraints: list[JSON] | None = None,
          phase: str = "Pending", owned: bool = True) -> JSON:
    """The PodGroup vc-controller-manager creates for a one-task Volcano Job our webhook admitted."""
    g = b.podgroup(NS, name, members, gpus=gpus)
    g["spec"]["minTaskMember"] = {"worker": members}
    g["metadata"]["annotations"][api.POD_CONSTRAINTS] = templates.encode(constraints or [{}])
    if owned:
        g["metadata"]["ownerReferences"] = [dict(VCJOB, name=name)]
    g["metadata"]["uid"] = f"uid-{name}"
    g["status"] = {"phase": phase}
    return g


def controller(fake: FakeApi) -> Controller:
    return Controller(fake, fake.stores(), Settings(write_concurrency=4), identity="test", clock=lambda: NOW)


def webhook(fake: FakeApi) -> Context:
    """The webhook's lookups, fed from the API's current objects (its watch caches)."""
    def claim(ns: str, name: str) -> JSON | None:
        return fake.get(kube.CLAIMS, ns, name)

    def pod_group(ns: str, name: str) -> JSON | None:
        return fake.get(kube.PODGROUPS, ns, name)

    return Context(lookups=Lookups(claim=claim, pod_group=pod_group))


def create_pods(fake: FakeApi, ctx: Context | None, name: str = "vj", members: int = 16, gpus: int = 1) -> list[JSON]:
    """Volcano's job controller creating the gang's pods through the webhook (``ctx``; None: gated as before)."""
    out = []
    for p in b.volcano_task_pods(NS, name, [("worker", members, gpus)]):
        if ctx is not None:
            fresh = copy.deepcopy(p)
            fresh["spec"].pop("schedulingGates", None)
            result = admit(review(fresh, namespace=NS), ctx)
            assert result.verdict in ("allowed", "patched")
            p = patched(fresh, result.review)
        out.append(fake.create(kube.PODS, p))
    return out


def pod_writes(fake: FakeApi) -> list[tuple[str, str, str]]:
    """The controller's writes on pods (the tests' own creates, standing for Volcano's, left out)."""
    return [w for w in fake.writes if w[1] == "pods" and w[0] != "create"]


def test_a_pending_podgroup_without_pods_is_decided_and_its_pods_are_created_placed(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, group())
    ctl = controller(fake)
    ctl.cycle()
    claim = fake.obj(kube.CLAIMS, NS, "podgroup-vj")
    status = claim["status"]
    assert sum(status["members"]) == 16 and len(status["nodes"]) == 2  # 16 pods of 1 GPU on 8-GPU nodes
    assert objects.condition(claim, "Placed")["status"] == "True"
    # Volcano enqueues the group and creates its pods: the webhook admits them placed, ungated.
    fake.put(kube.PODGROUPS, group(phase="Inqueue"))
    pods = create_pods(fake, webhook(fake))
    for p in pods:
        assert not objects.gates(p) and objects.pinned_nodes(p) == tuple(status["nodes"]), objects.name(p)
    before = len(fake.writes)
    for _ in range(3):
        ctl.cycle()
    assert fake.writes[before:] == []  # nothing left to write, for pods or claims
    assert fake.obj(kube.CLAIMS, NS, "podgroup-vj")["status"]["nodes"] == status["nodes"]


def test_pods_created_before_the_decision_are_gated_and_patched_as_before(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, group(phase="Inqueue"))
    create_pods(fake, None)  # Volcano was faster than the controller: the fallback
    ctl = controller(fake)
    for _ in range(3):
        ctl.cycle()
    nodes = tuple(fake.obj(kube.CLAIMS, NS, "podgroup-vj")["status"]["nodes"])
    assert len(pod_writes(fake)) == 16
    for p in fake.all(kube.PODS):
        assert not objects.gates(p) and objects.pinned_nodes(p) == nodes


def test_pods_racing_the_claim_half_placed_half_gated_end_in_one_node_set(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, group())
    ctl = controller(fake)
    ctl.cycle()
    nodes = tuple(fake.obj(kube.CLAIMS, NS, "podgroup-vj")["status"]["nodes"])
    pods = b.volcano_task_pods(NS, "vj", [("worker", 16, 1)])
    ctx = webhook(fake)
    for i, p in enumerate(pods):  # every other pod passed the webhook before its cache had the claim
        if i % 2:
            fake.create(kube.PODS, p)
        else:
            fresh = copy.deepcopy(p)
            fresh["spec"].pop("schedulingGates", None)
            fake.create(kube.PODS, patched(fresh, admit(review(fresh, namespace=NS), ctx).review))
    for _ in range(3):
        ctl.cycle()
    assert len(pod_writes(fake)) == 8  # only the gated half
    for p in fake.all(kube.PODS):
        assert not objects.gates(p) and objects.pinned_nodes(p) == nodes, objects.name(p)


def test_the_templates_node_constraints_limit_the_nodes_decided_before_pods(fake: FakeApi) -> None:
    fake.put(kube.NODES, {**b.node("n0", gpus=8, rack="r0"),
                          "spec": {"taints": [{"key": "maint", "value": "x", "effect": "NoSchedule"}]}})
    for i in (5, 6, 7):
        fake.put(kube.NODES, b.node(f"n{i}", gpus=8, rack=f"r{i // 4}", labels={"pool": "train"}))
    fake.put(kube.PODGROUPS, group(members=8, constraints=[{"nodeSelector": {"pool": "train"}}]))
    controller(fake).cycle()
    assert set(fake.obj(kube.CLAIMS, NS, "podgroup-vj")["status"]["nodes"]) <= {"n5", "n6", "n7"}
    fake.put(kube.PODGROUPS, group("vt", members=40))  # no selector: 5 whole nodes left, none of them tainted n0
    controller(fake).cycle()
    assert "n0" not in fake.obj(kube.CLAIMS, NS, "podgroup-vt")["status"]["nodes"]


@pytest.mark.parametrize("change,why", [
    (lambda g: g["metadata"].pop("ownerReferences"), "not created by a Volcano Job"),
    (lambda g: g["metadata"]["annotations"].pop(api.POD_CONSTRAINTS), None),
    (lambda g: g["metadata"]["annotations"].update({api.POD_CONSTRAINTS: "[{\"nodeName\": \"n1\"}]"}),
     "only the keys nodeSelector"),
    (lambda g: g["metadata"]["annotations"].update({api.POD_CONSTRAINTS: "{"}), "a JSON list"),
    (lambda g: g["spec"].update({"priorityClassName": "high"}), "priority class high"),
    (lambda g: g["metadata"]["annotations"].update(
        {api.POD_CONSTRAINTS: templates.encode([{"priorityClassName": "low"}])}), "priority class low"),
    (lambda g: g["status"].update({"phase": "Running"}), None),
    # Volcano turns a group whose pods were deleted back to Pending: it ran before, it is not decided again.
    (lambda g: g["status"].update({"running": 0, "succeeded": 2}), None),
    (lambda g: g["status"].update({"conditions": [{"type": "Scheduled", "status": "True"}]}), None),
    (lambda g: g["metadata"].update({"deletionTimestamp": "2026-11-23T18:00:00Z"}), None),
])
def test_a_podgroup_that_cannot_speak_for_its_pods_waits_for_them(fake: FakeApi, change: Any, why: str | None) -> None:
    g = group()
    change(g)
    fake.put(kube.PODGROUPS, g)
    ctl = controller(fake)
    plan, _ = ctl.cycle()
    assert fake.get(kube.CLAIMS, NS, "podgroup-vj") is None and pod_writes(fake) == []
    key = GangKey(NS, PODGROUP, "vj")
    listed = {gv.key: gv for gv in ctl.last_world.gangs} if ctl.last_world is not None else {}
    if why is None:  # a Running group without pods, or one without its pods' constraints, is not listed at all
        assert key not in listed
    else:
        assert key in listed and why in listed[key].waiting_for and not listed[key].pending


def test_decidable_before_pods_reads_profile_annotation_and_phase() -> None:
    assert gangs.decidable_before_pods(group())
    assert gangs.decidable_before_pods(group(phase="Inqueue"))
    assert not gangs.decidable_before_pods(group(phase="Running"))
    assert not gangs.decidable_before_pods(group(phase="Completed"))
    bare = group()
    del bare["metadata"]["annotations"][api.PROFILE]
    assert not gangs.decidable_before_pods(bare)


def test_the_observer_lists_the_podgroup_once_and_then_by_its_pods(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, group())
    world = Observer(Settings()).world(controller(fake).inputs())
    (gang,) = world.gangs
    assert gang.pending and gang.size == 16 and gang.gpus_per_member == 1 and gang.pods == ()


# --------------------------------------------------------------------------------------- the webhook's half
def test_the_webhook_records_the_templates_constraints_on_a_volcano_job() -> None:
    tasks = [{"name": "master", "replicas": 1, "template": {"spec": {
                 "nodeSelector": {"pool": "train"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
                 "containers": [{"name": "c", "image": "i"}]}}},
             {"name": "worker", "replicas": 3, "template": {"spec": {
                 "nodeSelector": {"pool": "train"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
                 "affinity": {"podAntiAffinity": {}}, "containers": [{"name": "c", "image": "i"}]}}}]
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {
        "name": "vj", "namespace": NS, "annotations": {api.MODEL: "resnet50"}}, "spec": {"tasks": tasks}}
    out = patched(job, admit(review(job, namespace=NS), Context()).review)
    text = out["metadata"]["annotations"][api.POD_CONSTRAINTS]
    # Both templates admit the same nodes (pod anti-affinity is no node constraint): recorded once.
    assert templates.decode(text, "x") == [{"nodeSelector": {"pool": "train"},
                                            "tolerations": [{"key": "gpu", "operator": "Exists"}]}]
    assert api.POD_CONSTRAINTS not in out["spec"]["tasks"][0]["template"]["metadata"]["annotations"]
    assert json.loads(text) == templates.decode(text, "x")


def test_node_constraints_keep_required_affinity_only() -> None:
    spec = {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}]}}}
    assert templates.node_constraints(spec) == {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]}}}
    assert templates.encode([{}, {"containers": []}]) == "[{}]"
    with pytest.raises(InvalidInput, match="where: got"):
        templates.decode("[]", "where")
