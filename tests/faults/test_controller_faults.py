"""The controller under faults, against a real kube-apiserver + etcd: a gang no decision exists for
beside a normal one, and a leader frozen mid-write while a standby takes over."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import time
from typing import Any

from tests.controller import builders as b
from tests.controller.cluster import Cluster, ControllerProcess, start_controller, wait_until
from volcano_metronome import api, kube
from volcano_metronome.controller import objects

FAST_LEASE = {"leaseDurationSeconds": 6, "renewDeadlineSeconds": 5, "retryPeriodSeconds": 1}
# 30 s iterations: longer than the hyperperiod cap (25.2 s), so no decision can exist for this gang.
POISON = {"period_ms": 30000, "windows": [{"start_ms": 0, "len_ms": 100, "gbps": 10}], "jitter_ms": 0}


def test_a_poison_gang_does_not_stop_a_normal_gang(cluster: Cluster, tmp_path: pathlib.Path,
                                                   controllers: list[ControllerProcess]) -> None:
    cluster.nodes(4)
    ns = cluster.namespace()
    # As a controller-made object would come in past the webhook (which marks it): the profile is there.
    cluster.k.create(kube.PODGROUPS, b.podgroup(ns, "poison", 2, profile=POISON), ns)
    for p in b.gang_pods(ns, "poison", 2, profile=POISON):
        cluster.k.create(kube.PODS, p, ns)
    cluster.gang(ns, "good", 2)
    ctl = start_controller(cluster, tmp_path, controllers, ns, args=["--no-leader-elect"])
    wait_until(lambda: cluster.ungated(ns, ["good"]), 60, lambda: f"the normal gang\n{ctl.logs()}")
    # Placed by the first cycle that decided anything, beside the poison gang's no-fit.
    # The cycle logs its summary after its writes, so the line may trail the ungating by a moment.
    first = wait_until(lambda: re.search(r"cycle: (\d+) decided \((\d+) placed\)", ctl.logs()), 30,
                       lambda: f"the deciding cycle's summary\n{ctl.logs()}")
    print(f"FAULT-BENCH poison gang: first deciding cycle: {first.group(0) if first else None}")
    assert first is not None and first.groups() == ("2", "1"), ctl.logs()
    claim = wait_until(lambda: (c := cluster.claims(ns).get("podgroup-poison")) and objects.condition(c, "NoFit")
                       and c, 30, "the poison gang's claim condition")
    cond = objects.condition(claim, "NoFit")
    assert cond["status"] == "True" and cond["reason"] == "Undecidable" and "25200 ms" in cond["message"]
    assert all(objects.gated_by_us(p) for p in cluster.pods(ns)
               if objects.annotations_of(p)[api.GANG_NAME] == "poison")
    events = wait_until(lambda: [e for e in cluster.k.list(kube.EVENTS, ns)["items"] if e["reason"] == "NoFit"],
                        10, "the NoFit event")  # Events go out after the claim and pod writes
    assert "30000" in events[0]["note"]
    assert ctl.metric("metronome_controller_cycle_failures_total") == 0
    assert wait_until(lambda: ctl.metric('metronome_controller_no_fits_total'), 10, "metrics")
    cluster.check_consistent(ns)


def _versions(cluster: Cluster, ns: str) -> dict[str, str]:
    out = {}
    for resource in (kube.PODS, kube.CLAIMS):
        for obj in cluster.k.list(resource, ns)["items"]:
            out[f"{resource.plural}/{objects.name(obj)}"] = objects.resource_version(obj)
    return out


def _settled(cluster: Cluster, ns: str, timeout: float = 30.0) -> dict[str, str]:
    """The resourceVersions of the namespace's pods and claims once two looks a second apart agree."""
    seen = [_versions(cluster, ns)]

    def same() -> bool:
        seen.append(_versions(cluster, ns))
        return seen[-1] == seen[-2]

    wait_until(same, timeout, "the new leader's last writes", interval=1.0)
    return seen[-1]


