"""Pods created after their gang's claim was decided: our webhook admits them placed, the controller leaves them be.

Real kube-apiserver + etcd, our webhook (HTTPS, a real certificate, registered by URL for this test's
namespace only) with its watch-fed claim and PodGroup caches, and our controller. The claim is
written before the pods, as the controller writes a decision (or, in the last test, by the controller
itself for a Volcano Job's PodGroup that has no pods yet); the pods then arrive as Volcano's job
controller creates them, and must come out ungated, pinned to the claim's node set, with the timing
annotations, and never be written to by the controller.
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

from tests.controller import builders as b
from tests.controller.cluster import Cluster, ControllerProcess, claim_timing, start_controller, wait_until
from volcano_metronome import api, kube
from volcano_metronome.controller import objects
from volcano_metronome.shapes.profiles import profile_from_annotation, profile_to_spec
from volcano_metronome.shapes.times import format_time

JSON = dict[str, Any]


def register(cluster: Cluster, ns: str, url: str, ca_pem: bytes) -> str:
    """A MutatingWebhookConfiguration sending this namespace's pod CREATEs to our webhook."""
    import base64

    name = f"placed-{cluster.tag}"
    cluster.k.create(kube.MUTATING_WEBHOOKS, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{"name": "pods.metronome.dev", "admissionReviewVersions": ["v1"], "sideEffects": "NoneOnDryRun",
                      "failurePolicy": "Fail", "timeoutSeconds": 10, "reinvocationPolicy": "Never",
                      "clientConfig": {"url": url + "/mutate", "caBundle": base64.b64encode(ca_pem).decode()},
                      "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                      "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                 "operations": ["CREATE"]}]}]})
    return name


def decided_claim(cluster: Cluster, ns: str, gang: str, nodes: list[str], members: list[int]) -> JSON:
    profile = profile_from_annotation(b.profile_text(), "test")
    cluster.k.create(kube.CLAIMS, {
        "apiVersion": api.API_VERSION, "kind": "STBandwidthClaim",
        "metadata": {"name": f"podgroup-{gang}", "namespace": ns, "labels": {api.MANAGED_LABEL: "true"}},
        "spec": {"gangRef": {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "name": gang},
                 "priority": 0, "profile": profile_to_spec(profile)}}, ns)
    now = format_time(time.time())
    status = {"nodes": nodes, "members": members, "offsetMs": 35, "periodMs": 200, "epoch": 1764000000000,
              "links": [], "predictedOverflowGbpsMs": 0, "feasible": True, "locked": True, "decidedAt": now,
              "conditions": [{"type": "Placed", "status": "True", "reason": "Placed", "message": "test",
                              "lastTransitionTime": now},
                             {"type": "NoFit", "status": "False", "reason": "Placed", "message": "placed",
                              "lastTransitionTime": now}]}
    return cluster.k.patch(kube.CLAIMS, ns, f"podgroup-{gang}", {"status": status}, subresource="status")


