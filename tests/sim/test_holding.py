"""Gangs held back in the simulator (core.holding): the wait, its bound, and what it buys.

Three nodes of 8 GPUs behind 20 Gbps NICs, one rack. ``a`` (2 x 6 GPUs) spans nodes 0 and 1 and sends
20 Gbps for 900 ms of every 1,000; ``c`` (one 8-GPU worker, no link) holds node 2 for 10 s (or hours). ``b`` (2 x 2
GPUs, a's profile) arrives at 2.3 s: the only room is a's two nodes, where their bursts overlap at every
phase (40 Gbps asked of 20: collisions of 1.62 x the time, both sides).
"""

from __future__ import annotations

import dataclasses

import pytest

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile, Window
from volcano_metronome.sim.engine import Engine, JobRun
from volcano_metronome.sim.policies import Context, make
from volcano_metronome.sim.workload import SimScenario, parse_sim

BUSY = Profile(1000.0, (Window(50.0, 900.0, 20.0),), 0.0)
QUIET = Profile(1000.0, (Window(50.0, 10.0, 1.0),), 0.0)


def scenario(c_iterations: int = 10, b_priority: int = 0, more: tuple[dict, ...] = ()) -> SimScenario:
    jobs = [{"name": "a", "workers": 2, "gpus_per_worker": 6, "iterations": 300, "profile": BUSY.to_dict()},
            {"name": "b", "arrival_s": 2.3, "workers": 2, "gpus_per_worker": 2, "iterations": 60,
             "priority": b_priority, "profile": BUSY.to_dict()}]
    jobs.append({"name": "c", "workers": 1, "gpus_per_worker": 8, "iterations": c_iterations,
                 "profile": QUIET.to_dict()})
    jobs.extend(more)
    return parse_sim({"name": "hold", "topology": {"racks": 1, "nodes_per_rack": 3, "gpus_per_node": 8,
                                                   "nic_gbps": 20, "uplink_gbps": 100}, "jobs": jobs})


def run(sim: SimScenario, policy: str = "metronome", max_hold_s: float = 60.0) -> dict[str, JobRun]:
    policy_ = dataclasses.replace(sim.scenario.policy, max_hold_s=max_hold_s)
    scenario_ = dataclasses.replace(sim.scenario, policy=policy_)
    chosen = make(policy, Context(scenario_, scenario_.topology.build(), 0))
    result = Engine(sim, sim.jobs(0), chosen).run()
    return {j.spec.name: j for j in result.jobs}


@pytest.mark.parametrize("policy", ["metronome", "metronome-free"])
def test_a_held_gang_takes_the_node_that_frees_up_and_never_collides(policy: str) -> None:
    held = run(scenario(), policy)
    c_end = held["c"].end_s
    assert held["b"].start_s == pytest.approx(c_end) and held["b"].nodes.tolist() == [2]
    assert held["b"].comm_s == pytest.approx(0.0)  # one node: no link at all
    # Placed at once (as Volcano's soft mode would), it shares a's NICs for its whole run.
    at_once = run(scenario(), policy, max_hold_s=0.0)
    assert at_once["b"].start_s == pytest.approx(2.3) and at_once["b"].nodes.tolist() == [0, 1]
    assert at_once["b"].comm_s > 1.3 * at_once["b"].comm_ideal_s
    for name in ("a", "b"):  # both finish sooner for the wait
        assert held[name].end_s - held[name].spec.arrival_s < at_once[name].end_s - at_once[name].spec.arrival_s


def test_the_wait_is_bounded_even_when_nothing_else_happens() -> None:
    # With c running for hours nothing arrives or ends while b waits: the policy's wake-up places it when its hold
    # runs out.
    jobs = run(scenario(c_iterations=20_000), max_hold_s=30.0)
    # (2.3 + 30) - 2.3 is a hair short of 30 in floating point: the hold must still count as run out.
    assert jobs["b"].start_s == pytest.approx(32.3, abs=1e-6) and jobs["b"].nodes.tolist() == [0, 1]


def test_the_baselines_never_hold() -> None:
    assert run(scenario(), "volcano-topology")["b"].start_s == pytest.approx(2.3)


def test_a_scenario_sets_the_bound_under_policy() -> None:
    data = {"name": "p", "topology": {"racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8, "nic_gbps": 100},
            "jobs": [{"name": "x", "workers": 1, "profile": QUIET.to_dict()}]}
    assert parse_sim(data).scenario.policy.max_hold_s == 60.0
    assert parse_sim({**data, "policy": {"max_hold_s": 0}}).scenario.policy.max_hold_s == 0.0
    with pytest.raises(InvalidInput, match=r"policy.max_hold_s: got 4000, expected a number in \[0, 3600\]"):
        parse_sim({**data, "policy": {"max_hold_s": 4000}})


@pytest.mark.parametrize("d_priority, overtaken", [(0, 1), (10, 0)])
def test_a_lower_priority_that_takes_a_held_gangs_room_is_counted(d_priority: int, overtaken: int) -> None:
    """``b`` (priority 10) is held from 2.3 s; ``d`` (one quiet worker of 2 GPUs) arrives at 3 s, and the only
    room left is b's, on a's nodes: d takes it either way (as behind any gang that does not fit), and b waits for
    c's node. Of lower priority, that is counted (the controller announces it)."""
    sim = scenario(b_priority=10, more=({"name": "d", "arrival_s": 3.0, "workers": 1, "gpus_per_worker": 2,
                                         "iterations": 10, "priority": d_priority, "profile": QUIET.to_dict()},))
    policy = make("metronome", Context(sim.scenario, sim.scenario.topology.build(), 0))
    jobs = {j.spec.name: j for j in Engine(sim, sim.jobs(0), policy).run().jobs}
    assert jobs["d"].start_s == pytest.approx(3.0) and jobs["d"].nodes.tolist() in ([0], [1])
    assert jobs["b"].start_s == pytest.approx(jobs["c"].end_s) and jobs["b"].nodes.tolist() == [2]
    assert policy.stats.extra["held_gangs"] == 1 and policy.stats.extra["holds_overtaken"] == overtaken
