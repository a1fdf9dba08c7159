"""Bursts of TCP traffic over loopback whose shape the kernel keeps, however loaded the machine.

Every ``--period-ms`` (an absolute schedule) one ``send`` queues a burst into a TCP socket to 127.0.0.1
whose pacing rate (``SO_MAX_PACING_RATE``) spreads it over ``--burst-ms``: the kernel transmits it from
its pacing timer, so the burst lasts its length on ``lo`` even when this process gets no CPU for tens
of milliseconds. A sender that loops over ``sendto`` instead sends only while it is scheduled: on 2 cores
at load 16 its 30 ms bursts came apart into fragments of a few ms at random places and the trace was
(rightly) refused as aperiodic. What the scheduler still moves is when each burst starts (how late this
process wakes), which the caller measures: the start times are printed when the sender stops.

    python3 -m tests.profiling.paced --period-ms 200 --burst-ms 30   # until SIGTERM; prints {"starts": ...}

Loopback only; the socket's receiving end is drained between bursts in the same loop (one thread: no
lock for the sending to wait behind).
"""

from __future__ import annotations

import argparse
import json
import select
import signal
import socket
import time
from typing import Any

SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # Linux; Python's socket module lacks the name
WANTED_BUFFER = 4 << 20


class Stop(Exception):
    """SIGTERM: print what was sent and exit."""


def connect() -> tuple[socket.socket, socket.socket]:
    """A TCP connection over loopback: (sending end, receiving end), both non-blocking."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, WANTED_BUFFER)  # inherited by the accepted end
        server.listen(1)
        tx = socket.create_connection(server.getsockname())
        rx, _ = server.accept()
    tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, WANTED_BUFFER)
    tx.setblocking(False)
    rx.setblocking(False)
    return tx, rx


def run(period_s: float, burst_s: float, max_bursts: int) -> dict[str, Any]:
    """Send the bursts until SIGTERM or ``max_bursts``; their start times and sizes."""
    tx, rx = connect()
    # Linux reports twice the buffer it grants (half is bookkeeping); a burst of a quarter of the report
    # fits the socket whole, so one send queues it and the pacing timer alone transmits it.
    burst_bytes = min(tx.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 4, WANTED_BUFFER // 2)
    rate = int(burst_bytes / burst_s)
    tx.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, rate)
    payload, sink = b"\0" * burst_bytes, bytearray(1 << 20)
    starts: list[float] = []
    queued: list[int] = []
    begin = time.monotonic() + 0.05
    try:
        for k in range(max_bursts):
            due = begin + period_s * k
            while (left := due - time.monotonic()) > 0:
                if select.select([rx], [], [], left)[0]:
                    try:
                        while rx.recv_into(sink):
                            pass
                    except BlockingIOError:
                        pass
            starts.append(time.monotonic())
            try:
                queued.append(tx.send(payload))
            except BlockingIOError:  # the previous burst still queued: nothing sent this time, and said so
                queued.append(0)
    except Stop:
        pass
    finally:
        tx.close()
        rx.close()
    return {"starts": starts, "queued": queued, "burst_bytes": burst_bytes, "rate_bytes_per_s": rate}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--period-ms", type=float, required=True)
    parser.add_argument("--burst-ms", type=float, required=True)
    parser.add_argument("--max-bursts", type=int, default=300)
    args = parser.parse_args()

    def stop(*_: object) -> None:
        raise Stop

    signal.signal(signal.SIGTERM, stop)
    print(json.dumps(run(args.period_ms / 1000.0, args.burst_ms / 1000.0, args.max_bursts)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
