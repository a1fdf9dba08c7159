"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

A candidate takes the lease when it is free or when its holder has not renewed it for
``leaseDurationSeconds`` *as observed locally* (we time how long the record has stayed unchanged on
our own monotonic clock, so clock skew between machines does not matter). The leader renews every
``retry_period``; if it has not renewed successfully for ``renew_deadline`` it stops leading
(``on_lost``), strictly before another candidate may take over (renew deadline < lease duration).
Updates are conditional on the lease's resourceVersion, so two candidates never both win.

Fencing: :meth:`LeaderElector.remaining` is the time our writes may still take. A standby takes
over no sooner than ``leaseDurationSeconds`` after it first saw our last renewal, which it cannot
see before we sent it, so from the moment we sent our last successful renew we lead for at least
the lease duration. Writes are fenced a margin earlier, at the renew deadline (the controller's
client cuts every write's timeout to ``remaining()`` and sends none once it is spent), so a write of
ours never lands after the lease could have passed, whatever the API server's latency up to that margin.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from volcano_metronome import kube
from volcano_metronome.shapes import JSON
from volcano_metronome.kube import Conflict, KubeError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseConfig:
    """Where the lease is and its timings (seconds)."""

    namespace: str
    name: str
    identity: str
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0


class LeaderElector:
    """Acquire, renew and release one Lease. Thread-safe; see the module docstring."""

    def __init__(self, api: Any, config: LeaseConfig, on_lost: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.config = config
        self.on_lost = on_lost
        self._clock = clock
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._last_renew: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.transitions_seen = 0

    # -- state
    def is_leader(self) -> bool:
        """True while we hold the lease and renewed it within the renew deadline."""
        with self._lock:
            return self._last_renew is not None and self._clock() - self._last_renew < self.config.renew_deadline_s

    def remaining(self) -> float:
        """Seconds our writes may still take before the lease could pass to another replica (<= 0: none)."""
        with self._lock:
            if self._last_renew is None:
                return 0.0
            return self._last_renew + self.config.renew_deadline_s - self._clock()

    # -- one attempt
    def try_acquire_or_renew(self) -> bool:
        """One client-go style attempt; True when we hold the lease afterwards."""
        cfg = self.config
        now = self._clock()
        try:
            lease = self.api.get(kube.LEASES, cfg.namespace, cfg.name)
        except KubeError as exc:
            log.info("lease %s/%s: %s", cfg.namespace, cfg.name, exc)
            return False
        stamp = kube.now_micro()
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                    "spec": self._spec(stamp, stamp, 0)}
            try:
                self.api.create(kube.LEASES, body, cfg.namespace)
            except KubeError as exc:
                log.info("lease %s/%s: create: %s", cfg.namespace, cfg.name, exc)
                return False
            self._renewed(now, (cfg.identity, stamp))
            return True
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = float(spec.get("leaseDurationSeconds") or cfg.lease_duration_s)
        if holder and holder != cfg.identity and now - self._observed_at < duration:
            return False  # held by someone who renewed recently (as far as we have seen)
        if holder == cfg.identity:
            new_spec = dict(spec)
            new_spec.update(renewTime=stamp, leaseDurationSeconds=int(cfg.lease_duration_s))
        else:
            new_spec = self._spec(stamp, stamp, int(spec.get("leaseTransitions") or 0) + (1 if holder else 0))
        updated = dict(lease)
        updated["spec"] = new_spec
        try:
            self.api.replace(kube.LEASES, updated)
        except Conflict:
            return False
        except KubeError as exc:
            log.info("lease %s/%s: update: %s", cfg.namespace, cfg.name, exc)
            return False
        if holder != cfg.identity:
            self.transitions_seen += 1
            log.info("acquired lease %s/%s (previous holder %r)", cfg.namespace, cfg.name, holder or None)
        self._renewed(now, (cfg.identity, stamp))
        return True

    def _spec(self, acquire: str, renew: str, transitions: int) -> JSON:
        return {"holderIdentity": self.config.identity, "leaseDurationSeconds": int(self.config.lease_duration_s),
                "acquireTime": acquire, "renewTime": renew, "leaseTransitions": transitions}

    def _renewed(self, now: float, record: tuple[str, str]) -> None:
        with self._lock:
            self._last_renew = now
        self._observed, self._observed_at = record, now

    # -- loops
    def acquire(self, stop: threading.Event) -> bool:
        """Block until we lead (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if self.try_acquire_or_renew():
                return True
            stop.wait(self.config.retry_period_s)
        return False

    def start_renewing(self) -> None:
        """Renew in a daemon thread; call ``on_lost`` once if the renew deadline passes."""
        self._thread = threading.Thread(target=self._renew_loop, name="lease-renew", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.config.retry_period_s):
            self.try_acquire_or_renew()
            if not self.is_leader():
                log.error("lost lease %s/%s: not renewed within %.0fs", self.config.namespace, self.config.name,
                          self.config.renew_deadline_s)
                if self.on_lost is not None:
                    self.on_lost()
                return

    def release(self) -> None:
        """Stop renewing and hand the lease back (so a standby takes over without waiting it out)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.config.retry_period_s + 5)
        if not self.is_leader():
            return
        with self._lock:
            self._last_renew = None
        try:
            lease = self.api.get(kube.LEASES, self.config.namespace, self.config.name)
            if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.config.identity:
                lease = dict(lease)
                lease["spec"] = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1}
                self.api.replace(kube.LEASES, lease)
        except KubeError as exc:
            log.info("lease release: %s", exc)
