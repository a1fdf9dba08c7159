"""``default``: kube-scheduler with a gang plugin: spread over the least-allocated nodes, no offsets.

Gangs are taken in the scenario's queue order (``common.queue_order``: the host scheduler's, e.g.
PrioritySort), their pods one at a time; each goes to the node with the
most free GPUs (NodeResourcesFit LeastAllocated), equal scores broken at random (seeded), as the
kube-scheduler does. A gang is placed only whole (coscheduling); one that does not fit waits without
blocking smaller ones behind it. No network awareness, no offsets.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.policies import Context, Placement, SimPolicy
from volcano_metronome.sim.policies.common import Gpus, placeable, queue_order, room


class Default(SimPolicy):
    """Least-allocated spread, pod by pod."""

    name = "default"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.gpus = Gpus(len(ctx.topology.nodes), ctx.scenario.topology.gpus_per_node)
        self.rng = np.random.default_rng([ctx.seed, 1])

    def schedule(self, now: float, pending: Sequence[JobSpec]) -> list[Placement]:
        """Place every pending gang that fits, in the scenario's queue order."""
        out = []
        for job in placeable(queue_order(pending, self.ctx.scenario.policy, now), self.gpus.free):
            started = time.perf_counter()
            placed = self._spread(job)
            if placed is not None:  # as every policy: the decisions that placed a gang are timed
                self.stats.decision_ms.append((time.perf_counter() - started) * 1000.0)
                nodes, members = placed
                self.gpus.take(job.name, nodes, members * job.gpus_per_worker)
                out.append(Placement(job.name, nodes, members))
        return out

    def release(self, now: float, uid: str) -> None:
        """Give the job's GPUs back."""
        self.gpus.give_back(uid)

    def _spread(self, job: JobSpec) -> tuple[np.ndarray, np.ndarray] | None:
        free = self.gpus.free
        if room(free, job).sum() < job.workers:
            return None
        # Random tie-break below one GPU of difference: it never overturns a real score difference.
        score = free.astype(float) + 0.5 * self.rng.random(len(free))
        need = max(job.gpus_per_worker, 1)
        members = np.zeros(len(free), dtype=np.int64)
        left = free.copy()
        for _ in range(job.workers):
            usable = np.where(left >= job.gpus_per_worker, score, -np.inf)
            node = int(np.argmax(usable))
            members[node] += 1
            left[node] -= job.gpus_per_worker
            score[node] -= need
        nodes = np.flatnonzero(members)
        return nodes, members[nodes]


POLICY = Default
