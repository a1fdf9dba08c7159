"""Small builders for core tests."""

from __future__ import annotations

import numpy as np

from volcano_metronome.core.grid import SlotGrid
from volcano_metronome.core.model import Gang
from volcano_metronome.core.profile import Profile, Window
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.core.topology import Topology, duplex, leaf_spine


def gang(uid, size=2, gpus=1, period=200.0, start=100.0, length=100.0, gbps=100.0, priority=0, created=0.0,
         jitter=0.0):
    return Gang(uid, uid, size, gpus, Profile(period, (Window(start, length, gbps),), jitter), priority, created)


def empty(topology: Topology, gpus_per_node: int = 8, grid: SlotGrid | None = None) -> Snapshot:
    return Snapshot(topology, grid or SlotGrid(), np.full(len(topology.nodes), gpus_per_node))


def two_nodes(nic_gbps: float = 100.0) -> Topology:
    return leaf_spine(1, 2, nic_gbps)


def ring(n: int, nic_gbps: float = 100.0) -> Topology:
    """n nodes, each with its own NIC, no racks: gangs on node pairs (i, i+1) share NICs in a cycle."""
    nodes = tuple(f"n{i}" for i in range(n))
    links = tuple(link for i in range(n) for link in duplex(f"nic:n{i}", nic_gbps, [f"n{i}"], 0))
    return Topology(nodes, links)
