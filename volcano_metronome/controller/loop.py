"""The controller's shell: informers feed cycles, cycles write plans, leader election gates the writes.

One cycle = read every store (merged with our own recent writes), observe, decide (the core),
maybe re-optimise (moves, and unlocking gangs left with no contended link), plan, write. Cycles
run when an informer reports a change (after a short debounce that batches bursts of events),
after a failed write (with backoff), at the next pods-timeout deadline (``Plan.wake_at_s``), when a
gang held back (``core.holding``) may wait no longer (``Decided.hold_until``), and every
``resyncSeconds`` regardless. Re-optimisation runs per QueuePolicy every ``intervalSeconds`` when
enabled, and for every such policy when the network changes; gangs no QueuePolicy governs get the
built-in policy's pass (the CRD's defaults); and a policy one of whose gangs adopts or drops a
measured profile gets one whatever its settings (``profiledrift``).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Mapping

from volcano_metronome import api, kube
from volcano_metronome.controller import deciding, profiledrift, reconcile
from volcano_metronome.controller.cache import Overlay, Store, View
from volcano_metronome.controller.leader import LeaderElector, LeaseConfig
from volcano_metronome.controller.metrics import HealthServer, Metrics
from volcano_metronome.shapes import JSON
from volcano_metronome.controller.loads import RunningLoads
from volcano_metronome.controller.observe import Observer, observe
from volcano_metronome.controller.views import Changed, Inputs, World
from volcano_metronome.controller.quiet import Quiet
from volcano_metronome.controller.queuepolicy import DEFAULT_NAME, Reoptimization
from volcano_metronome.controller.writes import Event, Plan
from volcano_metronome.controller.settings import Settings
from volcano_metronome.controller.writer import Api, Outcome, Writer
from volcano_metronome.core.errors import MetronomeError
from volcano_metronome.core.decision import NoFit
from volcano_metronome.controller.deciding import HELD_FOR_CONTENTION, Decided, Reoptimised, no_fit_category

log = logging.getLogger("volcano_metronome.controller")

#: Consecutive cycles that raised after which the controller reports not ready (/readyz 503).
FAILING_CYCLES = 3

BOUND_PODS = "bound-pods"
#: Stores whose changes the Observer takes by key instead of walking every object.
CHANGE_TRACKED = frozenset({"pods", BOUND_PODS, "nodes", "podgroups", "workloads", api.CLAIMS})
BOUND_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True)
class Source:
    """One watched resource: the store name a cycle reads it by, and how it is selected."""

    name: str
    resource: kube.Resource
    label_selector: str | None = None
    field_selector: str | None = None


SOURCES: tuple[Source, ...] = (
    Source("nodes", kube.NODES),
    Source("pods", kube.PODS, label_selector=f"{api.MANAGED_LABEL}=true"),
    Source(BOUND_PODS, kube.PODS, field_selector=BOUND_SELECTOR),
    Source("podgroups", kube.PODGROUPS),
    Source("workloads", kube.WORKLOADS),
    Source("admissionchecks", kube.ADMISSION_CHECKS),
    Source("clusterqueues", kube.CLUSTER_QUEUES),
    Source("resourceflavors", kube.RESOURCE_FLAVORS),
    Source(api.CLAIMS, kube.CLAIMS),
    Source(api.CAPACITIES, kube.CAPACITIES),
    Source("hypernodes", kube.HYPERNODES),
    Source(api.QUEUE_POLICIES, kube.QUEUE_POLICIES),
)


@dataclass(frozen=True)
class Thought:
    """What one cycle saw, decided and plans to write (``decide_s``: time spent in the core)."""

    world: World
    decided: Decided
    plan: Plan
    decide_s: float
    drift: profiledrift.Assessment


def default_identity() -> str:
    """``hostname_<random>``, as client-go does: unique per process."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class Controller:
    """Cycles over stores, writing through ``api``; use :func:`serve` to run one against a cluster."""

    def __init__(self, api_: Api, stores: Mapping[str, Store], settings: Settings, *, identity: str = "",
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic, after_write: Callable[[], None] | None = None,
                 may_write: Callable[[], bool] | None = None, freeze_heap: bool = False) -> None:
        self.settings = settings
        # After the first cycle, move everything alive (the informers' caches, the first world) out of the cyclic
        # collector's reach: its full collections otherwise rescan millions of long-lived objects (0.5 s of CPU
        # at 10,000 nodes, once every 20 to 30 cycles). They are still freed when no longer referenced.
        self.freeze_heap = freeze_heap
        self.identity = identity or default_identity()
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.monotonic = monotonic
        self.overlay = Overlay()
        self.observer = Observer(settings)  # views kept from cycle to cycle
        self.loads = RunningLoads(settings)  # the running gangs' link loads, kept from cycle to cycle
        self.quiet = Quiet()  # placed gangs with nothing to write, skipped while unchanged
        self.drift = profiledrift.Drift()  # each gang's drift, assessed again only when its view changed
        self.view = View(stores, self.overlay)
        self.writer = Writer(api_, self.overlay, settings.write_concurrency, self.identity, after_write, may_write)
        self.dirty = threading.Event()
        self.heartbeat = monotonic()
        self.failing = 0  # consecutive cycles that raised
        self._last_reopt: dict[str, float] = {}
        self._network: tuple[str, ...] | None = None
        self._fingerprinted: tuple[object, tuple[str, ...]] = (None, ())
        self.last_world: World | None = None
        self._reported: dict[str, str] = {}  # gang key -> last no-fit reason announced by an Event
        self.wake_at: float | None = None  # clock() time of the next release of a claim whose pods did not come
        self.held: dict[str, float] = {}  # gangs held back (core.holding): since when, by clock()
        # Keys the informers reported since the last cycle (CHANGE_TRACKED); the Observer reads only
        # those once every tracked store feeds :meth:`watcher` (else it walks every object).
        self._changes: dict[str, set[tuple[str | None, str]]] = {}
        self._changes_lock = threading.Lock()
        self._tracked: set[str] = set()

    def notify(self, *_: object) -> None:
        """Something changed: run a cycle soon."""
        self.dirty.set()

    @property
    def _watched(self) -> bool:
        # A resource without a store holds nothing, so nothing of it can change.
        return all(s in self._tracked for s in CHANGE_TRACKED if s in self.view.stores)

    def watcher(self, source: str) -> Callable[[str, JSON], None]:
        """The ``on_change`` callback of the informer of ``source`` (a store name of :data:`SOURCES`)."""
        self._tracked.add(source)
        def on_change(kind: str, obj: JSON) -> None:
            if source in CHANGE_TRACKED:
                with self._changes_lock:
                    self._changes.setdefault(source, set()).add(kube.key_of(obj))
            self.dirty.set()

        return on_change

    def inputs(self) -> Inputs:
        """What the stores (and our own recent writes) hold now, with what changed since the last call."""
        v = self.view
        with self._changes_lock:
            keys, self._changes = self._changes, {}
        changed = None
        # Our own writes show through the overlay without an informer event: while it holds any, read everything.
        if self._watched and not len(self.overlay):
            changed = Changed(
                pods={(ns or "", name): (self._get("pods", ns, name), self._get(BOUND_PODS, ns, name))
                      for ns, name in keys.get("pods", set()) | keys.get(BOUND_PODS, set())},
                nodes={name: self._get("nodes", None, name) for _, name in keys.get("nodes", set())},
                claims=self._current(api.CLAIMS, keys), podgroups=self._current("podgroups", keys),
                workloads=self._current("workloads", keys))
        return Inputs(nodes=v.items("nodes"), pods=v.items("pods"), bound_pods=v.items(BOUND_PODS),
                      podgroups=v.items("podgroups"), workloads=v.items("workloads"),
                      admission_checks=v.items("admissionchecks"), cluster_queues=v.items("clusterqueues"),
                      resource_flavors=v.items("resourceflavors"),
                      claims=v.items(api.CLAIMS), capacities=v.items(api.CAPACITIES),
                      hypernodes=v.items("hypernodes"), queue_policies=v.items(api.QUEUE_POLICIES), changed=changed)

    def _current(self, source: str, keys: Mapping[str, set[tuple[str | None, str]]]) -> dict[tuple[str, str], JSON | None]:
        return {(ns or "", name): self._get(source, ns, name) for ns, name in keys.get(source, set())}

    def _get(self, source: str, namespace: str | None, name: str) -> JSON | None:
        store = self.view.stores.get(source)
        return store.get(namespace, name) if store is not None else None

    def cycle(self) -> tuple[Plan, Outcome]:
        """One cycle: observe, decide, plan, write."""
        started = self.monotonic()
        thought = self.think()
        plan = thought.plan
        outcome = self.writer.apply(plan) if plan.writes else Outcome()
        self._remember_reports(plan, outcome)
        self.wake_at = min((t for t in (plan.wake_at_s, thought.decided.hold_until) if t is not None), default=None)
        self._record(thought.world, plan, outcome, thought.decided, thought.decide_s, self.monotonic() - started)
        profiledrift.record(thought.drift, self.metrics)
        return plan, outcome

    def think(self) -> Thought:
        """A cycle up to its plan of writes (observe, decide, maybe re-optimise, plan); writes nothing."""
        started = self.monotonic()
        now = self.clock()
        world = observe(self.inputs(), self.settings, self.observer)
        drift = self.drift.assess(world, self.view.items(api.QUEUE_POLICIES), self.settings, now)
        world = drift.world  # under profilePolicy adopt, drifted gangs are planned with their measured profile
        self.last_world = world
        for warning in world.warnings:
            log.warning("%s", warning)
        with self.loads.snapshot(world) as base:  # the running gangs' loads; this cycle's changes rolled back
            t0 = self.monotonic()
            decided = deciding.decide(world, self.settings, now, self.monotonic, base, self.held)
            self.held = dict(decided.held)
            decide_s = self.monotonic() - t0
            for warning in decided.warnings:
                log.warning("%s", warning)
            due = sorted(set(self._reopt_due(world, started)) | drift.replan)
            reoptimised = (deciding.reoptimise_running(world, self.settings, due, decided) if due
                           else Reoptimised())
        plan = drift.amend(reconcile.plan(world, decided, self.settings, now, reoptimised, self._reported, self.quiet))
        if self.freeze_heap:
            self.freeze_heap = False
            gc.collect()
            gc.freeze()
        return Thought(world, decided, plan, decide_s, drift)

    def _remember_reports(self, plan: Plan, outcome: Outcome) -> None:
        failed = set(outcome.failed)
        for g in plan.gangs:
            for w in g.after:
                if isinstance(w, Event) and w.reason == reconcile.NOFIT and g.gang not in failed:
                    self._reported[g.gang] = w.note
        if len(self._reported) > 100_000:  # bound the memory; forgetting only repeats an Event
            self._reported.clear()

    def _reopt_due(self, world: World, now: float) -> list[str]:
        if world.topology is not self._fingerprinted[0]:  # the Observer keeps the network while it is unchanged
            self._fingerprinted = (world.topology, tuple(f"{link.name}={link.capacity_gbps}"
                                                         for link in world.topology.links))
        fingerprint = self._fingerprinted[1]
        changed = self._network is not None and fingerprint != self._network
        self._network = fingerprint
        # Gangs no QueuePolicy governs run under the built-in policy, whose re-optimisation is the CRD's default.
        policies = [(v.name, v.reoptimization) for v in world.policies if not v.error]
        policies.append((DEFAULT_NAME, Reoptimization()))
        due = []
        for name, r in policies:
            if not r.enabled:
                continue
            last = self._last_reopt.setdefault(name, now)
            if changed or now - last >= r.interval_s:
                self._last_reopt[name] = now
                # Whether the built-in policy governs a placed gang is looked up only when its pass is due:
                # a walk over every gang each cycle would cost in proportion to the cluster, not the change.
                if name != DEFAULT_NAME or any(g.policy == DEFAULT_NAME and g.placed and not g.finished
                                               for g in world.gangs):
                    due.append(name)
        return due

    def _record(self, world: World, plan: Plan, outcome: Outcome, decided: Decided, decide_s: float,
                cycle_s: float) -> None:
        m = self.metrics
        m.queue_depth.set(plan.pending)
        m.placed_gangs.set(plan.placed)
        m.drifted_gangs.set(plan.drifted)
        results = list(decided.results.values())
        if results:
            per = decide_s / len(results)
            for _ in results:
                m.decision_seconds.observe(per)
        m.cycle_seconds.observe(cycle_s)
        m.placements.inc(len(outcome.placed))
        for klass in outcome.placed_classes:
            m.class_placements.labels(str(klass)).inc()
        held = 0
        for r in results:
            if isinstance(r, NoFit):
                category = no_fit_category(r.reason)
                m.no_fits.labels(category).inc()
                held += category == HELD_FOR_CONTENTION
        m.held_gangs.set(held)
        m.holds_overtaken.inc(len(decided.overtaken))
        m.reconfigurations.inc(len(plan.moves))
        m.locks.inc(len(outcome.locked))
        m.unlocks.inc(len(outcome.unlocked))
        m.ungated_pods.inc(outcome.ungated)
        m.redecisions.inc(len(outcome.redecided))
        m.pods_timeouts.inc(len(outcome.timed_out))
        m.stranded_pods_deleted.inc(outcome.deleted_pods)
        for (kind, result), n in outcome.by_kind.items():
            m.writes.labels(kind, result).inc(n)
        m.predicted_overflow.set(world.predicted_overflow())  # kept by the Observer as claims change
        for gang in outcome.timed_out:
            log.warning("gang %s: no pod came within podsTimeoutSeconds (%g s) of its decision before its pods; "
                        "claim released, decided again once its pods are created", gang, self.settings.pods_timeout_s)
        for gang in outcome.redecided:
            log.warning("gang %s: a node of its claim vanished before it was bound; released, decided again once "
                        "its members are back", gang)
        if plan.writes or results:
            log.info("cycle: %d decided (%d placed), %d pending, %d writes (%d conflicts, %d errors), "
                     "%d pods ungated, %d gangs locked, %d unlocked, %.1f ms", len(results), len(outcome.placed),
                     plan.pending, outcome.writes, outcome.conflicts, outcome.errors, outcome.ungated,
                     len(outcome.locked), len(outcome.unlocked), cycle_s * 1000)

    def run(self, stop: threading.Event) -> None:
        """Cycle until ``stop`` is set."""
        backoff = 0.05
        last = self.monotonic()
        self.dirty.set()
        while not stop.is_set():
            self.heartbeat = self.monotonic()
            # Wake at least every second so that a stop request is seen promptly (and a claim held for pods that
            # have not come is released within a second of its time).
            if not self.dirty.wait(timeout=1.0) and self.monotonic() - last < self.settings.resync_s and (
                    self.wake_at is None or self.clock() < self.wake_at):
                continue
            if stop.is_set():
                return
            last = self.monotonic()
            if self.settings.cycle_debounce_ms:
                stop.wait(self.settings.cycle_debounce_ms / 1000.0)
            self.dirty.clear()
            try:
                _, outcome = self.cycle()
                self.failing = 0
            except Exception:  # noqa: BLE001 - a bug in one cycle must not stop the controller
                log.exception("cycle failed")
                self.failing += 1
                self.metrics.cycle_failures.inc()
                outcome = Outcome(errors=1)
            if outcome.errors or outcome.conflicts or outcome.failed:
                stop.wait(backoff if outcome.errors else 0.05)
                backoff = min(5.0, backoff * 2) if outcome.errors else backoff
                self.dirty.set()
            else:
                backoff = 0.05

    def close(self) -> None:
        """Stop the writer's threads."""
        self.writer.close()


