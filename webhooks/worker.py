"""The webhook's gunicorn worker: gevent, with every phase of a connection bounded in time.

gthread gives a connection a thread as soon as its first byte arrives, then blocks that thread in
the TLS handshake or in reads with no timeout: eight clients that send one byte and stop stall a
worker (issue 13). Here every connection is a greenlet (a few KiB), so a slow or idle client costs
no thread, and each phase of a connection has a deadline after which it is closed:

* the TLS handshake: ``HANDSHAKE_SECONDS`` from accept (the context comes from
  :mod:`webhooks.tls` per connection, so a rotated certificate is served without a restart);
* idle between requests (keep-alive): the ``keepalive`` setting (120 s, above the API server's
  90 s idle timeout, so the client closes first); a worker that is stopping closes idle
  connections within ``IDLE_POLL_SECONDS``;
* request line and headers: ``HEADERS_SECONDS`` from their first byte;
* the body: ``BODY_SECONDS`` from the end of the headers (the API server sends it at once);
* each write: ``WRITE_SECONDS``.

What the API server sends, a plain ``POST /mutate`` (:func:`_plain_admission`), is parsed here and
answered with the app's admission function directly; every other request (probes, metrics, anything
unusual in its framing or fields) goes through gunicorn's parser and the WSGI app, as before. The two
together cost more CPU than the admission decision (docs/webhook.md, Benchmark).

Admission is CPU work that does not yield, so a worker computes one review at a time; reviews
take milliseconds, which is what keeps probes answered within a second (the fault suite measures
it with 50 slow connections open).
"""

from __future__ import annotations

import errno
import gc
import logging
import re
import socket
import ssl
import time
from typing import Any, Callable

import gevent
from gunicorn import SERVER, http, util
from gunicorn.http.body import Body, LengthReader
from gunicorn.workers.ggevent import GeventWorker

HANDSHAKE_SECONDS = 5.0
HEADERS_SECONDS = 10.0
BODY_SECONDS = 10.0
WRITE_SECONDS = 10.0
IDLE_POLL_SECONDS = 1.0
DRAIN_BYTES = 64 * 1024  # unread body a connection may drain to serve another request
LINGER_SECONDS = 2.0  # how long a connection refused a body (413) may go on reading it, to close cleanly
LINGER_CHUNK = 256 * 1024

log = logging.getLogger("volcano_metronome.webhook")

#: ``(cert_file, key_file) -> SSLContext`` for a new connection; set by webhooks.server.
ContextSource = Callable[[str, str], ssl.SSLContext]


class Expired(TimeoutError):
    """A phase of the connection passed its deadline: the connection is closed."""

    def __init__(self, phase: str) -> None:
        super().__init__(f"{phase} not received in time")
        self.phase = phase


class Paced:
    """The connection as the request parser reads it: each read waits at most until the phase's deadline."""

    def __init__(self, sock: ssl.SSLSocket, keepalive: float, alive: Callable[[], bool]) -> None:
        self.sock = sock
        self.keepalive = keepalive
        self.alive = alive
        self.phase = "idle"
        self.deadline = 0.0
        self.expired = ""  # the phase that ran out of time (the app may have caught the error)

    def idle(self) -> None:
        """Wait for the next request: up to the keep-alive time, then its headers are timed."""
        self.phase = "idle"

    def body(self) -> None:
        """The headers are in: the body must follow within ``BODY_SECONDS``."""
        self.phase, self.deadline = "body", time.monotonic() + BODY_SECONDS

    def recv(self, size: int) -> bytes:
        """One read of at most ``size`` bytes within the current phase's time."""
        try:
            if self.phase == "idle":
                data = self._idle_recv(size)
                self.phase, self.deadline = "headers", time.monotonic() + HEADERS_SECONDS
                return data
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.expired = self.phase
                raise Expired(self.phase)
            self.sock.settimeout(left)
            try:
                return self.sock.recv(size)
            except (socket.timeout, TimeoutError):
                self.expired = self.phase
                raise Expired(self.phase) from None
        finally:
            self.sock.settimeout(WRITE_SECONDS)  # what the response's writes get

    def _idle_recv(self, size: int) -> bytes:
        if self.sock.pending():
            return self.sock.recv(size)
        end = time.monotonic() + self.keepalive
        while True:
            if not self.alive():
                return b""  # stopping: an idle connection ends as if the client closed it
            left = end - time.monotonic()
            if left <= 0:
                return b""  # keep-alive over
            self.sock.settimeout(min(IDLE_POLL_SECONDS, left))
            try:
                return self.sock.recv(size)
            except (socket.timeout, TimeoutError):
                continue


