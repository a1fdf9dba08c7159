"""The controller's kept state against a from-scratch build, after every event of random event sequences.

One long-lived :class:`Observer` and :class:`RunningLoads` (as the controller keeps them) and a fresh
``observe`` + ``deciding.snapshot`` see the same stores after each add, update or delete of a node,
pod, PodGroup or claim; their worlds and snapshots must be equal. Each cycle also decides the pending
gangs on the kept snapshot (then rolls back), as a real cycle does.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from volcano_metronome import api
from volcano_metronome.controller import deciding
from volcano_metronome.controller.loads import RunningLoads
from volcano_metronome.controller.observe import Observer, observe
from volcano_metronome.controller.views import Changed, Inputs, World
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.shapes.profiles import profile_from_annotation, profile_to_spec

JSON = dict[str, Any]
SETTINGS = Settings()
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
        self.objs: dict[str, dict[tuple[str, str], JSON]] = {k: {} for k in ("nodes", "pods", "podgroups", "claims")}
        self.changed: dict[str, set[tuple[str, str]]] = {"nodes": set(), "pods": set()}  # as the informers report

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
        self.changed = {"nodes": set(), "pods": set()}
        return Changed(pods=pods, nodes=nodes)

    @staticmethod
    def bound(pod: JSON | None) -> JSON | None:
        return pod if pod is not None and pod["spec"].get("nodeName") else None

    def inputs(self) -> Inputs:
        pods = list(self.objs["pods"].values())
        return Inputs(nodes=list(self.objs["nodes"].values()), pods=pods,
                      bound_pods=[p for p in pods if p["spec"].get("nodeName")],
                      podgroups=list(self.objs["podgroups"].values()), claims=list(self.objs["claims"].values()))


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


def podgroup(gang: str, profile: int) -> JSON:
    return {"metadata": {"name": gang, "namespace": "ns", "annotations": {api.PROFILE: json.dumps(PROFILES[profile])}},
            "spec": {"minMember": 2, "queue": "default"}}


def claim(gang: str, nodes: list[str], offset: int, locked: bool, profile: int, released: bool) -> JSON:
    prof = profile_to_spec(profile_from_annotation(json.dumps(PROFILES[profile]), "test"))
    status: JSON = {"nodes": nodes, "members": [1] * len(nodes), "offsetMs": offset,
                    "periodMs": PROFILES[profile]["period_ms"], "epoch": 0, "locked": locked}
    if released:
        status["conditions"] = [{"type": "Placed", "status": "False"}]
    return {"metadata": {"name": f"podgroup-{gang}", "namespace": "ns", "labels": {api.MANAGED_LABEL: "true"}},
            "spec": {"gangRef": {"kind": "PodGroup", "name": gang}, "profile": prof}, "status": status}


node_names = st.sampled_from(NODES)
events = st.one_of(
    st.tuples(st.just("node"), node_names, st.integers(0, 2), st.integers(0, 8), st.booleans(), st.booleans()),
    st.tuples(st.just("-node"), node_names),
    st.tuples(st.just("taint"), node_names, st.booleans()),  # labels kept: only the taints change
    st.tuples(st.just("pod"), st.sampled_from(GANGS), st.integers(0, 1), st.integers(1, 4),
              st.one_of(st.none(), node_names), st.integers(0, 2)),
    st.tuples(st.just("-pod"), st.sampled_from(GANGS), st.integers(0, 1)),
    st.tuples(st.just("podgroup"), st.sampled_from(GANGS), st.integers(0, 2)),
    st.tuples(st.just("-podgroup"), st.sampled_from(GANGS)),
    st.tuples(st.just("claim"), st.sampled_from(GANGS), st.lists(node_names, min_size=1, max_size=3, unique=True),
              st.integers(0, 299), st.booleans(), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("-claim"), st.sampled_from(GANGS)),
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
        stores.put("podgroups", podgroup(event[1], event[2]))
    elif kind == "-podgroup":
        stores.delete("podgroups", event[1])
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
def test_kept_state_equals_a_fresh_build_after_every_event(sequence: list[tuple[Any, ...]]) -> None:
    stores = Stores()
    for name in NODES[:4]:
        stores.put("nodes", node(name, int(name[1]) // 2, 8, True))
    observer, loads, driven = Observer(SETTINGS), RunningLoads(SETTINGS), Observer(SETTINGS)
    for event in sequence:
        apply(stores, event)
        inputs = stores.inputs()
        kept = observer.world(inputs)
        fresh = observe(inputs, SETTINGS)
        same_world(kept, fresh)
        same_world(driven.world(replace(inputs, changed=stores.changes())), fresh)  # only the changed keys read
        fresh_snap, fresh_warnings = deciding.snapshot(fresh, SETTINGS)
        with loads.snapshot(kept) as base:
            same_snapshot(base[0], fresh_snap)
            assert base[1] == fresh_warnings
            decided = deciding.decide(kept, SETTINGS, 1.7e9, None, base)  # assumes into the kept snapshot
            assert decided == deciding.decide(fresh, SETTINGS, 1.7e9)
        after, _ = deciding.snapshot(fresh, SETTINGS)
        same_snapshot(loads._snap, after)  # type: ignore[arg-type]  # the cycle's decisions rolled back


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
