"""A local cluster to try volcano-metronome by hand: control plane, CRDs, kwok fake GPU nodes.

``up()`` starts etcd and kube-apiserver detached from the calling process, installs the upstream
Volcano and Kueue CRDs and ours, creates fake nodes in a leaf-spine layout (racks of nodes behind
leaf switches, racks grouped in zones under spines) and, when the kwok binary is built, starts kwok
so that those nodes report Ready and pods bound to them run. State lives in
``~/.cache/volcano-metronome/dev-cluster/`` (``METRONOME_DEV_CLUSTER_DIR`` overrides); ``down()``
stops every process recorded there.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from dataclasses import asdict, dataclass
from typing import Any, Callable

from volcano_metronome.devtools import binaries
from volcano_metronome.devtools.apply import ApiClient
from volcano_metronome.devtools.controlplane import (
    ControlPlane,
    ControlPlaneError,
    ProcessRecord,
    is_alive,
    spawn,
    terminate,
)

RACK_LABEL = "metronome.dev/rack"
ZONE_LABEL = "topology.kubernetes.io/zone"
GPU_RESOURCE = "nvidia.com/gpu"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"

SAMPLE_JOB = """\
# A Volcano Job whose workers communicate 60 ms of every 200 ms at 100 Gbps.
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: allreduce-demo
  namespace: default
  annotations:
    metronome.dev/period-ms: "200"
    metronome.dev/windows: '[{"start_ms": 0, "len_ms": 60, "gbps": 100}]'
spec:
  minAvailable: 4
  schedulerName: volcano
  queue: default
  tasks:
    - name: worker
      replicas: 4
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: worker
              image: busybox
              command: ["sleep", "3600"]
              resources:
                limits:
                  nvidia.com/gpu: 8
"""


@dataclass(frozen=True)
class Layout:
    """The fake fabric: ``racks`` leaf switches with ``nodes_per_rack`` nodes each, two racks per zone."""

    racks: int = 4
    nodes_per_rack: int = 4
    gpus_per_node: int = 8
    racks_per_zone: int = 2


@dataclass(frozen=True)
class Status:
    """What ``dev-cluster status`` reports."""

    state_dir: pathlib.Path
    running: bool
    ready: bool
    server_url: str | None
    kubeconfig: pathlib.Path | None
    processes: dict[str, bool]

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly form."""
        data = asdict(self)
        data["state_dir"] = str(self.state_dir)
        data["kubeconfig"] = str(self.kubeconfig) if self.kubeconfig else None
        return data


def state_dir(environ: dict[str, str] | None = None) -> pathlib.Path:
    """Where the dev cluster keeps its certificates, etcd data, logs and pids."""
    env = os.environ if environ is None else environ
    override = env.get("METRONOME_DEV_CLUSTER_DIR")
    if override:
        return pathlib.Path(override).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg).expanduser() if xdg else pathlib.Path.home() / ".cache"
    return base / "volcano-metronome" / "dev-cluster"


def repo_root() -> pathlib.Path:
    """The checkout this package runs from (the parent of ``tools/``)."""
    return binaries.tools_dir().parent


def upstream_dir(environ: dict[str, str] | None = None) -> pathlib.Path:
    """``shared/upstream`` beside the checkout (``METRONOME_UPSTREAM_DIR`` overrides)."""
    env = os.environ if environ is None else environ
    override = env.get("METRONOME_UPSTREAM_DIR")
    path = pathlib.Path(override).expanduser() if override else repo_root().parent / "shared" / "upstream"
    if not (path / "crds").is_dir():
        raise ControlPlaneError(f"no upstream CRDs in {path / 'crds'}; set METRONOME_UPSTREAM_DIR to the shared/upstream directory")
    return path


def upstream_crd_files(upstream: pathlib.Path | None = None) -> list[pathlib.Path]:
    """The Volcano and Kueue CRDs our product works with."""
    crds = (upstream or upstream_dir()) / "crds"
    return sorted((crds / "volcano").glob("*.yaml")) + sorted((crds / "kueue").glob("*.yaml"))


def our_crd_files(root: pathlib.Path | None = None) -> list[pathlib.Path]:
    """Every ``crds/*.yaml`` of the checkout (examples in sub-directories are not CRDs)."""
    return sorted(((root or repo_root()) / "crds").glob("*.yaml"))


def fake_nodes(layout: Layout = Layout()) -> list[dict[str, Any]]:
    """Node objects for kwok: rack and zone labels, GPUs, CPU and memory in allocatable."""
    nodes = []
    for rack in range(layout.racks):
        zone = f"zone-{rack // layout.racks_per_zone}"
        for index in range(layout.nodes_per_rack):
            name = f"gpu-r{rack}-n{index}"
            resources = {
                "cpu": "64",
                "memory": "512Gi",
                "pods": "110",
                GPU_RESOURCE: str(layout.gpus_per_node),
            }
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                        "labels": {
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            "type": "kwok",
                            RACK_LABEL: f"rack-{rack}",
                            ZONE_LABEL: zone,
                        },
                    },
                    "status": {"allocatable": resources, "capacity": resources},
                }
            )
    return nodes


