"""The local control plane is a real Kubernetes API: CRDs, validation, restarts, clean shutdown."""

from __future__ import annotations

import copy
import os
import pathlib
import socket
import subprocess
import time
import uuid
from typing import Any, Iterator

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from tests.integration.conftest import require_binaries
from volcano_metronome.devtools import binaries, sources
from volcano_metronome.devtools.apply import ApiClient, load_manifests
from volcano_metronome.devtools.controlplane import ControlPlane
from volcano_metronome.devtools.processes import ControlPlaneError


@pytest.fixture(scope="module")
def api(control_plane: ControlPlane) -> Iterator[k8s.ApiClient]:
    api_client = k8s_config.new_client_from_config(config_file=str(control_plane.kubeconfig_path))
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture(scope="module")
def upstream_crds(control_plane: ControlPlane, upstream_dir: pathlib.Path) -> list[str]:
    """Install the upstream Volcano and Kueue CRDs (and ours, if any) once for this module."""
    applier = ApiClient.from_kubeconfig(control_plane.kubeconfig_path)
    files = sources.upstream_crd_files(upstream_dir) + sources.our_crd_files()
    return applier.install_crds(files, timeout=120)


@pytest.fixture()
def namespace(api: k8s.ApiClient) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    return name


def test_api_server_answers_with_its_real_version(api: k8s.ApiClient, control_plane: ControlPlane) -> None:
    version = k8s.VersionApi(api).get_code()
    assert version.git_version.startswith("v1.36."), version
    assert control_plane.server_url.startswith("https://127.0.0.1:")
    assert b"BEGIN CERTIFICATE" in control_plane.ca_pem
    names = {ns.metadata.name for ns in k8s.CoreV1Api(api).list_namespace().items}
    assert {"default", "kube-system"} <= names
    assert control_plane.is_ready()


def test_admin_is_cluster_admin_and_strangers_are_not(control_plane: ControlPlane, tmp_path: pathlib.Path) -> None:
    """RBAC is on: a client certificate outside system:masters is authenticated but not authorised."""
    from volcano_metronome.certs import pki

    stranger = pki.make_client_cert(control_plane.ca, "stranger")
    stranger.write(tmp_path / "s.crt", tmp_path / "s.key")
    applier = ApiClient(
        server=control_plane.server_url,
        ca_file=control_plane.ca_path,
        cert_file=tmp_path / "s.crt",
        key_file=tmp_path / "s.key",
    )
    with pytest.raises(Exception, match="403"):
        applier.request("GET", "/api/v1/namespaces/default/configmaps")
    admin = ApiClient.from_kubeconfig(control_plane.kubeconfig_path)
    assert "items" in admin.request("GET", "/api/v1/namespaces/default/configmaps")


def test_upstream_crds_are_established(api: k8s.ApiClient, upstream_crds: list[str]) -> None:
    expected = {
        "jobs.batch.volcano.sh",
        "podgroups.scheduling.volcano.sh",
        "queues.scheduling.volcano.sh",
        "hypernodes.topology.volcano.sh",
        "workloads.kueue.x-k8s.io",
        "clusterqueues.kueue.x-k8s.io",
        "localqueues.kueue.x-k8s.io",
        "resourceflavors.kueue.x-k8s.io",
        "admissionchecks.kueue.x-k8s.io",
    }
    assert expected <= set(upstream_crds)
    ext = k8s.ApiextensionsV1Api(api)
    for name in expected:
        crd = ext.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in crd.status.conditions}
        assert conditions.get("Established") == "True", (name, conditions)


@pytest.mark.upstream_examples("volcano")
def test_volcano_job_example_is_accepted_and_read_back(
    api: k8s.ApiClient, upstream_crds: list[str], upstream_dir: pathlib.Path, namespace: str
) -> None:
    (job,) = load_manifests(upstream_dir / "examples" / "volcano" / "job.yaml")
    objects = k8s.CustomObjectsApi(api)
    created = objects.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", job)
    assert created["metadata"]["uid"]
    stored = objects.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", "test-job")
    assert stored["spec"]["minAvailable"] == 3
    assert stored["spec"]["tasks"][0]["replicas"] == 6
    assert stored["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"] == "nginx"
    assert stored["spec"]["plugins"] == {"ssh": [], "env": [], "svc": []}

    # Server-side validation is the judge: the CRD schema rejects a wrongly typed field.
    bad = copy.deepcopy(job)
    bad["metadata"]["name"] = "bad-job"
    bad["spec"]["minAvailable"] = "three"
    with pytest.raises(ApiException) as info:
        objects.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", bad)
    assert info.value.status == 422
    assert "minAvailable" in str(info.value.body)