def test_a_leader_frozen_mid_write_never_writes_after_the_standby_took_over(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess]) -> None:
    cluster.nodes(24)
    ns = cluster.namespace()
    for i in range(12):
        cluster.gang(ns, f"g{i}", 2)
    settings = {"leaderElection": {"leaseName": "metronome", **FAST_LEASE}}
    first = start_controller(cluster, tmp_path, controllers, ns, extra_settings=settings)
    wait_until(lambda: first.metric("metronome_controller_leader") == 1, 30, lambda: f"leadership\n{first.logs()}")
    second = start_controller(cluster, tmp_path, controllers, ns, extra_settings=settings)
    wait_until(lambda: second.metric("metronome_controller_leader") == 0, 30, "the standby")
    wait_until(lambda: any(not objects.gated_by_us(p) for p in cluster.pods(ns)), 60, "the first ungated pod",
               interval=0.01)
    assert first.proc is not None
    os.kill(first.proc.pid, signal.SIGSTOP)  # frozen with its plan half written
    stopped = time.monotonic()
    try:
        wait_until(lambda: second.metric("metronome_controller_leader") == 1, 30,
                   lambda: f"the standby's takeover\n{second.logs()}")
        took_over = time.monotonic() - stopped
        wait_until(lambda: cluster.ungated(ns), 60, lambda: f"convergence by the new leader\n{second.logs()}")
        settled = _settled(cluster, ns)
    finally:
        os.kill(first.proc.pid, signal.SIGCONT)
    assert first.wait(30) == 1, first.logs()  # it finds its lease gone and exits
    late = sum(1 for key, rv in _versions(cluster, ns).items() if settled.get(key) != rv)
    print(f"FAULT-BENCH frozen leader: standby led {took_over:.1f} s after SIGSTOP; objects written after SIGCONT: "
          f"{late}; old leader exit code {first.proc.returncode}")
    assert _versions(cluster, ns) == settled, "the old leader wrote after the standby took over"
    claims = cluster.check_consistent(ns)
    assert len(claims) == 12
    used: dict[str, str] = {}
    for name, claim in claims.items():
        for node in claim["status"]["nodes"]:
            assert node not in used, f"{node} given to {used.get(node)} and {name}"  # 8 GPUs per pod
            used[node] = name


def _bind(cluster: Cluster, ns: str, pod: str, node: str) -> None:
    """What a scheduler does: a Binding through the pod's binding subresource."""
    cluster.k.request("POST", kube.PODS.path(ns, pod, "binding"), body={
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}})


def _gang_pods(cluster: Cluster, ns: str, gang: str) -> dict[str, dict]:  # type: ignore[type-arg]
    return {objects.name(p): p for p in cluster.pods(ns) if objects.annotations_of(p).get(api.GANG_NAME) == gang}


