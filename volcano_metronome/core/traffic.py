"""The traffic model: which links a gang loads when placed on a set of nodes, and how much.

Ring all-reduce. The workers form one ring, ordered so that the workers of a node, then of a rack,
then of a pod, are consecutive. Workers on the same node talk over the node's own fabric (NVLink),
so a ring edge crosses a link only where it leaves or enters the set of nodes behind that link.
Ordered this way, the ring crosses every cut that splits the gang exactly once in each direction.
Hence: a link is loaded, in both of its directions, at the per-worker window rate, exactly when the
gang has nodes both behind it and outside it. A gang on one node loads nothing; a gang inside one
rack loads its nodes' NICs; a gang across racks also loads the uplinks and downlinks of every rack
it touches.

This module is the one place that knows the model: replace :func:`loaded_links` to model another
collective (all-to-all, tree, hierarchical) and the rest of the core follows.
"""

from __future__ import annotations

import numpy as np

from volcano_metronome.core.topology import Topology


def loaded_links(topology: Topology, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Links loaded by a gang on ``nodes`` (distinct node indices) and the rate multiplier of each.

    The multiplier scales the per-worker window rate; under ring all-reduce it is 1 everywhere.
    """
    nodes = np.unique(nodes)
    if len(nodes) < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    indptr, ids = topology.incidence
    starts, ends = indptr[nodes], indptr[nodes + 1]
    touched = np.concatenate([ids[s:e] for s, e in zip(starts, ends)])
    links, inside = np.unique(touched, return_counts=True)
    split = inside < len(nodes)
    links = links[split]
    return links, np.ones(len(links), dtype=np.int64)
