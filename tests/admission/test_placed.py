"""Pods created after their gang's claim was decided: the webhook places them as the controller would.

The webhook's choice (node affinity, timing annotations, no gate) is compared with the controller's
own assignment (``constraints.assign``) over the same gang's pods created gated, and the controller's
plan for the pods the webhook placed must write nothing.
"""

from __future__ import annotations

import copy
import random

import pytest

from tests.admission.builders import patched, review
from tests.controller import builders
from volcano_metronome import api
from volcano_metronome.admission import Context, Lookups, admit
from volcano_metronome.controller import objects, reconcile
from volcano_metronome.controller.constraints import assign
from volcano_metronome.controller.observe import claim_view, pod_view
from volcano_metronome.controller.settings import Settings
from volcano_metronome.controller.gangs import claim_name_for
from volcano_metronome.controller.views import GangKey, GangView
from volcano_metronome.shapes.refs import claim_name

NS = "team"
GPU = builders.GPU
NODES, MEMBERS = ["n-3", "n-1", "n-2"], [4, 4, 2]


def claim(kind: str, gang: str, *, locked: bool = True, placed: bool = True, nodes=NODES, members=MEMBERS) -> dict:
    """A decided claim, named as the controller names it."""
    status = {"nodes": list(nodes), "members": list(members), "offsetMs": 12.5, "periodMs": 100.0,
              "epoch": 25200000, "locked": locked, "conditions": [{"type": "Placed", "status": "True" if placed
                                                                    else "False"}]}
    return {"apiVersion": api.API_VERSION, "kind": "STBandwidthClaim",
            "metadata": {"name": claim_name(kind, gang), "namespace": NS, "resourceVersion": "7"},
            "spec": {"gangRef": {"kind": kind, "name": gang}, "profile": {}}, "status": status}


def podgroup(name: str, tasks: dict[str, int]) -> dict:
    group = builders.podgroup(NS, name, sum(tasks.values()), gpus=2)
    group["spec"]["minTaskMember"] = dict(tasks)
    return group


def lookups(claims: list[dict], groups: list[dict] = ()) -> Context:
    by_name = {(objects.namespace(c), objects.name(c)): c for c in [*claims, *groups]}
    return Context(lookups=Lookups(claim=lambda ns, n: by_name.get((ns, n)) if (ns, n) in by_name and
                                   by_name[(ns, n)].get("kind") == "STBandwidthClaim" else None,
                                   pod_group=lambda ns, n: next((g for g in groups if objects.name(g) == n), None)))


def fresh(pod: dict) -> dict:
    """The pod as its operator creates it: before our webhook (no gate, no label)."""
    out = copy.deepcopy(pod)
    out["spec"].pop("schedulingGates", None)
    out["metadata"]["labels"].pop(api.MANAGED_LABEL, None)
    return out


def webhook(pod: dict, ctx: Context) -> dict:
    result = admit(review(fresh(pod), namespace=NS), ctx)
    assert result.verdict in ("allowed", "patched")
    return patched(fresh(pod), result.review)


def indexed_job_pods(job: str, size: int) -> list[dict]:
    out = []
    for i in range(size):
        p = builders.pod(NS, f"{job}-{i}-x{random.Random(i).randrange(10**5)}", job, kind="Job", gpus=2, size=size)
        p["metadata"]["annotations"].pop(api.VOLCANO_GROUP_NAME, None)
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = str(i)
        p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "u",
                                             "controller": True}]
        out.append(p)
    return out


def gang_of(kind: str, name: str, claim_obj: dict, pods: list[dict]) -> GangView:
    views = tuple(pod_view(p, GPU) for p in pods)
    c = claim_view(claim_obj)
    return GangView(key=GangKey(NS, kind, name), obj=None, claim_name=c.name, claim=c, profile=c.profile,
                    profile_error="", size=len(pods), gpus_per_member=2, priority=0, created_s=0.0, pods=views,
                    policy="")


