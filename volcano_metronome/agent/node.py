"""The node agent's loop: record the NIC, fit, write the measured profile; and its Prometheus metrics.

Every ``interval_s`` it records ``seconds`` of ``/sys/class/net/IF/statistics/tx_bytes`` at ``hz``
(the sampler of ``profile record``), exports the mean rate, and, when this node's NIC belongs to one
gang and this node reports it (:mod:`volcano_metronome.agent.owners`), fits the trace and merges the
profile into that gang's claim as ``status.measuredProfile`` (the only write it makes). A refused
fit (too short, too coarse, aperiodic) writes nothing and is counted by reason.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from volcano_metronome import kube, sampler
from volcano_metronome.agent.owners import owner
from volcano_metronome.shapes.times import format_time
from volcano_metronome.shapes.profiles import profile_to_spec
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.profiling.fit import Fit, fit
from volcano_metronome.profiling.trace import parse

log = logging.getLogger(__name__)
_PREFIX = "metronome_agent"


@dataclass(frozen=True)
class AgentConfig:
    """What the agent samples and how often."""

    node: str
    interface: str
    hz: float = 1000.0
    seconds: float = 30.0
    interval_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.node:
            raise InvalidInput("--node", self.node, "this node's name (or $NODE_NAME from the downward API)")
        if not self.interval_s >= self.seconds:
            raise InvalidInput("--interval", self.interval_s, f"at least --seconds ({self.seconds:g})")


class AgentMetrics:
    """The agent's metrics, in a private registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.measured_gbps = Gauge(f"{_PREFIX}_measured_gbps", "Mean transmit rate of the NIC over the last trace",
                                   ["interface"], registry=r)
        self.sample_hz = Gauge(f"{_PREFIX}_sample_hz", "Sampling rate achieved in the last trace", ["interface"],
                               registry=r)
        self.period_ms = Gauge(f"{_PREFIX}_period_ms", "Period of the last profile fitted for a gang",
                               ["namespace", "claim"], registry=r)
        self.window_gbps = Gauge(f"{_PREFIX}_peak_gbps", "Highest window rate of the last profile fitted for a gang",
                                 ["namespace", "claim"], registry=r)
        self.gangs_on_node = Gauge(f"{_PREFIX}_gangs_on_node", "Placed gangs on this node (more than 1: the NIC "
                                   "mixes them and no profile is fitted)", registry=r)
        self.fits = Counter(f"{_PREFIX}_fits", "Traces by outcome: written, refused reason, shared, idle, "
                            "other-node", ["result"], registry=r)


def measured_status(result: Fit, node: str, now_s: float) -> dict[str, Any]:
    """``status.measuredProfile`` as the CRD spells it."""
    return {**profile_to_spec(result.profile), "source": "node-agent", "node": node,
            "measuredAt": format_time(now_s), "confidence": round(min(1.0, max(0.0, result.confidence)), 3),
            "periods": int(result.periods)}


def measure_once(cfg: AgentConfig, claims: Callable[[], Sequence[Mapping[str, Any]]],
                 write: Callable[[str, str, dict[str, Any]], None], metrics: AgentMetrics,
                 record: Callable[[AgentConfig], str], now: Callable[[], float] = time.time) -> str:
    """One round: record a trace (``record`` returns its CSV text), fit it, write it if this node reports a gang."""
    text = record(cfg)
    trace = parse(text, f"{cfg.interface} trace")
    if trace.span_s > 0:
        metrics.measured_gbps.labels(cfg.interface).set(float(trace.tx_bytes[-1]) * 8.0 / trace.span_s / 1e9)
        metrics.sample_hz.labels(cfg.interface).set((trace.samples - 1) / trace.span_s)
    who = owner(cfg.node, claims())  # after recording: the gangs placed over the trace's end
    metrics.gangs_on_node.set(who.gangs_on_node)
    if who.claim is None:
        result = "other-node" if who.why.startswith("another") else who.why
        metrics.fits.labels(result).inc()
        return result
    fitted = fit(trace)
    if not isinstance(fitted, Fit):
        metrics.fits.labels(fitted.reason).inc()
        log.info("%s/%s: no profile from %s: %s", *who.claim, cfg.interface, fitted)
        return fitted.reason
    namespace, name = who.claim
    write(namespace, name, measured_status(fitted, cfg.node, now()))
    metrics.period_ms.labels(namespace, name).set(fitted.profile.period_ms)
    metrics.window_gbps.labels(namespace, name).set(fitted.profile.peak_gbps)
    metrics.fits.labels("written").inc()
    return "written"


def record_counter(cfg: AgentConfig) -> str:
    """The sampler of ``profile record`` into memory."""
    out = io.StringIO()
    sampler.record(sampler.counter_path(cfg.interface), cfg.hz, cfg.seconds, out, interface=cfg.interface)
    return out.getvalue()


def run(k: kube.Kube, cfg: AgentConfig, stop: threading.Event, *, metrics_port: int = 9464,
        bind_address: str = "0.0.0.0") -> None:
    """Measure every ``interval_s`` until ``stop`` is set; serve /metrics on ``metrics_port`` (0: none)."""
    metrics = AgentMetrics()
    if metrics_port:
        start_http_server(metrics_port, bind_address, registry=metrics.registry)

    def claims() -> Sequence[Mapping[str, Any]]:
        return list(k.list(kube.CLAIMS)["items"])

    def write(namespace: str, name: str, measured: dict[str, Any]) -> None:
        k.patch(kube.CLAIMS, namespace, name, {"status": {"measuredProfile": measured}}, subresource="status")
        log.info("%s/%s: measured period %s ms, %d windows", namespace, name, measured["periodMs"],
                 len(measured["windows"]))

    sampler.counter_path(cfg.interface)  # an unknown interface stops the agent at once, naming those that exist
    while not stop.is_set():
        started = time.monotonic()
        try:
            measure_once(cfg, claims, write, metrics, record_counter)
        except kube.KubeError as exc:
            metrics.fits.labels("api-error").inc()
            log.warning("API: %s", exc)
        stop.wait(max(0.0, cfg.interval_s - (time.monotonic() - started)))
