"""A real webhook server for the tests: ``volcano-metronome webhook`` (gunicorn, gevent workers) in a
subprocess, over real HTTPS with certificates made by ``volcano_metronome.certs.pki``."""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest

from volcano_metronome.certs import pki

REPO = pathlib.Path(__file__).resolve().parents[2]
TEST_SETTINGS = "watch: {podGroups: false, claims: false}\n"  # no API server in this tier


@dataclass
class Certs:
    """A CA and a serving certificate for localhost / 127.0.0.1, written into ``directory``."""

    directory: pathlib.Path
    ca: pki.CertKey

    @property
    def ca_file(self) -> str:
        return str(self.directory / "ca.crt")

    def rotate(self) -> pki.CertKey:
        """A new serving certificate from the same CA, written the way pki writes (cert, then key)."""
        serving = pki.make_serving_cert(self.ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"])
        serving.write(self.directory / "tls.crt", self.directory / "tls.key")
        return serving


def make_certs(directory: pathlib.Path) -> Certs:
    ca = pki.make_ca("webhook-test-ca")
    directory.mkdir(parents=True, exist_ok=True)
    pki.write_pem(directory / "ca.crt", ca.cert_pem)
    certs = Certs(directory, ca)
    certs.rotate()
    return certs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def client_context(ca_file: str, maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file)
    if maximum is not None:
        context.maximum_version = maximum
    return context


@dataclass
class Server:
    """A running server process and how to talk to it."""

    port: int
    certs: Certs
    process: subprocess.Popen[bytes]
    stdout: pathlib.Path
    stderr: pathlib.Path
    context: ssl.SSLContext = field(init=False)

    def __post_init__(self) -> None:
        self.context = client_context(self.certs.ca_file)

    def connection(self, host: str = "localhost") -> http.client.HTTPSConnection:
        """A keep-alive connection (the API server keeps a pool of these)."""
        return http.client.HTTPSConnection(host, self.port, context=self.context, timeout=10)

    def request(self, method: str, path: str, body: bytes | None = None,
                conn: http.client.HTTPSConnection | None = None) -> tuple[int, dict[str, str], bytes]:
        own = conn is None
        conn = conn or self.connection()
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            if own:
                conn.close()

    def mutate(self, review: Any, conn: http.client.HTTPSConnection | None = None) -> dict[str, Any]:
        status, _, body = self.request("POST", "/mutate", json.dumps(review).encode(), conn)
        assert status == 200, body
        result: dict[str, Any] = json.loads(body)
        return result

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)


def start_server(tmp: pathlib.Path, certs: Certs, *, workers: int = 2, settings: str = TEST_SETTINGS) -> Server:
    """Start ``volcano-metronome webhook`` and wait until ``/readyz`` answers."""
    config = tmp / "settings.yaml"
    config.write_text(settings)
    port = free_port()
    stdout, stderr = tmp / "stdout.log", tmp / "stderr.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "volcano_metronome", "webhook", "--cert-dir", str(certs.directory), "--host", "127.0.0.1",
         "--port", str(port), "--workers", str(workers), "--config", str(config), "--metrics-dir", str(tmp / "metrics")],
        stdout=stdout.open("wb"), stderr=stderr.open("wb"), env=env, cwd=tmp,
    )
    server = Server(port, certs, process, stdout, stderr)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"webhook exited with {process.returncode}:\n{stderr.read_text()}")
        try:
            if server.request("GET", "/readyz")[0] == 200:
                return server
        except OSError:
            time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"webhook not ready within 30 s:\n{stderr.read_text()}")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the whole session (2 workers, default settings, no caches)."""
    tmp = tmp_path_factory.mktemp("webhook")
    running = start_server(tmp, make_certs(tmp / "certs"))
    yield running
    assert running.stop() == 0, running.stderr.read_text()