CASES = {
    "volcano-role": ("PodGroup", lambda: builders.volcano_task_pods(NS, "vj", [("worker", 10, 2)]), {"worker": 10}),
    "volcano-kube-scheduler": ("PodGroup", lambda: builders.volcano_task_pods(
        NS, "vj", [("worker", 10, 2)], scheduler="default-scheduler"), {"worker": 10}),
    "indexed-job": ("Job", lambda: indexed_job_pods("ij", 10), None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_webhook_places_each_pod_where_the_controller_would(case):
    kind, make, tasks = CASES[case]
    gated = make()
    name = gated[0]["metadata"]["annotations"][api.GANG_NAME]
    c = claim(kind, name)
    ctx = lookups([c], [podgroup(name, tasks)] if tasks else [])
    controller = {t.pod.name: t.nodes for t in assign(claim_view(c), [pod_view(p, GPU) for p in gated]).targets}
    assert all(controller.values())
    order = list(gated)
    random.Random(3).shuffle(order)  # operators create pods in no particular order
    placed = [webhook(p, ctx) for p in order]
    for p in placed:
        assert not p["spec"].get("schedulingGates"), p["metadata"]["name"]
        assert objects.pinned_nodes(p) == controller[p["metadata"]["name"]]
        ann = p["metadata"]["annotations"]
        assert (ann[api.PERIOD_MS], ann[api.OFFSET_MS], ann[api.EPOCH]) == ("100", "12.5", "25200000")
        assert p["metadata"]["labels"][api.MANAGED_LABEL] == "true"
    if case == "volcano-role":
        assert {objects.pinned_nodes(p) for p in placed} == {tuple(NODES)}  # the role's node set, in claim order
    else:
        assert sorted(objects.pinned_nodes(p)[0] for p in placed) == sorted(
            n for n, m in zip(NODES, MEMBERS) for _ in range(m))
    # Admitting a placed pod again (a later webhook changed it: reinvocationPolicy IfNeeded) changes nothing.
    for p in placed:
        again = admit(review(p, namespace=NS), ctx)
        assert patched(p, again.review) == p, p["metadata"]["name"]
    # The controller finds nothing to write for them: no pod patch, no claim status.
    gang = gang_of(kind, name, c, placed)
    writes = reconcile._follow(gang, gang.claim, None, Settings(), 1000.0, 1e6)
    assert writes.pods == () and writes.claim == () and writes.after == ()


def test_a_pod_gated_by_the_fallback_takes_the_slot_it_would_have_had():
    """Half the pods arrive placed, half gated (the claim cache lagged): the controller pins the rest as if all were gated."""
    gated = indexed_job_pods("ij", 10)
    c = claim("Job", "ij")
    ctx = lookups([c])
    controller = {t.pod.name: t.nodes for t in assign(claim_view(c), [pod_view(p, GPU) for p in gated]).targets}
    mixed = [webhook(p, ctx) if i % 2 else p for i, p in enumerate(gated)]
    mixed_targets = {t.pod.name: t.nodes for t in assign(claim_view(c), [pod_view(p, GPU) for p in mixed]).targets}
    assert mixed_targets == controller


def test_a_gang_with_a_long_name_finds_the_hashed_claim_the_controller_names():
    name = "j" * 250  # "job-" + 250 characters is past the 253 a name may have: the controller hashes it
    pods = indexed_job_pods(name, 3)
    c = claim("Job", name, nodes=NODES, members=[1, 1, 1])
    assert objects.name(c) == claim_name_for(GangKey(NS, "Job", name)) and len(objects.name(c)) == 253
    out = webhook(pods[0], lookups([c]))
    assert not out["spec"].get("schedulingGates") and objects.pinned_nodes(out) == ("n-3",)


def test_unlocked_claim_gives_the_period_only():
    pods = builders.volcano_task_pods(NS, "vj", [("worker", 10, 2)])
    c = claim("PodGroup", "vj", locked=False)
    out = webhook(pods[0], lookups([c], [podgroup("vj", {"worker": 10})]))
    ann = out["metadata"]["annotations"]
    assert ann[api.PERIOD_MS] == "100" and api.OFFSET_MS not in ann and api.EPOCH not in ann
    assert not out["spec"].get("schedulingGates")


def test_a_claim_with_a_traffic_class_gives_its_pods_the_class_and_the_controller_agrees():
    pods = builders.volcano_task_pods(NS, "vj", [("worker", 10, 2)])
    c = claim("PodGroup", "vj")
    c["status"].update({"trafficClass": 1, "trafficClassEnv": {"NCCL_IB_TC": "74", "NCCL_IB_SL": "2"}})
    out = webhook(pods[0], lookups([c], [podgroup("vj", {"worker": 10})]))
    ann = out["metadata"]["annotations"]
    assert ann[api.TRAFFIC_CLASS] == "1" and ann[api.TRAFFIC_CLASS_ENV] == '{"NCCL_IB_SL":"2","NCCL_IB_TC":"74"}'
    view = claim_view(c)
    assert (view.traffic_class, view.traffic_class_env) == (1, (("NCCL_IB_SL", "2"), ("NCCL_IB_TC", "74")))


@pytest.mark.parametrize("why", ["no-claim-cache", "no-claim", "released", "other-gang", "two-roles", "own-affinity",
                                 "no-index", "bound", "withdrawn-offset", "past-the-members"])
def test_fallback_gates_the_pod(why):
    pods = builders.volcano_task_pods(NS, "vj", [("worker", 10, 2)])
    p, tasks, claims = pods[3], {"worker": 10}, [claim("PodGroup", "vj")]
    if why == "no-claim":
        claims = []
    elif why == "released":
        claims = [claim("PodGroup", "vj", placed=False)]
    elif why == "other-gang":
        claims[0]["spec"]["gangRef"]["name"] = "someone-else"
    elif why == "two-roles":
        tasks = {"worker": 9, "master": 1}
    elif why == "own-affinity":
        p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    elif why == "no-index":
        p = builders.gang_pods(NS, "vj", 10, gpus=2)[0]
    elif why == "bound":
        p["spec"]["nodeName"] = "n-1"
    elif why == "withdrawn-offset":
        claims = [claim("PodGroup", "vj", locked=False)]
        p["metadata"]["annotations"][api.OFFSET_MS] = "3"
    elif why == "past-the-members":
        p["spec"]["schedulerName"] = "default-scheduler"
        p["metadata"]["annotations"]["volcano.sh/task-index"] = p["metadata"]["labels"]["volcano.sh/task-index"] = "10"
    ctx = Context() if why == "no-claim-cache" else lookups(claims, [podgroup("vj", tasks)])
    out = webhook(p, ctx)
    assert {"name": api.SCHEDULING_GATE} in out["spec"]["schedulingGates"]
    assert objects.pinned_nodes(out) is None


def test_kueue_pods_find_the_workload_claim_their_pod_set_names():
    """A Kueue batch Job's pods name their gang Job, the claim is the Workload's: podSetUpdates carry its name."""
    gated = indexed_job_pods("ij", 10)
    c = claim("Workload", "job-ij-5f2a")
    for p in gated:  # what Kueue copies from our AdmissionCheck's podSetUpdates into the pod template
        p["metadata"]["annotations"][api.PLACEMENT_CLAIM] = "workload-job-ij-5f2a"
    ctx = lookups([c])
    controller = {t.pod.name: t.nodes for t in assign(claim_view(c), [pod_view(p, GPU) for p in gated]).targets}
    placed = [webhook(p, ctx) for p in reversed(gated)]
    assert {p["metadata"]["name"]: objects.pinned_nodes(p) for p in placed} == controller
    assert not any(p["spec"].get("schedulingGates") for p in placed)
    gang = gang_of("Workload", "job-ij-5f2a", c, placed)
    writes = reconcile._follow(gang, gang.claim, None, Settings(), 1000.0, 1e6)
    assert writes.pods == () and writes.claim == ()
    # A name that is no decided Workload claim: gated as before.
    for p in gated:
        p["metadata"]["annotations"][api.PLACEMENT_CLAIM] = "workload-other"
    assert {"name": api.SCHEDULING_GATE} in webhook(gated[0], ctx)["spec"]["schedulingGates"]


@pytest.mark.parametrize("index", ["²", "9" * 5000, "１", "-1", " 3x"])
def test_a_rank_that_is_no_number_gates_the_pod_it_does_not_fail_the_review(index: str) -> None:
    # "²".isdigit() is true and int() refuses it, as it refuses 5,000 digits: the review used to raise (a 500).
    pod = indexed_job_pods("j", 2)[0]
    pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = index
    pod["spec"]["containers"][0]["env"] = [{"name": "RANK", "value": index}]
    result = admit(review(fresh(pod), namespace=NS), lookups([claim("Job", "j", members=[1, 1, 0])]))
    assert result.verdict == "patched"
    assert {"name": api.SCHEDULING_GATE} in patched(fresh(pod), result.review)["spec"]["schedulingGates"]


@pytest.mark.parametrize("status", [{"periodMs": "nan"}, {"offsetMs": float("inf")}, {"epoch": 1e300}, []])
def test_a_claim_not_as_the_controller_writes_it_gates_the_pod(status: object) -> None:
    bad = claim("Job", "j", members=[1, 1, 0])
    bad["status"] = {**bad["status"], **status} if isinstance(status, dict) else status
    pod = indexed_job_pods("j", 2)[0]
    result = admit(review(fresh(pod), namespace=NS), lookups([bad]))
    assert {"name": api.SCHEDULING_GATE} in patched(fresh(pod), result.review)["spec"]["schedulingGates"]
