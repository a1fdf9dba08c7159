"""``python -m volcano_metronome.bench cycle --nodes N --running R --pending P --json``.

One controller cycle as the controller runs it, without the API server: a batch of informer events
(``--churn`` running gangs finish and are placed again: their pods and claim deleted and re-added;
``--node-updates`` node status updates) lands in the stores and reaches the controller through the
informers' callbacks, then :meth:`Controller.think` observes, decides the P pending gangs (PodGroups
of ``--gang`` gated pods of 8 GPUs each) and plans the writes. Nothing is written, so the same P
gangs are pending in every cycle. The cluster: leaf-spine, 8 nodes of 8 GPUs per rack, 100 Gbps
NICs, rack uplinks 2:1 oversubscribed; R running gangs of 2 to 8 pods of 1 or 2 GPUs with the
catalog's profiles at random offsets, mostly inside one rack, a tenth across two.

Reported: p50/p99 of the whole cycle (events included) and of each decision, over ``--repeat``
cycles after one warm-up cycle, the first cycle (the informers' initial sync) and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

from volcano_metronome import api
from volcano_metronome.catalog import builtin
from volcano_metronome.controller import objects
from volcano_metronome.controller.loop import BOUND_PODS, Controller
from volcano_metronome.shapes import JSON
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core.decision import Decision
from volcano_metronome.shapes.profiles import profile_to_spec
from volcano_metronome.shapes.slots import number_text

NODES_PER_RACK = 8
GPUS_PER_NODE = 8
NIC_GBPS = 100.0
GPU = "nvidia.com/gpu"
Key = tuple[str | None, str]


class Store:
    """An informer's store fed by hand: ``put``/``delete`` call ``on_change`` as the informer does."""

    def __init__(self) -> None:
        self.objs: dict[Key, JSON] = {}
        self.on_change: Callable[[str, JSON], None] | None = None

    def get(self, namespace: str | None, name: str) -> JSON | None:
        return self.objs.get((namespace or None, name))

    def items(self) -> list[JSON]:
        return list(self.objs.values())

    def put(self, obj: JSON) -> None:
        key = (objects.namespace(obj) or None, objects.name(obj))
        kind = "MODIFIED" if key in self.objs else "ADDED"
        self.objs[key] = obj
        if self.on_change is not None:
            self.on_change(kind, obj)

    def delete(self, obj: JSON) -> None:
        gone = self.objs.pop((objects.namespace(obj) or None, objects.name(obj)), None)
        if gone is not None and self.on_change is not None:
            self.on_change("DELETED", gone)


