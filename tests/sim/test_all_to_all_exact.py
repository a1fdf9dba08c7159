"""The core plans all-to-all loads as the simulator's network carries them (issue 12): no phantom contention."""

from __future__ import annotations

import numpy as np

from tests.core.builders import empty
from volcano_metronome.core.decision import score_offsets
from volcano_metronome.core.grid import lay_out
from volcano_metronome.core.model import Gang, Policy
from volcano_metronome.core.profile import Profile, Window
from volcano_metronome.core.topology import leaf_spine
from volcano_metronome.core.traffic import link_shares, loaded_links, scaled
from volcano_metronome.sim.fluid import max_min

WORKER_GBPS = 960.0  # an MoE worker's all-to-all on moe-racks: 0.6 x 8 x 200 Gbps
A, B = np.array([0, 1, 4, 5, 6, 7]), np.array([2, 3, 8, 9, 10, 11])  # 6-node gangs sharing rack 0, 2 + 2


def moe(uid: str) -> Gang:
    return Gang(uid, uid, 6, 8, Profile(200.0, (Window(100.0, 100.0, WORKER_GBPS),), 0.0, "all-to-all"), 0, 0.0)


def test_a_placement_the_simulator_carries_uncontended_is_not_overflowing_in_the_core():
    # moe-racks' geometry: racks of 4 nodes behind 3,200 Gbps uplinks. Each gang puts
    # 2 x 4 / 5 = 1.6 x 960 = 1,536 Gbps on rack 0's uplink: 3,072 together, under 3,200
    # (a multiplier rounded up to 2 would make it 3,840).
    topo = leaf_spine(3, 4, 1000.0, 3200.0)
    routes = [link_shares(topo, nodes, None, "all-to-all") for nodes in (A, B)]
    incidence = np.zeros((2, len(topo.links)))
    for row, (links, weights) in zip(incidence, routes):
        row[links] = weights
    rates = max_min(np.full(2, WORKER_GBPS), incidence, topo.capacity_mbps / 1000.0)
    np.testing.assert_allclose(rates, WORKER_GBPS)  # both bursts at once: each at its full rate

    snap = empty(topo)
    snap.assume(moe("a"), A, np.ones(6, dtype=np.int64), 0)
    gang = moe("b")
    pattern = lay_out(gang.profile, snap.grid)
    scores = score_offsets(snap, gang, pattern, B, Policy(), np.ones(6, dtype=np.int64))
    assert scores.fits.all() and (scores.overflow == 0).all() and (scores.cost == 0).all()
    links, mult = loaded_links(topo, B, None, "all-to-all")
    assert not len(snap.contended(links, scaled(mult, int(pattern.rates.max()))))

    snap.assume(gang, B, np.ones(6, dtype=np.int64), 0)  # windows fully overlapping
    assert snap.clean("a") and snap.clean("b")
    uplink = topo.link_index["rack:rack-0:up"]
    assert int(snap.load[uplink].max()) == 3_072_000  # Mbps: the modelled load, to the Mbps
    assert not len(snap.contended(np.arange(len(topo.links))))
