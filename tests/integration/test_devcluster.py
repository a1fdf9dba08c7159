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
from volcano_metronome.devtools.apply import ApiClient
from volcano_metronome.devtools.controlplane import ProcessRecord, is_alive
from volcano_metronome.devtools.stack import Stack


@pytest.fixture()
def cluster_dir(tmp_path: pathlib.Path, control_plane_binaries: dict[str, pathlib.Path]) -> Iterator[pathlib.Path]:
    directory = tmp_path / "dev-cluster"
    try:
        yield directory
    finally:
        devcluster.down(directory=directory)


def test_up_status_down(cluster_dir: pathlib.Path) -> None:
    layout = fabric.Layout(racks=2, nodes_per_rack=2, gpus_per_node=4)
    status = devcluster.up(layout=layout, directory=cluster_dir)
    assert status.running and status.ready
    assert {"etcd", "kube-apiserver", "webhook", "controller"} <= set(status.processes)
    assert status.kubeconfig is not None and status.kubeconfig.exists()
    assert devcluster.sample_text(status).count(str(status.kubeconfig)) == 2

    api_client = k8s_config.new_client_from_config(config_file=str(status.kubeconfig))
    try:
        nodes = k8s.CoreV1Api(api_client).list_node().items
        assert sorted(n.metadata.labels[fabric.RACK_LABEL] for n in nodes) == ["rack-0", "rack-0", "rack-1", "rack-1"]
        assert all(n.status.allocatable[fabric.GPU_RESOURCE] == "4" for n in nodes)
        crds = {c.metadata.name for c in k8s.ApiextensionsV1Api(api_client).list_custom_resource_definition().items}
        assert {"jobs.batch.volcano.sh", "workloads.kueue.x-k8s.io", "stbandwidthclaims.metronome.dev"} <= crds
    finally:
        api_client.close()
    # The printed sample is accepted, and our webhook (registered by URL) resolves its profile and
    # creates its pods gated.
    group, *pods = ApiClient.from_kubeconfig(status.kubeconfig).apply_file(cluster_dir / devcluster.SAMPLE_PODGROUP_FILE)
    assert group["kind"] == "PodGroup" and api.PROFILE in group["metadata"]["annotations"]
    assert pods and all({"name": api.SCHEDULING_GATE} in p["spec"]["schedulingGates"] for p in pods)

    # A second `up` finds the running cluster instead of starting another.
    again = devcluster.up(layout=layout, directory=cluster_dir)
    assert again.server_url == status.server_url

    records = _records(cluster_dir)
    assert len(records) == len(status.processes)
    assert devcluster.down(directory=cluster_dir)
    assert not any(is_alive(record) for record in records)
    after = devcluster.status(cluster_dir)
    assert not after.running and after.processes == {}


@pytest.mark.e2e
def test_whole_stack_runs_the_printed_sample(cluster_dir: pathlib.Path, kwok_binary: pathlib.Path) -> None:
    status = devcluster.up(layout=fabric.Layout(racks=1, nodes_per_rack=2), directory=cluster_dir)
    assert set(status.processes) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
                                     "webhook", "kueue", "controller"}
    assert all(status.processes.values()) and not status.skipped
    ApiClient.from_kubeconfig(status.kubeconfig).apply_file(cluster_dir / devcluster.SAMPLE_PODGROUP_FILE)  # type: ignore[arg-type]
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
        # One 8-GPU pod per node, each pinned by our controller and bound there by kube-scheduler.
        assert sorted(p.spec.node_name for p in pods) == ["gpu-r0-n0", "gpu-r0-n1"]
        # Alone on its NICs the gang runs free (lock on demand): the period is published, no offset.
        assert all(api.PERIOD_MS in p.metadata.annotations for p in pods)
    finally:
        api_client.close()


def _records(directory: pathlib.Path) -> list[ProcessRecord]:
    return list(Stack.attach(directory).records().values())