@pytest.mark.upstream_examples("kueue")
def test_kueue_cluster_queue_example_is_accepted_and_read_back(
    api: k8s.ApiClient, upstream_crds: list[str], upstream_dir: pathlib.Path, namespace: str
) -> None:
    objects = k8s.CustomObjectsApi(api)
    manifests = load_manifests(upstream_dir / "examples" / "kueue" / "single-clusterqueue-setup.yaml")
    suffix = namespace  # cluster-scoped names must not clash between runs of this test
    stored: dict[str, dict[str, Any]] = {}
    for obj in manifests:
        group, version = obj["apiVersion"].split("/")
        kind = obj["kind"]
        obj = copy.deepcopy(obj)
        if kind == "ResourceFlavor":
            obj["metadata"]["name"] = f"default-flavor-{suffix}"
            stored[kind] = objects.create_cluster_custom_object(group, version, "resourceflavors", obj)
        elif kind == "ClusterQueue":
            obj["metadata"]["name"] = f"cluster-queue-{suffix}"
            for rg in obj["spec"]["resourceGroups"]:
                for flavor in rg["flavors"]:
                    flavor["name"] = f"default-flavor-{suffix}"
            stored[kind] = objects.create_cluster_custom_object(group, version, "clusterqueues", obj)
        elif kind == "LocalQueue":
            obj["metadata"]["namespace"] = namespace
            obj["spec"]["clusterQueue"] = f"cluster-queue-{suffix}"
            stored[kind] = objects.create_namespaced_custom_object(group, version, namespace, "localqueues", obj)
    assert set(stored) == {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    queue = objects.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", f"cluster-queue-{suffix}")
    resources = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert {r["name"]: str(r["nominalQuota"]) for r in resources} == {"cpu": "9", "memory": "36Gi"}
    # Defaults from the CRD schema were applied by the server.
    assert "queueingStrategy" in queue["spec"]


def test_server_side_apply_is_idempotent(control_plane: ControlPlane, namespace: str) -> None:
    applier = ApiClient.from_kubeconfig(control_plane.kubeconfig_path)
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "applied", "namespace": namespace},
        "data": {"a": "1"},
    }
    first = applier.apply(cm)
    again = applier.apply(cm)
    assert first["metadata"]["resourceVersion"] == again["metadata"]["resourceVersion"]
    managers = {m["manager"] for m in again["metadata"]["managedFields"]}
    assert managers == {"volcano-metronome"}
    assert applier.get(cm)["data"] == {"a": "1"}


def _process_exists(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _port_bindable(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_restart_keeps_data_and_stop_leaves_nothing_behind(control_plane_binaries: dict[str, pathlib.Path]) -> None:
    """A dedicated control plane: restart the API server, then stop everything and look for leftovers."""
    plane = ControlPlane()
    plane.start()
    try:
        api_client = k8s_config.new_client_from_config(config_file=str(plane.kubeconfig_path))
        core = k8s.CoreV1Api(api_client)
        core.create_namespaced_config_map(
            "default", k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="survivor"), data={"k": "v"})
        )
        url, old_pid = plane.server_url, plane.pids()["kube-apiserver"]
        plane.restart_apiserver()
        assert plane.server_url == url
        assert plane.pids()["kube-apiserver"] != old_pid
        assert not _process_exists(old_pid)
        assert core.read_namespaced_config_map("survivor", "default").data == {"k": "v"}
        api_client.close()
        pids = list(plane.pids().values())
        ports = plane.ports.all()
        work_dir = plane.work_dir
    finally:
        plane.stop()
    assert len(pids) == 2
    assert not any(_process_exists(pid) for pid in pids)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)  # nothing left in either process group
    assert all(_port_bindable(port) for port in ports)
    assert not work_dir.exists()


def test_failure_message_shows_the_logs_and_cleans_up(control_plane_binaries: dict[str, pathlib.Path]) -> None:
    plane = ControlPlane(extra_apiserver_args=["--no-such-flag=1"], keep_work_dir=True)
    try:
        with pytest.raises(ControlPlaneError) as info:
            plane.start()
        message = str(info.value)
        assert "kube-apiserver exited" in message
        assert "unknown flag: --no-such-flag" in message
        assert str(plane.log_path("kube-apiserver")) in message
        assert plane.pids() == {}  # etcd, which had started, was stopped as well
    finally:
        plane.stop()
        import shutil

        shutil.rmtree(plane.work_dir, ignore_errors=True)


def test_kubeconfig_is_private_and_complete(control_plane: ControlPlane) -> None:
    mode = control_plane.kubeconfig_path.stat().st_mode & 0o777
    assert mode == 0o600
    config = yaml.safe_load(control_plane.kubeconfig_path.read_text())
    assert config["clusters"][0]["cluster"]["server"] == control_plane.server_url
    assert (control_plane.pki_dir / "admin.key").stat().st_mode & 0o777 == 0o600
    started = time.monotonic()
    assert control_plane.is_ready()
    assert time.monotonic() - started < 5


def test_built_helm_and_kubectl_know_the_kubernetes_version_they_were_built_for(tmp_path: pathlib.Path) -> None:
    """helm renders our chart (kubeVersion >= 1.30) without --kube-version, as a release build of helm
    does; kubectl reports the control plane's version."""
    found = require_binaries("helm", "kubectl")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    rendered = subprocess.run([str(found["helm"]), "template", "vm", str(sources.chart_dir())], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
    assert rendered.returncode == 0, rendered.stderr
    assert "kind: Deployment" in rendered.stdout
    version = subprocess.run([str(found["kubectl"]), "version", "--client"], env=env, capture_output=True, text=True,
                             timeout=60, check=False)
    assert f"Client Version: {binaries.version_key('kube-apiserver')[0]}" in version.stdout, version.stdout + version.stderr
