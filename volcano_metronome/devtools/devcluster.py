"""A local cluster to try volcano-metronome by hand: the whole local stack, left running in the background.

``up()`` starts a :class:`~volcano_metronome.devtools.stack.Stack` (control plane, kube-controller-
manager, kube-scheduler, kwok with fake GPU nodes, Volcano's webhook manager, controller-manager and
scheduler, our CRDs, webhook and controller, the Kueue manager) with every component whose program is
built, detaches from it, and writes sample manifests. Without kwok the fake nodes are made Ready once,
so our controller places the sample even then. State lives in ``~/.cache/volcano-metronome/dev-cluster/``
(``METRONOME_DEV_CLUSTER_DIR`` overrides); ``down()`` stops every process recorded there and
``status()`` reports each one.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import yaml

from volcano_metronome import api
from volcano_metronome.devtools import binaries
from volcano_metronome.devtools.controlplane import ControlPlane
from volcano_metronome.devtools.processes import ProcessRecord, is_alive, terminate
from volcano_metronome.devtools.fabric import GPU_RESOURCE, Layout
from volcano_metronome.devtools.stack import Stack

SAMPLE_PODGROUP_FILE = "sample-podgroup.yaml"
SAMPLE_KUEUE_FILE = "sample-kueue.yaml"
SAMPLE_JOBSET_FILE = "sample-jobset.yaml"
SAMPLE_VOLCANO_JOB_FILE = "sample-volcano-job.yaml"

SAMPLE_PODGROUP_HEADER = """\
# A Volcano-shaped gang: a PodGroup and the pods that name it, as vc-controller-manager would
# create them for a Volcano Job. There is no Volcano scheduler here, so the pods use the default
# scheduler, which binds them where our controller pinned them. Each pod bursts 60 ms of every
# 200 ms at 60 Gbps; the profile is on the pods too, so the webhook gates them even if they reach
# it before it has seen their PodGroup.
"""
SAMPLE_PROFILE = {api.PERIOD_MS: "200", api.WINDOWS: '[{"start_ms": 0, "len_ms": 60, "gbps": 60}]'}

SAMPLE_VOLCANO_JOB = """\
# A Volcano Job for the real Volcano: vc-controller-manager makes its PodGroup and pods, our webhook
# gates them, our controller picks two nodes and the slot, and the Volcano scheduler binds each pod
# where our controller pinned it. Each pod bursts 60 ms of every 200 ms at 60 Gbps.
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: allreduce-volcano
  namespace: default
  annotations:
    metronome.dev/period-ms: "200"
    metronome.dev/windows: '[{"start_ms": 0, "len_ms": 60, "gbps": 60}]'
spec:
  schedulerName: volcano
  queue: default
  minAvailable: 2
  tasks:
    - name: worker
      replicas: 2
      template:
        spec:
          restartPolicy: OnFailure
          containers:
            - name: worker
              image: busybox
              command: ["sleep", "3600"]
              resources:
                requests: {cpu: "1", memory: 200Mi, nvidia.com/gpu: 8}
                limits: {nvidia.com/gpu: 8}
"""

SAMPLE_KUEUE = """\
# Kueue: a ClusterQueue that lists our AdmissionCheck, so Kueue holds each Workload until our
# controller has chosen its nodes and offset; then a Job of three 8-GPU pods (three nodes).
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata:
  name: metronome-placement
spec:
  controllerName: metronome.dev/placement
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: default-flavor
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: cluster-queue
spec:
  namespaceSelector: {}
  admissionChecksStrategy:
    admissionChecks:
      - name: metronome-placement
  resourceGroups:
    - coveredResources: ["cpu", "memory", "nvidia.com/gpu"]
      flavors:
        - name: default-flavor
          resources:
            - {name: cpu, nominalQuota: 64}
            - {name: memory, nominalQuota: 256Gi}
            - {name: nvidia.com/gpu, nominalQuota: 128}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: user-queue
  namespace: default
