"""JobSet, PyTorchJob and MPIJob gangs under Kueue, against the in-memory API: the multi-podset Workload is held
and released as one gang, and the job's pods (named by the webhook after their job) follow its claim in rank
order."""

from __future__ import annotations

import copy
import random
from typing import Any

from tests.controller import builders as b
from tests.controller.fake import FakeApi
from tests.controller.test_kueue_and_reoptimisation import NOW, NS, kueue_cluster, our_entry, run
from volcano_metronome import api, kube
from volcano_metronome.controller import objects, owners, ranks

JSON = dict[str, Any]


def multi_podset_workload(name: str, owner_kind: str, owner: str, sets: list[tuple[str, int]]) -> JSON:
    wl = b.workload(NS, name, sum(count for _, count in sets))
    template = wl["spec"]["podSets"][0]["template"]
    wl["spec"]["podSets"] = [{"name": n, "count": c, "template": copy.deepcopy(template)} for n, c in sets]
    wl["metadata"]["annotations"][api.GANG_SIZE] = str(sum(count for _, count in sets))
    api_version = {"JobSet": "jobset.x-k8s.io/v1alpha2", "PyTorchJob": "kubeflow.org/v1",
                   "MPIJob": "kubeflow.org/v2beta1"}[owner_kind]
    wl["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": owner_kind, "name": owner, "uid": "u1",
                                          "controller": True}]
    wl["status"] = b.quota_reserved_status("cq", sum(count for _, count in sets))
    return wl


def job_pod(name: str, kind: str, job: str, size: int, labels: dict[str, str], rank_env: int | None = None) -> JSON:
    pod = b.pod(NS, name, job, kind=kind, size=size)
    pod["metadata"]["labels"].update(labels)
    if rank_env is not None:
        pod["spec"]["containers"][0]["env"] = [{"name": "RANK", "value": str(rank_env)}]
    return pod


def placed_in_rank_order(f: FakeApi, claim_name: str, ranked: list[str]) -> None:
    """Each node of the claim, in order, holds the next ``members`` pods of ``ranked``."""
    status = f.obj(kube.CLAIMS, NS, claim_name)["status"]
    expected = [n for n, m in zip(status["nodes"], status["members"]) for _ in range(m)]
    got = [objects.pinned_node(f.obj(kube.PODS, NS, name)) for name in ranked]
    assert got == expected
    assert not any(objects.gates(p) for p in f.all(kube.PODS))


def test_a_jobset_workload_is_one_gang_and_its_pods_follow_the_claim_in_rank_order() -> None:
    f = kueue_cluster(nodes=6)
    f.put(kube.WORKLOADS, multi_podset_workload("jobset-js-1a2b3", "JobSet", "js", [("leader", 1), ("node", 4)]))
    ctl = f.controller(NOW)
    run(ctl)
    entry = our_entry(f, "jobset-js-1a2b3")
    assert entry["state"] == "Ready"
    assert [u["name"] for u in entry["podSetUpdates"]] == ["leader", "node"]
    claim = f.obj(kube.CLAIMS, NS, "workload-jobset-js-1a2b3")
    assert sum(claim["status"]["members"]) == 5 and claim["spec"]["gangRef"]["kind"] == "Workload"
    # JobSet's labels: leader-0, then node-0 (completion 0, 1), node-1 (completion 0, 1): global job index first.
    pods = [("js-leader-0-0", "leader", 0, 0, 0)] + [
        (f"js-node-{j}-{c}", "node", j, 1 + j, c) for j in range(2) for c in range(2)]
    shuffled = pods[:]
    random.Random(7).shuffle(shuffled)
    for name, rjob, index, global_index, completion in shuffled:
        f.put(kube.PODS, job_pod(name, "JobSet", "js", 5, {
            api.JOBSET_NAME_LABEL: "js", ranks.JOBSET_REPLICATED_JOB: rjob, ranks.JOBSET_JOB_INDEX: str(index),
            ranks.JOBSET_GLOBAL_INDEX: str(global_index), ranks.COMPLETION_INDEX: str(completion)}))
    run(ctl)
    placed_in_rank_order(f, "workload-jobset-js-1a2b3", [p[0] for p in pods])
    assert f.obj(kube.CLAIMS, NS, "workload-jobset-js-1a2b3")["status"] == claim["status"]


