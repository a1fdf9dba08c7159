"""Helpers for running the controller against a real API server (integration tests and the benchmark).

- :func:`ensure_crds`: our CRDs and the upstream Volcano and Kueue CRDs, installed once.
- :class:`Cluster`: a ``kube.Kube`` plus helpers to make nodes (allocatable through the status
  subresource), namespaces, priority classes and gangs of gated pods, and to wait for conditions.
- :class:`ControllerProcess`: ``volcano-metronome controller`` as a subprocess with its own settings
  file, log file and health port; killable with SIGKILL.
"""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import uuid
from typing import Any, Callable, Iterable

import yaml

from tests.controller import builders as b
from volcano_metronome import api, kube
from volcano_metronome.controller import objects
from volcano_metronome.devtools.apply import ApiClient
from volcano_metronome.devtools.sources import our_crd_files, upstream_crd_files
from volcano_metronome.shapes.slots import number_text

JSON = dict[str, Any]


def ensure_crds(kubeconfig: pathlib.Path) -> None:
    """Install our CRDs and the upstream ones unless they are all established already."""
    client = ApiClient.from_kubeconfig(kubeconfig)
    files = upstream_crd_files() + our_crd_files()
    k = kube.connect(str(kubeconfig))
    try:
        have = {objects.name(c) for c in k.list(kube.CRDS)["items"]
                if objects.condition_true(c, "Established")}
    finally:
        k.close()
    want = set()
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                want.add(doc["metadata"]["name"])
    if not want <= have:
        client.install_crds(files)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float, what: str | Callable[[], str],
               interval: float = 0.1) -> Any:
    """Poll until ``predicate()`` is truthy; its value, or an AssertionError naming ``what`` (a callable is
    called only then, e.g. to include a controller's log as it is at the time of failure)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    text = what() if callable(what) else what
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {text} (last: {str(last)[:300]})")


class Cluster:
    """A client with test-object helpers; ``tag`` isolates this test's nodes from other tests'."""

    def __init__(self, kubeconfig: pathlib.Path, tag: str | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.k = kube.connect(str(kubeconfig))
        self.tag = tag or uuid.uuid4().hex[:8]
        self.node_label = ("metronome-test", self.tag)
        self.created_namespaces: list[str] = []

    def close(self) -> None:
        """Delete what the test made that would otherwise linger (no garbage collector runs here)."""
        for ns in self.created_namespaces:
            for resource in (kube.PODS, kube.PODGROUPS, kube.WORKLOADS, kube.CLAIMS):
                try:
                    for obj in self.k.list(resource, ns)["items"]:
                        self.k.request("DELETE", resource.path(ns, objects.name(obj)),
                                       body={"gracePeriodSeconds": 0})
                except kube.KubeError:
                    pass
        self.k.close()

    @property
    def node_selector(self) -> str:
        return f"{self.node_label[0]}={self.node_label[1]}"

    def namespace(self, prefix: str = "t") -> str:
        name = f"{prefix}-{self.tag}-{uuid.uuid4().hex[:4]}"
        self.k.create(kube.NAMESPACES, {"metadata": {"name": name}})
        self.created_namespaces.append(name)
        return name

    def nodes(self, count: int, *, gpus: int = 8, per_rack: int = 4) -> list[str]:
        names = []
        for i in range(count):
            name = f"{self.tag}-n{i}"
            obj = b.node(name, gpus=gpus, rack=f"{self.tag}-r{i // per_rack}",
                         labels={self.node_label[0]: self.node_label[1]})
            status = obj.pop("status")
            self.k.create(kube.NODES, obj)
            self.k.patch(kube.NODES, None, name, {"status": status}, subresource="status")
            # No kubelet or node lifecycle controller runs here: lift the not-ready taint the API server put
            # on the new node, as they would once it is Ready (the controller honours taints).
            self.k.patch(kube.NODES, None, name, {"spec": {"taints": None}})
            names.append(name)
        return names

    def priority_class(self, value: int) -> str:
        name = f"{self.tag}-p{value}"
        self.k.create(kube.PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                              "metadata": {"name": name}, "value": value})
        return name

    def gang(self, namespace: str, name: str, members: int, *, gpus: int = 8, priority_class: str | None = None,
             podgroup: bool = True, patient: bool = False) -> None:
        """A PodGroup and its gated pods; ``patient`` retries through API server outages (idempotently)."""
        create = self._create_patiently if patient else self.k.create
        if podgroup:
            create(kube.PODGROUPS, b.podgroup(namespace, name, members, gpus=gpus), namespace)
        for p in b.gang_pods(namespace, name, members, gpus=gpus, priority_class=priority_class):
            create(kube.PODS, p, namespace)

    def _create_patiently(self, resource: kube.Resource, obj: JSON, namespace: str, timeout: float = 120) -> JSON:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.k.create(resource, obj, namespace)
            except kube.Conflict:  # created before the connection dropped
                return obj
            except kube.Unavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete at once: no kubelet confirms a graceful deletion here (as one would, in the end)."""
        self.k.request("DELETE", kube.PODS.path(namespace, name), body={"gracePeriodSeconds": 0})

    def pods(self, namespace: str) -> list[JSON]:
        return list(self.k.list(kube.PODS, namespace)["items"])

    def claims(self, namespace: str) -> dict[str, JSON]:
        return {objects.name(c): c for c in self.k.list(kube.CLAIMS, namespace)["items"]}

    def ungated(self, namespace: str, gangs: Iterable[str] | None = None) -> bool:
        wanted = set(gangs) if gangs is not None else None
        pods = [p for p in self.pods(namespace)
                if wanted is None or objects.annotations_of(p).get(api.GANG_NAME) in wanted]
        return bool(pods) and all(not objects.gated_by_us(p) for p in pods)

    def check_consistent(self, namespace: str) -> dict[str, JSON]:
        """Every placed gang: one claim; its pods pinned inside the claim's nodes (one node each, or a Volcano
        task role's node set), members per node respected."""
        claims = self.claims(namespace)
        by_gang: dict[str, list[JSON]] = {}
        for p in self.pods(namespace):
            by_gang.setdefault(objects.annotations_of(p)[api.GANG_NAME], []).append(p)
        refs = [c["spec"]["gangRef"]["name"] for c in claims.values()]
        assert len(refs) == len(set(refs)), f"a gang has two claims: {sorted(refs)}"
        for gang, pods in by_gang.items():
            claim = claims.get(f"podgroup-{gang}")
            pinned = [objects.pinned_nodes(p) for p in pods if not objects.gated_by_us(p)]
            if not pinned:
                continue
            assert claim is not None, f"gang {gang} has ungated pods but no claim"
            if (objects.condition(claim, "Placed") or {}).get("reason") == "Released":
                continue  # finished: its links are free again
            status = claim["status"]
            slots = dict(zip(status["nodes"], status["members"]))
            assert len(pinned) <= sum(slots.values()), f"gang {gang}: more pods ungated than members"
            for nodes in pinned:  # one node per pod, or a Volcano task role's node set
                assert nodes and set(nodes) <= set(slots), f"gang {gang}: a pod pinned to {nodes}, outside {slots}"
                if len(nodes) == 1:
                    slots[nodes[0]] -= 1
            assert min(slots.values()) >= 0, f"gang {gang}: more pods than members on a node"
            for p in pods:
                if not objects.gated_by_us(p):
                    assert timing(p) == claim_timing(claim), (gang, objects.name(p))
        return claims


