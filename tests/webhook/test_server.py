"""The real server over HTTPS: endpoints, HTTP errors that are never 5xx, body limit, TLS versions,
keep-alive, JSON access log, metrics summed across workers."""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import threading

import pytest

from tests.admission.builders import MODEL, ops_of, review, with_annotations
from tests.webhook.conftest import Server, client_context
from volcano_metronome import api

JOB = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "default"},
       "spec": {"tasks": [{"name": "w", "replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}]}}


def test_health_and_readiness(server: Server):
    assert server.request("GET", "/healthz")[0] == 200
    assert server.request("GET", "/readyz")[0] == 200


def test_mutate_answers_a_review(server: Server):
    out = server.mutate(review(with_annotations(JOB, MODEL), uid="uid-1"))
    assert out["response"]["uid"] == "uid-1" and out["response"]["allowed"] is True
    paths = {op["path"] for op in ops_of(out)}
    assert "/metadata/annotations/metronome.dev~1profile" in paths and "/spec/minAvailable" in paths


def test_denial_is_in_band_with_a_message(server: Server):
    out = server.mutate(review(with_annotations(JOB, {api.MODEL: "gpt-17"})))
    assert out["response"]["allowed"] is False
    assert out["response"]["status"]["code"] == 400
    assert "metronome.dev/model: got 'gpt-17', expected a catalog model" in out["response"]["status"]["message"]


@pytest.mark.parametrize("body", [b"", b"not json", b"\xff\xfe\x00garbage", b"[]", b"{}", b"null", b"[" * 100_000,
                                  json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                              "request": {"uid": 5}}).encode()],
                         ids=["empty", "text", "bad-utf8", "list", "object", "null", "deep", "bad-uid"])
def test_unparseable_bodies_get_400_with_a_message(server: Server, body: bytes):
    status, headers, content = server.request("POST", "/mutate", body)
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert json.loads(content)["error"].startswith("not an admission.k8s.io/v1 AdmissionReview")


def test_a_client_sending_a_body_over_the_limit_reads_the_413(server: Server):
    # The API server writes the whole body before it reads the answer. The server answers 413 from the
    # headers and must not then close with that body unread: closing with unread bytes resets the
    # connection, and the reset can discard the 413 on its way, so the client saw a broken connection
    # instead of the reason. It half-closes and discards what arrives, for a bounded time.
    body = b"x" * (16 * 1024 * 1024)
    errors: list[BaseException] = []
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with server.context.wrap_socket(raw, server_hostname="localhost") as tls:
            def send() -> None:
                try:
                    tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                                b"Content-Length: %d\r\n\r\n" % len(body) + body)
                except OSError as exc:
                    errors.append(exc)
            sender = threading.Thread(target=send)
            sender.start()
            sender.join(timeout=20)
            answer = http.client.HTTPResponse(tls)  # type: ignore[arg-type]
            answer.begin()
            assert answer.status == 413 and "3145728 bytes" in json.loads(answer.read())["error"]
    assert not sender.is_alive() and errors == []  # every byte was taken, none refused by a reset


def test_body_limit_is_3_mib(server: Server):
    # The server answers 413 from the headers alone, before the body arrives (and serves nothing more on
    # that connection), so send only the headers and a little of the body.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with server.context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n{" % (3 * 1024 * 1024 + 1))
            answer = http.client.HTTPResponse(tls)  # type: ignore[arg-type]
            answer.begin()
            assert answer.status == 413
            assert "3145728 bytes" in json.loads(answer.read())["error"]
            tls.settimeout(5)
            assert tls.recv(1) == b""  # half-closed: no further request is served here
    # A chunked body gets 413 too, once it passes the limit (it has no length to refuse it by).
    conn = server.connection()
    conn.request("POST", "/mutate", body=iter([b"x" * 65536] * 64), encode_chunked=True,
                 headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    answer = conn.getresponse()
    assert answer.status == 413 and "3145728 bytes" in json.loads(answer.read())["error"]
    conn.close()
    small = json.dumps(review(JOB, uid="chunked")).encode()
    conn = server.connection()
    conn.request("POST", "/mutate", body=iter([small[:100], small[100:]]), encode_chunked=True,
                 headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    answer = conn.getresponse()
    assert answer.status == 200 and json.loads(answer.read())["response"]["uid"] == "chunked"
    conn.close()
    fits = with_annotations(JOB, {"filler": "x" * (2 * 1024 * 1024)})
    assert server.request("POST", "/mutate", json.dumps(review(fits)).encode())[0] == 200


def test_wrong_method_and_path_are_4xx(server: Server):
    assert server.request("GET", "/mutate")[0] == 405
    assert server.request("POST", "/nowhere", b"{}")[0] == 404


def test_keep_alive_serves_many_requests_on_one_connection(server: Server):
    conn = server.connection()
    try:
        for i in range(20):
            status, headers, _ = server.request("POST", "/mutate", json.dumps(review(JOB, uid=f"k{i}")).encode(), conn)
            assert status == 200 and headers.get("connection", "").lower() != "close"
        assert conn.sock is not None
    finally:
        conn.close()


def _handshake(server: Server, context: ssl.SSLContext, host: str = "localhost") -> str:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            return str(tls.version())


def test_tls_13_preferred_12_accepted_older_refused(server: Server):
    assert _handshake(server, client_context(server.certs.ca_file)) == "TLSv1.3"
    assert _handshake(server, client_context(server.certs.ca_file, ssl.TLSVersion.TLSv1_2)) == "TLSv1.2"
    assert _handshake(server, client_context(server.certs.ca_file), host="127.0.0.1") == "TLSv1.3"
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(server.certs.ca_file)
    old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("ALL:@SECLEVEL=0")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _handshake(server, old)


def test_untrusted_clients_cannot_talk_to_it_in_clear(server: Server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            reply = raw.recv(100)
        except ConnectionResetError:
            reply = b""  # closed with our request unread: refused just the same
    assert not reply.startswith(b"HTTP/1.1 200")


def test_access_log_is_json_lines(server: Server):
    server.request("GET", "/healthz")
    lines = [line for line in server.stdout.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]
    assert any(r["path"] == "/healthz" and r["status"] == 200 and r["duration_ms"] >= 0 for r in records)
    assert all({"time", "remote", "method", "path", "status"} <= set(r) for r in records)


def test_metrics_count_requests_by_kind_and_verdict_across_workers(server: Server):
    before = _count(server, "VolcanoJob", "patched")
    for i in range(30):  # fresh connections: the kernel spreads them over both workers
        server.mutate(review(with_annotations(JOB, MODEL), uid=f"m{i}"))
    assert _count(server, "VolcanoJob", "patched") == before + 30
    status, _, text = server.request("GET", "/metrics")
    body = text.decode()
    assert status == 200
    assert 'metronome_webhook_request_duration_seconds_bucket{kind="VolcanoJob",le="0.005"}' in body
    assert re.search(r'metronome_webhook_requests_total\{kind="other",verdict="bad_request"\} \d', body)


def _count(server: Server, kind: str, verdict: str) -> float:
    _, _, text = server.request("GET", "/metrics")
    match = re.search(rf'metronome_webhook_requests_total\{{kind="{kind}",verdict="{verdict}"\}} (\S+)', text.decode())
    return float(match.group(1)) if match else 0.0
