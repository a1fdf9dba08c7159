"""`dev-cluster up/status/down` against real binaries, in a private state directory."""

from __future__ import annotations

import pathlib
import time
from typing import Iterator

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from volcano_metronome.devtools import devcluster
from volcano_metronome.devtools.apply import ApiClient
from volcano_metronome.devtools.controlplane import ProcessRecord, is_alive


@pytest.fixture()
def cluster_dir(tmp_path: pathlib.Path, control_plane_binaries: dict[str, pathlib.Path]) -> Iterator[pathlib.Path]:
    directory = tmp_path / "dev-cluster"
    try:
        yield directory
    finally:
        devcluster.down(directory=directory)


def test_up_status_down(cluster_dir: pathlib.Path) -> None:
    layout = devcluster.Layout(racks=2, nodes_per_rack=2, gpus_per_node=4)
    status = devcluster.up(layout=layout, directory=cluster_dir)
    assert status.running and status.ready
    assert status.kubeconfig is not None and status.kubeconfig.exists()
    assert devcluster.sample_text(status).count(str(status.kubeconfig)) == 2

    api = k8s_config.new_client_from_config(config_file=str(status.kubeconfig))
    try:
        nodes = k8s.CoreV1Api(api).list_node().items
        assert sorted(n.metadata.labels[devcluster.RACK_LABEL] for n in nodes) == ["rack-0", "rack-0", "rack-1", "rack-1"]
        assert all(n.status.allocatable[devcluster.GPU_RESOURCE] == "4" for n in nodes)
        crds = {c.metadata.name for c in k8s.ApiextensionsV1Api(api).list_custom_resource_definition().items}
        assert {"jobs.batch.volcano.sh", "workloads.kueue.x-k8s.io"} <= crds
        # The printed sample is accepted by the server (CRD schema validation).
        stored = ApiClient.from_kubeconfig(status.kubeconfig).apply_file(cluster_dir / "sample-job.yaml")
        assert stored[0]["metadata"]["annotations"]["metronome.dev/period-ms"] == "200"
        if "kwok" in status.processes:
            _wait_nodes_ready(k8s.CoreV1Api(api), expected=len(nodes))
    finally:
        api.close()

    # A second `up` finds the running cluster instead of starting another.
    again = devcluster.up(layout=layout, directory=cluster_dir)
    assert again.server_url == status.server_url

    records = _records(cluster_dir)
    assert devcluster.down(directory=cluster_dir)
    assert not any(is_alive(record) for record in records)
    after = devcluster.status(cluster_dir)
    assert not after.running and after.processes == {}


@pytest.mark.e2e
def test_kwok_makes_nodes_ready_and_runs_bound_pods(cluster_dir: pathlib.Path, kwok_binary: pathlib.Path) -> None:
    status = devcluster.up(layout=devcluster.Layout(racks=1, nodes_per_rack=2), directory=cluster_dir)
    assert status.processes.get("kwok") is True
    api = k8s_config.new_client_from_config(config_file=str(status.kubeconfig))
    try:
        core = k8s.CoreV1Api(api)
        _wait_nodes_ready(core, expected=2)
        pod = k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name="bound"),
            spec=k8s.V1PodSpec(node_name="gpu-r0-n1", containers=[k8s.V1Container(name="c", image="busybox")]),
        )
        core.create_namespaced_pod("default", pod)
        deadline = time.monotonic() + 30
        while core.read_namespaced_pod("bound", "default").status.phase != "Running":
            assert time.monotonic() < deadline, "kwok did not run the pod bound to its node"
            time.sleep(0.2)
    finally:
        api.close()


def _wait_nodes_ready(core: k8s.CoreV1Api, *, expected: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        ready = [
            n
            for n in core.list_node().items
            if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
        ]
        if len(ready) == expected:
            return
        assert time.monotonic() < deadline, f"only {len(ready)} of {expected} nodes became Ready"
        time.sleep(0.2)


def _records(directory: pathlib.Path) -> list[ProcessRecord]:
    import json

    state = json.loads((directory / "controlplane" / "state.json").read_text())
    records = [ProcessRecord(**r) for r in state["processes"].values()]
    kwok = directory / "kwok.json"
    if kwok.exists():
        records.append(ProcessRecord(**json.loads(kwok.read_text())))
    return records
