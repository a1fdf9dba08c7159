"""Untouched racks stay whole: the core offers one only where Volcano's binpack would open one too (round 11).

A fragmented-cluster run found metronome 6.2 % behind volcano-topology with the same offsets policy:
its alternative racks, chosen for fewer expected collisions on their NICs, opened untouched racks,
and the 4-node gangs that came later had to span racks over 50 Gbps uplinks.
"""

from __future__ import annotations

import numpy as np

from tests.core.builders import empty, gang
from volcano_metronome.core import placement
from volcano_metronome.core.cycle import commit
from volcano_metronome.core.decision import Decision, decide
from volcano_metronome.core.model import Policy
from volcano_metronome.core.topology import leaf_spine

POLICY = Policy()


def racks_of(cands: tuple[placement.Candidate, ...], per_rack: int) -> list[int]:
    return [int(c.nodes[0]) // per_rack for c in cands]


def test_an_untouched_rack_is_offered_only_when_binpack_opens_one():
    topo = leaf_spine(3, 2, 100.0, 100.0)
    free = np.array([4, 8, 8, 8, 6, 8])  # rack 0 and rack 2 are partly used, rack 1 untouched
    busy = np.array([True, False, False, False, True, False])
    g = gang("g", 3, 4)  # three members of 4 GPUs: two nodes of a rack
    free_racks = racks_of(placement.candidates(topo, free, np.zeros(len(topo.links)), g, 8).primary, 2)
    guarded = racks_of(placement.candidates(topo, free, np.zeros(len(topo.links)), g, 8, busy=busy).primary, 2)
    assert 1 in free_racks and 1 not in guarded and guarded[0] == free_racks[0] == 0
    # Every rack untouched: binpack opens one, and the others stay on offer.
    opened = placement.candidates(topo, np.full(6, 8), np.zeros(len(topo.links)), g, 8, busy=np.zeros(6, bool))
    assert sorted(set(racks_of(opened.primary, 2))) == [0, 1, 2]


def test_a_gang_shares_a_used_rack_instead_of_opening_an_untouched_one():
    # Racks of three 8-GPU nodes. a (2 x 5 GPUs, 120 ms bursts at 100 Gbps in 200 ms: no two interleave) runs on
    # rack 0's first two nodes; b (3 x 3
    # GPUs) still fits in rack 0, beside a on at least one NIC; rack 1 is untouched and would hold it clean.
    # Before, the core took rack 1 (strictly fewer expected collisions); now rack 0, as binpack does, and
    # rack 1 stays whole for a gang that needs it.
    snap = empty(leaf_spine(2, 3, 100.0, 100.0), 8)
    a = gang("a", 2, 5, period=200.0, start=60.0, length=120.0)
    snap.assume(a, np.array([0, 1]), np.array([1, 1]), 0, locked=False)
    b = gang("b", 3, 3, period=200.0, start=60.0, length=120.0)
    d = decide(snap, b, POLICY)
    assert isinstance(d, Decision) and all(n.startswith("rack-0-") for n in d.nodes), d.nodes
    commit(snap, b, d)
    assert snap.gangs_on[3:].tolist() == [0, 0, 0] and snap.gangs_on[:2].min() >= 1
    snap.forget("a")
    assert snap.gangs_on[:3].sum() == len(d.nodes)