class Coalesced:
    """The connection as a response writes to it: gunicorn sends the headers and the body in two
    writes (two TLS records, two syscalls); collected here and sent in one, when the request is done
    or when ``FLUSH_BYTES`` have gathered."""

    FLUSH_BYTES = 256 * 1024

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock
        self.parts: list[bytes] = []
        self.size = 0

    def sendall(self, data: bytes) -> None:
        """Keep ``data`` for the next flush (sent at once past ``FLUSH_BYTES``)."""
        self.parts.append(bytes(data))
        self.size += len(data)
        if self.size >= self.FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Send what was kept, in one write."""
        if self.parts:
            data = b"".join(self.parts)
            self.parts, self.size = [], 0
            self.sock.sendall(data)

    def __getattr__(self, name: str) -> Any:
        # Anything else (shutdown, close, fileno ...) acts on the connection after what was kept is sent.
        self.flush()
        return getattr(self.sock, name)


class WebhookWorker(GeventWorker):  # type: ignore[misc]  # gunicorn ships no type hints
    """gevent worker that does TLS itself (per-connection context) and bounds every phase in time."""

    #: How the worker gets the TLS context of a new connection (set by webhooks.server before forking).
    context_source: ContextSource | None = None
    cert_file = ""
    key_file = ""
    #: ``mutate(content_length, stream) -> (status, body)`` of the app, and the logger's ``request``
    #: (both set once the app is loaded; without them every request takes gunicorn's path).
    _mutate: Callable[[str | None, Any], tuple[str, bytes]] | None = None
    _log_request: Callable[..., None] | None = None
    alive: bool  # gunicorn's, set by the arbiter's signals
    nr: int
    max_requests: int

    def load_wsgi(self) -> None:
        """Load the app, find its ``POST /mutate`` entry point, then keep the start-up objects out of GC."""
        super().load_wsgi()
        from webhooks.app import MUTATE

        extensions = getattr(self.wsgi, "extensions", {})
        self._mutate = extensions.get(MUTATE)
        self._log_request = getattr(self.log, "request", None)
        # The app, its catalog and the libraries are never freed: move them out of the collector's
        # generations, so that a full collection does not walk them during a request (p99).
        gc.collect()
        gc.freeze()

    def run(self) -> None:
        """Serve until stopped; then hand the frozen objects back to the collector, so that the interpreter
        tears them down in its usual order (frozen, logging's handlers outlive gevent's thread module and
        print errors at exit)."""
        try:
            super().run()
        finally:
            gc.unfreeze()

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> None:
        """``POST /mutate`` straight to the app's admission function; anything else through gunicorn (and Flask)."""
        mutate, log_request = self._mutate, self._log_request
        if mutate is None or log_request is None or req.path != "/mutate" or req.method != "POST" \
                or req._expected_100_continue:
            GeventWorker.handle_request(self, listener_name, req, sock, addr)
            return
        self._admit(mutate, log_request, req, sock, addr)

    def _admit(self, mutate: Callable[[str | None, Any], tuple[str, bytes]], log_request: Callable[..., None],
               req: Any, sock: Any, addr: Any) -> None:
        # What gunicorn's handle_request, wsgi.create and Response do for this one path, without the WSGI
        # environ (40 keys), the Response object and the Date formatting per request: they cost as much
        # CPU as the admission decision (docs/webhook.md, Benchmark). The same bytes go out.
        started = time.perf_counter()
        try:
            self.nr += 1
            if self.nr >= self.max_requests and self.alive:
                self.log.info("Autorestarting worker after current request.")
                self.alive = False
            declared = user_agent = None
            for name, value in req.headers:
                if name == "CONTENT-LENGTH":
                    declared = value
                elif name == "USER-AGENT":
                    user_agent = value
            status, payload = mutate(declared, req.body)
            close = not self.alive or req.should_close()
            head = b"HTTP/%d.%d %s\r\nServer: %s\r\nDate: %s\r\nConnection: %s\r\n" \
                   b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (
                       req.version[0], req.version[1], status.encode("latin-1"), SERVER.encode(), _http_date(),
                       b"close" if close else b"keep-alive", len(payload))
            sock.sendall(head + payload)
            log_request(_remote(addr), "POST", "/mutate", int(status[:3]), len(payload),
                        time.perf_counter() - started, user_agent)
        except (gevent.GreenletExit, SystemExit):
            return  # as GeventWorker.handle_request: the worker is stopping
        if close:
            raise StopIteration()  # as gunicorn's: the connection ends after this response

    def handle(self, listener: Any, client: socket.socket, addr: Any) -> None:
        """Serve one connection: handshake, then requests until the client, a deadline or shutdown ends it."""
        req = None
        tls: ssl.SSLSocket | None = None
        try:
            client.setblocking(True)
            # Responses go out whole (Coalesced); without Nagle they are not held back for an ACK.
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tls = self._handshake(client)
            conn = Paced(tls, float(self.cfg.keepalive), lambda: bool(self.alive))
            parser = http.RequestParser(self.cfg, conn, addr)
            listener_name = listener.getsockname()
            while True:
                conn.idle()
                req = _plain_admission(parser.unreader)
                if req is None:
                    req = next(parser)
                if not req:
                    break
                req.scheme = "https"
                conn.body()
                out = Coalesced(tls)
                try:
                    self.handle_request(listener_name, req, out, addr)
                finally:
                    out.flush()
                if conn.expired:  # the app answered a body that ran out of time (400): no more requests here
                    raise Expired(conn.expired)
                if not _drained(req):
                    _linger(tls)  # a body left unread (413): no more requests, but let the client finish writing
                    break
                req = None
        except StopIteration:
            pass  # the client closed, or the response said Connection: close
        except http.errors.NoMoreData:
            pass
        except (Expired, gevent.Timeout) as exc:
            phase = exc.phase if isinstance(exc, Expired) else "handshake"
            log.debug("closing a connection from %s: %s not received in time", addr, phase)
            _count_expired(phase)
        except ssl.SSLError as exc:
            log.debug("TLS error from %s: %s", addr, exc)
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, None):
                log.warning("socket error from %s: %s", addr, exc)
        except Exception as exc:  # noqa: BLE001 - a malformed request: gunicorn answers 400 and logs
            self.handle_error(req, tls or client, addr, exc)
        finally:
            if tls is not None:
                util.close(tls)
            util.close(client)

    def _handshake(self, client: socket.socket) -> ssl.SSLSocket:
        source = type(self).context_source
        assert source is not None, "webhooks.server sets WebhookWorker.context_source"
        context = source(self.cert_file, self.key_file)
        tls = context.wrap_socket(client, server_side=True, do_handshake_on_connect=False,
                                  suppress_ragged_eofs=True)
        with gevent.Timeout(HANDSHAKE_SECONDS):
            tls.do_handshake()
        return tls


