"""The node agent's loop: record the NIC, fit, write the measured profile; and its Prometheus metrics.

Every ``interval_s`` it records ``seconds`` of ``/sys/class/net/IF/statistics/tx_bytes`` at ``hz``
(the sampler of ``profile record``), exports the mean rate, and, when this node's NIC belongs to one
gang and this node reports it (:mod:`volcano_metronome.agent.owners`), fits the trace and merges the
profile into that gang's claim as ``status.measuredProfile`` (the only write it makes). A refused
fit (too short, too coarse, aperiodic, a gap, too long, implausible) writes nothing and is counted by reason.

The runtime helpers' own measurements (``--runtime-dir``, :mod:`volcano_metronome.agent.reports`) come
first: for every gang whose first node is this one, a fresh report is written as the measured profile
with ``source: runtime``, on a shared NIC too (the NIC cannot tell gangs apart; their own timing can).
The NIC fit is then not written for a gang whose claim holds a fresh runtime measurement, whichever
node's agent wrote it: one source at a time, the gang's own timing preferred. Nor for a locked gang: its
runtime holds every burst to its slot, so the NIC shows the published period, padding included, not the
gang's own (the runtime helper takes its padding out of its timing, so its reports are written locked or not).
"""

from __future__ import annotations

import io
import logging
import pathlib
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from volcano_metronome import kube, sampler
from volcano_metronome.agent.owners import owner, runtime_reported
from volcano_metronome.agent.reports import Scan, freshest, gangs_of, read_reports
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile
from volcano_metronome.profiling.fit import Fit, fit
from volcano_metronome.profiling.report import RuntimeReport
from volcano_metronome.profiling.trace import parse
from volcano_metronome.shapes.profiles import profile_to_spec
from volcano_metronome.shapes.times import format_time, parse_time

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
    runtime_dir: str = ""  # where the runtime helpers publish their reports ("": none read)
    runtime_max_age_s: float = 180.0  # older runtime measurements are stale: the NIC fit is written again

    def __post_init__(self) -> None:
        if not self.node:
            raise InvalidInput("--node", self.node, "this node's name (or $NODE_NAME from the downward API)")
        if not self.interval_s >= self.seconds:
            raise InvalidInput("--interval", self.interval_s, f"at least --seconds ({self.seconds:g})")
        if not self.runtime_max_age_s > 0:
            raise InvalidInput("--runtime-max-age", self.runtime_max_age_s, "a number of seconds > 0")


