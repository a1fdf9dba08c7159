"""Ranks in ring order and one node set per Volcano task role, through a real kube-apiserver + etcd.

The API server checks what the controller writes on gated pods (it allows node affinity only to be
added or narrowed); no scheduler runs, so the test reads the constraints, not where pods land.
"""

from __future__ import annotations

import pathlib
from typing import Any

from tests.controller import builders as b
from tests.controller.cluster import Cluster, ControllerProcess, start_controller, wait_until
from volcano_metronome import kube
from volcano_metronome.controller import objects

JSON = dict[str, Any]





def slots_in_order(claim: JSON) -> list[str]:
    """The claim's member slots in its node order: where rank 0, 1, 2, ... belong."""
    status = claim["status"]
    return [n for n, m in zip(status["nodes"], status["members"]) for _ in range(m)]


def create(cluster: Cluster, ns: str, podgroup: JSON, pods: list[JSON]) -> None:
    cluster.k.create(kube.PODGROUPS, podgroup, ns)
    for p in pods:
        cluster.k.create(kube.PODS, p, ns)


def test_a_gang_of_twelve_is_pinned_in_rank_order(cluster: Cluster, tmp_path: pathlib.Path,
                                                  controllers: list[ControllerProcess]) -> None:
    cluster.nodes(8, per_rack=4)
    ns = cluster.namespace()
    # 12 pods of 4 GPUs on 8-GPU nodes: 6 nodes over two racks. Created last-first, so neither creation
    # order nor the name's lexicographic order (a-10 before a-2) gives the ranks.
    create(cluster, ns, b.podgroup(ns, "a", 12, gpus=4), list(reversed(b.gang_pods(ns, "a", 12, gpus=4))))
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    wait_until(lambda: cluster.ungated(ns), 60, lambda: f"ungated pods\n{ctl.logs()}")
    claim = cluster.check_consistent(ns)["podgroup-a"]
    pinned = {objects.name(p): objects.pinned_node(p) for p in cluster.pods(ns)}
    assert [pinned[f"a-{i}"] for i in range(12)] == slots_in_order(claim)
    racks = [int(n.rsplit("-n", 1)[1]) // 4 for n in claim["status"]["nodes"]]
    assert len(set(racks)) == 2 and racks == sorted(racks), claim["status"]["nodes"]


def test_volcano_task_roles_share_node_sets_or_say_how_to_unblock(cluster: Cluster, tmp_path: pathlib.Path,
                                                                  controllers: list[ControllerProcess]) -> None:
    cluster.nodes(12)
    ns = cluster.namespace()
    # One node set for all 12 pods (the master's node also holds workers' slots: the roles are merged).
    create(cluster, ns, b.podgroup(ns, "v", 12, gpus=4),
           b.volcano_task_pods(ns, "v", [("master", 1, 4), ("worker", 11, 4)]))
    # GPU requests differ: pinned per pod, and the claim says how to keep Volcano's cache from blocking it.
    create(cluster, ns, b.podgroup(ns, "m", 6, gpus=4),
           b.volcano_task_pods(ns, "m", [("master", 1, 4), ("worker", 5, 2)]))
    # Pods with required node affinity of their own: the API server lets a gated pod's terms only gain
    # requirements, so the role's set is named by hostname label in each term.
    own = b.volcano_task_pods(ns, "h", [("worker", 3, 8)])
    for p in own:
        p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": cluster.node_label[0], "operator": "In",
                                                         "values": [cluster.node_label[1]]}]}]}}}
    create(cluster, ns, b.podgroup(ns, "h", 3), own)
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    wait_until(lambda: cluster.ungated(ns), 60, lambda: f"ungated pods\n{ctl.logs()}")
    claims = cluster.check_consistent(ns)
    hosts = {n: n for n in claims["podgroup-h"]["status"]["nodes"]}  # the test nodes' hostname label is their name
    for p in cluster.pods(ns):
        if objects.name(p).startswith("h-"):
            terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"]
            assert len(terms) == 1 and terms[0]["matchExpressions"][0]["key"] == cluster.node_label[0]
            assert objects.pinned_nodes(p, hosts) == tuple(claims["podgroup-h"]["status"]["nodes"])
    pods = {objects.name(p): p for p in cluster.pods(ns)}
    nodes = tuple(claims["podgroup-v"]["status"]["nodes"])
    assert len(nodes) == 6
    for i in range(11):
        assert objects.pinned_nodes(pods[f"v-worker-{i}"]) == nodes
    assert objects.pinned_nodes(pods["v-master-0"]) == nodes
    assert objects.condition(claims["podgroup-v"], "PerPodConstraints") is None

    blocked = claims["podgroup-m"]
    order = [objects.pinned_node(pods["m-master-0"])] + [objects.pinned_node(pods[f"m-worker-{i}"]) for i in range(5)]
    assert order == slots_in_order(blocked)
    cond = wait_until(lambda: objects.condition(cluster.claims(ns)["podgroup-m"], "PerPodConstraints"), 30,
                      "the PerPodConstraints condition")
    assert cond["status"] == "True" and cond["reason"] == "VolcanoPredicateErrorCache"
    assert "predicateErrorCacheEnable: false" in cond["message"]
    events = wait_until(lambda: [e for e in cluster.k.list(kube.EVENTS, ns)["items"]
                                 if e.get("reason") == "PerPodConstraints"], 30, "the PerPodConstraints Event")
    assert len(events) == 1 and events[0]["type"] == "Warning" and events[0]["regarding"]["name"] == "m"