def test_pods_of_a_decided_gang_are_created_placed_and_never_patched(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess],
        webhook: tuple[str, bytes]) -> None:
    nodes = cluster.nodes(3, gpus=8)
    ns = cluster.namespace()
    hook = register(cluster, ns, *webhook)
    try:
        group = b.podgroup(ns, "vj", 6, gpus=4)
        group["spec"]["minTaskMember"] = {"worker": 6}
        cluster.k.create(kube.PODGROUPS, group, ns)
        claim = decided_claim(cluster, ns, "vj", [nodes[1], nodes[0], nodes[2]], [2, 2, 2])
        ctl = start_controller(cluster, tmp_path, controllers, ns)
        pods = b.volcano_task_pods(ns, "vj", [("worker", 6, 4)])
        for p in pods:  # as Volcano's job controller creates them: no gate, no label of ours
            p["spec"].pop("schedulingGates")
            p["metadata"]["labels"].pop(api.MANAGED_LABEL)

        def dry_run_placed() -> bool:  # the webhook's caches have the claim and the PodGroup
            out = cluster.k.request("POST", kube.PODS.path(ns), body=pods[0], query=[("dryRun", "All")])
            return not (out.get("spec") or {}).get("schedulingGates")

        wait_until(dry_run_placed, 30, "the webhook sees the decided claim")
        created = {p["metadata"]["name"]: cluster.k.create(kube.PODS, p, ns) for p in pods}
        for name, p in created.items():
            assert not p["spec"].get("schedulingGates"), name
            assert objects.pinned_nodes(p) == (nodes[1], nodes[0], nodes[2]), name  # the role's node set
            assert {k: v for k, v in objects.annotations_of(p).items() if k in claim_timing(claim)} == \
                claim_timing(claim)
            assert objects.labels(p)[api.MANAGED_LABEL] == "true"

        # Let the controller run several cycles over the gang: it must write neither pod nor claim.
        cycles = "metronome_controller_cycle_seconds_count"
        wait_until(lambda: (ctl.metric(cycles) or 0) >= 1, 60, lambda: f"a first cycle\n{ctl.logs()}")
        start = ctl.metric(cycles) or 0
        cluster.k.patch(kube.PODGROUPS, ns, "vj", {"metadata": {"labels": {"nudge": "1"}}})  # wake it
        wait_until(lambda: (ctl.metric(cycles) or 0) >= start + 2, 60, lambda: f"two more cycles\n{ctl.logs()}")
        time.sleep(1.0)
        for name, before in created.items():
            now = cluster.k.get(kube.PODS, ns, name)
            assert now is not None
            assert objects.resource_version(now) == objects.resource_version(before), name
            managers = {m.get("manager") for m in now["metadata"].get("managedFields") or []}
            assert len(managers) == 1, managers  # only the creator's entry: nobody patched it
        after = cluster.claims(ns)["podgroup-vj"]
        assert objects.resource_version(after) == objects.resource_version(claim)
        assert "Traceback" not in ctl.logs()
    finally:
        cluster.k.request("DELETE", kube.MUTATING_WEBHOOKS.path(None, hook))


def volcano_job(ns: str, replicas: int, gpus: int) -> JSON:
    """A managed Volcano Job ``vj`` of one task of ``replicas`` pods of ``gpus`` GPUs."""
    template = b.pod(ns, "unused", "vj", gpus=gpus, gates=(), with_profile=False)
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "vj", "namespace": ns, "annotations": {api.MODEL: "resnet50"}},
            "spec": {"schedulerName": "volcano", "queue": "default", "tasks": [{
                "name": "worker", "replicas": replicas, "template": {"spec": {
                    "containers": template["spec"]["containers"], "restartPolicy": "Never"}}}]}}


def volcano_job_with_group(cluster: Cluster, ns: str, replicas: int, gpus: int) -> str:
    """A managed Volcano Job ``vj`` of one task and the PodGroup vc-controller-manager makes for it (the Job's
    annotations, owned by the Job, Pending until enqueued); the group's name."""
    job = cluster.k.create(kube.VOLCANO_JOBS, volcano_job(ns, replicas, gpus), ns)
    assert json.loads(objects.annotations_of(job)[api.POD_CONSTRAINTS]) == [{}]
    group = f"vj-{job['metadata']['uid']}"
    cluster.k.create(kube.PODGROUPS, {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": group, "namespace": ns, "annotations": objects.annotations_of(job),
                     "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "vj",
                                          "uid": job["metadata"]["uid"], "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": {"minMember": replicas, "minTaskMember": {"worker": replicas}, "queue": "default",
                 "minResources": {b.GPU: str(replicas * gpus)}}}, ns)
    return group


