"""Which nodes a gang's pods admit: node selectors, required node affinity and taints, as kube-scheduler
judges them; and a controller that places gangs only there."""

from __future__ import annotations

from typing import Any

import pytest

from tests.controller import builders as b
from tests.controller.fake import FakeApi
from volcano_metronome import api, kube
from volcano_metronome.controller import objects
from volcano_metronome.controller.eligibility import admits, eligible_nodes
from volcano_metronome.controller.settings import Settings

NODE = b.node("n1", labels={"gpu": "a100", "gen": "4", "zone": "z1"})
TAINTED = {**b.node("t1", labels={"gpu": "h100"}),
           "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                               {"key": "soft", "effect": "PreferNoSchedule"}]}}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": op, **({"values": list(values)} if values else {})}]}


@pytest.mark.parametrize("spec, expected", [
    ({}, True),
    ({"nodeSelector": {"gpu": "a100"}}, True),
    ({"nodeSelector": {"gpu": "a100", "zone": "z2"}}, False),
    ({"nodeSelector": {"missing": ""}}, False),
    (required(expr("gpu", "In", "h100", "a100")), True),
    (required(expr("gpu", "In", "h100")), False),
    (required(expr("gpu", "NotIn", "h100")), True),
    (required(expr("missing", "NotIn", "x")), True),
    (required(expr("gpu", "Exists")), True),
    (required(expr("gpu", "DoesNotExist")), False),
    (required(expr("gen", "Gt", "3")), True),
    (required(expr("gen", "Lt", "4")), False),
    (required(expr("gpu", "Gt", "3")), False),  # not an integer
    (required(expr("gpu", "In", "h100"), expr("zone", "In", "z1")), True),  # terms are ORed
    (required({"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]},
                                    {"key": "zone", "operator": "In", "values": ["z2"]}]}), False),  # ANDed within
    (required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}), True),
    (required({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}), False),
    (required({}), False),  # an empty term matches nothing
    (required(), False),  # no term at all: nothing
], ids=repr)
def test_selector_and_required_affinity(spec: dict[str, Any], expected: bool) -> None:
    assert admits(NODE, spec) is expected


@pytest.mark.parametrize("tolerations, expected", [
    ([], False),
    ([{"key": "nvidia.com/gpu", "operator": "Exists"}], True),
    ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], True),
    ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], False),
    ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}], True),
    ([{"key": "nvidia.com/gpu", "value": "present"}], True),  # Equal is the default operator
    ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}], False),
    ([{"operator": "Exists"}], True),  # tolerates everything
    ([{"key": "other", "operator": "Exists"}], False),
], ids=repr)
def test_hard_taints_need_a_toleration_soft_ones_do_not(tolerations: list[dict[str, Any]], expected: bool) -> None:
    assert admits(TAINTED, {"tolerations": tolerations}) is expected


def test_eligible_nodes_is_none_when_nothing_restricts_and_memoises_per_template() -> None:
    nodes = [NODE, TAINTED, b.node("n2", labels={"gpu": "a100"})]
    memo: dict[str, frozenset[str] | None] = {}
    assert eligible_nodes([NODE, b.node("n2")], [{}], memo) is None
    assert eligible_nodes(nodes, [{}]) == frozenset({"n1", "n2"})  # the taint restricts
    pick = {"nodeSelector": {"gpu": "a100"}, "tolerations": [{"operator": "Exists"}]}
    assert eligible_nodes(nodes, [pick, pick], memo) == frozenset({"n1", "n2"})
    assert eligible_nodes(nodes, [pick, {"nodeSelector": {"zone": "z1"}}]) == frozenset({"n1"})  # every spec
    assert len(memo) == 2
    assert eligible_nodes([], [pick], memo) == frozenset({"n1", "n2"})  # from the memo, as documented


def test_the_controller_places_a_gang_only_on_nodes_its_pods_admit() -> None:
    f = FakeApi()
    for i in range(4):
        f.put(kube.NODES, b.node(f"n{i}", gpus=8, rack="r0", labels={"gpu": "h100" if i >= 2 else "a100"}))
    f.put(kube.PODGROUPS, b.podgroup("ns", "a", 2))
    for p in b.gang_pods("ns", "a", 2):
        p["spec"]["nodeSelector"] = {"gpu": "h100"}
        f.put(kube.PODS, p)
    f.put(kube.PODGROUPS, b.podgroup("ns", "c", 1))
    for p in b.gang_pods("ns", "c", 1):
        p["spec"]["nodeSelector"] = {"gpu": "h100"}  # no h100 left once a holds both
        f.put(kube.PODS, p)
    ctl = f.controller(1.7e9, Settings(write_concurrency=2), monotonic=lambda: 0.0)
    for _ in range(5):
        plan, _ = ctl.cycle()
    assert sorted(f.obj(kube.CLAIMS, "ns", "podgroup-a")["status"]["nodes"]) == ["n2", "n3"]
    pinned = {objects.pinned_node(p) for p in f.all(kube.PODS) if objects.annotations_of(p).get(api.GANG_NAME) == "a"}
    assert pinned == {"n2", "n3"}
    waiting = f.obj(kube.CLAIMS, "ns", "podgroup-c")
    assert "admit 2 of 4 nodes" in objects.condition(waiting, "NoFit")["message"]


def flavored_cluster(flavor_tolerations: list[dict[str, Any]]) -> FakeApi:
    """Only n2 and n3 are h100 nodes, n3 is tainted; a Workload with quota reserved in flavor h100."""
    f = FakeApi()
    for i in range(4):
        node = b.node(f"n{i}", gpus=8, rack="r0", labels={"gpu": "h100" if i >= 2 else "a100"})
        if i == 3:
            node["spec"] = {"taints": [{"key": "reserved", "value": "h100", "effect": "NoSchedule"}]}
        f.put(kube.NODES, node)
    f.put(kube.ADMISSION_CHECKS, b.admission_check("metronome"))
    f.put(kube.CLUSTER_QUEUES, b.cluster_queue("cq", "metronome"))
    f.put(kube.RESOURCE_FLAVORS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                  "metadata": {"name": "h100"},
                                  "spec": {"nodeLabels": {"gpu": "h100"}, "tolerations": flavor_tolerations}})
    wl = b.workload("ml", "wl", 2)
    wl["status"] = b.quota_reserved_status("cq", 2, flavor="h100")
    f.put(kube.WORKLOADS, wl)
    ctl = f.controller(1.7e9)
    for _ in range(5):
        ctl.cycle()
    return f


def test_a_workload_is_placed_on_the_nodes_of_its_assigned_resource_flavor() -> None:
    """Decided before it has pods: the template plus what Kueue will add from the flavor (nodeLabels as
    node selector, tolerations)."""
    f = flavored_cluster([{"key": "reserved", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}])
    assert sorted(f.obj(kube.CLAIMS, "ml", "workload-wl")["status"]["nodes"]) == ["n2", "n3"]

    # Without the flavor's toleration n3 is out, and two 8-GPU members no longer fit.
    g = flavored_cluster([])
    entry = next(e for e in g.obj(kube.WORKLOADS, "ml", "wl")["status"]["admissionChecks"] if e["name"] == "metronome")
    assert entry["state"] == "Retry" and "admit 1 of 4 nodes" in entry["message"], entry
