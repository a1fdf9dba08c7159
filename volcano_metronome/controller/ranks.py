"""The order of a claim's nodes for a ring; the rank rules themselves live in ``shapes.ranks``. PURE."""

from __future__ import annotations

from typing import Any, Sequence

from volcano_metronome.core.topology import Topology
from volcano_metronome.shapes.ranks import (COMPLETION_INDEX, JOBSET_GLOBAL_INDEX, JOBSET_JOB_INDEX,
                                            JOBSET_REPLICATED_JOB, KUBEFLOW_JOB_ROLE, KUBEFLOW_REPLICA_INDEX,
                                            KUBEFLOW_REPLICA_TYPE, SOURCES, VOLCANO_TASK_INDEX, VOLCANO_TASK_SPEC, Key,
                                            natural, rank_keys, rank_source, ring_order, volcano_role)

__all__ = ["COMPLETION_INDEX", "JOBSET_GLOBAL_INDEX", "JOBSET_JOB_INDEX", "JOBSET_REPLICATED_JOB", "KUBEFLOW_JOB_ROLE",
           "KUBEFLOW_REPLICA_INDEX", "KUBEFLOW_REPLICA_TYPE", "SOURCES", "VOLCANO_TASK_INDEX", "VOLCANO_TASK_SPEC", "Key",
           "natural", "rank_keys", "rank_source", "ring_order", "volcano_role", "ring_nodes"]


def ring_nodes(topology: Topology, nodes: Sequence[str], members: Sequence[int]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """A decision's nodes reordered so the nodes of each domain (rack, then zone, ...) are consecutive.

    Domains keep the order in which the decision first names them, nodes within a domain go in natural
    order; a ring through the nodes in this order crosses each rack boundary as rarely as it can.
    Nodes the topology does not know keep their place at the end.
    """
    index = topology.node_index
    known = [(n, m) for n, m in zip(nodes, members) if n in index]
    unknown = [(n, m) for n, m in zip(nodes, members) if n not in index]
    firsts: list[dict[int, int]] = []
    for tier in range(topology.tiers - 1, 0, -1):
        domain = topology.domain_of(tier)
        first: dict[int, int] = {}
        for pos, (n, _) in enumerate(known):
            first.setdefault(int(domain[index[n]]), pos)
        firsts.append(first)
    tiers = list(range(topology.tiers - 1, 0, -1))

    def key(item: tuple[str, int]) -> tuple[Any, ...]:
        n = item[0]
        return (*(f[int(topology.domain_of(t)[index[n]])] for f, t in zip(firsts, tiers)), natural(n), n)

    ordered = sorted(known, key=key) + unknown
    return tuple(n for n, _ in ordered), tuple(m for _, m in ordered)
