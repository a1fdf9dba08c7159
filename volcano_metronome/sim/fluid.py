"""The network as a fluid: bursts in flight share links max-min fairly, each capped by its demand.

A *flow* is one communication window of one gang: a volume (Gb, per worker) to move across a set of
links at no more than the window's rate (Gbps, per worker). Under the core's ring all-reduce model
(``core.traffic``) the gang's ring crosses each loaded link once per direction, and a pipelined ring
moves at the pace of its slowest edge, so one flow at one rate on all its links is exactly "the
slowest worker decides". Under all-to-all a link carries ``k (n - k) / (n - 1)`` times the
per-worker rate (its *weight*, ``core.traffic.link_shares``), and the exchange ends when its most
loaded cut is through: one flow whose rate ``x`` loads each link with ``weight x``. Max-min fairness
is then over the per-worker rates, each link's share being its room divided by the summed weights
of the flows on it (weighted progressive filling; with every weight 1 it is the plain one).

With traffic classes (``Route.klass``; ``execution.traffic_classes``) the links serve the classes in
strict priority, as switches and NICs serve their priority queues: class 0 is shared max-min fairly
first, every next class max-min fairly over what the classes before it left (``strict_priority``).

Rates change only when a flow starts or ends, so the model is event-driven. Two cheap exits come
first: a new burst that fits at its cap on every link it crosses changes nobody's rate, and neither
does the end of a burst that crossed no saturated link. Otherwise the max-min fair allocation is
re-solved (progressive filling) over the *binding* links only: a link whose flows' caps add up to
no more than its capacity can never limit anybody, and flows that cross no binding link run at
their cap. Flows live in arrays (cap, rate, volume left as of the last change of their rate, and
the predicted end at that rate, incidence): a flow's progress is settled only when its rate
changes, one kernel event waits for the earliest predicted end, and every link integrates its rate
into the volume it carried. The two directions of a duplex link carry the same ring traffic, so
only one of each pair is solved and the other mirrors it.

Speed (measured by replaying recorded bursts, see docs/simulator.md): numpy's per-call cost, not
arithmetic, bounds this solver (a typical re-solve has a few to a few dozen flows), so the work per
event is kept to a few whole-array operations. Restricting a re-solve to the connected component of
the changed flow was tried and was slower on every workload we replay (the walk costs more than
the flows it saves), and so was a plain-Python solver for small components.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from volcano_metronome.core.topology import Topology
from volcano_metronome.sim.kernel import NETWORK, Event, Kernel

#: Predicted ends closer than this (seconds) are handled as one.
_SAME_END_S = 1e-12


class Route:
    """The links a gang's bursts cross: directed ids and their weights, the solved links for them and
    their weights, the fastest per-worker rate the slowest of them allows, and the bursts' traffic class
    (0 is served first)."""

    __slots__ = ("directed", "directed_weight", "index", "weight", "floor", "klass")

    def __init__(self, directed: np.ndarray, index: np.ndarray, floor: float,
                 directed_weight: np.ndarray | None = None, weight: np.ndarray | None = None,
                 klass: int = 0) -> None:
        self.klass = klass
        self.directed = directed
        self.index = index
        self.floor = floor
        self.directed_weight = np.ones(len(directed)) if directed_weight is None else directed_weight
        self.weight = np.ones(len(index)) if weight is None else weight


#: Summed weights below this are float residue: no live flow is left on the link.
_NO_WEIGHT = 1e-9

#: Above this many flow x link cells a round's dense vector work costs more than sparse bookkeeping.
DENSE_CELLS = 60_000


def max_min(cap: np.ndarray, incidence: np.ndarray, link_cap: np.ndarray) -> np.ndarray:
    """Max-min fair rates of flows capped at ``cap`` on links of ``link_cap`` (progressive filling).

    ``incidence[f, l]`` is the weight with which flow ``f`` loads link ``l`` (0: it does not cross it). Each round finds the lowest fair
    share ``s`` of any link; every free flow capped at or below ``s`` is frozen at its cap (that only
    raises the shares of the links it leaves), or else the flows on the links whose share is ``s``
    are frozen at ``s``. There are as many rounds as distinct bottleneck levels. Small problems use
    the dense matrix directly; large ones (a congested cluster where hundreds of flows touch one
    another) its list of non-zero cells.
    """
    if incidence.size > DENSE_CELLS:
        flow_of, link_of = np.nonzero(incidence)
        return _max_min_sparse(cap, flow_of, link_of, link_cap, incidence[flow_of, link_of])
    rate = np.zeros(len(cap))
    live = np.ones(len(cap), dtype=bool)
    left = len(cap)
    open_cap = cap.astype(float).copy()
    rem = link_cap.astype(float).copy()
    n = incidence.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            share = rem / n  # inf or nan on links no live flow crosses
            level = float(np.fmin.reduce(share, initial=np.inf))
            limit = level * (1 + 1e-9) + 1e-12
            hit = open_cap <= limit
            if np.count_nonzero(hit):
                rate[hit] = cap[hit]
            else:
                hit = np.asarray(incidence[:, share <= limit].any(axis=1))
                hit &= live
                rate[hit] = level
            live &= ~hit
            left -= int(np.count_nonzero(hit))
            if not left:
                return rate
            open_cap[hit] = np.inf
            frozen = incidence[hit]
            rem -= rate[hit] @ frozen
            np.maximum(rem, 0.0, out=rem)
            n -= frozen.sum(axis=0)
            n[n < _NO_WEIGHT] = 0.0  # fractional weights leave float residue on links no live flow crosses


def strict_priority(cap: np.ndarray, incidence: np.ndarray, link_cap: np.ndarray, klass: np.ndarray) -> np.ndarray:
    """Rates when links serve traffic classes in strict priority (``klass``: 0 first), max-min fairly within one.

    A class sees only the room the classes before it left, as a priority queue is served only when the
    queues above it are empty; nothing is reserved for a class with no burst in flight.
    """
    if len(klass) == 0 or (klass == klass[0]).all():
        return max_min(cap, incidence, link_cap)
    rate = np.zeros(len(cap))
    room = link_cap.astype(float).copy()
    for k in np.unique(klass):
        mine = klass == k
        rate[mine] = max_min(cap[mine], incidence[mine], room)
        room = np.maximum(room - rate[mine] @ incidence[mine], 0.0)
    return rate


def _max_min_sparse(cap: np.ndarray, flow_of: np.ndarray, link_of: np.ndarray, link_cap: np.ndarray,
                    weight: np.ndarray | None = None) -> np.ndarray:
    """``max_min`` on the cells ``(flow_of[i], link_of[i])`` of the incidence matrix, of ``weight[i]``."""
    w = np.ones(len(flow_of)) if weight is None else weight
    links = len(link_cap)
    rate = np.zeros(len(cap))
    live = np.ones(len(cap), dtype=bool)
    left = len(cap)
    open_cap = cap.astype(float).copy()
    rem = link_cap.astype(float).copy()
    n = np.bincount(link_of, weights=w, minlength=links)
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            share = rem / n
            level = float(np.fmin.reduce(share, initial=np.inf))
            limit = level * (1 + 1e-9) + 1e-12
            hit = open_cap <= limit
            if np.count_nonzero(hit):
                rate[hit] = cap[hit]
            else:
                hit = np.zeros(len(cap), dtype=bool)
                hit[flow_of[(share <= limit)[link_of]]] = True
                hit &= live
                rate[hit] = level
            live &= ~hit
            left -= int(np.count_nonzero(hit))
            if not left:
                return rate
            open_cap[hit] = np.inf
            cells = hit[flow_of]
            rem -= np.bincount(link_of[cells], weights=rate[flow_of[cells]] * w[cells], minlength=links)
            np.maximum(rem, 0.0, out=rem)
            n -= np.bincount(link_of[cells], weights=w[cells], minlength=links)
            n[n < _NO_WEIGHT] = 0.0


def mirror_of(topology: Topology) -> np.ndarray:
    """For every link, the id of the link solved in its place (its duplex partner or itself)."""
    key: dict[tuple[frozenset[str], int, float], int] = {}
    canon = np.arange(len(topology.links), dtype=np.int64)
    for i, link in enumerate(topology.links):
        k = (link.nodes, link.tier, link.capacity_gbps)
        if k in key and topology.links[key[k]].direction != link.direction:
            canon[i] = key[k]
        else:
            key.setdefault(k, i)
    return canon


class Fluid:
    """Links, the flows in flight on them, and the volume every link has carried."""

    def __init__(self, kernel: Kernel, topology: Topology) -> None:
        self.kernel = kernel
        self.directed_capacity = np.array([link.capacity_gbps for link in topology.links], dtype=float)
        canon = mirror_of(topology)
        solved, self.solved_of = np.unique(canon, return_inverse=True)  # directed link -> solved link
        self.capacity = self.directed_capacity[solved]
        self.on_link = np.zeros(len(solved), dtype=np.int64)  # flows in flight per solved link
        self.cap_sum = np.zeros(len(solved))  # sum of their caps: above capacity, the link is binding
        self.link_rate = np.zeros(len(solved))
        self._carried = np.zeros(len(solved))  # Gb per solved link
        self.demanded = np.zeros(len(topology.links))  # Gb per directed link: what flows asked to move
        self.solves = 0
        self._settled = 0.0
        self._next: Event | None = None
        # Flow slots (grown on demand): cap and rate in Gbps, volumes in Gb, incidence slot x solved link.
        # ``remaining`` is a flow's volume still to move as of ``since``, the last change of its rate;
        # ``end`` is when it will be through at that rate (inf for free slots).
        self.cap = np.zeros(0)
        self.remaining = np.zeros(0)
        self.since = np.zeros(0)
        self.end = np.zeros(0)
        self.rate = np.zeros(0)
        self.alive = np.zeros(0, dtype=bool)
        self.klass = np.zeros(0, dtype=np.int64)
        self.incidence = np.zeros((0, len(solved)))
        self.paths: list[Route | None] = []
        self.done: list[Callable[[], None] | None] = []
        self._free: list[int] = []
        self._grow(64)

    # -- public ------------------------------------------------------------------------------------

    def route(self, links: np.ndarray, weights: np.ndarray | None = None, klass: int = 0) -> Route:
        """The route of a gang loading ``links`` (directed ids, at least one) with ``weights`` (default 1),
        its bursts in traffic class ``klass``."""
        links = np.asarray(links, dtype=np.int64)
        directed_weight = np.ones(len(links)) if weights is None else np.asarray(weights, dtype=float)
        index, first = np.unique(self.solved_of[links], return_index=True)
        weight = directed_weight[first]  # both directions of a duplex link carry the same cut
        return Route(links, index, float((self.capacity[index] / weight).min()), directed_weight, weight, klass)

    def start(self, route: Route, rate_gbps: float, volume_gb: float, done: Callable[[], None]) -> int:
        """Put a burst of ``volume_gb`` on ``route`` at up to ``rate_gbps``; ``done()`` when it is through."""
        self._settle()
        if not self._free:
            self._grow(2 * len(self.cap))
        slot = self._free.pop()
        index = route.index
        cap = min(rate_gbps, route.floor)
        now = self.kernel.now
        self.cap[slot] = cap
        self.remaining[slot] = volume_gb
        self.since[slot] = now
        self.rate[slot] = 0.0
        self.alive[slot] = True
        self.klass[slot] = route.klass
        self.paths[slot] = route
        weight = route.weight
        self.incidence[slot, index] = weight
        self.done[slot] = done
        self.demanded[route.directed] += volume_gb * route.directed_weight
        self.cap_sum[index] += cap * weight
        self.on_link[index] += 1
        # Links with room for the new burst at its cap are bottlenecks of nobody: nobody else moves.
        if (self.link_rate[index] + cap * weight > self.capacity[index] * (1 + 1e-12)).any():
            self._reallocate()
        else:
            self.rate[slot] = cap
            self.end[slot] = now + volume_gb / cap
            self.link_rate[index] += cap * weight
        self._reschedule()
        return slot

    def carried(self) -> np.ndarray:
        """Volume (Gb) every directed link has carried up to now."""
        self._settle()
        return self._carried[self.solved_of]

    @property
    def in_flight(self) -> int:
        """Flows in flight."""
        return int(self.alive.sum())

    # -- internals ---------------------------------------------------------------------------------

    def _grow(self, size: int) -> None:
        old = len(self.cap)

        def grown(arr: np.ndarray) -> np.ndarray:
            out = np.zeros((size,) + arr.shape[1:], dtype=arr.dtype)
            out[:old] = arr
            return out

        self.cap = grown(self.cap)
        self.remaining, self.since, self.rate = grown(self.remaining), grown(self.since), grown(self.rate)
        self.end = grown(self.end)
        self.end[old:] = np.inf
        self.alive, self.incidence, self.klass = grown(self.alive), grown(self.incidence), grown(self.klass)
        self.paths += [None] * (size - old)
        self.done += [None] * (size - old)
        self._free += list(range(size - 1, old - 1, -1))

    def _settle(self) -> None:
        """Advance every link's carried volume to now (flows are settled one by one, when their rate changes)."""
        now = self.kernel.now
        dt = now - self._settled
        if dt > 0:
            self._carried += self.link_rate * dt
            self._settled = now

    def _reschedule(self) -> None:
        """Keep the one completion event at the earliest predicted end."""
        soonest = float(self.end.min())
        if self._next is not None:
            if self._next.time == soonest:
                return
            self._next.cancel()
            self._next = None
        if soonest < np.inf:
            self._next = self.kernel.at(soonest, self._complete, rank=NETWORK)

    def _complete(self) -> None:
        self._next = None
        self._settle()
        # Ends within a picosecond of each other are one batch (float noise of the predictions).
        finished = np.flatnonzero(self.end <= self.kernel.now + _SAME_END_S).tolist()
        # Only a burst that left a saturated link can let others speed up.
        freed = False
        callbacks = []
        for slot in finished:
            route = self.paths[slot]
            assert route is not None
            index = route.index
            if (self.link_rate[index] >= self.capacity[index] * (1 - 1e-9)).any():
                freed = True
            self.link_rate[index] -= self.rate[slot] * route.weight
            self.cap_sum[index] -= self.cap[slot] * route.weight
            self.on_link[index] -= 1
            idle = index[self.on_link[index] == 0]
            self.cap_sum[idle] = self.link_rate[idle] = 0.0  # no float residue on idle links
            self.incidence[slot, index] = 0.0
            self.alive[slot] = False
            self.rate[slot] = self.remaining[slot] = 0.0
            self.end[slot] = np.inf
            self.paths[slot] = None
            callbacks.append(self.done[slot])
            self.done[slot] = None
            self._free.append(slot)
        if freed:
            self._reallocate()
        self._reschedule()
        for callback in callbacks:
            assert callback is not None
            callback()

    def _reallocate(self) -> None:
        """Re-solve every flow on a binding link; flows that cross none run at their cap."""
        self.solves += 1
        slots = np.flatnonzero(self.alive)
        links = np.flatnonzero(self.cap_sum > self.capacity * (1 + 1e-9))
        sub = self.incidence[np.ix_(slots, links)]
        limited = sub.any(axis=1)
        new = self.cap[slots]
        if limited.any():
            new[limited] = strict_priority(new[limited], sub[limited], self.capacity[links], self.klass[slots[limited]])
        old = self.rate[slots]
        moved = new != old
        changed = slots[moved]
        if len(changed):  # settle the progress of the flows whose rate changes, then predict their end
            now = self.kernel.now
            left = self.remaining[changed] - old[moved] * (now - self.since[changed])
            self.remaining[changed] = left
            self.since[changed] = now
            self.rate[changed] = new[moved]
            # A class the ones above it leave no room waits (rate 0, no end yet); one already through ends now.
            with np.errstate(divide="ignore", invalid="ignore"):
                self.end[changed] = np.where(left > 0, now + left / new[moved], now)
        self.link_rate = self.rate @ self.incidence  # summed afresh: no drift from repeated updates
