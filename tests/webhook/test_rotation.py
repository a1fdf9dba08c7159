"""Certificates rotated on disk while clients keep sending: no request lost, new connections see the new
certificate, no restart. Then a graceful stop."""

from __future__ import annotations

import http.client
import json
import pathlib
import re
import socket
import ssl
import threading
import time

from cryptography import x509

from tests.admission.builders import MODEL, review, with_annotations
from tests.webhook.conftest import Server, make_certs, start_server

JOB = with_annotations({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                        "metadata": {"name": "j", "namespace": "default"},
                        "spec": {"tasks": [{"name": "w", "replicas": 2,
                                            "template": {"spec": {"containers": [{"name": "c"}]}}}]}}, MODEL)
BODY = json.dumps(review(JOB, uid="rotation")).encode()


class Load:
    """Client threads posting reviews until stopped: half reconnect every time (fresh handshakes), half keep
    one connection alive. Every request must get a 200 with a review."""

    def __init__(self, server: Server, threads: int = 4) -> None:
        self.server = server
        self.stop = threading.Event()
        self.ok = 0
        self.failures: list[str] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i % 2 == 0,), daemon=True) for i in range(threads)]

    def __enter__(self) -> "Load":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)

    def _run(self, fresh: bool) -> None:
        conn: http.client.HTTPSConnection | None = None
        while not self.stop.is_set():
            if conn is None or fresh:
                if conn is not None:
                    conn.close()
                conn = self.server.connection()
            try:
                conn.request("POST", "/mutate", body=BODY, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                content = resp.read()
                if resp.status != 200 or json.loads(content)["response"]["uid"] != "rotation":
                    raise RuntimeError(f"status {resp.status}: {content[:200]!r}")
                with self.lock:
                    self.ok += 1
            except Exception as exc:  # noqa: BLE001 - every failure is recorded and fails the test
                with self.lock:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                conn.close()
                conn = None
        if conn is not None:
            conn.close()


def _peer_certificate(server: Server) -> x509.Certificate:
    context = ssl.create_default_context(cafile=server.certs.ca_file)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _write_in_place(path: pathlib.Path, data: bytes) -> None:
    """A naive writer: truncate, then write in two halves (readers may see an empty or half file)."""
    with path.open("wb") as handle:
        handle.write(data[: len(data) // 2])
        handle.flush()
        time.sleep(0.02)
        handle.write(data[len(data) // 2:])


def test_rotation_under_load_loses_no_request(tmp_path: pathlib.Path):
    certs = make_certs(tmp_path / "certs")
    server = start_server(tmp_path, certs)
    try:
        first = _peer_certificate(server)
        with Load(server) as load:
            time.sleep(0.3)
            for _ in range(8):  # atomic replacements, certificate first then key (a mismatched pair in between)
                latest = certs.rotate()
                time.sleep(0.15)
            from volcano_metronome.certs import pki

            in_place = pki.make_serving_cert(certs.ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"])
            _write_in_place(certs.directory / "tls.key", in_place.key_pem)
            _write_in_place(certs.directory / "tls.crt", in_place.cert_pem)
            latest = in_place
            time.sleep(0.5)
        assert load.failures == []
        assert load.ok > 100, f"only {load.ok} reviews answered during the rotations: too little load to tell"
        now = _peer_certificate(server)
        assert now.serial_number == latest.certificate().serial_number != first.serial_number
        status, _, text = server.request("GET", "/metrics")
        loaded = re.search(r'metronome_webhook_certificate_reloads_total\{result="loaded"\} (\S+)', text.decode())
        assert status == 200 and loaded and float(loaded.group(1)) >= 1
        assert server.process.poll() is None  # never restarted
    finally:
        assert server.stop() == 0


def test_graceful_stop_finishes_and_exits_cleanly(tmp_path: pathlib.Path):
    server = start_server(tmp_path, make_certs(tmp_path / "certs"), workers=1)
    conn = server.connection()
    assert server.request("POST", "/mutate", BODY, conn)[0] == 200
    started = time.monotonic()
    assert server.stop() == 0
    assert time.monotonic() - started < 10
    log = server.stderr.read_text()
    assert "Handling signal: term" in log and "Shutting down: Master" in log
    conn.close()
