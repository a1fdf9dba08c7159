"""The whole local stack: a real control plane, the Kubernetes components around it, Kueue, and ours.

``Stack`` starts, in this order, each as a local process with its log in the stack's directory:

1. etcd + kube-apiserver (:class:`~volcano_metronome.devtools.controlplane.ControlPlane`), then the
   namespaces ``volcano-metronome`` and ``kueue-system``, the Volcano CRDs (``shared/upstream``), the
   Kueue CRDs (those of the Kueue build when Kueue runs, else ``shared/upstream``'s), ours, and the
   fake nodes of the fabric (:mod:`~volcano_metronome.devtools.fabric`);
2. **kube-controller-manager** (Jobs create pods, garbage collection, namespace deletion, service
   accounts, node taints; :data:`~volcano_metronome.devtools.components.CONTROLLERS`);
3. **kube-scheduler** (binds pods, honouring the node affinity our controller writes);
4. **kwok** (the fake nodes report Ready, pods bound to them run);
5. **our webhook** under gunicorn, registered by URL with its caBundle: the chart's
   MutatingWebhookConfiguration with ``webhook.podSelection=all`` (pods of directly created
   PodGroups carry only Volcano's ``scheduling.k8s.io/group-name`` annotation);
6. **the Kueue manager**, run out of cluster: its webhooks registered by URL with the caBundle of a
   certificate made here, internal certificate management off;
7. **our controller**, leader-elected in ``volcano-metronome``.

Each step waits until its component is ready (health endpoint, nodes Ready, a dry-run request
mutated by the webhook just registered), so a started stack is usable at once. A component whose
program is not built is skipped with a note unless it is ``required``; the e2e tier requires all.
``detach()`` / :meth:`Stack.attach` let ``dev-cluster`` leave the stack running between commands.

With the Volcano programs built, it also runs Volcano as its chart does (:mod:`~volcano_metronome.devtools.volcano`):
its webhook manager (after kwok), controller-manager and scheduler, with the CRDs of that build.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import ssl
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping

import yaml

from volcano_metronome.certs import pki
from volcano_metronome.devtools import binaries, components, operators, probes, recipes, registrations, sources, volcano
from volcano_metronome.devtools.apply import ApiClient, ApiError
from volcano_metronome.devtools.controlplane import ControlPlane
from volcano_metronome.devtools.processes import (
    LOOPBACK,
    ControlPlaneError,
    ProcessRecord,
    free_ports,
    is_alive,
    spawn,
    terminate,
    wait_ports_free,
)
from volcano_metronome.devtools.fabric import Layout, fake_nodes, ready_status

NAMESPACE = "volcano-metronome"
KUEUE_NAMESPACE = "kueue-system"
RELEASE = "metronome"  # the Helm release name the webhook configuration is rendered with
WEBHOOK_CHART_VALUES: Mapping[str, Any] = {"webhook": {"podSelection": "all"}}
CONTROLLER_IDENTITY = "local-stack"

# In start order; stopped in reverse. Volcano's webhooks come first: its controller-manager's Jobs
# and PodGroups go through them.
COMPONENTS = ("kube-controller-manager", "kube-scheduler", "kwok", "volcano-webhook", "volcano-controller-manager",
              "volcano-scheduler", "webhook", "jobset", "training-operator", "training-operator-kueue", "kueue", "controller")
VOLCANO = ("volcano-webhook", "volcano-controller-manager", "volcano-scheduler")
# The programs from the binary cache each component needs.
PROGRAMS: Mapping[str, tuple[str, ...]] = {
    "kube-controller-manager": ("kube-controller-manager",),
    "kube-scheduler": ("kube-scheduler",),
    "kwok": ("kwok",),
    "volcano-webhook": ("volcano-webhook-manager", "helm"),  # helm renders the chart's registrations
    "volcano-controller-manager": ("volcano-controller-manager",),
    "volcano-scheduler": ("volcano-scheduler",),
    "webhook": ("helm",),  # renders the chart's webhook configuration
    "jobset": ("jobset",),
    "training-operator": ("training-operator",),  # PyTorchJobs of one namespace, gang-scheduled by Volcano
    "training-operator-kueue": ("training-operator",),  # those of another, admitted by Kueue
    "kueue": ("kueue",),
    "controller": (),
}
_STATE_FILE = "stack.json"
_LOG_TAIL_LINES = 40


class StackError(ControlPlaneError):
    """A component could not start or become ready; carries the tail of its log."""


@dataclass
class _Process:
    record: ProcessRecord
    port: int | None = None
    child: subprocess.Popen[bytes] | None = field(default=None, repr=False)


class Stack:
    """The local stack in ``directory``; a context manager, or ``start()`` / ``stop()``."""

    def __init__(
        self,
        directory: pathlib.Path,
        *,
        layout: Layout = Layout(),
        components: Iterable[str] = COMPONENTS,
        required: Iterable[str] = (),
        ready_timeout: float = 120.0,
        controller_settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.directory = pathlib.Path(directory)
        self.layout = layout
        wanted, required = set(components), set(required)
        self.components = tuple(name for name in COMPONENTS if name in wanted)
        unknown = (wanted | required) - set(COMPONENTS)
        if unknown:
            raise StackError(f"unknown components {sorted(unknown)}; known: {', '.join(COMPONENTS)}")
        self.required = frozenset(required)
        self.ready_timeout = ready_timeout
        self.controller_settings = dict(controller_settings or {})
        self.plane = ControlPlane(self.directory / "controlplane", keep_work_dir=True)
        self.skipped: dict[str, str] = {}
        self._processes: dict[str, _Process] = {}

    # ------------------------------------------------------------------ identity
    @property
    def kubeconfig_path(self) -> pathlib.Path:
        """The admin kubeconfig of the stack's API server."""
        return self.plane.kubeconfig_path

    def log_path(self, name: str) -> pathlib.Path:
        """The log file of component ``name`` (etcd and kube-apiserver log in ``controlplane/``)."""
        if name in ("etcd", "kube-apiserver"):
            return self.plane.log_path(name)
        return self.directory / f"{name}.log"

    def port(self, name: str) -> int:
        """The loopback port component ``name`` serves on (webhook: HTTPS; others: health)."""
        process = self._processes.get(name)
        if process is None or process.port is None:
            raise StackError(f"{name} is not running in this stack")
        return process.port

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, progress: Callable[[str], None] = lambda _: None) -> Stack:
        """Start every component in order and wait for each; on failure stop what started and raise."""
        programs = self._resolve_programs()
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            progress("starting etcd and kube-apiserver ...")
            self.plane.start()
            self._save_state()  # from here on, `attach` finds whatever has started, even after a crash
            client = ApiClient.from_kubeconfig(self.kubeconfig_path)
            self._prepare_api(client, programs, progress)
            for name in self.components:
                if name in self.skipped:
                    progress(f"{name}: skipped ({self.skipped[name]})")
                    continue
                progress(f"starting {name} ...")
                started = time.monotonic()
                self._starter(name)(client, programs.get(name, {}))
                progress(f"{name} ready in {time.monotonic() - started:.1f}s (log {self.log_path(name)})")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every component (in reverse order), then the control plane; wait until their ports are free."""
        ports = []
        for name in reversed(list(self._processes)):
            process = self._processes.pop(name)
            terminate(process.record, process.child)
            if process.port is not None:
                ports.append(process.port)
        self.plane.stop()
        (self.directory / _STATE_FILE).unlink(missing_ok=True)
        wait_ports_free(ports, timeout=10.0)

    def detach(self) -> None:
        """Let the processes outlive this Python process; :meth:`attach` finds them again."""
        self.plane.detach()
        for process in self._processes.values():
            process.child = None

    @classmethod
    def attach(cls, directory: pathlib.Path) -> Stack:
        """A handle on a stack started (and detached) in ``directory`` by another process."""
        directory = pathlib.Path(directory)
        try:
            state = json.loads((directory / _STATE_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise StackError(f"no stack state in {directory}: {exc}") from exc
        stack = cls(directory, layout=Layout(**state["layout"]), components=state["components"])
        try:
            stack.plane = ControlPlane.attach(directory / "controlplane")
        except ControlPlaneError:
            pass  # stopped (or never started): the handle's plane has no processes
        stack.skipped = dict(state.get("skipped", {}))
        stack._processes = {
            name: _Process(ProcessRecord(**entry["record"]), entry.get("port"))
            for name, entry in state["processes"].items()
        }
        return stack

    @staticmethod
    def exists(directory: pathlib.Path) -> bool:
        """Whether ``directory`` holds the state of a started stack."""
        return (pathlib.Path(directory) / _STATE_FILE).is_file()

    def records(self) -> dict[str, ProcessRecord]:
        """The identities of every process of the stack (etcd and kube-apiserver included)."""
        records = self.plane.records()
        records.update({name: process.record for name, process in self._processes.items()})
        return records

    def running(self) -> dict[str, bool]:
        """Whether each process of the stack (etcd and kube-apiserver included) is alive."""
        alive = dict(self.plane.running())
        alive.update({name: is_alive(process.record) for name, process in self._processes.items()})
        return alive

    def logs(self, name: str, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of one component's log."""
        path = self.log_path(name)
        try:
            text = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"(no log at {path})"
        return f"--- last {len(text)} lines of {path} ---\n" + "\n".join(text)

    # ------------------------------------------------------------------ preparation
    def _resolve_programs(self) -> dict[str, dict[str, pathlib.Path]]:
        found: dict[str, dict[str, pathlib.Path]] = {}
        missing: list[str] = []
        for name in self.components:
            paths: dict[str, pathlib.Path] = {}
            reason = ""
            for program in PROGRAMS[name]:
                try:
                    paths[program] = binaries.binary_path(program)
                except binaries.MissingBinary as exc:
                    reason = str(exc)
            if name == "kueue" and not reason and shutil.which("unshare") is None:
                reason = "Kueue runs in a private mount namespace, which needs `unshare` (util-linux) on PATH"
            if reason:
                if name in self.required:
                    missing.append(f"{name}: {reason}")
                self.skipped[name] = reason
            else:
                found[name] = paths
        if missing:
            raise binaries.MissingBinary("; ".join(missing))
        return found

    def _prepare_api(self, client: ApiClient, programs: Mapping[str, Any], progress: Callable[[str], None]) -> None:
        probes.forget_local_webhooks(client)
        for namespace in (NAMESPACE, KUEUE_NAMESPACE, volcano.NAMESPACE):
            client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        # A running Kueue or Volcano gets the CRDs of its own build; otherwise the pinned upstream ones.
        kueue_crds = (
            [binaries.module_file("kueue", relative) for relative in binaries.tool("kueue").module_files
             if "/crd/" in relative]
            if "kueue" in programs
            else sources.kueue_crd_files()
        )
        volcano_crds = (
            [binaries.module_file("volcano-controller-manager", relative) for relative in recipes.VOLCANO_CRDS]
            if "volcano-controller-manager" in programs
            else sources.volcano_crd_files()
        )
        # Kueue enables its JobSet integration only when the CRD is there when it starts.
        operator_crds = [binaries.module_file("jobset", recipes.JOBSET_CRD)] if "jobset" in programs else []
        if "training-operator" in programs or "training-operator-kueue" in programs:
            operator_crds += [binaries.module_file("training-operator", recipes.PYTORCH_CRD)]
        crds = volcano_crds + kueue_crds + operator_crds + sources.our_crd_files()
        progress(f"installing {len(crds)} CRDs ...")
        client.install_crds(crds)
        nodes = fake_nodes(self.layout)
        progress(f"creating {len(nodes)} fake nodes in {self.layout.racks} racks ...")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for node in nodes:
            client.apply(node)
            # Status is a subresource: the apply above only keeps labels and annotations.
            client.apply({k: node[k] for k in ("apiVersion", "kind", "metadata", "status")}, subresource="status")
            # Without kwok nobody reports these nodes Ready: do it once. Without kube-controller-manager's
            # node-lifecycle controller nobody lifts the not-ready taint the API server put on them: lift it,
            # as the integration fixtures do (our controller and the schedulers honour taints).
            if "kwok" not in programs:
                client.apply(ready_status(node, now), subresource="status")
            if "kube-controller-manager" not in programs:
                client.request("PATCH", f"/api/v1/nodes/{node['metadata']['name']}", body=b'{"spec":{"taints":null}}',
                               content_type="application/merge-patch+json")

    # ------------------------------------------------------------------ components
    def _starter(self, name: str) -> Callable[[ApiClient, Mapping[str, pathlib.Path]], None]:
        starters: dict[str, Callable[[ApiClient, Mapping[str, pathlib.Path]], None]] = {
            "kube-controller-manager": self._start_kube_controller_manager,
            "kube-scheduler": self._start_kube_scheduler,
            "kwok": self._start_kwok,
            "volcano-webhook": self._start_volcano_webhook,
            "volcano-controller-manager": self._start_volcano_controller_manager,
            "volcano-scheduler": self._start_volcano_scheduler,
            "webhook": self._start_webhook,
            "jobset": self._start_jobset,
            "training-operator": lambda c, p: self._start_training_operator(
                c, p, "training-operator", operators.VOLCANO_TRAINING_NAMESPACE, "volcano"),
            "training-operator-kueue": lambda c, p: self._start_training_operator(
                c, p, "training-operator-kueue", operators.KUEUE_TRAINING_NAMESPACE, None),
            "kueue": self._start_kueue,
            "controller": self._start_controller,
        }
        return starters[name]

    def _start_kube_controller_manager(self, client: ApiClient, programs: Mapping[str, pathlib.Path]) -> None:
        name = "kube-controller-manager"
        (port,) = free_ports(1)
        cert, key = self._serving_cert(name)
        args = components.controller_manager_args(
            programs[name], kubeconfig=self.kubeconfig_path, port=port, cert=cert, key=key, root_ca=self.plane.ca_path
        )
        self._spawn(name, args, port=port)
        context = ssl.create_default_context(cafile=str(self.plane.ca_path))
        self._wait(name, lambda: probes.http_ok(f"https://{LOOPBACK}:{port}/healthz", context))

    def _start_kube_scheduler(self, client: ApiClient, programs: Mapping[str, pathlib.Path]) -> None:
        name = "kube-scheduler"
        (port,) = free_ports(1)
        cert, key = self._serving_cert(name)
        args = components.scheduler_args(programs[name], kubeconfig=self.kubeconfig_path, port=port, cert=cert, key=key)
        self._spawn(name, args, port=port)
        context = ssl.create_default_context(cafile=str(self.plane.ca_path))
        self._wait(name, lambda: probes.http_ok(f"https://{LOOPBACK}:{port}/healthz", context))

    def _start_kwok(self, client: ApiClient, programs: Mapping[str, pathlib.Path]) -> None:
        # kwok run on its own reads its Stage objects (how fake nodes and pods move through their
        # lifecycle) from --config; the build copied upstream's default stages beside the binary.
        stages = [components.kwok_stage(binaries.module_file("kwok", relative).read_text())
                  for relative in binaries.tool("kwok").module_files]
        config = self.directory / "kwok-stages.yaml"
        config.write_text("---\n".join(yaml.safe_dump(stage, sort_keys=False) for stage in stages))
        self._spawn("kwok", components.kwok_args(programs["kwok"], kubeconfig=self.kubeconfig_path, stages=config))
        expected = self.layout.nodes
        self._wait("kwok", lambda: probes.ready_nodes(client) >= expected, what=f"{expected} Ready nodes")

    def _start_volcano_webhook(self, client: ApiClient, programs: Mapping[str, pathlib.Path]) -> None:
        name = "volcano-webhook"
        certs = self.directory / name / "certs"
        port, health = free_ports(2)
        ca_pem = self._webhook_certs(certs, "volcano-admission-service")
        self._spawn(name, volcano.webhook_manager_args(programs["volcano-webhook-manager"], kubeconfig=self.kubeconfig_path,
                                                       port=port, healthz_port=health, cert_dir=certs), port=port)
        template = binaries.module_file("volcano-webhook-manager", recipes.VOLCANO_WEBHOOKS)
        kube_version = binaries.version_key("kube-apiserver")[0].lstrip("v")
        for configuration in volcano.render_webhooks(programs["helm"], template, kube_version=kube_version):
            client.apply(registrations.point_at_url(configuration, f"https://{LOOPBACK}:{port}", ca_pem))
        self._wait(name, lambda: probes.volcano_mutates_queues(client), what="the API server calling Volcano's webhooks")

    def _start_volcano_controller_manager(self, client: ApiClient, programs: Mapping[str, pathlib.Path]) -> None:
        name = "volcano-controller-manager"
        health, metrics = free_ports(2)
        self._spawn(name, volcano.controller_manager_args(programs[name], kubeconfig=self.kubeconfig_path,
                                                          healthz_port=health, metrics_port=metrics), port=health)
        self._wait(name, lambda: probes.http_ok(f"http://{LOOPBACK}:{health}/healthz"))

    def _start_volcano_scheduler(self, client: ApiClient, programs: Mapping[str, pathlib.Path]) -> None:
        name = "volcano-scheduler"
        health, metrics = free_ports(2)
        conf = volcano.scheduler_conf(binaries.module_file(name, recipes.VOLCANO_SCHEDULER_CONF), self.directory / name / "conf")
        self._spawn(name, volcano.scheduler_args(programs[name], kubeconfig=self.kubeconfig_path, conf=conf, healthz_port=health,
                                                 metrics_port=metrics, dump_dir=self.directory / name), port=health)
        self._wait(name, lambda: probes.http_ok(f"http://{LOOPBACK}:{health}/healthz"))

    def _start_webhook(self, client: ApiClient, programs: Mapping[str, pathlib.Path]) -> None:
        name = "webhook"
        work = self.directory / name
        (port,) = free_ports(1)
        ca_pem = self._webhook_certs(work / "certs", "volcano-metronome-webhook")
        args = components.webhook_args(
            cert_dir=work / "certs", port=port, kubeconfig=self.kubeconfig_path, metrics_dir=work / "metrics"
        )
        self._spawn(name, args, port=port, env=components.python_env(sources.repo_root()))
        context = ssl.create_default_context(cafile=str(work / "certs" / "ca.crt"))
        self._wait(name, lambda: probes.http_ok(f"https://{LOOPBACK}:{port}/readyz", context))
        configuration = registrations.render_chart_webhooks(
            programs["helm"], sources.chart_dir(), release=RELEASE, namespace=NAMESPACE,
            values=WEBHOOK_CHART_VALUES, kube_version=binaries.version_key("kube-apiserver")[0].lstrip("v"),
        )
        client.apply(registrations.point_at_url(configuration, f"https://{LOOPBACK}:{port}", ca_pem))
        self._wait(name, lambda: probes.webhook_mutates_podgroups(client), what="the API server calling the webhook")

    def _start_kueue(self, client: ApiClient, programs: Mapping[str, pathlib.Path]) -> None:
        name = "kueue"
        work = self.directory / name
        health, webhook = free_ports(2)
        ca_pem = self._webhook_certs(work / "certs", "kueue-webhook-service")
        config = work / "config.yaml"
        frameworks = components.KUEUE_FRAMEWORKS + tuple(framework for component, framework in (
            ("jobset", operators.KUEUE_JOBSET_FRAMEWORK), ("training-operator-kueue", operators.KUEUE_PYTORCH_FRAMEWORK))
            if component in self._processes)
        config.write_text(yaml.safe_dump(components.kueue_configuration(
            namespace=KUEUE_NAMESPACE, health_port=health, webhook_port=webhook, cert_dir=work / "certs",
            frameworks=frameworks)))
        overlay = work / "overlay"
        overlay.mkdir(parents=True, exist_ok=True)
        unshare = shutil.which("unshare")
        assert unshare is not None  # checked by _resolve_programs
        argv, extra = components.kueue_command(
            programs[name], kubeconfig=self.kubeconfig_path, config=config, cert_dir=work / "certs",
            overlay_dir=overlay, unshare=unshare, as_root=os.geteuid() == 0,
        )
        self._spawn(name, argv, port=health, env={**os.environ, **extra})
        # /readyz includes Kueue's own check that its webhook server is serving.
        self._wait(name, lambda: probes.http_ok(f"http://{LOOPBACK}:{health}/readyz"))
        manifests, kustomization = (binaries.module_file("kueue", relative) for relative in binaries.tool("kueue").module_files
                                    if "/webhook/" in relative)
        for configuration in registrations.kueue_webhooks(manifests, kustomization):
            client.apply(registrations.point_at_url(configuration, f"https://{LOOPBACK}:{webhook}", ca_pem))
        self._wait(name, lambda: probes.kueue_suspends_jobs(client), what="the API server calling Kueue's webhooks")

    def _start_jobset(self, client: ApiClient, programs: Mapping[str, pathlib.Path]) -> None:
        operators.start_jobset(client, programs["jobset"], self._operator_context("jobset"))

    def _start_training_operator(self, client: ApiClient, programs: Mapping[str, pathlib.Path], name: str,
                                 namespace: str, gang_scheduler: str | None) -> None:
        operators.start_training_operator(client, programs["training-operator"], self._operator_context(name),
                                          namespace=namespace, gang_scheduler=gang_scheduler)

    def _operator_context(self, name: str) -> operators.Context:
        return operators.Context(
            work=self.directory / name, kubeconfig=self.kubeconfig_path,
            spawn=lambda args, port, env: self._spawn(name, args, port=port, env=env),
            wait=lambda ready: self._wait(name, ready), webhook_certs=self._webhook_certs)

    def _start_controller(self, client: ApiClient, programs: Mapping[str, pathlib.Path]) -> None:
        name = "controller"
        (port,) = free_ports(1)
        config = self.directory / "controller.yaml"
        settings = components.controller_settings(namespace=NAMESPACE, health_port=port, extra=self.controller_settings)
        config.write_text(yaml.safe_dump(settings))
        args = components.controller_args(kubeconfig=self.kubeconfig_path, config=config, identity=CONTROLLER_IDENTITY)
        self._spawn(name, args, port=port, env=components.python_env(sources.repo_root()))
        self._wait(name, lambda: probes.http_ok(f"http://{LOOPBACK}:{port}/readyz"))

    # ------------------------------------------------------------------ helpers
    def _serving_cert(self, name: str) -> tuple[pathlib.Path, pathlib.Path]:
        """A loopback serving certificate signed by the control plane's CA (health checks verify it)."""
        cert, key = self.plane.pki_dir / f"{name}.crt", self.plane.pki_dir / f"{name}.key"
        if not cert.exists():
            pki.make_serving_cert(self.plane.ca, dns_names=["localhost"], ip_addresses=[LOOPBACK]).write(cert, key)
        return cert, key

    @staticmethod
    def _webhook_certs(directory: pathlib.Path, common_name: str) -> bytes:
        """A CA and a loopback serving certificate (``ca.crt``, ``tls.crt``, ``tls.key``); the CA PEM."""
        if not (directory / "tls.key").exists():
            ca = pki.make_ca(f"{common_name}-ca")
            ca.write(directory / "ca.crt", directory / "ca.key")
            serving = pki.make_serving_cert(ca, dns_names=["localhost"], ip_addresses=[LOOPBACK], common_name=common_name)
            # Written last: its presence says the whole set exists.
            serving.write(directory / "tls.crt", directory / "tls.key")
        return (directory / "ca.crt").read_bytes()

    def _spawn(self, name: str, args: list[str], *, port: int | None = None, env: Mapping[str, str] | None = None) -> None:
        child, record = spawn(name, args, log_path=self.log_path(name), cwd=self.directory, env=env)
        self._processes[name] = _Process(record, port, child)
        self._save_state()

    def _wait(self, name: str, ready: Callable[[], bool], *, what: str = "ready") -> None:
        deadline = time.monotonic() + self.ready_timeout
        process = self._processes[name]
        while True:
            if process.child is not None and process.child.poll() is not None:
                raise StackError(f"{name} exited with status {process.child.returncode} before becoming {what}\n"
                                 f"{self.logs(name)}")
            try:
                if ready():
                    return
            except ApiError:
                pass  # the API server may briefly refuse while the component registers itself
            if time.monotonic() > deadline:
                raise StackError(f"{name} not {what} within {self.ready_timeout:.0f}s\n{self.logs(name)}")
            time.sleep(0.2)

    def _save_state(self) -> None:
        state = {
            "layout": asdict(self.layout),
            "components": list(self.components),
            "skipped": self.skipped,
            "processes": {name: {"record": asdict(p.record), "port": p.port} for name, p in self._processes.items()},
        }
        (self.directory / _STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
