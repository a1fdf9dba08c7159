"""The traffic model: which links a gang loads when placed on a set of nodes, and how much.

Two collectives, chosen by the gang's profile (``Profile.collective``), both MODELLED:

*Ring all-reduce* (``ring``, the default). The workers form one ring, ordered so that the workers
of a node, then of a rack, then of a pod, are consecutive. Workers on the same node talk over the
node's own fabric (NVLink), so a ring edge crosses a link only where it leaves or enters the set of
nodes behind that link. Ordered this way, the ring crosses every cut that splits the gang exactly
once in each direction. Hence: a link is loaded, in both of its directions, at the per-worker window
rate, exactly when the gang has nodes both behind it and outside it (multiplier 1). A gang on one
node loads nothing; a gang inside one rack loads its nodes' NICs; a gang across racks also loads the
uplinks and downlinks of every rack it touches.

*All-to-all* (``all-to-all``: MoE expert dispatch and combine, DLRM embedding exchange). Each of the
gang's ``n`` workers sends an equal share of its volume to each of the ``n - 1`` others, and sends
its whole volume in the window at the per-worker rate ``r`` (its NIC line share). A link with ``k``
of the gang's workers behind it carries every pair that straddles it: ``k (n - k)`` pairs, each at
``r / (n - 1)``, so it is loaded at ``k (n - k) / (n - 1)`` times ``r`` in each direction (the cut
is symmetric). A single worker's NIC (k = 1) carries ``r`` as under the ring; a rack holding half of
a 16-worker gang carries ``64 / 15 = 4.3 r`` where the ring puts ``r``: that is how all-to-all loads
uplinks more than a ring.

The core plans with the exact multipliers, as the simulator's network carries them: its loads are
whole Mbps, so :func:`scaled` turns a per-worker rate into a link's load to the nearest Mbps (an
error under 1 Mbps per gang on links of tens of Gbps). Rounding the multiplier itself up instead
(1.6 -> 2, 2.29 -> 3) made the core see overflow where the model has none: two 6-node gangs
sharing a rack 2 + 2 put 3,072 Gbps on a 3,200 Gbps uplink, which it counted as 3,840.
"""

from __future__ import annotations

import numpy as np

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import COLLECTIVES, RING
from volcano_metronome.core.topology import Topology


def link_shares(topology: Topology, nodes: np.ndarray, members: np.ndarray | None = None,
                collective: str = RING) -> tuple[np.ndarray, np.ndarray]:
    """Links loaded by a gang with ``members[i]`` workers on ``nodes[i]`` and the exact rate multiplier of each.

    ``members`` defaults to one worker per node; the ring ignores it.
    """
    nodes = np.asarray(nodes, dtype=np.int64)
    counts = np.ones(len(nodes), dtype=np.int64) if members is None else np.asarray(members, dtype=np.int64)
    if collective not in COLLECTIVES:
        raise InvalidInput("collective", collective, f"one of {', '.join(COLLECTIVES)}")
    if len(counts) != len(nodes):
        raise InvalidInput("members", len(counts), f"one worker count per node ({len(nodes)} nodes)")
    unique, where = np.unique(nodes, return_inverse=True)
    if len(unique) < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    per_node = np.bincount(where, weights=counts, minlength=len(unique))
    indptr, ids = topology.incidence
    starts, ends = indptr[unique], indptr[unique + 1]
    lengths = ends - starts
    touched = np.concatenate([ids[s:e] for s, e in zip(starts, ends)])
    links, inverse, inside = np.unique(touched, return_inverse=True, return_counts=True)
    split = inside < len(unique)
    if collective == RING:
        return links[split], np.ones(int(split.sum()))
    behind = np.bincount(inverse, weights=np.repeat(per_node, lengths), minlength=len(links))
    size = float(per_node.sum())
    return links[split], behind[split] * (size - behind[split]) / (size - 1.0)


#: How many node sets :func:`loaded_links` remembers per topology (a cycle scores, locks and assumes the same ones).
REMEMBERED = 4096


def loaded_links(topology: Topology, nodes: np.ndarray, members: np.ndarray | None = None,
                 collective: str = RING) -> tuple[np.ndarray, np.ndarray]:
    """Links loaded by a gang on ``nodes`` and the exact rate multiplier of each (1.0 everywhere under a ring).

    Remembered per topology: the arrays returned are shared, hence read-only.
    """
    nodes = np.asarray(nodes, dtype=np.int64)
    counts = None if members is None else np.asarray(members, dtype=np.int64)
    key = (nodes.tobytes(), None if counts is None else counts.tobytes(), collective)
    memo = topology.shares_memo
    hit = memo.get(key)
    if hit is None:
        links, mult = link_shares(topology, nodes, counts, collective)
        links.flags.writeable = mult.flags.writeable = False
        if len(memo) >= REMEMBERED:
            memo.clear()
        hit = memo[key] = (links, mult)
    return hit


def scaled(multiplier: np.ndarray | float, rate: np.ndarray | int) -> np.ndarray:
    """The whole Mbps a link carries for a per-worker ``rate`` at ``multiplier``: the product to the nearest Mbps.

    Every load the core adds or compares goes through here, so a gang's load on a link is the same
    integer in the snapshot, the offset kernels and the contention test.
    """
    return np.rint(np.multiply(multiplier, rate)).astype(np.int64)