class AgentMetrics:
    """The agent's metrics, in a private registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.measured_gbps = Gauge(f"{_PREFIX}_measured_gbps", "Mean transmit rate of the NIC over the last trace",
                                   ["interface"], registry=r)
        self.sample_hz = Gauge(f"{_PREFIX}_sample_hz", "Sampling rate achieved in the last trace", ["interface"],
                               registry=r)
        self.period_ms = Gauge(f"{_PREFIX}_period_ms", "Period of the last profile measured for a gang, by source "
                               "(node-agent: fitted to the NIC; runtime: the helper's own timing)",
                               ["namespace", "claim", "source"], registry=r)
        self.window_gbps = Gauge(f"{_PREFIX}_peak_gbps", "Highest window rate of the last profile measured for a "
                                 "gang, by source", ["namespace", "claim", "source"], registry=r)
        self.gangs_on_node = Gauge(f"{_PREFIX}_gangs_on_node", "Placed gangs on this node (more than 1: the NIC "
                                   "mixes them and no profile is fitted)", registry=r)
        self.fits = Counter(f"{_PREFIX}_fits", "Outcomes: written, refused reason, shared, idle, other-node, "
                            "runtime (a runtime report written), runtime-preferred (the NIC fit not written), "
                            "runtime-invalid (a report file refused), aligned (a locked gang: the NIC shows its "
                            "slot, not its own period)", ["result"], registry=r)

    def measured(self, namespace: str, claim: str, source: str, profile: Profile) -> None:
        """Export the profile just written for a claim under its source (the other source's series goes)."""
        for gauge, value in ((self.period_ms, profile.period_ms), (self.window_gbps, profile.peak_gbps)):
            for other in _SOURCES:
                if other != source:
                    try:
                        gauge.remove(namespace, claim, other)
                    except KeyError:
                        pass
            gauge.labels(namespace, claim, source).set(value)


_SOURCES = ("node-agent", "runtime")


def measured_status(result: Fit, node: str, now_s: float) -> dict[str, Any]:
    """``status.measuredProfile`` as the CRD spells it."""
    return {**profile_to_spec(result.profile), "source": "node-agent", "node": node,
            "measuredAt": format_time(now_s), "confidence": round(min(1.0, max(0.0, result.confidence)), 3),
            "periods": int(result.periods)}


def runtime_status(report: RuntimeReport, node: str) -> dict[str, Any]:
    """``status.measuredProfile`` from a runtime report (which carries every window's rate)."""
    profile = report.measured.profile()
    if profile is None:
        raise InvalidInput("windows[].gbps", None, "a rate for every window of a runtime report to write")
    return {**profile_to_spec(profile), "source": "runtime", "node": node,
            "measuredAt": format_time(report.measured_at_s), "periods": int(report.measured.periods)}


def measure_once(cfg: AgentConfig, claims: Callable[[], Sequence[Mapping[str, Any]]],
                 write: Callable[[str, str, dict[str, Any]], None], metrics: AgentMetrics,
                 record: Callable[[AgentConfig], str], now: Callable[[], float] = time.time,
                 reports: Callable[[], Scan] = lambda: Scan(())) -> str:
    """One round: record a trace (``record`` returns its CSV text), write the runtime reports of the gangs
    this node reports for, then fit the trace and write it if this node reports the NIC's gang; the
    NIC's outcome is returned."""
    text = record(cfg)
    trace = parse(text, f"{cfg.interface} trace")
    if trace.span_s > 0:
        metrics.measured_gbps.labels(cfg.interface).set(float(trace.tx_bytes[-1]) * 8.0 / trace.span_s / 1e9)
        metrics.sample_hz.labels(cfg.interface).set((trace.samples - 1) / trace.span_s)
    listed = claims()  # after recording: the gangs placed over the trace's end
    by_runtime = _write_runtime(cfg, listed, reports(), write, metrics, now())
    who = owner(cfg.node, listed)
    metrics.gangs_on_node.set(who.gangs_on_node)
    if who.claim is None:
        result = "other-node" if who.why.startswith("another") else who.why
        metrics.fits.labels(result).inc()
        return result
    if who.claim in by_runtime:
        return "runtime"
    status = next((c.get("status") or {} for c in listed if _key(c) == who.claim), {})
    current = status.get("measuredProfile") or {}
    measured_at = parse_time(current.get("measuredAt"))
    if current.get("source") == "runtime" and measured_at is not None \
            and now() - measured_at <= cfg.runtime_max_age_s:
        metrics.fits.labels("runtime-preferred").inc()  # another node's agent wrote the gang's own timing
        return "runtime-preferred"
    if status.get("locked") is not False:  # as the controller reads it: absent on claims from before lock on demand
        # Its bursts leave at its slots: a fit would give the published period, padding counted as compute.
        metrics.fits.labels("aligned").inc()
        log.info("%s/%s: no profile from %s: the gang is locked, its bursts aligned to period %s ms", *who.claim,
                 cfg.interface, status.get("periodMs"))
        return "aligned"
    fitted = fit(trace)
    if not isinstance(fitted, Fit):
        metrics.fits.labels(fitted.reason).inc()
        log.info("%s/%s: no profile from %s: %s", *who.claim, cfg.interface, fitted)
        return fitted.reason
    namespace, name = who.claim
    write(namespace, name, measured_status(fitted, cfg.node, now()))
    metrics.measured(namespace, name, "node-agent", fitted.profile)
    metrics.fits.labels("written").inc()
    return "written"


def _key(claim: Mapping[str, Any]) -> tuple[str, str]:
    meta = claim.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _write_runtime(cfg: AgentConfig, claims: Sequence[Mapping[str, Any]], scan: Scan,
                   write: Callable[[str, str, dict[str, Any]], None], metrics: AgentMetrics,
                   now_s: float) -> set[tuple[str, str]]:
    """Write the freshest runtime report of every gang this node reports runtime timing for; the claims written."""
    for problem in scan.problems:
        metrics.fits.labels("runtime-invalid").inc()
        log.warning("runtime report refused: %s", problem)
    written: set[tuple[str, str]] = set()
    if not scan.reports:
        return written
    for claim in runtime_reported(cfg.node, claims):
        report = freshest(scan.reports, gangs_of(claim), now_s, cfg.runtime_max_age_s)
        if report is None:
            continue
        namespace, name = _key(claim)
        status = runtime_status(report, cfg.node)
        write(namespace, name, status)
        profile = report.measured.profile()
        assert profile is not None  # freshest() keeps only reports with rates
        metrics.measured(namespace, name, "runtime", profile)
        metrics.fits.labels("runtime").inc()
        written.add((namespace, name))
    return written


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
        log.info("%s/%s: measured period %s ms, %d windows (%s)", namespace, name, measured["periodMs"],
                 len(measured["windows"]), measured["source"])

    def reports() -> Scan:
        return read_reports(pathlib.Path(cfg.runtime_dir)) if cfg.runtime_dir else Scan(())

    sampler.counter_path(cfg.interface)  # an unknown interface stops the agent at once, naming those that exist
    while not stop.is_set():
        started = time.monotonic()
        try:
            measure_once(cfg, claims, write, metrics, record_counter, reports=reports)
        except kube.KubeError as exc:
            metrics.fits.labels("api-error").inc()
            log.warning("API: %s", exc)
        stop.wait(max(0.0, cfg.interval_s - (time.monotonic() - started)))
