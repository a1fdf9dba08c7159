"""Prometheus metrics of the controller and its HTTP endpoints: /healthz, /readyz, /metrics.

Each controller gets its own registry (several may live in one test process).
"""

from __future__ import annotations

import http.server
import logging
import threading
from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)
_PREFIX = "metronome_controller"


class _WatchRestarts(Collector):
    """Watch restarts per resource, read from the informers when scraped."""

    def __init__(self, source: Callable[[], dict[str, int]]) -> None:
        self._source = source

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily(f"{_PREFIX}_watch_restarts", "Watches re-established after an error or a 410",
                                     labels=["resource"])
        for resource, count in sorted(self._source().items()):
            family.add_metric([resource], count)
        yield family


class Metrics:
    """The controller's metrics, in a private registry."""

    def __init__(self, watch_restarts: Callable[[], dict[str, int]] | None = None) -> None:
        r = self.registry = CollectorRegistry()
        self.queue_depth = Gauge(f"{_PREFIX}_queue_depth", "Gangs waiting for a placement", registry=r)
        self.held_gangs = Gauge(f"{_PREFIX}_held_gangs", "Gangs that fit but are held back this cycle for a node set "
                                "with fewer collisions (NoFit reason HeldForContention)", registry=r)
        self.decision_seconds = Histogram(
            f"{_PREFIX}_decision_seconds", "Time the core took per gang decided (cycle time / gangs decided)",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5), registry=r)
        self.cycle_seconds = Histogram(
            f"{_PREFIX}_cycle_seconds", "Time of one whole cycle (observe, decide, write)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0), registry=r)
        self.placements = Counter(f"{_PREFIX}_placements", "Gangs placed", registry=r)
        self.class_placements = Counter(f"{_PREFIX}_traffic_class_placements", "Gangs placed with a traffic class "
                                        "(QueuePolicy trafficClasses), by class (0: served first)", ["traffic_class"],
                                        registry=r)
        self.no_fits = Counter(f"{_PREFIX}_no_fits", "Decisions that found no placement, by reason", ["reason"],
                               registry=r)
        self.holds_overtaken = Counter(f"{_PREFIX}_holds_overtaken", "Gangs held back for contention whose best node "
                                       "set a gang of lower priority took GPUs of", registry=r)
        self.reconfigurations = Counter(f"{_PREFIX}_reconfigurations", "Running gangs given a new offset",
                                        registry=r)
        self.locks = Counter(f"{_PREFIX}_locks", "Running gangs made to align their bursts: a gang placed on "
                             "their links could collide with them", registry=r)
        self.unlocks = Counter(f"{_PREFIX}_unlocks", "Running gangs let run free: left with no contended link",
                               registry=r)
        self.redecisions = Counter(f"{_PREFIX}_vanished_node_redecisions", "Gangs whose claim was released to be "
                                   "decided again: a node of it vanished before the gang was bound", registry=r)
        self.stranded_pods_deleted = Counter(f"{_PREFIX}_stranded_pods_deleted", "Unbound pods pinned to a vanished "
                                             "node deleted for their owners to recreate", registry=r)
        self.pods_timeouts = Counter(f"{_PREFIX}_pods_timeout_releases", "Claims decided for a PodGroup before its "
                                     "pods, released because no pod came within podsTimeoutSeconds", registry=r)
        self.predicted_overflow = Gauge(f"{_PREFIX}_predicted_overflow_gbps_ms",
                                        "Predicted overflow of the placed gangs, Gbps*ms per period, summed",
                                        registry=r)
        self.placed_gangs = Gauge(f"{_PREFIX}_placed_gangs", "Gangs holding nodes", registry=r)
        self.drifted_gangs = Gauge(f"{_PREFIX}_drifted_gangs", "Placed gangs with pods bound outside their node set",
                                   registry=r)
        self.profile_drifted_gangs = Gauge(f"{_PREFIX}_profile_drifted_gangs", "Placed gangs whose measured profile "
                                           "departs from the declared one (claim condition ProfileDrift)", registry=r)
        self.profile_adoptions = Counter(f"{_PREFIX}_profile_adoptions", "Measured profiles adopted for planning "
                                         "(QueuePolicy profilePolicy adopt)", registry=r)
        self.writes = Counter(f"{_PREFIX}_writes", "API writes by kind and result", ["kind", "result"], registry=r)
        self.ungated_pods = Counter(f"{_PREFIX}_ungated_pods", "Pods whose scheduling gate we removed", registry=r)
        self.cycle_failures = Counter(f"{_PREFIX}_cycle_failures", "Cycles that raised (nothing was written)",
                                      registry=r)
        self.leader = Gauge(f"{_PREFIX}_leader", "1 while this replica holds the lease", registry=r)
        if watch_restarts is not None:
            r.register(_WatchRestarts(watch_restarts))

    def exposition(self) -> bytes:
        """The text exposition format."""
        return bytes(generate_latest(self.registry))


class HealthServer:
    """/healthz (the loop is alive), /readyz (caches synced, cycles succeeding), /metrics, in a daemon thread.

    ``ready`` returns "" when ready, else why not (the body of the 503).
    """

    def __init__(self, bind: str, port: int, metrics: Metrics, healthy: Callable[[], bool],
                 ready: Callable[[], str]) -> None:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, outer.metrics.exposition(), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    ok = outer.healthy()
                    self._send(200 if ok else 500, b"ok\n" if ok else b"loop stalled\n")
                elif path == "/readyz":
                    why = outer.ready()
                    self._send(503 if why else 200, (why or "ok").encode() + b"\n")
                else:
                    self._send(404, b"not found\n")

            def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
                log.debug("health: " + format, *args)

        self.metrics = metrics
        self.healthy = healthy
        self.ready = ready
        self._server = http.server.ThreadingHTTPServer((bind, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="health", daemon=True)

    @property
    def port(self) -> int:
        """The port it listens on (useful with port 0)."""
        return int(self._server.server_address[1])

    def start(self) -> "HealthServer":
        """Serve in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
