"""Candidate node sets for a gang: GPU fit, then locality, binpacked as Volcano would.

The bound on the work per decision is ``limit`` node sets (``Policy.max_candidates``, default 8):

1. If one node can hold the whole gang, the gang loads no link at all: one candidate, the node with
   the fewest free GPUs that fits (bin-packing keeps large holes for large gangs, as Volcano does).
2. Otherwise, at the lowest tier (rack, then pod, ...) where some domain can hold the gang, up to
   ``limit - 2`` *primary* candidates, Volcano's binpack in each: the fullest fitting domains first,
   their most allocated nodes first. The first is what Volcano's topology plugin would choose, so
   the core never places worse than it; the others let ``core.decision`` trade a fuller rack for
   less contention. Then, while the primary candidates number at most ``limit``, the same domains'
   nodes with the least-loaded NICs first (roomiest first among equals): ranked after every binpack,
   so ``core.decision`` takes one only where it scores strictly better (with lock on demand, the
   default: a strictly lower expected cost; without it, as between racks: fit, overflow, then a lower
   peak), and a tie keeps the binpack (round 7 of docs/simulator-rounds.md; a fill of the emptiest nodes taken whatever the
   collisions fragmented partly used nodes and queued later gangs longer). A domain that holds no gang
   (``busy``) is offered only where the first, Volcano's, is untouched too: binpacking keeps such domains
   whole for the gangs that need one (round 11). So are nodes where whole ones are scarce (under
   ``SCARCE`` of the cluster's nodes untouched once the binpack's node set is placed, round 35): a
   least-loaded node set is then offered only where it opens no more untouched nodes than the binpack of
   its domain (rounds 26 and 27). Up to two *spanning* candidates, which cross domains but use the
   least-loaded uplinks or NICs, are kept as *secondary*: ``core.decision`` scores them only as a last
   resort.
3. If no domain can hold it, up to ``limit`` spanning candidates are primary, Volcano's first (the
   roomiest racks, bin-packed inside). A flat cluster (no rack tier) is this case with one domain:
   its candidates are the least-loaded NICs, roomiest first, then Volcano's binpack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from volcano_metronome.core.model import Gang
from volcano_metronome.core.topology import Topology

SECONDARY = 2
#: Whole nodes are scarce below this share of the cluster's nodes untouched, as the binpack would leave them.
#: Only then does breaking one open for fewer collisions cost a later gang its whole node: on a cluster with
#: room to spare, the least-loaded NICs are the gain (rounds 27 and 35 of docs/simulator-rounds.md).
SCARCE = 0.25


@dataclass(frozen=True, eq=False)
class Candidate:
    """A node set with the members each node gets; ``racks`` counts the tier-1 domains it spans."""

    nodes: np.ndarray
    members: np.ndarray
    racks: int
    rank: int


@dataclass(frozen=True, eq=False)
class Candidates:
    """Primary candidates, secondary ones, or (when nothing fits) the reason."""

    primary: tuple[Candidate, ...]
    secondary: tuple[Candidate, ...] = ()
    reason: str = ""


def member_room(free_gpus: np.ndarray, gang: Gang) -> np.ndarray:
    """How many members of ``gang`` each node can take (GPU-less gangs are not limited by GPUs)."""
    if gang.gpus_per_member == 0:
        return np.full(len(free_gpus), gang.size, dtype=np.int64)
    return np.asarray(np.maximum(free_gpus, 0) // gang.gpus_per_member)


def node_load(topology: Topology, link_mean: np.ndarray) -> np.ndarray:
    """Mean load of each node's own (tier-0) links: how busy its NIC is."""
    indptr, ids = topology.incidence
    own = np.where(topology.link_tiers[ids] == 0, link_mean[ids], 0.0)
    sums = np.add.reduceat(np.concatenate([own, [0.0]]), indptr[:-1]) if len(ids) else np.zeros(len(indptr) - 1)
    return np.where(indptr[1:] > indptr[:-1], sums, 0.0)


def domain_load(topology: Topology, link_mean: np.ndarray, tier: int) -> np.ndarray:
    """Mean load of each domain's uplinks at ``tier``."""
    links, domains = topology.uplinks(tier)
    return np.bincount(domains, weights=link_mean[links], minlength=int(topology.domain_of(tier).max()) + 1)


