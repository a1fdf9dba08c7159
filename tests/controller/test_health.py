"""The health server: /healthz, /readyz and /metrics on a real socket."""

from __future__ import annotations

import urllib.error
import urllib.request

from volcano_metronome.controller.metrics import HealthServer, Metrics


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_endpoints() -> None:
    ready = ["caches not synced"]
    metrics = Metrics(lambda: {"pods": 3})
    metrics.no_fits.labels("InsufficientGPUs").inc()
    metrics.queue_depth.set(7)
    server = HealthServer("127.0.0.1", 0, metrics, healthy=lambda: True, ready=lambda: ready[0]).start()
    try:
        assert get(server.port, "/healthz") == (200, "ok\n")
        assert get(server.port, "/readyz") == (503, "caches not synced\n")
        ready[0] = ""
        assert get(server.port, "/readyz") == (200, "ok\n")
        code, text = get(server.port, "/metrics")
        assert code == 200
        assert "metronome_controller_queue_depth 7.0" in text
        assert 'metronome_controller_no_fits_total{reason="InsufficientGPUs"} 1.0' in text
        assert 'metronome_controller_watch_restarts_total{resource="pods"} 3.0' in text
        assert "metronome_controller_decision_seconds_bucket" in text
        assert get(server.port, "/nope")[0] == 404
    finally:
        server.stop()
