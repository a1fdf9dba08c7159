"""Topologies and the traffic model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.core import reference
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.topology import Link, Topology, duplex, leaf_spine
from volcano_metronome.core.traffic import link_shares, loaded_links


def names(topology, links):
    return sorted(topology.links[i].name for i in links)


def test_leaf_spine_has_a_duplex_nic_per_node_and_a_duplex_uplink_per_rack():
    t = leaf_spine(3, 4, 100.0, 200.0)
    assert len(t.nodes) == 12
    assert len(t.links) == 2 * 12 + 2 * 3
    assert t.tiers == 2
    assert list(t.domain_of(1)) == [0] * 4 + [1] * 4 + [2] * 4
    assert t.capacity_mbps[t.link_index["rack:rack-1:up"]] == 200_000


def test_one_rack_needs_no_uplink_but_several_do():
    assert leaf_spine(1, 2, 100.0).tiers == 1
    with pytest.raises(InvalidInput, match="topology.uplink_gbps"):
        leaf_spine(2, 2, 100.0)


def test_a_gang_on_one_node_loads_nothing():
    t = leaf_spine(2, 2, 100.0, 100.0)
    links, _ = loaded_links(t, np.array([0]))
    assert len(links) == 0


def test_a_gang_inside_a_rack_loads_its_nics_only():
    t = leaf_spine(2, 3, 100.0, 100.0)
    links, mult = loaded_links(t, t.nodes_of(["rack-0-node-0", "rack-0-node-2"]))
    assert names(t, links) == sorted(["nic:rack-0-node-0:up", "nic:rack-0-node-0:down",
                                      "nic:rack-0-node-2:up", "nic:rack-0-node-2:down"])
    assert (mult == 1).all()


def test_a_gang_across_racks_also_loads_every_rack_it_touches():
    t = leaf_spine(3, 2, 100.0, 100.0)
    links, _ = loaded_links(t, t.nodes_of(["rack-0-node-0", "rack-2-node-1"]))
    assert "rack:rack-0:up" in names(t, links) and "rack:rack-2:down" in names(t, links)
    assert not any(n.startswith("rack:rack-1") for n in names(t, links))


@given(st.integers(1, 3), st.integers(1, 4), st.data())
def test_loaded_links_equals_the_set_definition(racks, per_rack, data):
    t = leaf_spine(racks, per_rack, 100.0, 100.0 if racks > 1 else None)
    nodes = data.draw(st.lists(st.integers(0, len(t.nodes) - 1), min_size=1, max_size=len(t.nodes), unique=True))
    links, _ = loaded_links(t, np.array(nodes))
    assert list(links) == reference.loaded_links(t, nodes)


def test_generic_topologies_are_validated():
    with pytest.raises(InvalidInput, match="unique link name"):
        Topology(("a", "b"), duplex("x", 1.0, ["a"], 0) + duplex("x", 1.0, ["b"], 0))
    with pytest.raises(InvalidInput, match="a node of the topology"):
        Topology(("a",), (Link("l", 1.0, frozenset({"z"}), 0),))
    with pytest.raises(InvalidInput, match="equal or disjoint"):
        Topology(("a", "b", "c"), duplex("r1", 1.0, ["a", "b"], 1) + duplex("r2", 1.0, ["b", "c"], 1))
    with pytest.raises(InvalidInput, match="positive"):
        Topology(("a",), (Link("l", 0.0, frozenset({"a"}), 0),))


@given(st.integers(1, 3), st.integers(1, 4), st.sampled_from(["ring", "all-to-all"]), st.data())
def test_link_shares_equal_the_pairwise_definition(racks, per_rack, collective, data):
    t = leaf_spine(racks, per_rack, 100.0, 100.0 if racks > 1 else None)
    nodes = data.draw(st.lists(st.integers(0, len(t.nodes) - 1), min_size=1, max_size=len(t.nodes), unique=True))
    members = data.draw(st.lists(st.integers(1, 4), min_size=len(nodes), max_size=len(nodes)))
    links, shares = link_shares(t, np.array(nodes), np.array(members), collective)
    expected = reference.link_shares(t, nodes, members, collective)
    assert list(links) == sorted(expected)
    assert shares == pytest.approx([expected[i] for i in links])
    planned, mult = loaded_links(t, np.array(nodes), np.array(members), collective)
    assert list(planned) == list(links)
    # The core plans with the modelled multiplier itself, not a rounded one.
    np.testing.assert_array_equal(mult, shares)


def test_all_to_all_loads_a_rack_uplink_more_than_a_ring():
    t = leaf_spine(2, 8, 100.0, 400.0)
    nodes = np.arange(16)  # 8 one-worker nodes in each rack
    uplink = t.link_index["rack:rack-0:up"]
    nic = t.link_index["nic:rack-0-node-0:up"]
    links, ring = link_shares(t, nodes, None, "ring")
    assert ring[list(links).index(uplink)] == 1.0
    links, a2a = link_shares(t, nodes, None, "all-to-all")
    assert a2a[list(links).index(uplink)] == pytest.approx(8 * 8 / 15)  # 64 pairs straddle it, each at r / 15
    assert a2a[list(links).index(nic)] == pytest.approx(1.0)  # one worker's NIC: its own rate, as in the ring
    assert loaded_links(t, nodes, None, "all-to-all")[1][list(links).index(uplink)] == pytest.approx(64 / 15)


def test_a_bad_collective_or_member_count_is_named():
    t = leaf_spine(1, 2, 100.0)
    with pytest.raises(InvalidInput, match="collective"):
        link_shares(t, np.array([0, 1]), None, "tree")
    with pytest.raises(InvalidInput, match="members"):
        link_shares(t, np.array([0, 1]), np.array([1]), "all-to-all")
