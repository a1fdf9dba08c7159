"""Round 7: more node sets of the same locality for the decision to rank by expected collisions.

In the domains Volcano's binpack picks, the same nodes are also offered with the least-loaded NICs
first; on a flat cluster (no rack tier), Volcano's binpack is offered after the least-loaded order.
Either is ranked after the order that was there before, so it is taken only where it is expected
to collide less.
"""

from __future__ import annotations

import numpy as np

from tests.core.builders import empty, gang
from volcano_metronome.core.decision import Decision, decide
from volcano_metronome.core.model import Policy
from volcano_metronome.core.topology import leaf_spine

POLICY = Policy()
#: 50 Gbps bursts every 170 ms: beside a line-rate gang of period 200 ms they collide at any phase of the
#: grid snap; beside a steady 40 Gbps one they never can.
B = dict(period=170.0, start=50.0, length=60.0, gbps=50.0)


def _steady(uid: str, size: int):
    return gang(uid, size, 4, period=200.0, start=5.0, length=190.0, gbps=40.0)


def _bursty(uid: str, gpus: int, duty_ms: float):
    return gang(uid, 2, gpus, period=200.0, start=100.0 - duty_ms / 2, length=duty_ms, gbps=100.0)


def test_on_a_flat_cluster_volcanos_binpack_is_taken_where_the_least_loaded_nics_would_collide():
    topology = leaf_spine(1, 5, 100.0)
    snap = empty(topology, 8)
    # a (steady) holds node 0 and half of nodes 1 and 2; c (line-rate bursts, mean 30 Gbps) crosses node 3's
    # NIC, whose other 7 GPUs are free; node 4 is full.
    snap.assume(_steady("a", 4), np.array([0, 1, 2]), np.array([2, 1, 1]), 0)
    snap.assume(_bursty("c", 1, 60.0), np.array([3, 4]), np.array([1, 1]), 0)
    snap.assume(gang("d", 1, 7), np.array([4]), np.array([1]), 0)
    # Least-loaded NICs first: node 3 (c) and node 1, colliding with c. Volcano's binpack: nodes 1 and 2.
    d = decide(snap, gang("b", 2, 4, **B), POLICY)
    assert isinstance(d, Decision)
    assert d.nodes == (topology.nodes[1], topology.nodes[2]) and d.expected_ms == 0.0 and not d.locked


def test_in_a_rack_the_least_loaded_nics_are_taken_where_the_binpack_would_collide():
    topology = leaf_spine(2, 5, 100.0, 1000.0)
    snap = empty(topology, 8)
    for i in range(5, 10):  # rack 1 is full (one-node gangs, no links): the gang stays in rack 0
        snap.assume(gang(f"f{i}", 1, 8), np.array([i]), np.array([1]), 0)
    # c (line-rate bursts, mean 50 Gbps) holds node 0 and half of node 1; a (steady, mean 38 Gbps) holds
    # node 4 and half of node 2; node 3 is empty.
    snap.assume(_bursty("c", 4, 100.0), np.array([0, 1]), np.array([2, 1]), 0)
    snap.assume(_steady("a", 3), np.array([2, 4]), np.array([1, 2]), 0)
    # Volcano's binpack: nodes 1, 2, 3 (colliding with c on node 1). Least-loaded NICs first: nodes 3 and 2.
    d = decide(snap, gang("b", 3, 4, **B), POLICY)
    assert isinstance(d, Decision)
    assert d.nodes == (topology.nodes[2], topology.nodes[3]) and d.members == (1, 2)
    assert d.expected_ms == 0.0 and not d.locked
