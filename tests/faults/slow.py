"""Slow and idle clients against a real TLS server, and a prober that times fresh requests meanwhile.

Four kinds of connection, as a careless or hostile client leaves them (issue 13):

* ``silent``: completes the TLS handshake, then sends nothing;
* ``tls-byte``: sends one byte of a TLS ClientHello, then nothing;
* ``slow-headers``: sends a request line and part of the headers, then one byte every second;
* ``slow-body``: sends complete headers announcing a 64 KiB body, then a few bytes every second.
"""

from __future__ import annotations

import select
import socket
import ssl
import statistics
import threading
import time
from dataclasses import dataclass, field

KINDS = ("silent", "tls-byte", "slow-headers", "slow-body")


@dataclass
class Horde:
    """Open ``count`` slow connections (kinds in turn) to ``127.0.0.1:port`` and keep them slow until closed."""

    port: int
    context: ssl.SSLContext
    count: int = 50
    drip_s: float = 1.0
    sockets: list[socket.socket] = field(default_factory=list)
    opened: int = 0
    dropped: int = 0  # connections the server closed while we held them
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def open(self) -> "Horde":
        for i in range(self.count):
            thread = threading.Thread(target=self._hold, args=(KINDS[i % len(KINDS)],), daemon=True)
            thread.start()
            self._threads.append(thread)
        deadline = time.monotonic() + 20
        while self.opened < self.count and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)

    def _hold(self, kind: str) -> None:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        sock: socket.socket = raw
        try:
            if kind == "tls-byte":
                raw.sendall(b"\x16")
            else:
                sock = self.context.wrap_socket(raw, server_hostname="localhost")
                if kind == "slow-headers":
                    sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n")
                elif kind == "slow-body":
                    sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 65536\r\n\r\n{")
            self.sockets.append(sock)
            self.opened += 1
            while not self._stop.wait(self.drip_s):
                if _closed_by_peer(sock):
                    self.dropped += 1  # the server answered (an error) or closed: it gave up on us
                    return
                if kind == "slow-headers":
                    sock.sendall(b"X")
                elif kind == "slow-body":
                    sock.sendall(b" ")
        except (OSError, ssl.SSLError):
            self.dropped += 1
        finally:
            sock.close()


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server closed the connection or answered on it (a TLS 1.3 session ticket does not count)."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    sock.setblocking(False)
    try:
        sock.recv(1)
        return True  # data (an error response) or b"" (closed)
    except (ssl.SSLWantReadError, BlockingIOError):
        return False  # only a TLS record with no application data
    except OSError:
        return True
    finally:
        sock.setblocking(True)


@dataclass(frozen=True)
class Probes:
    """Latencies of fresh-connection probes (None: no answer within the limit)."""

    latencies: tuple[float | None, ...]

    @property
    def answered(self) -> int:
        return sum(1 for x in self.latencies if x is not None)

    @property
    def worst(self) -> float:
        return max((x for x in self.latencies if x is not None), default=float("inf"))

    @property
    def median(self) -> float:
        done = [x for x in self.latencies if x is not None]
        return statistics.median(done) if done else float("inf")


def probe(port: int, context: ssl.SSLContext, path: str = "/healthz", limit_s: float = 1.0) -> float | None:
    """Seconds for one GET on a fresh TLS connection (handshake included); None past ``limit_s`` or on error."""
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=limit_s) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as sock:
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = sock.recv(4096)
                    if not chunk:
                        return None
                    data += chunk
                if not data.startswith(b"HTTP/1.1 200"):
                    return None
    except (OSError, ssl.SSLError):
        return None
    elapsed = time.monotonic() - started
    return elapsed if elapsed <= limit_s else None


def probes(port: int, context: ssl.SSLContext, count: int = 25, path: str = "/healthz", gap_s: float = 0.1) -> Probes:
    """``count`` probes one after another, ``gap_s`` apart."""
    out = []
    for _ in range(count):
        out.append(probe(port, context, path))
        time.sleep(gap_s)
    return Probes(tuple(out))