#: The one request the API server sends, in the strictest form: ``POST /mutate`` over HTTP/1.1, a
#: Content-Length body, printable ASCII headers that frame nothing else. Everything else goes to gunicorn's parser.
_PLAIN_LINE = re.compile(rb"POST /mutate(?:\?[!-~]*)? HTTP/1\.1")
#: A field: an RFC 9110 token name, but without "_" (gunicorn drops such fields), and a printable ASCII value.
_PLAIN_FIELD = re.compile(rb"([!#$%&'*+\-.^`|~0-9A-Za-z]+):[ \t]*((?:[!-~](?:[ -~\t]*[!-~])?)?)[ \t]*")
_PLAIN_HEAD_BYTES = 4094  # gunicorn's limit on the request line alone (and so below its 8,190 per field)
_PLAIN_FIELDS = 100  # gunicorn's limit on the number of fields (limit_request_fields, which the server keeps)
#: Fields that change how a request is framed, answered or routed: a request with one goes to gunicorn.
_NOT_PLAIN = frozenset({"TRANSFER-ENCODING", "CONNECTION", "EXPECT", "UPGRADE", "TE", "TRAILER", "HTTP2-SETTINGS",
                        "KEEP-ALIVE", "PROXY-CONNECTION", "SCRIPT_NAME", "PATH_INFO"})


