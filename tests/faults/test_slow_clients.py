"""50 slow or idle connections against the real webhook (gunicorn, TLS): probes are still answered
within 1 s, and every slow phase is cut at its deadline."""

from __future__ import annotations

import pathlib
import time

from tests.faults.slow import KINDS, Horde, probes
from tests.webhook.conftest import make_certs, start_server
from webhooks import worker


def test_fifty_slow_connections_do_not_stop_the_probes(tmp_path: pathlib.Path) -> None:
    server = start_server(tmp_path, make_certs(tmp_path / "certs"))
    try:
        horde = Horde(server.port, server.context, count=50).open()
        opened_at = time.monotonic()
        try:
            assert horde.opened == 50, f"only {horde.opened} of 50 slow connections could be opened"
            for path in ("/healthz", "/readyz"):
                result = probes(server.port, server.context, count=15, path=path, gap_s=0.05)
                print(f"FAULT-BENCH slow-clients 50 open, {path}: {result.answered}/15 answered within 1 s, "
                      f"median {result.median * 1000:.1f} ms, worst {result.worst * 1000:.1f} ms")
                assert result.answered == 15, (path, result.latencies)
                assert result.worst < 1.0
            # Past the handshake and header/body deadlines, the server has closed the slow ones itself;
            # the silent ones look like idle keep-alive connections and wait for the keep-alive time.
            time.sleep(max(0.0, opened_at + worker.BODY_SECONDS + 2.0 - time.monotonic()))
            slow = sum(1 for i in range(50) if KINDS[i % len(KINDS)] != "silent")
            print(f"FAULT-BENCH slow-clients: {horde.dropped} of {slow} slow connections closed by the server within "
                  f"{worker.BODY_SECONDS + 2:.0f} s")
            assert horde.dropped >= slow, f"{horde.dropped} of the {slow} slow connections were closed"
            status, _, body = server.request("GET", "/metrics")
            text = body.decode()
            for phase in ("handshake", "headers", "body"):
                assert f'metronome_webhook_connections_expired_total{{phase="{phase}"}}' in text
        finally:
            horde.close()
    finally:
        assert server.stop() == 0, server.stderr.read_text()
