"""The controller's kept state against a from-scratch build, after every event of random event sequences.

One long-lived :class:`Observer` and :class:`RunningLoads` (as the controller keeps them) and a fresh
``observe`` + ``deciding.snapshot`` see the same stores after each add, update or delete of a node,
pod, PodGroup or claim; their worlds and snapshots must be equal. Each cycle also decides the pending
gangs on the kept snapshot (then rolls back), as a real cycle does.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import HealthCheck, example, given, settings as hsettings, strategies as st

from volcano_metronome import api
from volcano_metronome.shapes import templates
from volcano_metronome.controller import deciding, profiledrift, reconcile
from volcano_metronome.controller.loads import RunningLoads
from volcano_metronome.controller.observe import Observer, observe
from volcano_metronome.controller.views import Changed, Inputs, World
from volcano_metronome.controller.quiet import Quiet
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.shapes.profiles import profile_from_annotation, profile_to_spec
from volcano_metronome.shapes.times import format_time

JSON = dict[str, Any]
SETTINGS = Settings()
NOW = 1.7e9
NODES = [f"n{i}" for i in range(6)]
GANGS = ["g0", "g1", "g2", "g3"]
PROFILES = [
    {"period_ms": 200, "windows": [{"start_ms": 170, "len_ms": 30, "gbps": 80}], "jitter_ms": 0},
    {"period_ms": 100, "windows": [{"start_ms": 0, "len_ms": 20, "gbps": 60}], "jitter_ms": 0},
    {"period_ms": 300, "windows": [{"start_ms": 100, "len_ms": 35, "gbps": 70}], "jitter_ms": 0},
]


class Stores:
    """The informers' stores, with resourceVersions bumped on every write as the API server does."""

    def __init__(self) -> None:
        self.rv = 0
        self.objs: dict[str, dict[tuple[str, str], JSON]] = {
            k: {} for k in ("nodes", "pods", "podgroups", "claims", "queuepolicies")}
        self.changed: dict[str, set[tuple[str, str]]] = {k: set() for k in self.objs}  # as the informers report

    def put(self, kind: str, obj: JSON) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        self.objs[kind][key] = obj
        self.changed.get(kind, set()).add(key)

    def delete(self, kind: str, name: str) -> None:
        key = ("" if kind == "nodes" else "ns", name)
        if self.objs[kind].pop(key, None) is not None:
            self.changed.get(kind, set()).add(key)

    def changes(self) -> Changed:
        """What changed since the last call, as the controller hands it to the Observer."""
        pods = {k: (self.objs["pods"].get(k), self.bound(self.objs["pods"].get(k))) for k in self.changed["pods"]}
        nodes = {k[1]: self.objs["nodes"].get(k) for k in self.changed["nodes"]}
        claims = {k: self.objs["claims"].get(k) for k in self.changed["claims"]}
        podgroups = {k: self.objs["podgroups"].get(k) for k in self.changed["podgroups"]}
        self.changed = {k: set() for k in self.objs}
        return Changed(pods=pods, nodes=nodes, claims=claims, podgroups=podgroups, workloads={})

    @staticmethod
    def bound(pod: JSON | None) -> JSON | None:
        return pod if pod is not None and pod["spec"].get("nodeName") else None

    def inputs(self) -> Inputs:
        pods = list(self.objs["pods"].values())
        return Inputs(nodes=list(self.objs["nodes"].values()), pods=pods,
                      bound_pods=[p for p in pods if p["spec"].get("nodeName")],
                      podgroups=list(self.objs["podgroups"].values()), claims=list(self.objs["claims"].values()),
                      queue_policies=list(self.objs["queuepolicies"].values()))


def node(name: str, rack: int, gpus: int, ready: bool, tainted: bool = False) -> JSON:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "metronome.dev/rack": f"r{rack}"}},
            "spec": {"taints": [{"key": "maintenance", "effect": "NoSchedule"}] if tainted else []},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pod(gang: str, i: int, gpus: int, where: str | None, profile: int) -> JSON:
    spec: JSON = {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}
    if where is None:
        spec["schedulingGates"] = [{"name": api.SCHEDULING_GATE}]
    else:
        spec["nodeName"] = where
    return {"metadata": {"name": f"{gang}-{i}", "namespace": "ns", "labels": {api.MANAGED_LABEL: "true"},
                         "annotations": {api.GANG_KIND: "PodGroup", api.GANG_NAME: gang, api.GANG_SIZE: "2",
                                         api.PROFILE: json.dumps(PROFILES[profile])}},
            "spec": spec, "status": {"phase": "Running" if where else "Pending"}}