class PlainRequest:
    """A ``POST /mutate`` request as gunicorn's ``Request`` presents it to the worker (the fields it uses)."""

    method = "POST"
    path = "/mutate"
    version = (1, 1)
    scheme = "https"
    _expected_100_continue = False

    def __init__(self, headers: list[tuple[str, str]], body: Any) -> None:
        self.headers = headers
        self.body = body

    def should_close(self) -> bool:
        """HTTP/1.1 without a ``Connection`` field: the connection stays open."""
        return False


def _plain_admission(unreader: Any) -> PlainRequest | None:
    """The next request, when it is a plain ``POST /mutate`` (:data:`_PLAIN_LINE`), parsed here: gunicorn's
    pure-Python parser costs a fifth of a request's CPU. ``None`` (every byte read put back) for anything
    else, which gunicorn's parser then reads and answers as before."""
    data = unreader.read()
    if not data:
        raise StopIteration()  # the client closed, or the worker is stopping: as gunicorn's parser ends it
    end = data.find(b"\r\n\r\n", 0, _PLAIN_HEAD_BYTES)
    if end < 0:
        unreader.unread(data)
        return None
    lines = data[:end].split(b"\r\n")
    if len(lines) > _PLAIN_FIELDS + 1 or not _PLAIN_LINE.fullmatch(lines[0]):
        unreader.unread(data)
        return None
    headers: list[tuple[str, str]] = []
    seen: set[str] = set()
    length = -1
    for line in lines[1:]:
        field = _PLAIN_FIELD.fullmatch(line)
        if field is None:
            unreader.unread(data)
            return None
        name = field.group(1).decode("ascii").upper()
        if name in seen or name in _NOT_PLAIN:
            unreader.unread(data)
            return None
        seen.add(name)
        value = field.group(2).decode("ascii")
        if name == "CONTENT-LENGTH":
            if not value.isdigit() or len(value) > 10:
                unreader.unread(data)
                return None
            length = int(value)
        headers.append((name, value))
    if length < 0:
        unreader.unread(data)
        return None
    unreader.unread(data[end + 4:])
    return PlainRequest(headers, Body(LengthReader(unreader, length)))


_date_second = -1
_date_text = b""


def _http_date() -> bytes:
    """The ``Date`` header's value (RFC 9110 IMF-fixdate), formatted once a second."""
    global _date_second, _date_text
    second = int(time.time())
    if second != _date_second:
        _date_second, _date_text = second, util.http_date(second).encode("latin-1")
    return _date_text


def _remote(addr: Any) -> str:
    """``REMOTE_ADDR`` as gunicorn's environ has it."""
    return str(addr[0]) if isinstance(addr, tuple) else str(addr)


def _linger(tls: ssl.SSLSocket) -> None:
    """Half-close, then discard what the client still sends, for at most ``LINGER_SECONDS``.

    Closing a socket with unread bytes resets the connection, and the reset can discard a response still
    on its way, so a client that writes its whole body before it reads (the API server) saw a broken
    connection instead of the 413. This is the lingering close of nginx and Apache: the response is
    out, nothing else will be answered, the bytes are read undecrypted and thrown away.
    """
    deadline = time.monotonic() + LINGER_SECONDS
    try:
        tls.shutdown(socket.SHUT_WR)  # drops the TLS layer: what follows is read as raw bytes
        while (left := deadline - time.monotonic()) > 0:
            tls.settimeout(left)
            if not tls.recv(LINGER_CHUNK):
                return
    except (OSError, ValueError):
        return  # the client closed or reset, or the time ran out: close now


def _drained(req: Any) -> bool:
    """Read what is left of the request body, up to ``DRAIN_BYTES``; whether it ended."""
    declared = getattr(getattr(req.body, "reader", None), "length", None)  # what a Content-Length body has left
    if isinstance(declared, int) and declared > DRAIN_BYTES:
        return False
    left = DRAIN_BYTES
    while left > 0:
        data = req.body.read(min(8192, left))
        if not data:
            return True
        left -= len(data)
    return False


def _count_expired(phase: str) -> None:
    from webhooks.metrics import EXPIRED

    EXPIRED.labels(phase).inc()