TIMING_KEYS = (api.PERIOD_MS, api.OFFSET_MS, api.EPOCH)


def timing(pod: JSON) -> dict[str, str]:
    """The timing annotations a pod carries."""
    ann = objects.annotations_of(pod)
    return {k: ann[k] for k in TIMING_KEYS if k in ann}


def claim_timing(claim: JSON) -> dict[str, str]:
    """The timing annotations the pods of a placed gang should carry: the period, and the offset and
    epoch only when the claim is locked (an unlocked gang runs free)."""
    status = claim["status"]
    out = {api.PERIOD_MS: number_text(status["periodMs"])}
    if status.get("locked", True):
        out.update({api.OFFSET_MS: number_text(status["offsetMs"]), api.EPOCH: str(status["epoch"])})
    return out


def start_controller(cluster: Cluster, work: pathlib.Path, started: list["ControllerProcess"], ns: str, *,
                     lease: str = "metronome", identity: str | None = None,
                     extra_settings: dict[str, Any] | None = None, args: Iterable[str] = ()) -> "ControllerProcess":
    """A controller leading through a Lease in ``ns``, started and recorded in ``started`` (stopped by the fixture)."""
    ctl = ControllerProcess(cluster, work, lease=lease, lease_namespace=ns, identity=identity,
                            extra_settings=extra_settings, args=args).start()
    started.append(ctl)
    return ctl


class ControllerProcess:
    """``volcano-metronome controller`` in a subprocess."""

    def __init__(self, cluster: Cluster, work: pathlib.Path, *, lease: str, lease_namespace: str,
                 identity: str | None = None, extra_settings: dict[str, Any] | None = None,
                 args: Iterable[str] = ()) -> None:
        self.identity = identity or f"ctl-{uuid.uuid4().hex[:6]}"
        self.port = free_port()
        self.log_path = work / f"{self.identity}.log"
        self.config_path = work / f"{self.identity}.yaml"
        settings = {
            "nodeSelector": cluster.node_selector, "healthPort": self.port, "bindAddress": "127.0.0.1",
            "namespace": lease_namespace, "watchNamespace": lease_namespace, "resyncSeconds": 5,
            "cycleDebounceMs": 10,
            "leaderElection": {"leaseName": lease},
            **(extra_settings or {}),
        }
        self.config_path.write_text(yaml.safe_dump(settings))
        self.args = [sys.executable, "-m", "volcano_metronome", "controller", "--kubeconfig",
                     str(cluster.kubeconfig), "--config", str(self.config_path), "--identity", self.identity, *args]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "ControllerProcess":
        log = open(self.log_path, "ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        log.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a node failure or the OOM killer would."""
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        """SIGTERM and wait (then SIGKILL if it hangs)."""
        if self.proc is None:
            return None
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def logs(self) -> str:
        try:
            return self.log_path.read_text()[-6000:]
        except OSError:
            return ""

    def metric(self, name: str) -> float | None:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as resp:
                text = resp.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None
