"""``python -m volcano_metronome.bench controller --gangs N --size M [--json]``.

Against a real kube-apiserver + etcd (started here unless ``--kubeconfig`` names one): installs the
CRDs, creates enough fake GPU nodes, starts ``volcano-metronome controller`` as a subprocess (leader
election on, as in production), waits until it leads, then creates N PodGroups with M gated pods
each, as the webhook would leave them, and measures the time until every pod is ungated.

Modes: ``create`` (the headline: from the first create to the last ungate, so the API server also
absorbs the creations) and ``backlog`` (all gangs exist before the controller starts; from its
leadership to the last ungate: the controller's own drain rate).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import yaml

from volcano_metronome import api, kube
from volcano_metronome.bench import cputime
from volcano_metronome.controller import objects

GPU = "nvidia.com/gpu"
PROFILE = json.dumps({"period_ms": 200, "windows": [{"start_ms": 176, "len_ms": 24, "gbps": 80}], "jitter_ms": 0},
                     separators=(",", ":"))
TARGET_GANGS_PER_S = 50.0


def main(argv: list[str]) -> int:
    """Run the benchmark; prints one JSON object (or a short summary without ``--json``)."""
    parser = argparse.ArgumentParser(prog="python -m volcano_metronome.bench controller", description=__doc__)
    parser.add_argument("--gangs", type=int, default=50)
    parser.add_argument("--size", type=int, default=16, help="pods per gang")
    parser.add_argument("--gpus-per-pod", type=int, default=1)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--mode", choices=("create", "backlog"), default="create")
    parser.add_argument("--creators", type=int, default=8, help="threads creating pods")
    parser.add_argument("--write-concurrency", type=int, default=16, help="the controller's writeConcurrency")
    parser.add_argument("--kubeconfig", help="use this API server instead of starting one")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    plane = None
    if args.kubeconfig:
        kubeconfig = pathlib.Path(args.kubeconfig)
    else:
        from volcano_metronome.devtools.controlplane import ControlPlane

        plane = ControlPlane().start()
        kubeconfig = plane.kubeconfig_path
    try:
        result = run(kubeconfig, args, plane.pids() if plane is not None else {})
    finally:
        if plane is not None:
            plane.stop()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['gangs']} gangs x {result['size']} pods ({result['mode']}): {result['total_s']:.2f} s, "
              f"{result['gangs_per_s']:.1f} gangs/s, {result['pods_per_s']:.0f} pods/s "
              f"(target {TARGET_GANGS_PER_S:g} gangs/s)")
    return 0


def install_crds(kubeconfig: pathlib.Path) -> None:
    from volcano_metronome.devtools.apply import ApiClient
    from volcano_metronome.devtools.sources import our_crd_files, upstream_crd_files

    ApiClient.from_kubeconfig(kubeconfig).install_crds(upstream_crd_files() + our_crd_files())


def run(kubeconfig: pathlib.Path, args: argparse.Namespace, server_pids: dict[str, int]) -> dict[str, Any]:
    """Set up, measure, tear down; the figures as a dict."""
    install_crds(kubeconfig)
    k = kube.connect(str(kubeconfig), qps_pool=max(32, args.creators * 2))
    tag = uuid.uuid4().hex[:6]
    ns = f"bench-{tag}"
    k.create(kube.NAMESPACES, {"metadata": {"name": ns}})
    pods = args.gangs * args.size
    members_per_node = max(1, args.gpus_per_node // args.gpus_per_pod)
    nodes = int(math.ceil(pods / members_per_node * 1.25)) + 1
    node_names = make_nodes(k, tag, nodes, args.gpus_per_node, args.creators)
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-controller-"))
    ctl = Controller(kubeconfig, work, tag, ns, args.write_concurrency)
    done = threading.Event()
    ungated: set[str] = set()
    lock = threading.Lock()

    def on_change(_: str, pod: dict[str, Any]) -> None:
        if not objects.gated_by_us(pod) and objects.pinned_node(pod):
            with lock:
                ungated.add(objects.name(pod))
                if len(ungated) >= pods:
                    done.set()

    watcher = kube.Informer(k, kube.PODS, ns, label_selector=f"{api.MANAGED_LABEL}=true", on_change=on_change)
    watcher.start()
    watcher.wait_synced(30)
    try:
        created_at = started_at = 0.0
        if args.mode == "backlog":
            create_all(k, ns, args)
            created_at = time.monotonic()
            ctl.start()
            ctl.wait_leading(k, args.timeout)
            started_at = time.monotonic()
            cpu_before = ctl.cpu(server_pids)
        else:
            ctl.start()
            ctl.wait_leading(k, args.timeout)
            started_at = time.monotonic()
            cpu_before = ctl.cpu(server_pids)
            create_all(k, ns, args)
            created_at = time.monotonic()
        if not done.wait(args.timeout):
            raise SystemExit(f"timed out: {len(ungated)} of {pods} pods ungated\n{ctl.logs()}")
        finished_at = time.monotonic()
        cpu_after = ctl.cpu(server_pids)
        metrics = ctl.metrics(pods)
    finally:
        watcher.stop()
        ctl.stop()
        k.close()
    total = finished_at - started_at
    return {
        "benchmark": "controller", "mode": args.mode, "gangs": args.gangs, "size": args.size, "pods": pods,
        "nodes": len(node_names), "gpus_per_pod": args.gpus_per_pod, "write_concurrency": args.write_concurrency,
        "create_s": round(created_at - started_at, 3) if args.mode == "create" else None,
        "total_s": round(total, 3),
        "after_last_create_s": round(finished_at - created_at, 3) if args.mode == "create" else None,
        "gangs_per_s": round(args.gangs / total, 2), "pods_per_s": round(pods / total, 1),
        "target_gangs_per_s": TARGET_GANGS_PER_S, "meets_target": args.gangs / total >= TARGET_GANGS_PER_S,
        "controller": metrics, "cpus": os.cpu_count(),
        "cpu_s": {name: round(cpu_after[name] - cpu_before.get(name, 0.0), 2) for name in cpu_after},
    }


def make_nodes(k: kube.Kube, tag: str, count: int, gpus: int, threads: int) -> list[str]:
    def one(i: int) -> str:
        name = f"bench-{tag}-n{i}"
        res = {GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
        k.create(kube.NODES, {"metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "metronome.dev/rack": f"bench-{tag}-r{i // 8}", "bench": tag}}})
        k.patch(kube.NODES, None, name, {"status": {"allocatable": res, "capacity": res}}, subresource="status")
        # No kubelet or node lifecycle controller runs here: lift the node.kubernetes.io/not-ready taint the
        # API server put on the new node, as they would once it is Ready (the controller honours taints).
        k.patch(kube.NODES, None, name, {"spec": {"taints": None}})
        return name

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(count)))


def create_all(k: kube.Kube, ns: str, args: argparse.Namespace) -> None:
    """N PodGroups and N x M gated pods, as the webhook leaves them; gangs in order, pods in parallel."""
    def gang(g: int) -> None:
        name = f"g{g}"
        k.create(kube.PODGROUPS, {
            "metadata": {"name": name, "namespace": ns, "annotations": {
                api.PROFILE: PROFILE, api.PROFILE_SOURCE: "annotation", api.GANG_SIZE: str(args.size)}},
            "spec": {"minMember": args.size, "queue": "default"}}, ns)

    def pod(g: int, i: int) -> None:
        k.create(kube.PODS, {
            "metadata": {"name": f"g{g}-{i}", "namespace": ns, "labels": {api.MANAGED_LABEL: "true"},
                         "annotations": {api.GANG_KIND: "PodGroup", api.GANG_NAME: f"g{g}",
                                         api.VOLCANO_GROUP_NAME: f"g{g}", api.PROFILE: PROFILE,
                                         api.GANG_SIZE: str(args.size)}},
            "spec": {"schedulingGates": [{"name": api.SCHEDULING_GATE}], "containers": [{
                "name": "train", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {GPU: str(args.gpus_per_pod)},
                              "limits": {GPU: str(args.gpus_per_pod)}}}]}}, ns)

    with ThreadPoolExecutor(args.creators) as pool:
        for g in range(args.gangs):
            gang(g)
            list(pool.map(lambda i: pod(g, i), range(args.size)))


class Controller:
    """The controller subprocess of one benchmark run."""

    def __init__(self, kubeconfig: pathlib.Path, work: pathlib.Path, tag: str, ns: str, concurrency: int) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.identity = f"bench-{tag}"
        self.ns = ns
        self.log = work / "controller.log"
        config = work / "controller.yaml"
        config.write_text(yaml.safe_dump({
            "nodeSelector": f"bench={tag}", "watchNamespace": ns, "namespace": ns, "healthPort": self.port,
            "bindAddress": "127.0.0.1", "writeConcurrency": concurrency, "leaderElection": {"leaseName": "bench"}}))
        self.cmd = [sys.executable, "-m", "volcano_metronome", "controller", "--kubeconfig", str(kubeconfig),
                    "--config", str(config), "--identity", self.identity, "--log-level", "WARNING"]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_leading(self, k: kube.Kube, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lease = k.get(kube.LEASES, self.ns, "bench")
            if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise SystemExit(f"the controller exited:\n{self.logs()}")
            time.sleep(0.02)
        raise SystemExit(f"the controller did not take the lease:\n{self.logs()}")

    def cpu(self, server_pids: dict[str, int]) -> dict[str, float]:
        """CPU seconds used so far by the controller, the benchmark itself and the servers (if ours)."""
        out = {"controller": cputime.process_tree(self.proc.pid) if self.proc is not None else 0.0,
               "benchmark": cputime.own()}  # not its tree: the controller and the servers are its children
        out.update({name: cputime.process_tree(pid) for name, pid in server_pids.items()})
        return out

    def metrics(self, pods: int) -> dict[str, float]:
        """Counters from /metrics (polled briefly: the last cycle records them after its writes return)."""
        text = ""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
                    text = resp.read().decode()
            except OSError:
                return {}
            done = [line for line in text.splitlines() if line.startswith("metronome_controller_ungated_pods_total ")]
            if done and float(done[0].rsplit(" ", 1)[1]) >= pods:
                break
            time.sleep(0.05)
        wanted = ("metronome_controller_placements_total", "metronome_controller_ungated_pods_total",
                  "metronome_controller_cycle_seconds_count", "metronome_controller_cycle_seconds_sum",
                  "metronome_controller_decision_seconds_sum", "metronome_controller_decision_seconds_count")
        out: dict[str, float] = {}
        for line in text.splitlines():
            name = line.split(" ", 1)[0]
            if name in wanted:
                out[name.replace("metronome_controller_", "")] = float(line.rsplit(" ", 1)[1])
        writes = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith("metronome_controller_writes_total{") and 'result="ok"' in line]
        out["writes_ok"] = sum(writes)
        return out

    def logs(self) -> str:
        try:
            return self.log.read_text()[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
