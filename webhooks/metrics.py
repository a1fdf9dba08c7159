"""Prometheus metrics of the webhook, correct across gunicorn's worker processes.

The server runs several worker processes, so metrics use prometheus-client's multiprocess mode:
``volcano-metronome webhook`` sets ``PROMETHEUS_MULTIPROC_DIR`` (``--metrics-dir``, else the variable
already set, else a fresh directory) before any worker starts, each worker writes its samples to memory-mapped files
there, and ``/metrics`` in any worker sums them all. Outside that mode (the Flask app in a test, a
single process) the ordinary in-process registry is used. This module must be imported after the
environment variable is set, which the server guarantees by importing the app only in the workers.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import multiprocess

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

REQUESTS = Counter(
    "metronome_webhook_requests_total",
    "Admission requests answered, by object kind and verdict (patched, allowed, warned, denied, bad_request, error).",
    ["kind", "verdict"],
)
LATENCY = Histogram(
    "metronome_webhook_request_duration_seconds",
    "Time from the request body read to the response built, by object kind.",
    ["kind"],
    buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
EXPIRED = Counter(
    "metronome_webhook_connections_expired_total",
    "Connections closed because a phase passed its deadline, by phase (handshake, headers, body).",
    ["phase"],
)
CERT_RELOADS = Counter(
    "metronome_webhook_certificate_reloads_total",
    "Serving certificate reloads after the files changed on disk, by result (loaded, kept_previous).",
    ["result"],
)


@functools.lru_cache(maxsize=None)
def requests(kind: str, verdict: str) -> Any:
    """The counter of one (kind, verdict): looked up once, not on every request."""
    return REQUESTS.labels(kind, verdict)


@functools.lru_cache(maxsize=None)
def latency(kind: str) -> Any:
    """The latency histogram of one kind."""
    return LATENCY.labels(kind)


def exposition() -> tuple[bytes, str]:
    """The text exposition of every metric (summed over worker processes in multiprocess mode)."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def worker_exited(pid: int) -> None:
    """Bookkeeping when a worker process ends (its live-gauge files go; its counters stay summed)."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
