"""Gangs that span racks whose uplinks are slower than their bursts (issue 12, round 11).

Three racks of two 8-GPU nodes, 100 Gbps NICs, uplinks of 50 Gbps (4:1). Each job is three whole-node
workers, so it spans two racks; the two jobs share the middle rack's uplink. A burst of 40 ms at
100 Gbps runs at 50 Gbps on that uplink even alone: 80 ms in a 240 ms iteration, duty cycle 1/3.
Planned at its nominal rate, every offset of the second job overflowed the uplink and it ran free
beside the first (the two collided); planned as it runs (``core.bottleneck``), it is locked beside it.
"""

from __future__ import annotations

import pytest

from volcano_metronome.catalog import builtin
from volcano_metronome.core.profile import Profile, Window
from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.engine import Engine, JobRun
from volcano_metronome.sim.policies import Context, make
from volcano_metronome.sim.workload import SimScenario, parse_sim

PROFILE = Profile(200.0, (Window(100.0, 40.0, 100.0),))
ALONE_ITERATION_S = 0.240  # 100 ms of compute, 80 ms at 50 Gbps, 60 ms of compute


@pytest.fixture(scope="module")
def thin() -> SimScenario:
    return parse_sim({"name": "thin", "slot_ms": 5, "policy": {"ordering": "FIFO"},
                      "topology": {"racks": 3, "nodes_per_rack": 2, "gpus_per_node": 8, "nic_gbps": 100,
                                   "uplink_gbps": 50},
                      "jobs": [{"name": "unused", "model": "vgg11", "workers": 1, "gpus_per_worker": 1,
                                "iterations": 1}]}, builtin())


def run(sim: SimScenario, policy: str) -> dict[str, JobRun]:
    jobs = [JobSpec("a", 0.0, 3, 8, 60, 0, PROFILE), JobSpec("b", 0.05, 3, 8, 60, 0, PROFILE)]
    chosen = make(policy, Context(sim.scenario, sim.scenario.topology.build(), 0))
    return {j.spec.name: j for j in Engine(sim, jobs, chosen).run().jobs}


def contention_s(job: JobRun) -> float:
    return job.end_s - job.start_s - job.isolated_s - job.padded_s


def test_alone_each_job_runs_at_its_uplink(thin: SimScenario) -> None:
    a = run(thin, "metronome")["a"]
    assert a.isolated_s == pytest.approx(60 * ALONE_ITERATION_S, abs=1e-6)


def test_metronome_interleaves_the_throttled_bursts_and_free_running_collides(thin: SimScenario) -> None:
    locked, free = run(thin, "metronome"), run(thin, "metronome-free")
    assert {n: (j.nodes.tolist()) for n, j in locked.items()} == {n: j.nodes.tolist() for n, j in free.items()}
    assert contention_s(free["b"]) > 1.0  # free, the shared uplink stretches their bursts
    for job in locked.values():
        assert job.aligned_iterations > 0
        assert contention_s(job) == pytest.approx(0.0, abs=1e-6)
    # Locked at the period it runs at alone: no padding beyond the wait for its first slot.
    assert locked["b"].padded_s == pytest.approx(locked["b"].first_wait_s, abs=1e-6)