# ----------------------------------------------------------------------------------------------- serve
@dataclass
class ServeOptions:
    """How :func:`serve` runs (flags of ``volcano-metronome controller``)."""

    identity: str = ""
    leader_election: bool = True
    health: bool = True
    exit_after_writes: int | None = None  # testing aid: SIGKILL ourselves after this many writes
    sync_timeout_s: float = 120.0


def serve(k: kube.Kube, settings: Settings, options: ServeOptions, stop: threading.Event) -> int:
    """Run the controller until ``stop`` (0) or until the lease is lost (1)."""
    identity = options.identity or default_identity()
    lost = threading.Event()
    informers: dict[str, kube.Informer] = {}
    metrics = Metrics(lambda: {name: inf.restarts for name, inf in informers.items()})
    elector: LeaderElector | None = None
    wake: list[Callable[[], None]] = []

    def on_lost() -> None:
        lost.set()
        stop.set()
        for fn in wake:
            fn()

    if options.leader_election and settings.leader_election.enabled:
        le = settings.leader_election
        elector = LeaderElector(k, LeaseConfig(settings.lease_namespace, le.lease_name, identity,
                                               le.lease_duration_s, le.renew_deadline_s, le.retry_period_s),
                                on_lost=on_lost)
    # Writes through a fenced client: none is sent, or waited for, past the renew deadline.
    writes = k.fenced(elector.remaining) if elector is not None else k
    controller = Controller(writes, informers, settings, identity=identity, metrics=metrics,
                            after_write=_fault(options.exit_after_writes),
                            may_write=elector.is_leader if elector is not None else None, freeze_heap=True)
    wake.append(controller.notify)
    for src in SOURCES:
        selector = settings.node_selector or None if src.name == "nodes" else src.label_selector
        # GPU accounting needs every bound pod, whatever namespace the gangs are watched in.
        scoped = src.resource.namespaced and src.name != BOUND_PODS
        informers[src.name] = kube.Informer(k, src.resource, settings.watch_namespace or None if scoped else None,
                                            label_selector=selector,
                                            field_selector=src.field_selector, on_change=controller.watcher(src.name),
                                            timeout_seconds=settings.watch_timeout_s)
    synced = threading.Event()

    leading = threading.Event()

    def healthy() -> bool:
        # A standby waiting for the Lease runs no cycles; only a leader's loop can stall.
        if not leading.is_set():
            return True
        return time.monotonic() - controller.heartbeat < max(3 * settings.resync_s, 60.0)

    server = None
    if options.health:
        try:
            server = HealthServer(settings.bind_address, settings.health_port, metrics, healthy,
                                  lambda: not_ready(controller, informers, synced)).start()
        except OSError as exc:  # the port is taken, or the address is none of this host's
            raise MetronomeError(f"cannot serve health and metrics on {settings.bind_address}:{settings.health_port}: "
                                 f"{exc.strerror or exc}") from None
        log.info("health and metrics on %s:%d", settings.bind_address, server.port)
    try:
        for inf in informers.values():
            inf.start()
        deadline = time.monotonic() + options.sync_timeout_s
        for name, inf in informers.items():
            if not inf.wait_synced(max(0.0, deadline - time.monotonic())):
                log.error("cache of %s did not sync within %.0fs", name, options.sync_timeout_s)
                return 1
        synced.set()
        log.info("caches synced; identity %s", identity)
        if elector is not None:
            log.info("waiting for lease %s/%s", settings.lease_namespace, settings.leader_election.lease_name)
            if not elector.acquire(stop):
                return 0
            elector.start_renewing()
        metrics.leader.set(1)
        controller.heartbeat = time.monotonic()
        leading.set()
        log.info("leading: running cycles")
        controller.run(stop)
        return 1 if lost.is_set() else 0
    finally:
        metrics.leader.set(0)
        if elector is not None and not lost.is_set():
            elector.release()
        for inf in informers.values():
            inf.stop()
        controller.close()
        if server is not None:
            server.stop()
        if lost.is_set():
            log.error("lease lost: exiting")


def not_ready(controller: Controller, informers: Mapping[str, kube.Informer], synced: threading.Event) -> str:
    """Why the controller is not ready ("" when it is): caches not synced, or its cycles keep failing."""
    if not synced.is_set() or not all(i.synced for i in informers.values()):
        return "caches not synced"
    if controller.failing >= FAILING_CYCLES:
        return f"the last {controller.failing} cycles failed (see the log and metronome_controller_cycle_failures_total)"
    return ""


def _fault(after: int | None) -> Callable[[], None] | None:
    if not after:
        return None
    count = [0]
    lock = threading.Lock()

    def hook() -> None:
        with lock:
            count[0] += 1
            if count[0] >= after:
                log.warning("exit-after-writes reached (%d): SIGKILL", after)
                os.kill(os.getpid(), signal.SIGKILL)

    return hook
