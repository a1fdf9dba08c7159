"""Ranks in ring order, and one node set per Volcano task role (its predicate error cache), on the in-memory API."""

from __future__ import annotations

from typing import Any

import pytest

from tests.controller import builders as b
from tests.controller.fake import FakeApi
from volcano_metronome import api, kube
from volcano_metronome.controller import objects, ranks
from volcano_metronome.controller.constraints import assign
from volcano_metronome.controller.loop import Controller
from volcano_metronome.controller.observe import claim_view, pod_view
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core.topology import leaf_spine

NS = "team-a"
NOW = 1_700_000_000.0
JSON = dict[str, Any]


def converge(fake: FakeApi, limit: int = 10) -> None:
    ctl = Controller(fake, fake.stores(), Settings(write_concurrency=4), identity="test", clock=lambda: NOW)
    for _ in range(limit):
        plan, _ = ctl.cycle()
        if not plan.writes:
            return
    raise AssertionError(f"no fixed point after {limit} cycles")


def slots_in_order(status: JSON) -> list[str]:
    """The claim's member slots in its node order: where rank 0, 1, 2, ... belong."""
    return [n for n, m in zip(status["nodes"], status["members"]) for _ in range(m)]


def claim_of(fake: FakeApi, gang: str) -> JSON:
    return fake.obj(kube.CLAIMS, NS, f"podgroup-{gang}")


# ------------------------------------------------------------------------------------------- rank keys
def test_natural_order_puts_worker_10_after_worker_9() -> None:
    names = [f"worker-{i}" for i in range(16)]
    assert sorted(names) != names  # the lexicographic order the controller used to assign by
    shuffled = sorted(names)
    assert ranks.ring_order(shuffled, [{} for _ in shuffled], shuffled) == names