def test_a_pytorchjob_workload_places_master_then_workers_by_rank() -> None:
    f = kueue_cluster(nodes=4)
    f.put(kube.WORKLOADS, multi_podset_workload("pytorchjob-pt-9z8y7", "PyTorchJob", "pt", [("master", 1),
                                                                                              ("worker", 3)]))
    ctl = f.controller(NOW)
    run(ctl)
    assert our_entry(f, "pytorchjob-pt-9z8y7")["state"] == "Ready"
    names = ["pt-master-0", "pt-worker-0", "pt-worker-1", "pt-worker-2"]
    for rank, name in reversed(list(enumerate(names))):  # the training-operator's literal RANK: master 0, workers 1..n
        replica_type, index = ("master", 0) if rank == 0 else ("worker", rank - 1)
        f.put(kube.PODS, job_pod(name, "PyTorchJob", "pt", 4, {
            api.KUBEFLOW_JOB_NAME_LABEL: "pt", ranks.KUBEFLOW_REPLICA_TYPE: replica_type,
            ranks.KUBEFLOW_REPLICA_INDEX: str(index)}, rank_env=rank))
    run(ctl)
    placed_in_rank_order(f, "workload-pytorchjob-pt-9z8y7", names)


def test_the_pods_of_a_job_whose_workload_is_not_seen_stay_gated() -> None:
    f = kueue_cluster(nodes=2)
    for i in range(2):
        f.put(kube.PODS, job_pod(f"mpi-worker-{i}", "MPIJob", "mpi", 2, {api.KUBEFLOW_JOB_NAME_LABEL: "mpi"}))
    run(f.controller(NOW))
    assert all(objects.gates(p) for p in f.all(kube.PODS))
    assert f.all(kube.CLAIMS) == []


def test_workloads_are_found_by_the_kind_and_name_of_their_owner() -> None:
    wls = [multi_podset_workload(f"w-{kind.lower()}", kind, "same", [("a", 1)]) for kind in ("JobSet", "MPIJob")]
    batch = b.workload(NS, "job-x", 1)
    batch["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "x", "uid": "u"}]
    other = b.workload(NS, "rs", 1)
    other["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u"}]
    assert owners.workload_owners([*wls, batch, other]) == {
        (NS, "JobSet", "same"): "w-jobset", (NS, "MPIJob", "same"): "w-mpijob", (NS, "Job", "x"): "job-x"}


def test_an_mpi_launcher_ranks_before_its_workers_in_index_order() -> None:
    def pod(name: str, labels: dict[str, str]) -> JSON:
        return {"metadata": {"name": name, "labels": labels}, "spec": {"containers": [{"name": "c"}]}}

    launcher = pod("pi-launcher-abcde", {ranks.KUBEFLOW_JOB_ROLE: "launcher"})
    workers = [pod(f"pi-worker-{i}", {ranks.KUBEFLOW_JOB_ROLE: "worker", ranks.KUBEFLOW_REPLICA_INDEX: str(i)})
               for i in (10, 2, 0, 1)]
    everyone = [*workers, launcher]
    keys = [ranks.rank_keys(p) for p in everyone]
    assert ranks.rank_source(keys) == "kubeflow"
    ordered = ranks.ring_order(everyone, keys, [p["metadata"]["name"] for p in everyone])
    assert [p["metadata"]["name"] for p in ordered] == ["pi-launcher-abcde", "pi-worker-0", "pi-worker-1",
                                                        "pi-worker-2", "pi-worker-10"]


def test_pods_created_out_of_rank_order_still_take_their_ranks_slots() -> None:
    """Operators create pods in no particular order, often over several cycles: the first pins wait for
    every member, so the last-ranked pod arriving first does not take the first node."""
    f = kueue_cluster(nodes=4)
    f.put(kube.WORKLOADS, multi_podset_workload("jobset-late-1", "JobSet", "late", [("leader", 1), ("node", 2)]))
    ctl = f.controller(NOW)
    run(ctl)
    pods = [("late-leader-0-0", "leader", 0), ("late-node-0-0", "node", 1), ("late-node-1-0", "node", 2)]
    for name, rjob, global_index in reversed(pods):  # one pod per cycle, last rank first
        f.put(kube.PODS, job_pod(name, "JobSet", "late", 3, {
            api.JOBSET_NAME_LABEL: "late", ranks.JOBSET_REPLICATED_JOB: rjob,
            ranks.JOBSET_GLOBAL_INDEX: str(global_index)}))
        run(ctl)
        if name != pods[0][0]:
            assert all(objects.gates(p) for p in f.all(kube.PODS)), "pinned before every member existed"
    placed_in_rank_order(f, "workload-jobset-late-1", [p[0] for p in pods])