def candidates(topology: Topology, free_gpus: np.ndarray, link_mean: np.ndarray, gang: Gang,
               limit: int, secondary: bool = True, busy: np.ndarray | None = None) -> Candidates:
    """Node sets worth scoring for ``gang`` (see the module docstring for the bound); without
    ``secondary``, the spanning candidates kept in reserve are not built. ``busy`` marks the nodes that
    hold a gang: an untouched domain is offered only where Volcano's binpack would open one too, and, where
    whole nodes are scarce, an untouched node only where it would open as many."""
    room = member_room(free_gpus, gang)
    if room.sum() < gang.size:
        usable = int((room > 0).sum())
        return Candidates((), reason=(
            f"insufficient GPUs: needs {gang.size} members x {gang.gpus_per_member} GPUs; "
            f"the cluster has room for {int(room.sum())} members on {usable} nodes"))
    load = node_load(topology, link_mean)
    racks = topology.domain_of(1) if topology.tiers > 1 else np.zeros(len(room), dtype=np.int64)

    single = np.flatnonzero(room >= gang.size)
    if len(single):
        best = single[np.lexsort((single, free_gpus[single]))[0]]
        return Candidates((Candidate(np.array([best]), np.array([gang.size]), 1, 0),))

    def make(order: np.ndarray, rank: int) -> Candidate:
        return _fill(order, room, gang.size, racks, rank)

    for tier in range(1, topology.tiers):
        domain = topology.domain_of(tier)
        room_for = max(1, limit - SECONDARY)
        packed = _binpack_domains(domain, room, free_gpus, gang.size, room_for)
        if not packed:
            continue
        held = np.bincount(domain, weights=busy, minlength=int(domain.max()) + 1) > 0 if busy is not None else None
        if held is not None and held[domain[packed[0][0]]]:
            # Binpacking keeps untouched domains whole for the gangs that need one: taking one for less
            # contention now pushes a later gang across domains, where it collides on the uplinks instead.
            packed = packed[:1] + [nodes for nodes in packed[1:] if held[domain[nodes[0]]]]
        binpacked = [make(nodes, 0) for nodes in packed]
        # The same domains' nodes, least-loaded NICs first: ranked after every binpack, so core.decision
        # takes one only where its expected collisions are strictly lower (same domain, same locality).
        # Where whole nodes are scarce, not where it opens more untouched nodes than the binpack: the
        # collisions it avoids last while the neighbour runs, the node it breaks keeps whole-node gangs off it
        # while this one runs (rounds 26 and 27). Scarce as the binpack would leave them (round 35): what a
        # gang opens counts most where it opens the last whole nodes.
        spread: list[Candidate] = []
        for nodes, binpack in zip(packed, binpacked):
            cand = make(_least_loaded(nodes, room, load), 0)
            if busy is not None and _breaks_scarce_nodes(cand, binpack, busy):
                continue
            if not _same_as_any(cand, binpacked) and not _same_as_any(cand, spread):
                spread.append(cand)
        primary = tuple(_ranked(binpacked + spread[:max(0, limit - len(binpacked))]))
        if not secondary:
            return Candidates(primary)
        spanning = _ranked(_spanning(topology, room, free_gpus, load, link_mean, make)[:SECONDARY], len(primary))
        return Candidates(primary, tuple(c for c in spanning if not _same_as_any(c, primary)))
    return Candidates(tuple(_ranked(_spanning(topology, room, free_gpus, load, link_mean, make)[:limit])))


def _binpack_domains(domain: np.ndarray, room: np.ndarray, free: np.ndarray, size: int,
                     limit: int) -> list[np.ndarray]:
    """Volcano's binpack: the fullest ``limit`` domains that hold ``size`` members, each with its most
    allocated nodes first (what its topology plugin would choose, best first)."""
    usable = room > 0
    domain_room = np.bincount(domain, weights=room)
    domain_free = np.bincount(domain, weights=np.where(usable, free, 0), minlength=len(domain_room))
    fitting = np.flatnonzero(domain_room >= size)
    out = []
    for d in fitting[np.lexsort((fitting, domain_free[fitting]))][:limit]:
        inside = np.flatnonzero((domain == d) & usable)
        out.append(inside[np.lexsort((inside, free[inside]))])
    return out