def up(
    *,
    layout: Layout = Layout(),
    directory: pathlib.Path | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Status:
    """Start (or find running) the dev cluster and return its status."""
    directory = directory or state_dir()
    current = status(directory)
    if current.running and current.ready:
        progress(f"dev cluster already running at {current.server_url}")
        return current
    if current.processes:
        # Half of it is running (a crash, a reboot): start clean rather than guess.
        down(directory=directory)
    directory.mkdir(parents=True, exist_ok=True)
    plane = ControlPlane(directory / "controlplane", keep_work_dir=True)
    progress("starting etcd and kube-apiserver ...")
    plane.start()
    plane.detach()
    try:
        client = ApiClient.from_kubeconfig(plane.kubeconfig_path)
        crds = upstream_crd_files() + our_crd_files()
        progress(f"installing {len(crds)} CRDs ...")
        client.install_crds(crds)
        nodes = fake_nodes(layout)
        progress(f"creating {len(nodes)} fake nodes in {layout.racks} racks ...")
        for node in nodes:
            client.apply(node)
            # Status is a subresource: the apply above only keeps labels and annotations.
            client.apply({k: node[k] for k in ("apiVersion", "kind", "metadata", "status")}, subresource="status")
        _start_kwok(directory, plane, progress)
    except BaseException:
        down(directory=directory)
        raise
    (directory / "sample-job.yaml").write_text(SAMPLE_JOB)
    return status(directory)


def down(*, directory: pathlib.Path | None = None, purge: bool = False) -> bool:
    """Stop every process of the dev cluster; ``purge`` also deletes its data. True if any ran."""
    directory = directory or state_dir()
    stopped = False
    kwok_state = directory / "kwok.json"
    if kwok_state.exists():
        record = _read_record(kwok_state)
        if record is not None and is_alive(record):
            terminate(record)
            stopped = True
        kwok_state.unlink(missing_ok=True)
    if (directory / "controlplane" / "state.json").exists():
        plane = ControlPlane.attach(directory / "controlplane")
        stopped = any(plane.running().values()) or stopped
        plane.stop()
    if purge:
        shutil.rmtree(directory, ignore_errors=True)
    return stopped


def status(directory: pathlib.Path | None = None) -> Status:
    """Which processes of the dev cluster run and whether its API server is ready."""
    directory = directory or state_dir()
    processes: dict[str, bool] = {}
    server_url: str | None = None
    kubeconfig: pathlib.Path | None = None
    ready = False
    if (directory / "controlplane" / "state.json").exists():
        plane = ControlPlane.attach(directory / "controlplane")
        processes.update(plane.running())
        server_url = plane.server_url
        kubeconfig = plane.kubeconfig_path
        ready = all(processes.values()) and plane.is_ready()
    record = _read_record(directory / "kwok.json")
    if record is not None:
        processes["kwok"] = is_alive(record)
    running = bool(processes) and all(processes.values())
    return Status(directory, running, ready, server_url, kubeconfig, processes)


def _start_kwok(directory: pathlib.Path, plane: ControlPlane, progress: Callable[[str], None]) -> None:
    try:
        kwok = binaries.binary_path("kwok")
    except binaries.MissingBinary as exc:
        progress(f"kwok is not built, so the fake nodes stay NotReady: {exc}")
        return
    # kwok run on its own reads its Stage objects (how fake nodes and pods move through their
    # lifecycle) from --config; the build copied upstream's default stages beside the binary.
    stages = [binaries.module_file("kwok", relative).read_text() for relative in binaries.tool("kwok").module_files]
    config = directory / "kwok-stages.yaml"
    config.write_text("\n---\n".join(stage.strip() for stage in stages) + "\n")
    args = [
        str(kwok),
        f"--config={config}",
        f"--kubeconfig={plane.kubeconfig_path}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
        "--manage-nodes-with-label-selector=",
        "--manage-single-node=",
        "--cidr=10.0.1.0/24",
        "--node-ip=10.0.1.1",
        "--node-lease-duration-seconds=40",
    ]
    _, record = spawn("kwok", args, log_path=directory / "kwok.log", cwd=directory)
    (directory / "kwok.json").write_text(json.dumps(asdict(record), indent=2) + "\n")
    progress(f"kwok started (pid {record.pid}, log {directory / 'kwok.log'})")


def _read_record(path: pathlib.Path) -> ProcessRecord | None:
    try:
        return ProcessRecord(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def sample_text(current: Status) -> str:
    """The lines ``dev-cluster up`` prints: how to point kubectl at the cluster and what to apply."""
    sample = current.state_dir / "sample-job.yaml"
    return "\n".join(
        [
            f"API server: {current.server_url}",
            f"kubeconfig: {current.kubeconfig}",
            "",
            f"  export KUBECONFIG={current.kubeconfig}",
            "  kubectl get nodes -L metronome.dev/rack,topology.kubernetes.io/zone",
            f"  kubectl apply -f {sample}",
            "",
            "Stop it with `volcano-metronome dev-cluster down`.",
        ]
    )


def node_summary(layout: Layout) -> str:
    """One line describing the fake fabric."""
    total = layout.racks * layout.nodes_per_rack
    return (
        f"{total} nodes ({layout.gpus_per_node} x {GPU_RESOURCE} each) in {layout.racks} racks "
        f"({RACK_LABEL}), {layout.racks_per_zone} racks per zone ({ZONE_LABEL})"
    )

