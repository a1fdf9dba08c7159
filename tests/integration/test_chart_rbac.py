"""The controller under the chart's own RBAC on a real kube-apiserver: its ServiceAccount's token, no more.

The chart's ClusterRole, leader-election Role and their bindings are rendered by helm, applied to the API
server (which authorises with RBAC), and the controller runs with a token of the chart's ServiceAccount.
PodGroup gangs and a Kueue Workload go through it: placed, ungated, checked Ready, Events written, the
Lease held, a capacity's status written. Any permission the chart lacks
shows up as a failed write (403) and a gang left gated. The chart grants no more than this path and the
paths the unit tier covers use (tests/helm checks the list; docs/install.md "The controller" explains it).
"""

from __future__ import annotations

import contextlib
import pathlib
import types
from typing import Any

import yaml

from tests.controller import builders as b
from tests.controller.cluster import Cluster, ControllerProcess, wait_until
from tests.helm.chart import template
from volcano_metronome import api, kube
from volcano_metronome.controller import objects

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
PATHS = {"ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
         "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
         "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
         "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
         "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"}


def _controller_rbac(release: str, ns: str) -> list[dict[str, Any]]:
    """The chart's objects that give the controller its permissions, as helm renders them into ``ns``."""
    objects_ = template({"webhook": {"replicas": 1}}, namespace=ns, release=release)
    return [o for o in objects_ if o["kind"] in RBAC_KINDS
            and (o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "controller"]


def _token_kubeconfig(cluster: Cluster, ns: str, account: str, path: pathlib.Path) -> pathlib.Path:
    """A kubeconfig that authenticates as ``ns/account`` with a bound token (TokenRequest)."""
    issued = cluster.k.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{account}/token", body={
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    config = {"apiVersion": "v1", "kind": "Config", "clusters": admin["clusters"],
              "users": [{"name": account, "user": {"token": issued["status"]["token"]}}],
              "contexts": [{"name": account, "context": {"cluster": admin["clusters"][0]["name"], "user": account}}],
              "current-context": account}
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def test_the_controller_works_with_exactly_the_charts_permissions(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess]) -> None:
    ns = cluster.namespace()
    release = f"r{cluster.tag}"
    rbac = _controller_rbac(release, ns)
    assert {o["kind"] for o in rbac} == set(RBAC_KINDS)
    for obj in rbac:
        cluster.k.request("POST", PATHS[obj["kind"]].format(ns=ns), body=obj)
    account = next(o for o in rbac if o["kind"] == "ServiceAccount")["metadata"]["name"]
    lease = next(o for o in rbac if o["kind"] == "Role")["rules"][-1]["resourceNames"][0]
    as_account = types.SimpleNamespace(kubeconfig=_token_kubeconfig(cluster, ns, account, tmp_path / "sa.yaml"),
                                       node_selector=cluster.node_selector)
    try:
        nodes = cluster.nodes(4)  # one rack of 4 x 8 GPUs: the Workload takes a node, gangs a and b 12 GPUs each
        nic = f"nic-{cluster.tag}"
        cluster.k.create(kube.CAPACITIES, {"apiVersion": api.API_VERSION, "kind": "STBandwidthCapacity",
                                           "metadata": {"name": nic},
                                           "spec": {"capacityGbps": 100, "tier": 0, "nodes": nodes}})
        cluster.gang(ns, "a", 3, gpus=4)
        check, cq = f"metronome-{cluster.tag}", f"cq-{cluster.tag}"
        cluster.k.create(kube.ADMISSION_CHECKS, b.admission_check(check))
        cluster.k.create(kube.CLUSTER_QUEUES, b.cluster_queue(cq, check))
        cluster.k.create(kube.WORKLOADS, b.workload(ns, "wl", 1), ns)
        cluster.k.patch(kube.WORKLOADS, ns, "wl", {"status": b.quota_reserved_status(cq, 1)}, subresource="status")
        ctl = ControllerProcess(as_account, tmp_path, lease=lease, lease_namespace=ns).start()  # type: ignore[arg-type]
        controllers.append(ctl)

        wait_until(lambda: cluster.ungated(ns, ["a"]), 60, lambda: f"gang a ungated\n{ctl.logs()}")

        def ready() -> bool:
            entries = ((cluster.k.get(kube.WORKLOADS, ns, "wl") or {}).get("status") or {}).get("admissionChecks") or []
            return any(e["name"] == check and e["state"] == "Ready" for e in entries)

        wait_until(ready, 60, lambda: f"the Workload's check Ready\n{ctl.logs()}")
        wait_until(lambda: objects.condition_true(cluster.k.get(kube.ADMISSION_CHECKS, None, check) or {}, "Active"),
                   20, lambda: f"our AdmissionCheck Active\n{ctl.logs()}")
        # A second gang beside gang a (it may share a NIC with it and lock it: writes to a running gang).
        cluster.gang(ns, "b", 3, gpus=4)
        wait_until(lambda: cluster.ungated(ns, ["b"]), 60, lambda: f"gang b ungated\n{ctl.logs()}")
        wait_until(lambda: [e for e in cluster.k.list(kube.EVENTS, ns)["items"] if e["reason"] == "Placed"],
                   20, lambda: f"the Placed events\n{ctl.logs()}")
        capacity = wait_until(lambda: ((cluster.k.get(kube.CAPACITIES, None, nic) or {}).get("status") or {}).get(
            "matchedNodes"), 20, lambda: f"the capacity's status\n{ctl.logs()}")
        assert capacity == 4
        holder = (cluster.k.get(kube.LEASES, ns, lease) or {}).get("spec", {}).get("holderIdentity")
        assert holder == ctl.identity
        assert not ctl.metric('metronome_controller_writes_total{kind="pod",result="error"}')
        assert "forbidden" not in ctl.logs().lower(), ctl.logs()
        assert not ctl.metric("metronome_controller_cycle_failures_total"), ctl.logs()
    finally:
        for obj in rbac:
            if obj["kind"].startswith("Cluster"):
                cluster.k.request("DELETE", PATHS[obj["kind"]] + "/" + obj["metadata"]["name"])
        with contextlib.suppress(kube.NotFound):  # a cluster-scoped object the next tests' controllers would see
            cluster.k.delete(kube.CAPACITIES, None, f"nic-{cluster.tag}")