@pytest.mark.parametrize("source,extra", [
    ("volcano", lambda i: {"annotations": {"volcano.sh/task-spec": "worker", "volcano.sh/task-index": str(i)}}),
    ("completion-index", lambda i: {"annotations": {"batch.kubernetes.io/job-completion-index": str(i)}}),
    ("jobset", lambda i: {"labels": {"jobset.sigs.k8s.io/replicatedjob-name": "w",
                                     "jobset.sigs.k8s.io/job-index": str(i // 4),
                                     "batch.kubernetes.io/job-completion-index": str(i % 4)}}),
    ("kubeflow", lambda i: {"labels": {"training.kubeflow.org/replica-type": "master" if i == 0 else "worker",
                                       "training.kubeflow.org/replica-index": str(0 if i == 0 else i - 1)}}),
])
def test_rank_comes_from_the_workload_not_the_name(source: str, extra: Any) -> None:
    # Names deliberately in the reverse of rank order: only the index can give the right answer.
    pods = []
    for i in range(12):
        p = b.pod(NS, f"p-{11 - i}", "g")
        for where, values in extra(i).items():
            p["metadata"].setdefault(where, {}).update(values)
        pods.append(p)
    keys = [ranks.rank_keys(p) for p in pods]
    assert ranks.rank_source(keys) == source
    ordered = ranks.ring_order(pods, keys, [objects.name(p) for p in pods])
    assert [objects.name(p) for p in ordered] == [f"p-{11 - i}" for i in range(12)]


def test_env_rank_wins_and_a_source_missing_on_one_pod_is_not_used() -> None:
    pods = [b.pod(NS, f"p-{i}", "g") for i in range(4)]
    for i, p in enumerate(pods):
        p["spec"]["containers"][0]["env"] = [{"name": "RANK", "value": str(3 - i)}]
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = str(i)
    keys = [ranks.rank_keys(p) for p in pods]
    assert ranks.rank_source(keys) == "env-rank"
    assert [objects.name(p) for p in ranks.ring_order(pods, keys, [objects.name(p) for p in pods])] == [
        "p-3", "p-2", "p-1", "p-0"]
    del pods[0]["spec"]["containers"][0]["env"]
    keys = [ranks.rank_keys(p) for p in pods]
    assert ranks.rank_source(keys) == "completion-index"


def test_volcano_coordinator_task_comes_first() -> None:
    pods = b.volcano_task_pods(NS, "j", [("worker", 3, 8), ("master", 1, 8)])
    keys = [ranks.rank_keys(p) for p in pods]
    ordered = ranks.ring_order(pods, keys, [objects.name(p) for p in pods])
    assert [objects.name(p) for p in ordered] == ["j-master-0", "j-worker-0", "j-worker-1", "j-worker-2"]


def test_claim_nodes_are_put_in_ring_order_rack_by_rack() -> None:
    topo = leaf_spine(3, 4, 100, 400)
    decided = ("rack-0-node-3", "rack-1-node-0", "rack-0-node-2", "rack-2-node-3", "rack-1-node-1")
    assert ranks.ring_nodes(topo, decided, (1, 2, 3, 4, 5)) == (
        ("rack-0-node-2", "rack-0-node-3", "rack-1-node-0", "rack-1-node-1", "rack-2-node-3"), (3, 1, 2, 5, 4))
    # Nodes the topology does not know (gone since the decision) keep their place at the end.
    assert ranks.ring_nodes(topo, ("gone", "rack-0-node-1"), (2, 1)) == (("rack-0-node-1", "gone"), (1, 2))


# ----------------------------------------------------------------------------------- per pod, by rank
def test_a_gang_of_sixteen_is_pinned_in_rank_order_not_name_order(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, b.podgroup(NS, "a", 16, gpus=4))
    for p in reversed(b.gang_pods(NS, "a", 16, gpus=4)):
        fake.put(kube.PODS, p)
    converge(fake)
    status = claim_of(fake, "a")["status"]
    pinned = {objects.name(p): objects.pinned_node(p) for p in fake.all(kube.PODS)}
    assert [pinned[f"a-{i}"] for i in range(16)] == slots_in_order(status)
    racks = [int(n[1:]) // 4 for n in status["nodes"]]
    assert racks == sorted(racks)  # nodes of one rack consecutive in the claim


def test_claim_nodes_are_rack_by_rack_when_node_names_interleave_racks() -> None:
    fake = FakeApi()
    for i in range(8):  # n0, n2, n4, n6 in rack r0; n1, n3, n5, n7 in r1: name order alternates racks
        fake.put(kube.NODES, b.node(f"n{i}", gpus=8, rack=f"r{i % 2}"))
    fake.put(kube.PODGROUPS, b.podgroup(NS, "x", 16, gpus=4))
    for p in b.gang_pods(NS, "x", 16, gpus=4):
        fake.put(kube.PODS, p)
    converge(fake)
    status = claim_of(fake, "x")["status"]
    racks = [int(n[1:]) % 2 for n in status["nodes"]]
    assert racks in ([0, 0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0, 0]), status["nodes"]
    pinned = {objects.name(p): objects.pinned_node(p) for p in fake.all(kube.PODS)}
    crossings = sum(int(pinned[f"x-{i}"][1:]) % 2 != int(pinned[f"x-{i + 1}"][1:]) % 2 for i in range(15))
    assert crossings == 1  # the ring leaves each rack once (and closes back)


def test_pods_of_a_volcano_role_scheduled_by_kube_scheduler_stay_pinned_per_pod(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, b.podgroup(NS, "k", 12, gpus=2))
    for p in b.volcano_task_pods(NS, "k", [("worker", 12, 2)], scheduler="default-scheduler"):
        fake.put(kube.PODS, p)
    converge(fake)
    status = claim_of(fake, "k")["status"]
    pinned = {objects.name(p): objects.pinned_node(p) for p in fake.all(kube.PODS)}
    assert [pinned[f"k-worker-{i}"] for i in range(12)] == slots_in_order(status)


# ------------------------------------------------------------------------------------------ Volcano roles
def test_pods_of_one_volcano_role_share_one_node_set(fake: FakeApi) -> None:
    # 1 master + 11 workers of 4 GPUs on 8-GPU nodes: 6 nodes, the master's shared with two workers' slots.
    fake.put(kube.PODGROUPS, b.podgroup(NS, "v", 12, gpus=4))
    for p in b.volcano_task_pods(NS, "v", [("worker", 11, 4), ("master", 1, 4)]):
        fake.put(kube.PODS, p)
    converge(fake)
    claim = claim_of(fake, "v")
    nodes = tuple(claim["status"]["nodes"])
    assert len(nodes) == 6
    for p in fake.all(kube.PODS):
        assert not objects.gates(p) and objects.pinned_nodes(p) == nodes, objects.name(p)
    assert objects.condition(claim, "PerPodConstraints") is None
    assert "PerPodConstraints" not in [e["reason"] for e in fake.events]


def test_volcano_roles_on_separate_nodes_get_separate_sets(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, b.podgroup(NS, "w", 4))
    for p in b.volcano_task_pods(NS, "w", [("worker", 3, 8), ("master", 1, 8)]):
        fake.put(kube.PODS, p)
    converge(fake)
    nodes = tuple(claim_of(fake, "w")["status"]["nodes"])
    sets = {objects.name(p): objects.pinned_nodes(p) for p in fake.all(kube.PODS)}
    assert sets["w-master-0"] == nodes[:1]  # rank 0 on the first node of the ring
    assert {sets[f"w-worker-{i}"] for i in range(3)} == {nodes[1:]}


def test_a_role_whose_pods_need_different_pins_is_reported_with_the_fix(fake: FakeApi) -> None:
    # Different GPU requests in one pool: a free choice could strand a pod, so pods stay pinned one by one,
    # and the workers (on three nodes) then need different constraints: Volcano's default cache blocks that.
    fake.put(kube.PODGROUPS, b.podgroup(NS, "m", 6, gpus=4))
    for p in b.volcano_task_pods(NS, "m", [("master", 1, 4), ("worker", 5, 2)]):
        fake.put(kube.PODS, p)
    converge(fake)
    claim = claim_of(fake, "m")
    pinned = {objects.name(p): objects.pinned_node(p) for p in fake.all(kube.PODS)}
    assert [pinned["m-master-0"]] + [pinned[f"m-worker-{i}"] for i in range(5)] == slots_in_order(claim["status"])
    cond = objects.condition(claim, "PerPodConstraints")
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "VolcanoPredicateErrorCache"
    assert "predicateErrorCacheEnable: false" in cond["message"] and "worker" in cond["message"]
    warnings = [e for e in fake.events if e["reason"] == "PerPodConstraints"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
    # Once every pod is bound there is nothing left for the cache to block: the condition clears.
    for p in fake.all(kube.PODS):
        fake.put(kube.PODS, {**p, "spec": {**p["spec"], "nodeName": objects.pinned_node(p)}})
    converge(fake)
    cond = objects.condition(claim_of(fake, "m"), "PerPodConstraints")
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "SharedPerRole"
    assert len([e for e in fake.events if e["reason"] == "PerPodConstraints"]) == 1


def test_a_replacement_pod_joins_its_roles_existing_node_set() -> None:
    pods = b.volcano_task_pods(NS, "r", [("worker", 4, 4)])
    claim = claim_view({"metadata": {"name": "c", "namespace": NS},
                        "status": {"nodes": ["n0", "n1"], "members": [2, 2]}})
    for p in pods[:3]:  # ungated earlier with the role's set, not bound yet
        p["spec"]["schedulingGates"] = []
        p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": objects.pinned_terms(p, ["n0", "n1"])}}}
    views = [pod_view(p, b.GPU) for p in pods]
    result = assign(claim, views)
    assert [t.nodes for t in result.targets] == [("n0", "n1")] * 4 and not result.blocked
    # Pods of the role already pinned to different nodes (an older controller) are reported.
    for p, node in zip(pods[:3], ["n0", "n0", "n1"]):
        p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"] = objects.pinned_terms({}, node)
    result = assign(claim, [pod_view(p, b.GPU) for p in pods])
    assert "role worker" in result.blocked and api.SCHEDULING_GATE not in result.blocked


def test_a_replacement_whose_slot_lies_outside_its_roles_set_is_reported() -> None:
    pods = b.volcano_task_pods(NS, "s", [("worker", 2, 8)])
    claim = claim_view({"metadata": {"name": "c", "namespace": NS},
                        "status": {"nodes": ["n0", "n1"], "members": [1, 1]}})
    pods[1]["spec"]["schedulingGates"] = []  # worker-1 ungated, pinned to n1, not bound yet
    pods[1]["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": objects.pinned_terms(pods[1], "n1")}}}
    result = assign(claim, [pod_view(p, b.GPU) for p in pods])  # worker-0 replaced: n0 is the free slot
    assert [t.nodes for t in result.targets] == [("n0", "n1"), ("n1",)]  # never a second pod on full n1
    assert "role worker: its waiting pods are pinned to [n0 n1], [n1]" in result.blocked
    pods[1]["spec"]["nodeName"] = "n1"  # once worker-1 is bound nothing is left to block
    assert not assign(claim, [pod_view(p, b.GPU) for p in pods]).blocked


# ------------------------------------------------------------------------------ node sets as affinity
def test_a_node_set_is_one_term_per_node_or_a_hostname_requirement_next_to_existing_terms() -> None:
    bare = b.pod(NS, "p", "g")
    terms = objects.pinned_terms(bare, ["n1", "n0"])
    # The API server accepts one value per metadata.name requirement: one ORed term per node.
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                     {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n0"]}]}]
    bare["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}
    assert objects.pinned_nodes(bare) == ("n1", "n0") and objects.pinned_node(bare) is None
    assert not objects.has_own_terms(bare)  # every term is ours
    own = b.pod(NS, "q", "g")
    own["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                              {"matchExpressions": [{"key": "tpu", "operator": "Exists"}]}]}}}
    # Existing terms can only gain requirements (no new terms): the set is named by hostname label.
    assert objects.pinned_terms(own, ["n0", "n1"], {"n0": "h0"}) is None
    terms = objects.pinned_terms(own, ["n0", "n1"], {"n0": "h0", "n1": "h1"})
    assert [t["matchExpressions"] for t in terms] == [
        [{"key": "gpu", "operator": "Exists"}, {"key": "kubernetes.io/hostname", "operator": "In", "values": ["h0", "h1"]}],
        [{"key": "tpu", "operator": "Exists"}, {"key": "kubernetes.io/hostname", "operator": "In", "values": ["h0", "h1"]}]]
    own["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = terms
    assert objects.pinned_nodes(own, {"h0": "n0", "h1": "n1"}) == ("n0", "n1") and objects.has_own_terms(own)


@pytest.mark.parametrize("labelled", [True, False])
def test_pods_with_own_affinity_share_a_hostname_set_or_are_pinned_per_pod_without_labels(labelled: bool) -> None:
    fake = FakeApi()
    for i in range(4):
        node = b.node(f"n{i}", gpus=8, rack="r0", labels={"pool": "gpu"})
        if not labelled:
            del node["metadata"]["labels"]["kubernetes.io/hostname"]
        fake.put(kube.NODES, node)
    fake.put(kube.PODGROUPS, b.podgroup(NS, "h", 6, gpus=4))
    for p in b.volcano_task_pods(NS, "h", [("worker", 6, 4)]):
        p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}]}}}
        fake.put(kube.PODS, p)
    converge(fake)
    claim = claim_of(fake, "h")
    nodes = claim["status"]["nodes"]
    assert len(nodes) == 3
    sets = {objects.pinned_nodes(p, {n: n for n in nodes}) for p in fake.all(kube.PODS)}
    cond = objects.condition(claim, "PerPodConstraints")
    if labelled:
        assert sets == {tuple(nodes)} and cond is None
    else:  # no hostname label to name a set by: pinned per pod, and the claim says what to change
        assert sets == {(n,) for n in nodes}
        assert cond is not None and cond["status"] == "True"
        assert "have no kubernetes.io/hostname label" in cond["message"] and "predicateErrorCacheEnable: false" in cond[
            "message"]


@pytest.mark.parametrize("index", ["²", "9" * 5000])
def test_a_rank_that_is_no_number_is_no_rank_and_no_failed_cycle(index: str) -> None:
    # One such pod used to raise in pod_view, which fails every cycle of the controller.
    pod = {"metadata": {"name": "p", "namespace": NS, "annotations": {
        "batch.kubernetes.io/job-completion-index": index, "volcano.sh/task-spec": f"w-1{index[:3]}"}},
        "spec": {"containers": [{"name": "c", "env": [{"name": "RANK", "value": index}]}]}}
    assert pod_view(pod, "nvidia.com/gpu").ranks == {}