def _least_loaded(nodes: np.ndarray, room: np.ndarray, load: np.ndarray) -> np.ndarray:
    """``nodes`` with the least-loaded NICs first, the roomiest first among equals (the index breaks ties)."""
    return nodes[np.lexsort((nodes, -room[nodes], load[nodes]))]


def _spanning(topology: Topology, room: np.ndarray, free: np.ndarray, load: np.ndarray, link_mean: np.ndarray,
              make: Callable[[np.ndarray, int], Candidate]) -> list[Candidate]:
    """Cross-domain node sets: Volcano's (roomiest racks, binpack inside), then fewest racks, least-loaded
    racks, least-loaded NICs."""
    # Only nodes with room can be taken: sorting those alone gives the same orders (the node index breaks every
    # tie), at a fraction of the cost on a large, mostly busy cluster.
    nodes = np.flatnonzero(room > 0)
    room_n, free_n, load_n = room[nodes], free[nodes], load[nodes]
    orders = []
    if topology.tiers > 1:
        rack = topology.domain_of(1)
        rack_room = np.bincount(rack, weights=room)
        rack_n = rack[nodes]
        roomiest = np.empty(len(rack_room), dtype=np.int64)
        roomiest[np.lexsort((np.arange(len(rack_room)), -rack_room))] = np.arange(len(rack_room))
        orders.append(nodes[np.lexsort((nodes, free_n, roomiest[rack_n]))])
        uplink = domain_load(topology, link_mean, 1)
        for keys in ((uplink, -rack_room), (-rack_room, uplink)):
            rank_of = np.empty(len(rack_room), dtype=np.int64)
            rank_of[np.lexsort((np.arange(len(rack_room)),) + keys)] = np.arange(len(rack_room))
            orders.append(nodes[np.lexsort((nodes, load_n, -room_n, rank_of[rack_n]))])
    orders.append(nodes[np.lexsort((nodes, -room_n, load_n))])
    if topology.tiers == 1:
        # A flat cluster is one domain: Volcano's binpack (most allocated first) is scored too, after the
        # least-loaded order, so it is taken only where its expected collisions are strictly lower.
        orders.append(nodes[np.lexsort((nodes, free_n))])
    out: list[Candidate] = []
    for order in orders:
        cand = make(order, 0)
        if not _same_as_any(cand, out):
            out.append(cand)
    return out


def _fill(order: np.ndarray, room: np.ndarray, size: int, racks: np.ndarray, rank: int) -> Candidate:
    """Take nodes in ``order`` until they hold ``size`` members."""
    cum = np.cumsum(room[order])
    count = int(np.searchsorted(cum, size)) + 1
    chosen = order[:count]
    members = room[chosen].copy()
    members[-1] -= int(cum[count - 1]) - size
    keep = members > 0
    chosen, members = chosen[keep], members[keep]
    sort = np.argsort(chosen)
    return Candidate(chosen[sort], members[sort], int(len(np.unique(racks[chosen]))), rank)


def _untouched(cand: Candidate, busy: np.ndarray) -> int:
    """How many nodes no gang holds ``cand`` would open."""
    return int((~busy[cand.nodes]).sum())


def _breaks_scarce_nodes(cand: Candidate, binpack: Candidate, busy: np.ndarray) -> bool:
    """Whether ``cand`` opens more untouched nodes than ``binpack`` where whole nodes are scarce: fewer than
    ``SCARCE`` of the cluster's would stay untouched after ``binpack``."""
    opens = _untouched(binpack, busy)
    return _untouched(cand, busy) > opens and int((~busy).sum()) - opens < SCARCE * len(busy)


def _ranked(cands: list[Candidate], first: int = 0) -> list[Candidate]:
    return [Candidate(c.nodes, c.members, c.racks, first + i) for i, c in enumerate(cands)]


def _same_as_any(cand: Candidate, others: "list[Candidate] | tuple[Candidate, ...]") -> bool:
    return any(np.array_equal(cand.nodes, o.nodes) and np.array_equal(cand.members, o.members) for o in others)