spec:
  clusterQueue: cluster-queue
---
apiVersion: batch/v1
kind: Job
metadata:
  name: resnet50-demo
  namespace: default
  labels:
    kueue.x-k8s.io/queue-name: user-queue
  annotations:
    metronome.dev/model: resnet50
spec:
  parallelism: 3
  completions: 3
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: train
          image: busybox
          command: ["sleep", "60"]
          resources:
            requests: {cpu: "1", memory: 200Mi}
            limits: {nvidia.com/gpu: 8}
"""


@dataclass(frozen=True)
class Status:
    """What ``dev-cluster status`` reports."""

    state_dir: pathlib.Path
    running: bool
    ready: bool
    server_url: str | None
    kubeconfig: pathlib.Path | None
    processes: dict[str, bool]
    skipped: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly form."""
        data = asdict(self)
        data["state_dir"] = str(self.state_dir)
        data["kubeconfig"] = str(self.kubeconfig) if self.kubeconfig else None
        return data


def state_dir(environ: dict[str, str] | None = None) -> pathlib.Path:
    """Where the dev cluster keeps its certificates, etcd data, logs and pids."""
    return binaries.user_cache_dir("dev-cluster", "METRONOME_DEV_CLUSTER_DIR", environ)


SAMPLE_JOBSET = """\
# A JobSet of two replicated jobs through Kueue (apply sample-kueue.yaml first: its queues and our
# AdmissionCheck): one gang of 3 pods of 8 GPUs, held by our check, placed leader first in rank order.
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: jobset-demo
  namespace: default
  labels:
    kueue.x-k8s.io/queue-name: user-queue
  annotations:
    metronome.dev/model: resnet50
spec:
  replicatedJobs:
    - name: leader
      replicas: 1
      template:
        spec:
          template:
            spec:
              restartPolicy: Never
              containers:
                - {name: trainer, image: busybox, command: [sleep, "3600"], resources: {limits: {nvidia.com/gpu: 8}}}
    - name: workers
      replicas: 2
      template:
        spec:
          template:
            spec:
              restartPolicy: Never
              containers:
                - {name: trainer, image: busybox, command: [sleep, "3600"], resources: {limits: {nvidia.com/gpu: 8}}}
"""


def sample_podgroup(members: int = 2, name: str = "allreduce-demo") -> str:
    """The PodGroup sample: a PodGroup and ``members`` pods of 8 GPUs naming it, in ``default``."""
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "annotations": dict(SAMPLE_PROFILE)},
        "spec": {"minMember": members, "queue": "default"},
    }
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-worker-{index}",
                "namespace": "default",
                "annotations": {api.VOLCANO_GROUP_NAME: name, **SAMPLE_PROFILE},
            },
            "spec": {
                "restartPolicy": "OnFailure",
                "containers": [
                    {
                        "name": "worker",
                        "image": "busybox",
                        "command": ["sleep", "3600"],
                        "resources": {"limits": {GPU_RESOURCE: "8"}},
                    }
                ],
            },
        }
        for index in range(members)
    ]
    return SAMPLE_PODGROUP_HEADER + yaml.safe_dump_all([group, *pods], sort_keys=False)