def pods_as_volcano_creates(ns: str, group: str, replicas: int, gpus: int) -> list[dict[str, Any]]:
    """The group's pods as Volcano's job controller creates them from the template: none of our gang keys."""
    pods = b.volcano_task_pods(ns, group, [("worker", replicas, gpus)])
    for p in pods:
        p["spec"].pop("schedulingGates")
        p["metadata"]["labels"].pop(api.MANAGED_LABEL)
        for key in (api.GANG_KIND, api.GANG_NAME, api.PROFILE, api.PROFILE_SOURCE):
            p["metadata"]["annotations"].pop(key)
    return pods


def register_volcano(cluster: Cluster, ns: str, url: str, ca_pem: bytes) -> str:
    """Our webhook for this namespace's Volcano Jobs, PodGroups and pods, as the chart registers it, once in effect."""
    import base64

    name = f"placed-vc-{cluster.tag}"
    cluster.k.create(kube.MUTATING_WEBHOOKS, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{"name": "volcano.metronome.dev", "admissionReviewVersions": ["v1"],
                      "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail", "timeoutSeconds": 10,
                      "reinvocationPolicy": "Never",
                      "clientConfig": {"url": url + "/mutate", "caBundle": base64.b64encode(ca_pem).decode()},
                      "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                      "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                 "operations": ["CREATE"]},
                                {"apiGroups": ["batch.volcano.sh"], "apiVersions": ["v1alpha1"],
                                 "resources": ["jobs"], "operations": ["CREATE"]},
                                {"apiGroups": ["scheduling.volcano.sh"], "apiVersions": ["v1beta1"],
                                 "resources": ["podgroups"], "operations": ["CREATE"]}]}]})

    def in_effect() -> bool:
        # The API server calls a webhook only once its own watch has the new configuration: a create sent
        # before that is admitted unmutated (seen once in CI). A dry run (our webhook has no side effects) tells.
        out = cluster.k.request("POST", kube.VOLCANO_JOBS.path(ns), body=volcano_job(ns, replicas=1, gpus=1),
                                query=[("dryRun", "All")])
        return api.POD_CONSTRAINTS in objects.annotations_of(out)

    wait_until(in_effect, 30, "the webhook configuration in effect")
    return name


def test_a_volcano_job_is_decided_at_its_podgroup_before_its_pods_exist(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess],
        webhook: tuple[str, bytes]) -> None:
    cluster.nodes(3, gpus=8)
    ns = cluster.namespace()
    hook = register_volcano(cluster, ns, *webhook)
    try:
        group_name = volcano_job_with_group(cluster, ns, replicas=6, gpus=4)
        start_controller(cluster, tmp_path, controllers, ns)
        claim_name = f"podgroup-{group_name}"
        claim = wait_until(lambda: (c := cluster.claims(ns).get(claim_name)) and (c.get("status") or {}).get(
            "nodes") and c, 60, "the PodGroup decided without pods")
        assert sum(claim["status"]["members"]) == 6
        assert not cluster.k.list(kube.PODS, ns)["items"]  # decided before any pod exists
        pods = pods_as_volcano_creates(ns, group_name, replicas=6, gpus=4)

        def dry_run_placed() -> bool:
            out = cluster.k.request("POST", kube.PODS.path(ns), body=pods[0], query=[("dryRun", "All")])
            return not (out.get("spec") or {}).get("schedulingGates")

        wait_until(dry_run_placed, 30, "the webhook sees the decided claim")
        created = [cluster.k.create(kube.PODS, p, ns) for p in pods]
        for p in created:
            assert not p["spec"].get("schedulingGates") and objects.pinned_nodes(p) == tuple(
                claim["status"]["nodes"]), objects.name(p)
        time.sleep(3.0)  # the controller's cycles over the gang with its pods: nothing to write
        for before in created:
            now = cluster.k.get(kube.PODS, ns, objects.name(before))
            assert now is not None and objects.resource_version(now) == objects.resource_version(before)
    finally:
        cluster.k.request("DELETE", kube.MUTATING_WEBHOOKS.path(None, hook))
