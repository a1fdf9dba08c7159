"""What the e2e tests share: the Kueue set-up, and assertions (pods bound where the claim says, with its timing)."""

from __future__ import annotations

import pathlib
from collections import Counter
from typing import Any, Callable, Iterable, Mapping

from tests.controller.cluster import wait_until
from tests.e2e import manifests
from tests.e2e.manifests import LAYOUT
from volcano_metronome import api, kube
from volcano_metronome.controller import objects
from volcano_metronome.devtools.apply import ApiClient
from volcano_metronome.devtools.stack import Stack
from volcano_metronome.shapes.slots import number_text

JSON = dict[str, Any]


def decided(claim: Mapping[str, Any]) -> bool:
    """Whether the claim's status records a placement (nodes chosen, condition Placed=True)."""
    status = claim.get("status") or {}
    return bool(status.get("nodes")) and objects.condition_true(claim, "Placed")


def assert_bound_as_decided(pods: Iterable[Mapping[str, Any]], claim: Mapping[str, Any]) -> None:
    """Each pod is bound to a node of the claim's decision (each node gets exactly its members) and
    carries the claim's period, and its offset and epoch when the claim is locked (a gang alone on its
    links runs free: no offset); its node affinity confines it to that node (or to its role's node set)."""
    status = claim["status"]
    pods = list(pods)
    slots = Counter(dict(zip(status["nodes"], status["members"])))
    bound = Counter(str(p["spec"].get("nodeName")) for p in pods)
    assert bound == slots, f"pods bound {dict(bound)}, decision {dict(slots)} ({objects.name(claim)})"
    for pod in pods:
        node = pod["spec"]["nodeName"]
        # One node per pod, or (pods of one Volcano task role) the role's node set: the node is in it.
        pinned = objects.pinned_nodes(pod) or ()
        assert node in pinned, f"{objects.name(pod)}: affinity pins {pinned}, bound to {node}"
        annotations = objects.annotations_of(pod)
        assert annotations[api.PERIOD_MS] == number_text(status["periodMs"]), objects.name(pod)
        if status.get("locked", True):
            assert annotations[api.OFFSET_MS] == number_text(status["offsetMs"]), objects.name(pod)
            assert annotations[api.EPOCH] == str(status["epoch"]), objects.name(pod)
        else:
            assert api.OFFSET_MS not in annotations and api.EPOCH not in annotations, objects.name(pod)
        assert not objects.gated_by_us(pod)


def bound(pods: Iterable[Mapping[str, Any]]) -> bool:
    """Every pod has a node (kube-scheduler bound it)."""
    pods = list(pods)
    return bool(pods) and all(p["spec"].get("nodeName") for p in pods)


def running(pods: Iterable[Mapping[str, Any]]) -> bool:
    """Every pod runs (kwok started it on its fake node)."""
    pods = list(pods)
    return bool(pods) and all((p.get("status") or {}).get("phase") == "Running" for p in pods)


def gpus_in_use(k: kube.Kube) -> int:
    """GPUs requested by bound, non-terminal pods anywhere in the cluster."""
    pods = k.list(kube.PODS, field_selector="spec.nodeName!=")["items"]
    return sum(objects.pod_gpus(p, "nvidia.com/gpu") for p in pods if not objects.pod_terminal(p))


def held_claims(k: kube.Kube) -> list[str]:
    """Claims anywhere whose status still holds nodes."""
    return [f"{objects.namespace(c)}/{objects.name(c)}" for c in k.list(kube.CLAIMS)["items"] if decided(c)]


def created_gated(first_version: Mapping[str, Any]) -> bool:
    """The pod as created (its first recorded version) carried our scheduling gate."""
    return api.SCHEDULING_GATE in objects.gates(first_version)


def created_placed(first_version: Mapping[str, Any], claim: Mapping[str, Any]) -> bool:
    """The pod as created was already placed by our webhook from the decided ``claim``: no gate, confined to
    nodes of the claim, with its period (its gang was decided before the pod existed)."""
    pinned = objects.pinned_nodes(first_version) or ()
    return (api.SCHEDULING_GATE not in objects.gates(first_version) and bool(pinned)
            and set(pinned) <= set((claim.get("status") or {}).get("nodes") or ())
            and api.PERIOD_MS in objects.annotations_of(first_version))



def set_up_kueue(stack: Stack, k: kube.Kube, upstream: pathlib.Path, logs: Callable[[], str]) -> None:
    """Apply our AdmissionCheck and the upstream example's queues; return once the ClusterQueue is Active."""
    apply = ApiClient.from_kubeconfig(stack.kubeconfig_path)
    for obj in [manifests.admission_check(), *manifests.kueue_setup(upstream, gpus=LAYOUT.nodes * LAYOUT.gpus_per_node)]:
        apply.apply(obj)
    # Kueue keeps a ClusterQueue inactive until every AdmissionCheck it lists is Active, which our
    # controller sets on the checks it owns.
    wait_until(lambda: objects.condition_true(k.get(kube.CLUSTER_QUEUES, None, "cluster-queue") or {}, "Active"),
               60, lambda: f"the ClusterQueue Active\n{logs()}")


def check_state(workload: Mapping[str, Any]) -> str | None:
    """The state of our AdmissionCheck on ``workload`` (Pending, Ready, Retry, Rejected), if listed."""
    entries = (workload.get("status") or {}).get("admissionChecks") or []
    return next((e.get("state") for e in entries if e.get("name") == manifests.CHECK_NAME), None)


def held_then_ready_then_admitted(workloads: Any, name: str, logs: Callable[[], str]) -> tuple[Any, Any, Any]:
    """The versions of Workload ``name`` that show it held, our check Ready, and admitted, in that order.

    Held: quota reserved, not admitted, our check not Ready. Kueue's workload controller lists the check as
    Pending as soon as it knows the ClusterQueue, but its scheduler may reserve quota first, and our Ready
    (written only on a reservation) can then be the first state of the check the Workload shows. The
    recorder's watch can trail the list that saw the Workload admitted: waited for, not assumed.
    """
    admitted = wait_until(lambda: workloads.first(lambda w: objects.condition_true(w, "Admitted"), name), 30,
                          lambda: f"the admitted version of {name} recorded\n{logs()}")
    held = workloads.first(lambda w: objects.condition_true(w, "QuotaReserved") and check_state(w) != "Ready"
                           and not objects.condition_true(w, "Admitted"), name)
    ready = workloads.first(lambda w: check_state(w) == "Ready", name)
    versions = workloads.versions(name)
    shown = [((w.get("status") or {}).get("conditions"), check_state(w)) for w in versions]
    assert held is not None and ready is not None, shown
    assert versions.index(held) < versions.index(ready) <= versions.index(admitted), shown
    assert objects.condition_true(ready, "QuotaReserved") and objects.condition_true(admitted, "QuotaReserved")
    return held, ready, admitted
