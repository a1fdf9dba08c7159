"""What a gang's profile becomes on a node set whose links are slower than its bursts (modelled).

Alone on its node set, no worker of a gang sends faster than its slowest link lets it: a link that
carries ``multiplier`` times the per-worker rate (``core.traffic``) caps that rate at
``capacity / multiplier``. A window faster than the cap moves its volume at the cap instead, so it
lasts longer and pushes the later windows and the period back; the simulator's fluid runs a gang
alone the same way (``sim.engine.Job.alone_s``). Planned at its nominal rate, such a gang overflows
its own links at every offset, so no offset is ever clean beside another gang and none is locked
(round 11 of docs/simulator-rounds.md: racks of two nodes with 4:1 uplinks, no lock in 45 decisions);
planned as it runs, its bursts interleave like any other's.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.model import Gang
from volcano_metronome.core.topology import Topology
from volcano_metronome.core.traffic import loaded_links


def bottleneck_mbps(topology: Topology, nodes: np.ndarray, members: np.ndarray | None, collective: str) -> float:
    """The fastest per-worker rate (whole Mbps) every link of the node set carries within its capacity."""
    links, multiplier = loaded_links(topology, nodes, members, collective)
    if not len(links):
        return math.inf
    # Floored, so that the capped rate times each multiplier, to the nearest Mbps (``scaled``), fits the link.
    return float(np.floor(topology.capacity_mbps[links] / multiplier).min())


def as_run(gang: Gang, topology: Topology, nodes: np.ndarray, members: np.ndarray | None,
           max_period_ms: float) -> Gang:
    """``gang`` with the profile it runs with alone on ``nodes`` (``members`` workers on each): its own, unless
    a link is slower than its bursts; then throttled to that link (kept as declared when the throttled
    period would be longer than ``max_period_ms``, which no grid could hold)."""
    cap = bottleneck_mbps(topology, nodes, members, gang.profile.collective)
    if cap >= round(gang.profile.peak_gbps * 1000.0) or cap < 1:
        return gang
    try:
        profile = gang.profile.throttled(cap / 1000.0)
    except InvalidInput:  # a throttled period past MAX_PERIOD_MS: no grid could hold it either
        return gang
    if profile.period_ms > max_period_ms:
        return gang
    return dataclasses.replace(gang, profile=profile)
