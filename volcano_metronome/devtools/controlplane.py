"""A real etcd + kube-apiserver running as local processes on free loopback ports (envtest style).

``ControlPlane`` generates its own PKI (``volcano_metronome.certs.pki``), writes an admin kubeconfig, starts
etcd and then kube-apiserver, each in its own process group with its output in a log file in the work
directory, and waits until ``/readyz`` answers over mutual TLS. ``stop()`` kills both process groups
and waits until their ports are free again.

What this is not: there is no kube-controller-manager and no scheduler, so nothing garbage-collects,
namespaces never finish terminating, and pods stay Pending unless something binds them (the whole
stack, with both, is :mod:`volcano_metronome.devtools.stack`). The ``ServiceAccount`` admission
plugin is disabled because nothing creates the ``default`` service account of new namespaces (and
in the stack, pods need no service-account token: nothing runs in them).
"""

from __future__ import annotations

import base64
import contextlib
import json
import pathlib
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Sequence

import yaml

from volcano_metronome.certs import pki
from volcano_metronome.devtools import binaries
# Re-exported (``as``): modules written before the split import these from here.
from volcano_metronome.devtools.processes import (LOOPBACK, ControlPlaneError, ProcessRecord, free_ports, is_alive,
                                                  port_free, spawn, terminate, wait_ports_free)

SERVICE_CIDR = "10.0.0.0/24"
ADMIN_USER = "metronome-admin"
_STATE_FILE = "state.json"
_LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class Ports:
    """The loopback ports one control plane listens on."""

    etcd_client: int
    etcd_peer: int
    apiserver: int

    def all(self) -> tuple[int, ...]:
        """Every port, for leak checks."""
        return (self.etcd_client, self.etcd_peer, self.apiserver)


