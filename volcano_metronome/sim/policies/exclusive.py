"""``exclusive``: network-aware peak reservation (scheduler-plugins networkaware style), no offsets.

Each gang reserves its peak rate on every link it loads for as long as it runs, so no link is ever
over-subscribed and no burst is ever slowed; the price is admission. A gang is admitted only where
its peak fits every link: the lowest-tier binpack candidates of ``volcano-topology`` (one node, else
each fitting rack, fullest first), first over all nodes, then over the nodes whose NIC still has
the headroom; failing that, across the fewest racks among nodes whose NIC and rack uplink have it.
Otherwise it waits, in the scenario's queue order (``common.queue_order``; a waiting gang does not
block smaller ones).
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from volcano_metronome.core.traffic import link_shares
from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.policies import Context, Placement, SimPolicy
from volcano_metronome.sim.policies.common import Gpus, placeable, queue_order, racks_of, room
from volcano_metronome.sim.policies.volcano_topology import lowest_tier, per_rack, spanning


class Exclusive(SimPolicy):
    """Peak reservation on every loaded link."""

    name = "exclusive"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        topo = ctx.topology
        self.gpus = Gpus(len(topo.nodes), ctx.scenario.topology.gpus_per_node)
        self.rack = racks_of(topo)
        self.capacity = np.array([link.capacity_gbps for link in topo.links])
        self.reserved = np.zeros(len(topo.links))
        self.holding: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        indptr, ids = topo.incidence
        node_of = np.repeat(np.arange(len(topo.nodes)), np.diff(indptr))
        tiers = topo.link_tiers[ids]
        # Per node: its own (tier-0) links, and the rack uplinks it sits behind (tier 1).
        self.nic = (node_of[tiers == 0], ids[tiers == 0])
        self.uplink = (node_of[tiers == 1], ids[tiers == 1])

    def schedule(self, now: float, pending: Sequence[JobSpec]) -> list[Placement]:
        """Admit every pending gang whose peak fits, in the scenario's queue order."""
        out = []
        for job in placeable(queue_order(pending, self.ctx.scenario.policy, now), self.gpus.free):
            started = time.perf_counter()
            found = self._admit(job)
            if found is not None:  # as every policy: the decisions that placed a gang are timed
                self.stats.decision_ms.append((time.perf_counter() - started) * 1000.0)
                nodes, members, links, peak = found
                self.reserved[links] += peak
                self.holding[job.name] = (links, peak)
                self.gpus.take(job.name, nodes, members * job.gpus_per_worker)
                out.append(Placement(job.name, nodes, members))
        return out

    def release(self, now: float, uid: str) -> None:
        """Give back the job's GPUs and its reservations."""
        self.gpus.give_back(uid)
        links, peak = self.holding.pop(uid)
        self.reserved[links] -= peak

    def _node_ok(self, which: tuple[np.ndarray, np.ndarray], peak: float) -> np.ndarray:
        node_of, links = which
        short = self.capacity[links] - self.reserved[links] < peak
        bad = np.zeros(len(self.gpus.free), dtype=bool)
        bad[node_of[short]] = True
        return ~bad

    def _fits(self, job: JobSpec, nodes: np.ndarray, members: np.ndarray,
              peak: float) -> tuple[np.ndarray, np.ndarray] | None:
        """The links the gang loads and its peak on each (all-to-all loads a cut more than a ring), if they fit."""
        links, shares = link_shares(self.ctx.topology, nodes, members, job.profile.collective)
        need = (peak + 1e-9) * shares
        if len(links) and (self.capacity[links] - self.reserved[links] < need - 1e-9).any():
            return None
        return links, need

    def _admit(self, job: JobSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        free = self.gpus.free
        if room(free, job).sum() < job.workers:
            return None
        peak = job.profile.peak_gbps - 1e-9
        for nodes, members in lowest_tier(free, self.rack, job):
            if (fit := self._fits(job, nodes, members, peak)) is not None:
                return nodes, members, *fit
        nic_ok = self._node_ok(self.nic, peak)
        can = np.where(nic_ok, room(free, job), 0)
        if can.sum() < job.workers:
            return None
        for nodes, members in per_rack(free, self.rack, job, can):
            if (fit := self._fits(job, nodes, members, peak)) is not None:
                return nodes, members, *fit
        can = np.where(self._node_ok(self.uplink, peak), can, 0)
        if can.sum() < job.workers:
            return None
        nodes, members = spanning(free, self.rack, job, can)
        fit = self._fits(job, nodes, members, peak)
        return None if fit is None else (nodes, members, *fit)


POLICY = Exclusive