def up(
    *,
    layout: Layout = Layout(),
    directory: pathlib.Path | None = None,
    keep_state: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> Status:
    """Start (or find running) the dev cluster and return its status.

    A cluster that is not running starts empty (its previous etcd data, certificates and logs are
    deleted) unless ``keep_state``: then it comes back with the objects it had.
    """
    directory = directory or state_dir()
    current = status(directory)
    if current.running and current.ready:
        progress(f"dev cluster already running at {current.server_url}")
        return current
    if current.processes:
        # Half of it is running (a crash, a reboot): stop it rather than guess.
        down(directory=directory)
    if not keep_state and directory.exists():
        progress(f"starting empty (previous state in {directory} deleted; --keep-state keeps it)")
        shutil.rmtree(directory)
    stack = Stack(directory, layout=layout)
    stack.start(progress)
    stack.detach()
    (directory / SAMPLE_PODGROUP_FILE).write_text(sample_podgroup())
    (directory / SAMPLE_KUEUE_FILE).write_text(SAMPLE_KUEUE)
    (directory / SAMPLE_JOBSET_FILE).write_text(SAMPLE_JOBSET)
    (directory / SAMPLE_VOLCANO_JOB_FILE).write_text(SAMPLE_VOLCANO_JOB)
    return status(directory)


def down(*, directory: pathlib.Path | None = None, purge: bool = False) -> bool:
    """Stop every process of the dev cluster; ``purge`` also deletes its data. True if any ran."""
    directory = directory or state_dir()
    stopped = False
    legacy_kwok = directory / "kwok.json"  # written by dev clusters started before the stack existed
    if legacy_kwok.exists():
        record = _read_record(legacy_kwok)
        if record is not None and is_alive(record):
            terminate(record)
            stopped = True
        legacy_kwok.unlink(missing_ok=True)
    if Stack.exists(directory):
        stack = Stack.attach(directory)
        stopped = any(stack.running().values()) or stopped
        stack.stop()
    elif (directory / "controlplane" / "state.json").exists():
        plane = ControlPlane.attach(directory / "controlplane")
        stopped = any(plane.running().values()) or stopped
        plane.stop()
    if purge:
        shutil.rmtree(directory, ignore_errors=True)
    return stopped


def status(directory: pathlib.Path | None = None) -> Status:
    """Which processes of the dev cluster run and whether its API server is ready."""
    directory = directory or state_dir()
    if not Stack.exists(directory):
        return Status(directory, False, False, None, None, {})
    stack = Stack.attach(directory)
    processes = stack.running()
    running = bool(processes) and all(processes.values())
    ready = running and stack.plane.is_ready()
    server_url = stack.plane.server_url if stack.plane.records() else None
    return Status(directory, running, ready, server_url, stack.kubeconfig_path, processes, stack.skipped)


def _read_record(path: pathlib.Path) -> ProcessRecord | None:
    try:
        return ProcessRecord(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def sample_text(current: Status) -> str:
    """The lines ``dev-cluster up`` prints: how to point kubectl at the cluster and what to apply."""
    lines = [
        f"API server: {current.server_url}",
        f"kubeconfig: {current.kubeconfig}",
        "",
        f"  export KUBECONFIG={current.kubeconfig}",
        "  kubectl get nodes -L metronome.dev/rack,topology.kubernetes.io/zone",
    ]
    if "volcano-controller-manager" in current.processes:
        lines.append(f"  kubectl apply -f {current.state_dir / SAMPLE_VOLCANO_JOB_FILE}   # a Volcano Job, bound by the Volcano scheduler")
    else:
        lines.append(f"  kubectl apply -f {current.state_dir / SAMPLE_PODGROUP_FILE}   # a Volcano-shaped gang")
    if "kube-scheduler" not in current.processes and "volcano-scheduler" not in current.processes:
        lines.append("  (no scheduler runs: our controller places and ungates the pods, nothing binds them)")
    if "kueue" in current.processes:
        lines.append(f"  kubectl apply -f {current.state_dir / SAMPLE_KUEUE_FILE}      # a Kueue Job, held by our AdmissionCheck")
        if "jobset" in current.processes:
            lines.append(f"  kubectl apply -f {current.state_dir / SAMPLE_JOBSET_FILE}     # then a JobSet of 2 replicated jobs")
    lines += [
        "  kubectl get stbandwidthclaims -A; kubectl get pods -o wide",
        "",
    ]
    for name, reason in current.skipped.items():
        lines.append(f"not running: {name} ({reason})")
    lines.append("Stop it with `volcano-metronome dev-cluster down`.")
    return "\n".join(lines)