class ControlPlane:
    """etcd + kube-apiserver on loopback; use as a context manager or call start()/stop().

    ``work_dir`` keeps certificates, the kubeconfig, etcd's data and the logs. When omitted a
    temporary directory is made and removed by ``stop()`` (unless ``keep_work_dir``); a given
    directory is kept, and its certificates and etcd data are reused by the next start.
    """

    def __init__(
        self,
        work_dir: pathlib.Path | None = None,
        *,
        etcd_binary: pathlib.Path | None = None,
        apiserver_binary: pathlib.Path | None = None,
        ready_timeout: float = 120.0,
        extra_apiserver_args: Sequence[str] = (),
        keep_work_dir: bool = False,
    ) -> None:
        self._own_dir = work_dir is None
        self.work_dir = pathlib.Path(work_dir) if work_dir else pathlib.Path(tempfile.mkdtemp(prefix="metronome-cp-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._etcd_binary = etcd_binary
        self._apiserver_binary = apiserver_binary
        self.ready_timeout = ready_timeout
        self.extra_apiserver_args = tuple(extra_apiserver_args)
        self.keep_work_dir = keep_work_dir or not self._own_dir
        self._ports: Ports | None = None
        self._records: dict[str, ProcessRecord] = {}
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    # ----------------------------------------------------------------- paths and identity
    @property
    def pki_dir(self) -> pathlib.Path:
        """Certificates and keys (keys are mode 0600)."""
        return self.work_dir / "pki"

    @property
    def kubeconfig_path(self) -> pathlib.Path:
        """An admin kubeconfig (user in group system:masters) with the credentials embedded."""
        return self.work_dir / "kubeconfig"

    @property
    def ca_path(self) -> pathlib.Path:
        """The CA certificate that signed the serving and client certificates."""
        return self.pki_dir / "ca.crt"

    @property
    def ca_pem(self) -> bytes:
        """The CA certificate, PEM-encoded (the ``caBundle`` a client of this API server trusts)."""
        return self.ca_path.read_bytes()

    @property
    def ca(self) -> pki.CertKey:
        """The CA with its key, to sign more client certificates (other users, other groups)."""
        return pki.read_cert_key(self.ca_path, self.pki_dir / "ca.key")

    @property
    def admin_cert_path(self) -> pathlib.Path:
        """The admin client certificate."""
        return self.pki_dir / "admin.crt"

    @property
    def admin_key_path(self) -> pathlib.Path:
        """The admin client key."""
        return self.pki_dir / "admin.key"

    @property
    def ports(self) -> Ports:
        """The ports in use; only valid once started."""
        if self._ports is None:
            raise ControlPlaneError("the control plane has not been started")
        return self._ports

    @property
    def server_url(self) -> str:
        """``https://127.0.0.1:<port>`` of the API server."""
        return f"https://{LOOPBACK}:{self.ports.apiserver}"

    @property
    def etcd_url(self) -> str:
        """``http://127.0.0.1:<port>`` of etcd's client endpoint (plain HTTP, loopback only)."""
        return f"http://{LOOPBACK}:{self.ports.etcd_client}"

    def log_path(self, name: str) -> pathlib.Path:
        """The log file of ``etcd`` or ``kube-apiserver``."""
        return self.work_dir / f"{name}.log"

    def records(self) -> dict[str, ProcessRecord]:
        """The identities of the running processes (pid and start time: safe to signal later)."""
        return dict(self._records)

    def pids(self) -> dict[str, int]:
        """Process ids (each also its process group id) of the running processes."""
        return {name: record.pid for name, record in self._records.items()}

    # ----------------------------------------------------------------- lifecycle
    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Start etcd, then kube-apiserver, and wait until the API server is ready.

        On failure both processes are stopped and the work directory is kept: the error quotes its
        logs. Only a start that failed before launching anything removes a temporary directory.
        """
        if self._records:
            raise ControlPlaneError("the control plane is already running")
        try:
            etcd = self._etcd_binary or binaries.binary_path("etcd")
            apiserver = self._apiserver_binary or binaries.binary_path("kube-apiserver")
        except binaries.MissingBinary:
            if self._own_dir and not any(self.work_dir.iterdir()):
                self.work_dir.rmdir()  # nothing happened yet; leave no empty temp dir behind
            raise
        self._ensure_pki()
        last_error: ControlPlaneError | None = None
        # A free port can be taken by someone else between our probe and the server's bind; retry
        # with fresh ports rather than fail a test run on that race.
        for attempt in range(3):
            self._ports = self._choose_ports(prefer_saved=attempt == 0)
            self._write_kubeconfig()
            try:
                self._start_process("etcd", self._etcd_args(etcd))
                self._wait_etcd()
                self._start_process("kube-apiserver", self._apiserver_args(apiserver))
                self._wait_apiserver()
            except BaseException as exc:
                # Whatever went wrong (Ctrl-C included), no half-started process may outlive us.
                self._kill_all()
                if isinstance(exc, ControlPlaneError) and "address already in use" in str(exc):
                    last_error = exc
                    continue
                raise
            self._save_state()
            return self
        assert last_error is not None
        raise last_error

    def stop(self) -> None:
        """Stop both processes (their whole process groups) and wait until their ports are free."""
        ports = self._ports
        self._kill_all()
        if ports is not None:
            wait_ports_free(ports.all(), timeout=10.0)
        (self.work_dir / _STATE_FILE).unlink(missing_ok=True)
        if not self.keep_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port with the same etcd data."""
        apiserver = self._apiserver_binary or binaries.binary_path("kube-apiserver")
        self._kill("kube-apiserver")
        wait_ports_free((self.ports.apiserver,), timeout=10.0)
        self._start_process("kube-apiserver", self._apiserver_args(apiserver))
        self._wait_apiserver()
        self._save_state()

    def detach(self) -> None:
        """Forget the child process handles so the processes outlive this Python process.

        The state file in ``work_dir`` keeps their identities; :meth:`attach` picks them up again.
        """
        self._children.clear()

    @classmethod
    def attach(cls, work_dir: pathlib.Path) -> ControlPlane:
        """A handle on a control plane started (and detached) by another process in ``work_dir``."""
        state_file = pathlib.Path(work_dir) / _STATE_FILE
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError) as exc:
            raise ControlPlaneError(f"no control plane state in {work_dir}: {exc}") from exc
        plane = cls(pathlib.Path(work_dir), keep_work_dir=True)
        plane._ports = Ports(**state["ports"])
        plane._records = {name: ProcessRecord(**record) for name, record in state["processes"].items()}
        return plane

    def running(self) -> dict[str, bool]:
        """Whether each recorded process is still alive."""
        return {name: is_alive(record) for name, record in self._records.items()}

    def is_ready(self) -> bool:
        """Whether ``/readyz`` answers ``ok`` right now."""
        try:
            return self._get("/readyz", timeout=5.0) == (200, "ok")
        except OSError:
            return False

    def logs(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of each log, for failure messages."""
        parts = []
        for name in ("etcd", "kube-apiserver"):
            path = self.log_path(name)
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- last {len(text)} lines of {path} ---\n" + "\n".join(text))
        return "\n".join(parts) or "(no logs)"

    # ----------------------------------------------------------------- internals
    def _ensure_pki(self) -> None:
        if (self.pki_dir / "sa.pub").exists():
            return
        ca = pki.make_ca("volcano-metronome-dev-ca")
        ca.write(self.ca_path, self.pki_dir / "ca.key")
        serving = pki.make_serving_cert(
            ca,
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=[LOOPBACK, "10.0.0.1"],
            common_name="kube-apiserver",
        )
        serving.write(self.pki_dir / "apiserver.crt", self.pki_dir / "apiserver.key")
        admin = pki.make_client_cert(ca, ADMIN_USER, groups=["system:masters"])
        admin.write(self.admin_cert_path, self.admin_key_path)
        # Written last: its presence says the whole set exists.
        pki.make_rsa_key_pair().write(self.pki_dir / "sa.key", self.pki_dir / "sa.pub")

    def _choose_ports(self, *, prefer_saved: bool) -> Ports:
        saved = self.work_dir / "ports.json"
        if prefer_saved and saved.exists():
            # Reusing the ports of the previous start keeps a kubeconfig handed out earlier valid.
            with contextlib.suppress(ValueError, TypeError, OSError):
                ports = Ports(**json.loads(saved.read_text()))
                if all(port_free(port) for port in ports.all()):
                    return ports
        ports = Ports(*free_ports(3))
        saved.write_text(json.dumps(asdict(ports)) + "\n")
        return ports

    def _write_kubeconfig(self) -> None:
        def b64(path: pathlib.Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "metronome", "cluster": {"server": self.server_url, "certificate-authority-data": b64(self.ca_path)}}
            ],
            "users": [
                {
                    "name": ADMIN_USER,
                    "user": {
                        "client-certificate-data": b64(self.admin_cert_path),
                        "client-key-data": b64(self.admin_key_path),
                    },
                }
            ],
            "contexts": [{"name": "metronome", "context": {"cluster": "metronome", "user": ADMIN_USER}}],
            "current-context": "metronome",
        }
        pki.write_pem(self.kubeconfig_path, yaml.safe_dump(config, sort_keys=False).encode(), private=True)

    def _etcd_args(self, binary: pathlib.Path) -> list[str]:
        peer = f"http://{LOOPBACK}:{self.ports.etcd_peer}"
        return [
            str(binary),
            "--name=default",
            f"--data-dir={self.work_dir / 'etcd-data'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            # Test data is disposable; skipping fsync makes every write several times faster.
            "--unsafe-no-fsync=true",
        ]

    def _apiserver_args(self, binary: pathlib.Path) -> list[str]:
        p = self.pki_dir
        return [
            str(binary),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={self.ports.apiserver}",
            f"--cert-dir={self.work_dir / 'apiserver-certs'}",
            f"--tls-cert-file={p / 'apiserver.crt'}",
            f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={self.ca_path}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # No controller-manager creates the `default` service account of new namespaces.
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            "--profiling=false",
            *self.extra_apiserver_args,
        ]

    def _start_process(self, name: str, args: list[str]) -> None:
        child, record = spawn(name, args, log_path=self.log_path(name), cwd=self.work_dir)
        self._children[name] = child
        self._records[name] = record

    def _wait_etcd(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        url = f"{self.etcd_url}/health"
        while True:
            self._check_alive("etcd")
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(url, timeout=2.0) as response:
                    if json.loads(response.read()).get("health") == "true":
                        return
            if time.monotonic() > deadline:
                self._fail(f"etcd did not become healthy at {url} within {self.ready_timeout:.0f}s")
            time.sleep(0.1)

    def _wait_apiserver(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last = "no answer"
        while True:
            self._check_alive("kube-apiserver")
            try:
                status, body = self._get("/readyz", timeout=5.0)
                if status == 200:
                    # Objects in `default` are what most callers create first; the bootstrap
                    # controller makes that namespace a moment after /readyz turns ok.
                    if self._get("/api/v1/namespaces/default", timeout=5.0)[0] == 200:
                        return
                    last = "namespace default not yet created"
                else:
                    last = f"/readyz answered {status}: {body[-500:]}"
            except OSError as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                self._fail(f"kube-apiserver not ready at {self.server_url} within {self.ready_timeout:.0f}s ({last})")
            time.sleep(0.25)

    def _get(self, path: str, *, timeout: float) -> tuple[int, str]:
        context = ssl.create_default_context(cafile=str(self.ca_path))
        context.load_cert_chain(self.admin_cert_path, self.admin_key_path)
        request = urllib.request.Request(self.server_url + path)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                return int(response.status), response.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode(errors="replace")

    def _check_alive(self, name: str) -> None:
        child = self._children.get(name)
        if child is not None and child.poll() is not None:
            self._fail(f"{name} exited with status {child.returncode} before becoming ready")

    def _fail(self, message: str) -> None:
        logs = self.logs()
        hint = ""
        if "address already in use" in logs:
            hint = " (address already in use)"
        raise ControlPlaneError(f"{message}{hint}\n{logs}")

    def _kill_all(self) -> None:
        # The API server first: it would otherwise log etcd connection errors while shutting down.
        for name in ("kube-apiserver", "etcd"):
            self._kill(name)

    def _kill(self, name: str) -> None:
        record = self._records.pop(name, None)
        child = self._children.pop(name, None)
        if record is not None:
            terminate(record, child)

    def _save_state(self) -> None:
        state = {
            "ports": asdict(self.ports),
            "server_url": self.server_url,
            "kubeconfig": str(self.kubeconfig_path),
            "processes": {name: asdict(record) for name, record in self._records.items()},
        }
        (self.work_dir / _STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
