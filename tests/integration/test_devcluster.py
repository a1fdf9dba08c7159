"""`dev-cluster up/status/down` against real binaries, in a private state directory.

Without the e2e programs (the normal CI run) the dev cluster is the control plane, the fake nodes,
our CRDs, webhook and controller; with them (METRONOME_E2E=1) the whole stack, whose sample
gang then runs.
"""

from __future__ import annotations

import pathlib
import time
from typing import Iterator

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from volcano_metronome import api
from volcano_metronome.devtools import devcluster, fabric
from volcano_metronome.devtools.apply import ApiClient, ApiError
from volcano_metronome.devtools.processes import ProcessRecord, is_alive
from volcano_metronome.devtools.stack import COMPONENTS as STACK_COMPONENTS
from volcano_metronome.devtools.stack import Stack


@pytest.fixture()
def cluster_dir(tmp_path: pathlib.Path, control_plane_binaries: dict[str, pathlib.Path]) -> Iterator[pathlib.Path]:
    directory = tmp_path / "dev-cluster"
    try:
        yield directory
    finally:
        devcluster.down(directory=directory)


def test_up_status_down(cluster_dir: pathlib.Path) -> None:
    layout = fabric.Layout(racks=2, nodes_per_rack=2, gpus_per_node=8)  # the sample asks 8 GPUs per pod
    status = devcluster.up(layout=layout, directory=cluster_dir)
    assert status.running and status.ready
    assert {"etcd", "kube-apiserver", "webhook", "controller"} <= set(status.processes)
    assert status.kubeconfig is not None and status.kubeconfig.exists()
    assert devcluster.sample_text(status).count(str(status.kubeconfig)) == 2

    api_client = k8s_config.new_client_from_config(config_file=str(status.kubeconfig))
    try:
        nodes = k8s.CoreV1Api(api_client).list_node().items
        assert sorted(n.metadata.labels[fabric.RACK_LABEL] for n in nodes) == ["rack-0", "rack-0", "rack-1", "rack-1"]
        assert all(n.status.allocatable[fabric.GPU_RESOURCE] == "8" for n in nodes)
        crds = {c.metadata.name for c in k8s.ApiextensionsV1Api(api_client).list_custom_resource_definition().items}
        assert {"jobs.batch.volcano.sh", "workloads.kueue.x-k8s.io", "stbandwidthclaims.metronome.dev"} <= crds
    finally:
        api_client.close()
    # The printed sample is accepted, and our webhook (registered by URL) resolves its profile and
    # creates its pods gated.
    client = ApiClient.from_kubeconfig(status.kubeconfig)
    group, *pods = client.apply_file(cluster_dir / devcluster.SAMPLE_PODGROUP_FILE)
    assert group["kind"] == "PodGroup" and api.PROFILE in group["metadata"]["annotations"]
    assert pods and all({"name": api.SCHEDULING_GATE} in p["spec"]["schedulingGates"] for p in pods)
    # Without kwok the nodes were made Ready and untainted, so our controller places the sample.
    nodes = client.request("GET", "/api/v1/nodes")["items"]
    assert all(not n["spec"].get("taints") for n in nodes)
    claim_path = f"/apis/{api.GROUP}/{api.VERSION}/namespaces/default/{api.CLAIMS}/podgroup-{group['metadata']['name']}"
    deadline = time.monotonic() + 60
    while not (_exists(client, claim_path) and (client.request("GET", claim_path).get("status") or {}).get("nodes")):
        assert time.monotonic() < deadline, "the sample was not placed without kwok"
        time.sleep(0.5)

    # A second `up` finds the running cluster instead of starting another.
    again = devcluster.up(layout=layout, directory=cluster_dir)
    assert again.server_url == status.server_url

    records = _records(cluster_dir)
    assert len(records) == len(status.processes)
    assert devcluster.down(directory=cluster_dir)
    assert not any(is_alive(record) for record in records)
    after = devcluster.status(cluster_dir)
    assert not after.running and after.processes == {}

    # Asked to keep state, `up` brings the sample back; by default it starts empty.
    group_path = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups/{group['metadata']['name']}"
    kept = devcluster.up(layout=layout, directory=cluster_dir, keep_state=True)
    assert _exists(ApiClient.from_kubeconfig(kept.kubeconfig), group_path)  # type: ignore[arg-type]
    devcluster.down(directory=cluster_dir)
    fresh = devcluster.up(layout=layout, directory=cluster_dir)
    assert not _exists(ApiClient.from_kubeconfig(fresh.kubeconfig), group_path)  # type: ignore[arg-type]


@pytest.mark.e2e
def test_whole_stack_runs_the_printed_sample(cluster_dir: pathlib.Path, kwok_binary: pathlib.Path) -> None:
    status = devcluster.up(layout=fabric.Layout(racks=1, nodes_per_rack=2), directory=cluster_dir)
    assert set(status.processes) == {"etcd", "kube-apiserver", *STACK_COMPONENTS}
    assert all(status.processes.values()) and not status.skipped
    # The sample the Volcano stack prints: a Volcano Job, bound by the Volcano scheduler.
    assert devcluster.SAMPLE_VOLCANO_JOB_FILE in devcluster.sample_text(status)
    client = ApiClient.from_kubeconfig(status.kubeconfig)  # type: ignore[arg-type]
    client.apply_file(cluster_dir / devcluster.SAMPLE_VOLCANO_JOB_FILE)
    api_client = k8s_config.new_client_from_config(config_file=str(status.kubeconfig))
    try:
        core = k8s.CoreV1Api(api_client)
        deadline = time.monotonic() + 60
        while True:
            pods = core.list_namespaced_pod("default").items
            if pods and all(p.spec.node_name and p.status.phase == "Running" for p in pods):
                break
            assert time.monotonic() < deadline, [(p.metadata.name, p.spec.node_name, p.status.phase) for p in pods]
            time.sleep(0.5)
        # One 8-GPU pod per node, each bound by the Volcano scheduler where our controller pinned it.
        assert sorted(p.spec.node_name for p in pods) == ["gpu-r0-n0", "gpu-r0-n1"]
        assert all(p.spec.scheduler_name == "volcano" for p in pods)
        claims = client.request("GET", f"/apis/{api.GROUP}/{api.VERSION}/namespaces/default/{api.CLAIMS}")["items"]
        assert sorted(n for c in claims for n in c["status"]["nodes"]) == ["gpu-r0-n0", "gpu-r0-n1"]
        # Alone on its NICs the gang runs free (lock on demand): the period is published, no offset.
        assert all(api.PERIOD_MS in p.metadata.annotations for p in pods)
    finally:
        api_client.close()


def _exists(client: ApiClient, path: str) -> bool:
    try:
        client.request("GET", path)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _records(directory: pathlib.Path) -> list[ProcessRecord]:
    return list(Stack.attach(directory).records().values())