def test_a_node_vanishing_under_a_decided_gang_gets_the_gang_re_decided(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess]) -> None:
    cluster.nodes(9)
    ns = cluster.namespace()
    # "v": a Volcano Job's two workers (one task role: one node set), owned by a Job that recreates them.
    job = cluster.k.create(kube.BATCH_JOBS, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "v"},
                                             "spec": {"suspend": True, "template": {"spec": {
                                                 "restartPolicy": "Never",
                                                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}},
                           ns)
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "v", "uid": job["metadata"]["uid"], "controller": True}
    templates = b.volcano_task_pods(ns, "v", [("worker", 2, 8)])
    cluster.k.create(kube.PODGROUPS, b.podgroup(ns, "v", 2), ns)
    for p in templates:
        p["metadata"]["ownerReferences"] = [owner]
        cluster.k.create(kube.PODS, p, ns)
    cluster.gang(ns, "bound", 2)  # its pods get bound: a vanished node never costs it a pod
    cluster.gang(ns, "bare", 2)  # pods without an owner: reported, never deleted
    ctl = start_controller(cluster, tmp_path, controllers, ns, args=["--no-leader-elect"])
    wait_until(lambda: cluster.ungated(ns), 60, lambda: f"the first placements\n{ctl.logs()}")
    claims = cluster.check_consistent(ns)
    old = {g: claims[f"podgroup-{g}"]["status"]["nodes"] for g in ("v", "bound", "bare")}
    for name, p in _gang_pods(cluster, ns, "bound").items():
        _bind(cluster, ns, name, objects.pinned_node(p) or "")
    bound_before = {n: (p["metadata"]["uid"], p["spec"]["nodeName"]) for n, p in _gang_pods(cluster, ns, "bound").items()}
    bare_before = {n: p["metadata"]["uid"] for n, p in _gang_pods(cluster, ns, "bare").items()}
    v_before = {n: p["metadata"]["uid"] for n, p in _gang_pods(cluster, ns, "v").items()}

    gone = [old["v"][0], old["bound"][0], old["bare"][0]]
    started = time.monotonic()
    for node in gone:
        cluster.k.delete(kube.NODES, None, node)

    def owner_recreates() -> bool:
        """The Job controller's part: once the stranded pods are deleted, recreate them (gated, as the webhook
        would gate them), under the same names as Volcano's job controller does."""
        have = _gang_pods(cluster, ns, "v")
        if any(p["metadata"]["uid"] == v_before.get(n) for n, p in have.items()):
            return False
        for p in templates:
            if objects.name(p) not in have:
                cluster.k.create(kube.PODS, {k: v for k, v in p.items() if k != "status"}, ns)
        return True

    wait_until(owner_recreates, 60, lambda: f"the stranded pods' deletion\n{ctl.logs()}")
    deleted_s = time.monotonic() - started

    def redecided() -> dict | None:  # type: ignore[type-arg]
        claim = cluster.claims(ns)["podgroup-v"]
        nodes = claim.get("status", {}).get("nodes") or []
        pods = _gang_pods(cluster, ns, "v")
        ok = nodes and len(pods) == 2 and all(not objects.gated_by_us(p) for p in pods.values())
        return claim if ok else None

    claim = wait_until(redecided, 60, lambda: f"the re-decision\n{ctl.logs()}")
    total_s = time.monotonic() - started
    new = claim["status"]["nodes"]
    live = {objects.name(n) for n in cluster.k.list(kube.NODES)["items"]}
    assert len(new) == 2 and not set(new) & set(gone) and set(new) <= live
    for p in _gang_pods(cluster, ns, "v").values():
        assert objects.pinned_nodes(p) == tuple(new) and p["metadata"]["uid"] not in v_before.values()
    cond = objects.condition(claim, "NodeVanished")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "Redecided"), claim["status"]
    def vanished_events() -> list[dict[str, Any]]:
        return [e for e in cluster.k.list(kube.EVENTS, ns)["items"] if e["reason"] == "NodeVanished"]

    def about(events: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(e["regarding"]["kind"], e["regarding"]["name"]) for e in events}

    # Events go out after the claim and pod writes: waited for, not read at once.
    events = wait_until(lambda: (ev := vanished_events()) and {("PodGroup", "v"), ("STBandwidthClaim", "podgroup-v")}
                        <= about(ev) and ev, 10, lambda: f"the NodeVanished events (seen: {about(vanished_events())})")
    assert all(e["type"] == "Warning" and f"node {old['v'][0]} vanished before the gang was bound; re-deciding"
               in e["note"] for e in events if e["regarding"]["name"] in ("v", "podgroup-v"))
    # Bound pods untouched, their claim kept; bare pods reported and kept.
    assert {n: (p["metadata"]["uid"], p["spec"]["nodeName"])
            for n, p in _gang_pods(cluster, ns, "bound").items()} == bound_before
    assert cluster.claims(ns)["podgroup-bound"]["status"]["nodes"] == old["bound"]
    assert {n: p["metadata"]["uid"] for n, p in _gang_pods(cluster, ns, "bare").items()} == bare_before
    bare = wait_until(lambda: objects.condition(cluster.claims(ns)["podgroup-bare"], "NodeVanished"), 30,
                      "the bare gang's report")
    assert bare["status"] == "True" and bare["reason"] == "OwnerlessPods" and "NOT deleted" in bare["message"]
    assert wait_until(lambda: ctl.metric("metronome_controller_stranded_pods_deleted_total"), 10, "metrics") == 2
    assert ctl.metric("metronome_controller_vanished_node_redecisions_total") == 2  # "v" and "bare" released
    print(f"FAULT-BENCH vanished node: stranded pods deleted {deleted_s:.1f} s after the node deletions; gang "
          f"re-decided on live nodes and its recreated pods pinned {total_s:.1f} s after")