class NoApi:
    """The controller's API client in this benchmark: never called (the cycle stops at its plan)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the cycle benchmark writes nothing, but {name} was called")


class Cluster:
    """The objects of the benchmark's cluster, and the stores that hold them."""

    def __init__(self, nodes: int, running: int, pending: int, gang: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.rv = 1000
        self.stores = {name: Store() for name in ("nodes", "pods", BOUND_PODS, "podgroups", api.CLAIMS)}
        catalog = builtin()
        self.profiles = [catalog.get(name).profile(NIC_GBPS) for name in catalog.names()]
        racks = max(1, nodes // NODES_PER_RACK)
        self.names = [f"n{r}-{i}" for r in range(racks) for i in range(NODES_PER_RACK)]
        free = np.full(len(self.names), GPUS_PER_NODE)
        for r, name in enumerate(self.names):
            self.put("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "metronome.dev/rack": f"r{r // NODES_PER_RACK}"}},
                "status": self.node_status()})
        kept = np.zeros(len(self.names), dtype=bool)
        kept[self.rng.choice(len(self.names), size=min(len(self.names), 2 * pending * gang), replace=False)] = True
        self.running: list[list[JSON]] = []  # per running gang: its PodGroup, claim and pods
        for i in range(running * 3):
            if len(self.running) == running:
                break
            placed = self.place(i, racks, free, kept)
            if placed is not None:
                self.running.append(placed)
                for obj in placed:
                    self.add(obj)
        for g in range(pending):
            self.add(self.podgroup(f"p{g}", gang, None))
            for m in range(gang):
                self.add(self.pod(f"p{g}", m, gang, GPUS_PER_NODE, None, None))

    def node_status(self) -> JSON:
        res = {GPU: str(GPUS_PER_NODE), "cpu": "64", "memory": "512Gi", "pods": "110"}
        return {"allocatable": res, "capacity": res, "conditions": [{"type": "Ready", "status": "True"}]}

    def place(self, i: int, racks: int, free: np.ndarray, kept: np.ndarray) -> list[JSON] | None:
        members = int(self.rng.choice([2, 2, 4, 4, 8]))
        gpus = int(self.rng.choice([1, 1, 2]))
        home = int(self.rng.integers(racks))
        pool = np.arange(home * NODES_PER_RACK, (home + 1) * NODES_PER_RACK)
        if racks > 1 and self.rng.random() < 0.1:
            other = (home + 1 + int(self.rng.integers(racks - 1))) % racks
            pool = np.concatenate([pool, np.arange(other * NODES_PER_RACK, (other + 1) * NODES_PER_RACK)])
        pool = pool[(free[pool] >= gpus) & ~kept[pool]]
        if len(pool) < min(members, 2):
            return None
        chosen = np.sort(self.rng.choice(pool, size=min(members, len(pool)), replace=False))
        per_node = np.full(len(chosen), members // len(chosen))
        per_node[: members - int(per_node.sum())] += 1
        if (free[chosen] < per_node * gpus).any():
            return None
        free[chosen] -= per_node * gpus
        profile = self.profiles[int(self.rng.integers(len(self.profiles)))]
        offset = float(self.rng.integers(int(profile.period_ms)))
        name = f"r{i}"
        claim = {"apiVersion": api.API_VERSION, "kind": "STBandwidthClaim",
                 "metadata": {"name": f"podgroup-{name}", "namespace": "bench", "generation": 1,
                              "labels": {api.MANAGED_LABEL: "true"}},
                 "spec": {"gangRef": {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "name": name},
                          "priority": 0, "profile": profile_to_spec(profile)},
                 "status": {"nodes": [self.names[n] for n in chosen], "members": [int(m) for m in per_node],
                            "offsetMs": offset, "periodMs": profile.period_ms, "epoch": 0, "locked": True,
                            "conditions": [{"type": "Placed", "status": "True", "reason": "Placed", "message": "",
                                            "lastTransitionTime": "2025-01-01T00:00:00Z"}]}}
        text = json.dumps(profile.to_dict(), separators=(",", ":"))
        out = [self.podgroup(name, members, text), claim]
        m = 0
        for n, count in zip(chosen, per_node):
            for _ in range(int(count)):
                out.append(self.pod(name, m, members, gpus, self.names[n], (offset, profile.period_ms)))
                m += 1
        return out

    def podgroup(self, name: str, members: int, profile: str | None) -> JSON:
        text = profile or json.dumps(self.profiles[len(name) % len(self.profiles)].to_dict(), separators=(",", ":"))
        return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "bench", "annotations": {
                    api.PROFILE: text, api.PROFILE_SOURCE: "annotation", api.GANG_SIZE: str(members)}},
                "spec": {"minMember": members, "queue": "default"}}

    def pod(self, gang: str, m: int, members: int, gpus: int, node: str | None,
            timing: tuple[float, float] | None) -> JSON:
        ann = {api.GANG_KIND: "PodGroup", api.GANG_NAME: gang, api.VOLCANO_GROUP_NAME: gang,
               api.GANG_SIZE: str(members)}
        if timing is not None:
            ann.update({api.OFFSET_MS: number_text(timing[0]), api.PERIOD_MS: number_text(timing[1]),
                        api.EPOCH: "0"})
        spec: JSON = {"containers": [{"name": "train", "image": "registry.k8s.io/pause:3.10", "resources": {
            "requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}
        if node is None:
            spec["schedulingGates"] = [{"name": api.SCHEDULING_GATE}]
        else:
            spec["nodeName"] = node
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{gang}-{m}", "namespace": "bench", "labels": {api.MANAGED_LABEL: "true"},
                             "annotations": ann, "creationTimestamp": "2025-01-01T00:00:00Z"},
                "spec": spec, "status": {"phase": "Running" if node else "Pending"}}

    def stamp(self, obj: JSON) -> JSON:
        self.rv += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        obj["metadata"].setdefault("uid", f"uid-{obj['kind']}-{obj['metadata']['name']}")
        return obj

    def put(self, store: str, obj: JSON) -> None:
        self.stores[store].put(self.stamp(obj))

    def add(self, obj: JSON) -> None:
        kind = obj["kind"]
        if kind == "Pod":
            obj = self.stamp(obj)
            self.stores["pods"].put(obj)
            if (obj.get("spec") or {}).get("nodeName"):
                self.stores[BOUND_PODS].put(obj)
        elif kind == "PodGroup":
            self.put("podgroups", obj)
        else:
            self.put(api.CLAIMS, obj)

    def remove(self, obj: JSON) -> None:
        for store in self.stores.values():
            current = store.get(objects.namespace(obj) or None, objects.name(obj))
            if current is not None and current.get("kind") == obj["kind"]:
                store.delete(current)

    def events(self, churn: int, node_updates: int) -> int:
        """Land one batch of events in the stores; returns how many."""
        count = 0
        for i in self.rng.choice(len(self.running), size=min(churn, len(self.running)), replace=False):
            gang = self.running[int(i)]
            for obj in gang[1:]:  # its claim and pods go, then come back (a gang finished, another placed)
                self.remove(obj)
                count += 1 + (obj["kind"] == "Pod")
            for obj in gang[1:]:
                self.add(obj)
                count += 1 + (obj["kind"] == "Pod")
        for n in self.rng.choice(len(self.names), size=min(node_updates, len(self.names)), replace=False):
            node = self.stores["nodes"].get(None, self.names[int(n)])
            assert node is not None
            self.put("nodes", {**node, "status": self.node_status()})
            count += 1
        return count


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON line."""
    parser = argparse.ArgumentParser(prog="python -m volcano_metronome.bench cycle", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--running", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=10)
    parser.add_argument("--gang", type=int, default=4, help="pods of each pending gang, 8 GPUs each")
    parser.add_argument("--churn", type=int, default=10, help="running gangs deleted and re-added per cycle")
    parser.add_argument("--node-updates", type=int, default=20, help="node status updates per cycle")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--decision-clock", choices=("wall", "cpu"), default="wall",
                        help="time each decision by the wall clock or by the process's CPU time (a shared machine)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    cluster = Cluster(args.nodes, args.running, args.pending, args.gang, args.seed)
    setup_s = time.perf_counter() - t0
    controller = Controller(NoApi(), cluster.stores, Settings(events=True), identity="bench", clock=lambda: 1.7e9,
                            monotonic=time.process_time if args.decision_clock == "cpu" else time.monotonic,
                            freeze_heap=True)  # as serve() runs it
    for name, store in cluster.stores.items():
        store.on_change = controller.watcher(name)
    t0 = time.perf_counter()
    controller.think()  # the first cycle after the informers' initial sync
    first_s = time.perf_counter() - t0
    cycles: list[float] = []
    cpu: list[float] = []  # the process's CPU time per cycle: steadier than wall time on a shared machine
    decisions: list[float] = []
    placed = writes = events = 0
    for _ in range(args.repeat + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        events = cluster.events(args.churn, args.node_updates)
        thought = controller.think()
        cycles.append((time.perf_counter() - t0) * 1000.0)
        cpu.append((time.process_time() - c0) * 1000.0)
        decisions.extend(s * 1000.0 for s in thought.decided.seconds.values())
        placed = sum(isinstance(r, Decision) for r in thought.decided.results.values())
        writes = thought.plan.writes
    cycles, cpu = cycles[1:], cpu[1:]  # the first repeated cycle warms caches the steady state keeps warm
    doc = {
        "benchmark": "cycle", "nodes": len(cluster.names), "running": len(cluster.running), "pending": args.pending,
        "gang": args.gang, "events_per_cycle": events, "decision_clock": args.decision_clock,
        "p50_ms": round(statistics.median(cycles), 1), "p99_ms": round(percentile(cycles, 0.99), 1),
        "cpu_p50_ms": round(statistics.median(cpu), 1), "cpu_p99_ms": round(percentile(cpu, 0.99), 1),
        "decision_p50_ms": round(statistics.median(decisions), 2) if decisions else None,
        "decision_p99_ms": round(percentile(decisions, 0.99), 2) if decisions else None,
        "first_cycle_ms": round(first_s * 1000.0, 1), "peak_rss_mb": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "placed_per_cycle": placed, "writes_planned": writes, "repeat": args.repeat,
        "setup_s": round(setup_s, 1), "load_average": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(doc))
    if not args.json:
        print(f"cycle p50 {doc['p50_ms']} ms, p99 {doc['p99_ms']} ms; decision p99 {doc['decision_p99_ms']} ms "
              f"({doc['nodes']} nodes, {doc['running']} running, {args.pending} pending)", file=sys.stderr)
    return 0
