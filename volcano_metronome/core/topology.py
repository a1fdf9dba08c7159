"""Network topology: nodes, directed links with capacities, and which nodes sit behind each link.

A link is described by the set of nodes *behind* it: a NIC has its one node behind it, a rack
uplink has the rack's nodes, a spine uplink a pod's. This one description serves leaf-spine
clusters, STBandwidthCapacity objects and Volcano HyperNode tiers alike, and it is all the traffic
model needs (``core.traffic``). The link sets of one tier partition the nodes they cover into
*domains* (racks at tier 1); placement uses domains for locality.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Sequence

import numpy as np

from volcano_metronome.core.errors import InvalidInput

UP = "up"
DOWN = "down"


@dataclass(frozen=True)
class Link:
    """A directed link: ``up`` carries traffic out of ``nodes``, ``down`` into them."""

    name: str
    capacity_gbps: float
    nodes: frozenset[str]
    tier: int
    direction: str = UP


@dataclass(frozen=True, eq=False)
class Topology:
    """Nodes and links, with index structures for fast incidence queries (built once, lazily)."""

    nodes: tuple[str, ...]
    links: tuple[Link, ...]

    def __post_init__(self) -> None:
        if len(set(self.nodes)) != len(self.nodes):
            dup = next(n for n in self.nodes if self.nodes.count(n) > 1)
            raise InvalidInput("topology.nodes", dup, "unique node names")
        known = set(self.nodes)
        names: set[str] = set()
        for i, link in enumerate(self.links):
            field = f"topology.links[{i}]"
            if link.name in names:
                raise InvalidInput(f"{field}.name", link.name, "a unique link name")
            names.add(link.name)
            if not link.capacity_gbps > 0:
                raise InvalidInput(f"{field}.capacity_gbps", link.capacity_gbps, "a positive number")
            if link.tier < 0:
                raise InvalidInput(f"{field}.tier", link.tier, "a tier >= 0 (0 = NIC)")
            if link.direction not in (UP, DOWN):
                raise InvalidInput(f"{field}.direction", link.direction, "'up' or 'down'")
            if not link.nodes:
                raise InvalidInput(f"{field}.nodes", [], "at least one node behind the link")
            stray = sorted(link.nodes - known)
            if stray:
                raise InvalidInput(f"{field}.nodes", stray[0], "a node of the topology")
        for tier in range(1, self.tiers):
            self.domain_of(tier)  # validates that the tier's link sets do not overlap

    @cached_property
    def node_index(self) -> dict[str, int]:
        """Node name -> position in ``nodes``."""
        return {n: i for i, n in enumerate(self.nodes)}

    @cached_property
    def link_index(self) -> dict[str, int]:
        """Link name -> position in ``links``."""
        return {link.name: i for i, link in enumerate(self.links)}

    @cached_property
    def capacity_mbps(self) -> np.ndarray:
        """Capacity of every link in whole Mbps (int64)."""
        return np.array([int(round(link.capacity_gbps * 1000)) for link in self.links], dtype=np.int64)

    @cached_property
    def incidence(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR ``(indptr, link_ids)``: the links each node sits behind."""
        per_node: list[list[int]] = [[] for _ in self.nodes]
        for li, link in enumerate(self.links):
            for n in link.nodes:
                per_node[self.node_index[n]].append(li)
        indptr = np.zeros(len(self.nodes) + 1, dtype=np.int64)
        indptr[1:] = np.cumsum([len(p) for p in per_node])
        ids = np.fromiter((li for p in per_node for li in sorted(p)), dtype=np.int64, count=int(indptr[-1]))
        return indptr, ids

    @cached_property
    def shares_memo(self) -> dict[tuple[bytes, bytes | None, str], tuple[np.ndarray, np.ndarray]]:
        """``core.traffic.loaded_links``'s answers for this topology (filled as they are asked for)."""
        return {}

    @cached_property
    def link_tiers(self) -> np.ndarray:
        """Tier of every link."""
        return np.array([link.tier for link in self.links], dtype=np.int64)

    def uplinks(self, tier: int) -> tuple[np.ndarray, np.ndarray]:
        """The links of ``tier`` (>= 1) and the domain each one serves."""
        return self._uplinks[tier]

    @cached_property
    def _uplinks(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        out = {}
        for tier in range(1, self.tiers):
            ids = np.flatnonzero(self.link_tiers == tier)
            first = np.array([self.node_index[min(self.links[i].nodes)] for i in ids], dtype=np.int64)
            out[tier] = (ids, self.domain_of(tier)[first])
        return out

    @cached_property  # read by every placement and ring order: a walk over every link each time cost ms
    def tiers(self) -> int:
        """Number of link tiers (0 = NIC, 1 = rack, ...)."""
        return 1 + max((link.tier for link in self.links), default=0)

    def domain_of(self, tier: int) -> np.ndarray:
        """Domain id of every node at ``tier`` (>= 1); nodes behind no link of the tier get their own domain."""
        return self._domains[tier][0]

    @cached_property
    def _domains(self) -> dict[int, tuple[np.ndarray, tuple[str, ...]]]:
        out: dict[int, tuple[np.ndarray, tuple[str, ...]]] = {}
        for tier in range(1, self.tiers):
            ids = np.full(len(self.nodes), -1, dtype=np.int64)
            names: list[str] = []
            seen: dict[frozenset[str], int] = {}
            for link in self.links:
                if link.tier != tier or link.nodes in seen:
                    continue
                members = np.array([self.node_index[n] for n in link.nodes], dtype=np.int64)
                if (ids[members] >= 0).any():
                    raise InvalidInput(f"topology tier {tier}", link.name,
                                       "links of one tier whose node sets are equal or disjoint")
                seen[link.nodes] = len(names)
                ids[members] = len(names)
                names.append(link.name.rsplit(":", 1)[0] if ":" in link.name else link.name)
            for i in np.flatnonzero(ids < 0):
                ids[i] = len(names)
                names.append(self.nodes[i])
            out[tier] = (ids, tuple(names))
        return out

    def nodes_of(self, names: Iterable[str]) -> np.ndarray:
        """Indices of the named nodes, with an error naming the first unknown one."""
        try:
            return np.array([self.node_index[n] for n in names], dtype=np.int64)
        except KeyError as exc:
            raise InvalidInput("nodes", exc.args[0], "a node of the topology") from None


def duplex(name: str, capacity_gbps: float, nodes: Iterable[str], tier: int) -> tuple[Link, Link]:
    """The two directions of one physical link."""
    members = frozenset(nodes)
    return (Link(f"{name}:{UP}", capacity_gbps, members, tier, UP),
            Link(f"{name}:{DOWN}", capacity_gbps, members, tier, DOWN))


def leaf_spine(racks: int, nodes_per_rack: int, nic_gbps: float, uplink_gbps: float | None = None,
               rack_names: Sequence[str] | None = None) -> Topology:
    """``racks`` x ``nodes_per_rack`` nodes, one NIC each, one uplink per rack to a non-blocking spine."""
    if racks < 1:
        raise InvalidInput("topology.racks", racks, "an integer >= 1")
    if nodes_per_rack < 1:
        raise InvalidInput("topology.nodes_per_rack", nodes_per_rack, "an integer >= 1")
    if racks > 1 and uplink_gbps is None:
        raise InvalidInput("topology.uplink_gbps", None, "the rack uplink capacity in Gbps (needed when racks > 1)")
    names = list(rack_names) if rack_names is not None else [f"rack-{r}" for r in range(racks)]
    nodes: list[str] = []
    links: list[Link] = []
    for r, rack in enumerate(names):
        members = [f"{rack}-node-{i}" for i in range(nodes_per_rack)]
        nodes.extend(members)
        for n in members:
            links.extend(duplex(f"nic:{n}", nic_gbps, [n], 0))
        if racks > 1:
            assert uplink_gbps is not None
            links.extend(duplex(f"rack:{rack}", uplink_gbps, members, 1))
    return Topology(tuple(nodes), tuple(links))
