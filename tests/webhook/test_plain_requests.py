"""The worker's own parse of a plain ``POST /mutate`` agrees with gunicorn's, and hands everything else to it untouched."""

from __future__ import annotations

import datetime
import io
import json
import re
import socket
from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.http.parser import RequestParser
from gunicorn.http.unreader import Unreader
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.admission.builders import MODEL, review, with_annotations
from tests.webhook.conftest import Server
from volcano_metronome.bench.webhook import request_bodies
from webhooks.access_log import JsonLogger
from webhooks.worker import PlainRequest, _plain_admission


JOB = with_annotations({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"},
                        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": {"spec": {"containers": []}}}]}},
                       MODEL)


class Chunks(Unreader):  # type: ignore[misc]  # gunicorn ships no type hints
    """A connection that delivers ``chunks`` one read at a time, then end of stream."""

    def __init__(self, chunks: list[bytes]) -> None:
        super().__init__()
        self.chunks = list(chunks)

    def chunk(self, size_hint: Any = None) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


def gunicorn_reads(data: bytes) -> Any:
    return next(iter(RequestParser(Config(), [data], ("127.0.0.1", 1))))


@pytest.mark.parametrize("index", range(12))
def test_the_benchmark_requests_parse_as_gunicorn_parses_them(index: int) -> None:
    data = request_bodies()[index]
    mine = _plain_admission(Chunks([data]))
    theirs = gunicorn_reads(data)
    assert isinstance(mine, PlainRequest)
    assert mine.headers == theirs.headers and (mine.method, mine.path, mine.version) == (
        theirs.method, theirs.path, theirs.version)
    assert mine.body.read(1 << 22) == theirs.body.read(1 << 22) and mine.body.read(10) == b""


def test_a_pipelined_request_stays_for_the_next_read() -> None:
    first, second = request_bodies()[:2]
    source = Chunks([first + second[:40], second[40:]])
    mine = _plain_admission(source)
    assert mine is not None and mine.body.read(1 << 22) == first.partition(b"\r\n\r\n")[2]
    assert _plain_admission(source) is None  # its head is not all there yet: gunicorn reads on
    assert source.read(len(second)) == second


@pytest.mark.parametrize("head", [
    b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n",
    b"POST /mutate HTTP/1.1\r\nContent-Length: +2\r\n\r\n",
    b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n",
    b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n",
    b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\nX_Forwarded: a\r\n\r\n",
    b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\nX: caf\xc3\xa9\r\n\r\n",
    b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\n folded\r\n\r\n",
    b"POST /mutate HTTP/1.0\r\nContent-Length: 2\r\n\r\n",
    b"POST /mutate/x HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
    b"GET /mutate HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
    b"POST /mutate HTTP/1.1\r\n\r\n",
    b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\nX-" + b"a" * 5000 + b": 1\r\n\r\n",
    b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\n" + b"".join(b"X%d:\r\n" % i for i in range(100)) + b"\r\n",
])
def test_anything_not_plain_goes_back_to_gunicorn_byte_for_byte(head: bytes) -> None:
    source = Chunks([head + b"{}"])
    assert _plain_admission(source) is None
    assert source.read(len(head) + 2) == head + b"{}"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet="abXY-", min_size=1, max_size=6) | st.text(alphabet="ab-_:XY ", max_size=6),
                          st.text(alphabet=" \tab:1\"", max_size=6).map(str.encode) | st.binary(max_size=8)),
                max_size=5),
       st.sampled_from([b"/mutate", b"/mutate?timeout=10s", b"/mutate?", b"/mutate?a#b%zz", b"/healthz"]),
       st.integers(min_value=0, max_value=4))