def podgroup(gang: str, profile: int, before_pods: str | None = None) -> JSON:
    """A PodGroup; ``before_pods`` (a phase) makes it one of a Volcano Job decided before its pods (gangs.decidable_before_pods)."""
    group: JSON = {"metadata": {"name": gang, "namespace": "ns",
                                "annotations": {api.PROFILE: json.dumps(PROFILES[profile])}},
                   "spec": {"minMember": 2, "queue": "default"}}
    if before_pods is not None:
        group["metadata"]["annotations"][api.POD_CONSTRAINTS] = templates.encode([{}])
        group["metadata"]["ownerReferences"] = [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": gang,
                                                 "uid": f"u-{gang}", "controller": True}]
        group["spec"]["minTaskMember"] = {"worker": 2}
        group["status"] = {"phase": before_pods}
    return group


def spec_of(profile: int) -> JSON:
    return profile_to_spec(profile_from_annotation(json.dumps(PROFILES[profile]), "test"))


def claim(gang: str, nodes: list[str], offset: int, locked: bool, profile: int, released: bool,
          ref: bool = True, measured: int | str | None = None, adopted: int | None = None,
          overflow: float | None = None, decided_ago: float | None = None) -> JSON:
    prof = spec_of(profile)
    status: JSON = {"nodes": nodes, "members": [1] * len(nodes), "offsetMs": offset,
                    "periodMs": PROFILES[profile]["period_ms"], "epoch": 0, "locked": locked}
    if overflow is not None:
        status["predictedOverflowGbpsMs"] = overflow
    if decided_ago is not None:  # a claim held for a PodGroup's pods is released podsTimeoutSeconds after this
        status["decidedAt"] = format_time(NOW - decided_ago)
    if measured is not None:  # what the agent measured (profiledrift): a profile, or a broken one
        status["measuredProfile"] = {"periodMs": -1} if measured == "broken" else {
            **spec_of(int(measured)), "source": "agent"}
    if adopted is not None:
        status["adoptedProfile"] = spec_of(adopted)
    if released:
        status["conditions"] = [{"type": "Placed", "status": "False"}]
    return {"metadata": {"name": f"podgroup-{gang}", "namespace": "ns", "labels": {api.MANAGED_LABEL: "true"}},
            # Without a gangRef the gang finds its claim by the name the controller gives it (gangs.find_claim).
            "spec": {"gangRef": {"kind": "PodGroup", "name": gang}, "profile": prof} if ref else {"profile": prof},
            "status": status}


node_names = st.sampled_from(NODES)
events = st.one_of(
    st.tuples(st.just("node"), node_names, st.integers(0, 2), st.integers(0, 8), st.booleans(), st.booleans()),
    st.tuples(st.just("-node"), node_names),
    st.tuples(st.just("taint"), node_names, st.booleans()),  # labels kept: only the taints change
    st.tuples(st.just("pod"), st.sampled_from(GANGS), st.integers(0, 1), st.integers(1, 4),
              st.one_of(st.none(), node_names), st.integers(0, 2)),
    st.tuples(st.just("-pod"), st.sampled_from(GANGS), st.integers(0, 1)),
    st.tuples(st.just("podgroup"), st.sampled_from(GANGS), st.integers(0, 2),
              st.sampled_from([None, "Pending", "Inqueue", "Running"])),
    st.tuples(st.just("-podgroup"), st.sampled_from(GANGS)),
    st.tuples(st.just("claim"), st.sampled_from(GANGS), st.lists(node_names, min_size=1, max_size=3, unique=True),
              st.integers(0, 299), st.booleans(), st.integers(0, 2), st.booleans(), st.booleans(),
              st.sampled_from([None, 0, 1, 2, "broken"]), st.one_of(st.none(), st.integers(0, 2)),
              st.sampled_from([None, 0.0, 0.1, 0.2, 0.3, 1e-9, 12.5, 3.3e6]),  # predictedOverflowGbpsMs
              st.sampled_from([None, 0.0, 250.0])),  # decidedAt, seconds before the first cycle
    st.tuples(st.just("-claim"), st.sampled_from(GANGS)),
    st.tuples(st.just("policy"), st.sampled_from(["observe", "adopt", "bad"])),  # a catch-all QueuePolicy
    st.tuples(st.just("-policy")),
)


