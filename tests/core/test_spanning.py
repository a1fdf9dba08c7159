"""Spanning candidates sorted over the nodes with room alone equal those sorted over every node."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings, strategies as st

from tests.core.builders import gang
from volcano_metronome.core import placement
from volcano_metronome.core.topology import leaf_spine


def spanning_over_every_node(topology, room, free, load, link_mean, make):
    """The orders of ``placement._spanning`` built over all nodes, then cut to the nodes with room."""
    nodes = np.arange(len(room))
    rack = topology.domain_of(1)
    rack_room = np.bincount(rack, weights=room)
    roomiest = np.empty(len(rack_room), dtype=np.int64)
    roomiest[np.lexsort((np.arange(len(rack_room)), -rack_room))] = np.arange(len(rack_room))
    orders = [np.lexsort((nodes, free, roomiest[rack]))]
    uplink = placement.domain_load(topology, link_mean, 1)
    for keys in ((uplink, -rack_room), (-rack_room, uplink)):
        rank_of = np.empty(len(rack_room), dtype=np.int64)
        rank_of[np.lexsort((np.arange(len(rack_room)),) + keys)] = np.arange(len(rack_room))
        orders.append(np.lexsort((nodes, load, -room, rank_of[rack])))
    orders.append(np.lexsort((nodes, -room, load)))
    out = []
    for order in orders:
        cand = make(order[room[order] > 0], 0)
        if not placement._same_as_any(cand, out):
            out.append(cand)
    return out


@given(st.integers(2, 6), st.integers(1, 5), st.data())
@settings(max_examples=200, deadline=None)
def test_spanning_candidates_equal_those_sorted_over_every_node(racks, per_rack, data):
    topology = leaf_spine(racks, per_rack, 100.0, 200.0)
    n, links = len(topology.nodes), len(topology.links)
    free = np.array(data.draw(st.lists(st.sampled_from([0, 0, 1, 2, 4, 8]), min_size=n, max_size=n)))
    link_mean = np.array(data.draw(st.lists(st.integers(0, 3), min_size=links, max_size=links)), float) * 1000
    g = gang("x", data.draw(st.integers(1, 10)), data.draw(st.sampled_from([1, 2, 4])))
    room = placement.member_room(free, g)
    assume(room.sum() >= g.size)
    load = placement.node_load(topology, link_mean)
    racks_of = topology.domain_of(1)

    def make(order, rank):
        return placement._fill(order, room, g.size, racks_of, rank)

    got = placement._spanning(topology, room, free, load, link_mean, make)
    want = spanning_over_every_node(topology, room, free, load, link_mean, make)
    assert [(c.nodes.tolist(), c.members.tolist()) for c in got] == [(c.nodes.tolist(), c.members.tolist())
                                                                     for c in want]


def flat_over_every_node(room, free, load, make):
    """A flat cluster's orders built over all nodes, then cut to those with room: the least-loaded NICs,
    roomiest first, then Volcano's binpack (most allocated first)."""
    nodes = np.arange(len(room))
    out = []
    for order in (np.lexsort((nodes, -room, load)), np.lexsort((nodes, free))):
        cand = make(order[room[order] > 0], 0)
        if not placement._same_as_any(cand, out):
            out.append(cand)
    return out


@given(st.integers(2, 12), st.data())
@settings(max_examples=200, deadline=None)
def test_a_flat_cluster_offers_volcanos_binpack_after_the_least_loaded_nics(nodes, data):
    topology = leaf_spine(1, nodes, 100.0)
    assert topology.tiers == 1
    free = np.array(data.draw(st.lists(st.sampled_from([0, 0, 1, 2, 4, 8]), min_size=nodes, max_size=nodes)))
    link_mean = np.array(data.draw(st.lists(st.integers(0, 3), min_size=len(topology.links),
                                            max_size=len(topology.links))), float) * 1000
    g = gang("x", data.draw(st.integers(1, 10)), data.draw(st.sampled_from([1, 2, 4])))
    room = placement.member_room(free, g)
    assume(room.sum() >= g.size)
    load = placement.node_load(topology, link_mean)
    racks_of = np.zeros(nodes, dtype=np.int64)

    def make(order, rank):
        return placement._fill(order, room, g.size, racks_of, rank)

    got = placement._spanning(topology, room, free, load, link_mean, make)
    want = flat_over_every_node(room, free, load, make)
    assert [(c.nodes.tolist(), c.members.tolist()) for c in got] == [(c.nodes.tolist(), c.members.tolist())
                                                                     for c in want]