def test_any_head_is_parsed_as_gunicorn_parses_it_or_handed_back(fields: list[tuple[str, bytes]], target: bytes,
                                                                  length: int) -> None:
    head = b"POST " + target + b" HTTP/1.1\r\n" + b"".join(
        name.encode() + b":" + value + b"\r\n" for name, value in fields) + b"Content-Length: %d\r\n\r\n" % length
    data = head + b"x" * length
    source = Chunks([data])
    mine = _plain_admission(source)
    if mine is None:
        assert source.read(len(data)) == data
        return
    theirs = gunicorn_reads(data)  # gunicorn must accept what we accept, and read it the same way
    assert mine.headers == theirs.headers and mine.path == theirs.path
    assert mine.body.read(100) == theirs.body.read(100) == b"x" * length


def test_an_ended_connection_ends_the_loop() -> None:
    with pytest.raises(StopIteration):
        _plain_admission(Chunks([]))


CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def _exchange(server: Server, request: bytes) -> bytes:
    """Send ``request`` on a new connection; the final response (after any ``100 Continue``)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with server.context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(request)
            data = b""
            while True:
                final = data.removeprefix(CONTINUE)
                head, found, rest = final.partition(b"\r\n\r\n")
                if found and len(rest) >= _length(head):
                    return final
                chunk = tls.recv(65536)
                assert chunk, data
                data += chunk


def _length(head: bytes) -> int:
    return int(head.decode().lower().split("content-length:")[1].split("\r\n")[0])


def test_the_worker_answers_with_the_bytes_gunicorn_would(server: Server) -> None:
    body = json.dumps(review(JOB, uid="same")).encode()
    plain = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nUser-Agent: plain\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body), body)
    # Connection: keep-alive is read by gunicorn's parser, then answered by the worker; Expect: 100-continue
    # is answered by gunicorn and the WSGI app, as every request was before.
    parsed = plain.replace(b"Host: localhost\r\n", b"Host: localhost\r\nConnection: keep-alive\r\n")
    wsgi = plain.replace(b"Host: localhost\r\n", b"Host: localhost\r\nExpect: 100-continue\r\n")
    assert _plain_admission(Chunks([plain])) is not None and _plain_admission(Chunks([parsed])) is None
    date = re.compile(rb"\r\nDate: [^\r]*\r\n")
    answers = [date.sub(b"\r\n", _exchange(server, request)) for request in (plain, parsed, wsgi)]
    assert answers[0] == answers[1] == answers[2]
    assert answers[0].startswith(b"HTTP/1.1 200 OK\r\nServer: gunicorn\r\nConnection: keep-alive\r\n")
    keys = ("method", "path", "status", "bytes", "remote", "user_agent")
    lines = [json.loads(line) for line in server.stdout.read_text().splitlines() if '"user_agent": "plain"' in line]
    assert len(lines) >= 3 and all(line.keys() == lines[-1].keys() for line in lines[-3:])
    assert all({key: line[key] for key in keys} == {key: lines[-1][key] for key in keys} for line in lines[-3:])


@pytest.mark.parametrize("remote, agent, status, sent", [
    ("127.0.0.1", "kube-apiserver-admission", 200, 1205),
    ("::1", 'quote " backslash \\ caf\u00e9 \u2603 tab\t', 413, None),
    ("-", None, None, 0),
])
def test_the_hand_made_access_line_is_what_json_dumps_gives(remote: str, agent: str | None, status: int | None,
                                                           sent: int | None) -> None:
    cfg = Config()
    cfg.set("accesslog", "-")
    logger = JsonLogger(cfg)
    stream = io.StringIO()
    logger.access_log.handlers[0].stream = stream
    before = datetime.datetime.now(datetime.timezone.utc)
    logger.request(remote, "POST", "/mutate", status, sent, 0.0004125, agent)
    line = stream.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1
    document = json.loads(line)
    stamp = datetime.datetime.fromisoformat(document["time"])
    assert before - datetime.timedelta(milliseconds=1) <= stamp <= datetime.datetime.now(datetime.timezone.utc)
    assert line == json.dumps({"time": document["time"], "remote": remote, "method": "POST", "path": "/mutate",
                               "status": status, "bytes": sent, "duration_ms": 0.412, "user_agent": agent}) + "\n"