def apply(stores: Stores, event: tuple[Any, ...]) -> None:
    kind = event[0]
    if kind == "node":
        stores.put("nodes", node(*event[1:]))
    elif kind == "taint":
        current = stores.objs["nodes"].get(("", event[1]))
        if current is not None:
            stores.put("nodes", {**current, "metadata": dict(current["metadata"]), "spec": {
                "taints": [{"key": "maintenance", "effect": "NoSchedule"}] if event[2] else []}})
    elif kind == "-node":
        stores.delete("nodes", event[1])
    elif kind == "pod":
        stores.put("pods", pod(*event[1:]))
    elif kind == "-pod":
        stores.delete("pods", f"{event[1]}-{event[2]}")
    elif kind == "podgroup":
        stores.put("podgroups", podgroup(*event[1:]))
    elif kind == "-podgroup":
        stores.delete("podgroups", event[1])
    elif kind == "policy":
        stores.put("queuepolicies", {"metadata": {"name": "qp"}, "spec": {"profilePolicy": event[1]}})
    elif kind == "-policy":
        stores.objs["queuepolicies"].pop(("", "qp"), None)
    elif kind == "claim":
        stores.put("claims", claim(*event[1:]))
    else:
        stores.delete("claims", f"podgroup-{event[1]}")


def same_world(kept: World, fresh: World) -> None:
    assert kept.topology.nodes == fresh.topology.nodes
    assert [(link.name, link.capacity_gbps) for link in kept.topology.links] == [
        (link.name, link.capacity_gbps) for link in fresh.topology.links]
    assert kept.gangs == fresh.gangs
    assert [g.hostnames for g in kept.gangs] == [g.hostnames for g in fresh.gangs]
    assert (kept.allocatable, kept.free_gpus) == (fresh.allocatable, fresh.free_gpus)
    assert kept.orphans == fresh.orphans and kept.claims == fresh.claims
    assert kept.warnings == fresh.warnings and kept.running() == fresh.running()
    assert kept.index == {g.key: g for g in kept.gangs}
    assert kept.pending_gangs() == [g for g in kept.gangs if g.pending]


def same_overflow(world: World) -> None:
    """The predicted overflow the Observer kept from the changed claims equals the sum over every claim."""
    assert world.overflow is not None
    assert world.predicted_overflow() == math.fsum(c.overflow_gbps_ms for c in world.claims.values())


def changes_named(before: World | None, after: World) -> None:
    """``after.changed`` names every gang whose view is not the very object of the world before."""
    if before is None or after.changed is None:
        return
    assert after.serial == before.serial + 1
    for key in set(before.index) | set(after.index):
        if key not in after.changed:
            assert before.index.get(key) is after.index.get(key), key


def same_snapshot(kept: Snapshot, fresh: Snapshot) -> None:
    assert kept.hyperperiod == fresh.hyperperiod
    assert np.array_equal(kept.load, fresh.load)
    assert np.array_equal(kept.link_mean, fresh.link_mean)  # to the bit: candidates are ranked by it
    assert np.array_equal(kept.link_peaks, fresh.link_peaks)
    assert np.array_equal(kept.free_gpus, fresh.free_gpus)
    assert sorted(kept.placed) == sorted(fresh.placed)
    for uid, p in fresh.placed.items():
        q = kept.placed[uid]
        assert (q.gang, q.offset, q.locked, q.holds_gpus) == (p.gang, p.offset, p.locked, p.holds_gpus)
        assert np.array_equal(q.nodes, p.nodes) and np.array_equal(q.members, p.members)
        assert np.array_equal(q.links, p.links) and np.array_equal(q.multiplier, p.multiplier)
    assert {k: v for k, v in kept._link_gangs.items() if v} == {
        k: v for k, v in fresh._link_gangs.items() if v}


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events, min_size=1, max_size=30))
# A gang adopting its measured profile, then cycles in which nothing of it changes but the clock: its claim's
# new epoch is worked out again every cycle until written (profiledrift.Drift keeps such gangs active).
@example([("podgroup", "g0", 0), ("claim", "g0", ["n0", "n1"], 0, True, 0, False, True, 1, None),
          ("policy", "adopt"), ("taint", "n3", True), ("taint", "n3", False), ("taint", "n3", True),
          ("taint", "n3", False)])
# A claim held for a PodGroup's pods that do not come, while nothing of it changes but the clock: the plan visits
# it every cycle (its release time, then its release) though its view stays the same (controller.podless).
@example([("podgroup", "g0", 0, "Pending"),
          ("claim", "g0", ["n0", "n1"], 0, True, 0, False, True, None, None, None, 250.0),
          ("taint", "n3", True), ("taint", "n3", False), ("taint", "n3", True), ("taint", "n3", False),
          ("taint", "n3", True), ("taint", "n3", False)])
def test_kept_state_equals_a_fresh_build_after_every_event(sequence: list[tuple[Any, ...]]) -> None:
    stores = Stores()
    for name in NODES[:4]:
        stores.put("nodes", node(name, int(name[1]) // 2, 8, True))
    observer, driven = Observer(SETTINGS), Observer(SETTINGS)
    loads, drift, quiet = RunningLoads(SETTINGS), profiledrift.Drift(), Quiet()
    last: World | None = None
    last_driven: World | None = None
    last_planned: World | None = None
    for step, event in enumerate(sequence):
        now_s = NOW + 13.7 * step  # the clock moves: epochs written from now on differ from cycle to cycle
        apply(stores, event)
        inputs = stores.inputs()
        kept = observer.world(inputs)
        fresh = observe(inputs, SETTINGS)
        same_world(kept, fresh)
        same_overflow(kept)
        same_overflow(fresh)
        changes_named(last, kept)
        last = kept
        now = driven.world(replace(inputs, changed=stores.changes()))  # only the changed keys read
        same_world(now, fresh)
        same_overflow(now)
        changes_named(last_driven, now)
        last_driven = now
        # Profile drift, kept (assessed again only for the gangs World.changed names) and from scratch.
        assessed = drift.assess(now, inputs.queue_policies, SETTINGS, now_s)
        fresh_assessed = profiledrift.assess(fresh, inputs.queue_policies, SETTINGS, now_s)
        same_world(assessed.world, fresh_assessed.world)
        assert (assessed.replan, assessed.changes, assessed.drifted, assessed.adopted, assessed.warnings) == (
            fresh_assessed.replan, fresh_assessed.changes, fresh_assessed.drifted, fresh_assessed.adopted,
            fresh_assessed.warnings)
        changes_named(last_planned, assessed.world)
        last_planned = planned = assessed.world
        fresh_planned = fresh_assessed.world
        fresh_snap, fresh_warnings = deciding.snapshot(fresh_planned, SETTINGS)
        with loads.snapshot(planned) as base:
            same_snapshot(base[0], fresh_snap)
            assert base[1] == fresh_warnings
            decided = deciding.decide(planned, SETTINGS, now_s, None, base)  # assumes into the kept snapshot
            fresh_decided = deciding.decide(fresh_planned, SETTINGS, now_s)
            assert decided == fresh_decided
        after, _ = deciding.snapshot(fresh_planned, SETTINGS)
        same_snapshot(loads._snap, after)  # type: ignore[arg-type]  # the cycle's decisions rolled back
        # The plan, kept (quiet gangs skipped, only changed ones planned again) and from scratch.
        assert reconcile.plan(planned, decided, SETTINGS, now_s, quiet=quiet) == reconcile.plan(
            fresh_planned, fresh_decided, SETTINGS, now_s)


def test_a_taint_alone_changes_the_eligible_nodes_of_an_event_driven_observer() -> None:
    stores = Stores()
    for name in NODES[:4]:
        stores.put("nodes", node(name, int(name[1]) // 2, 8, True))
    stores.put("podgroups", podgroup("g0", 0))
    for i in range(2):
        stores.put("pods", pod("g0", i, 1, None, 0))
    driven = Observer(SETTINGS)
    assert [g.nodes for g in driven.world(replace(stores.inputs(), changed=stores.changes())).gangs] == [None]
    apply(stores, ("taint", "n1", True))  # labels unchanged: the network stands, the eligible nodes do not
    same_world(driven.world(replace(stores.inputs(), changed=stores.changes())), observe(stores.inputs(), SETTINGS))


def test_a_controller_that_freezes_its_heap_does_so_once_after_its_first_cycle() -> None:
    import gc
    import time

    from volcano_metronome.bench.cycle import Cluster, NoApi
    from volcano_metronome.controller.loop import Controller

    cluster = Cluster(16, 4, 1, 2, seed=3)
    controller = Controller(NoApi(), cluster.stores, SETTINGS, identity="t", clock=lambda: NOW,
                            monotonic=time.monotonic, freeze_heap=True)
    for name, store in cluster.stores.items():
        store.on_change = controller.watcher(name)
    gc.unfreeze()
    try:
        controller.think()
        frozen = gc.get_freeze_count()
        assert frozen > 0 and not controller.freeze_heap
        cluster.events(1, 1)
        controller.think()
        assert gc.get_freeze_count() <= frozen  # once only (frozen objects still go when no longer referenced)
    finally:
        gc.unfreeze()
