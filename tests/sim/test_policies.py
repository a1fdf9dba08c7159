"""Each baseline does what it models, at its strongest; metronome drives the real core."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from volcano_metronome.core.profile import Profile, Window
from volcano_metronome.scenario import JobSpec, parse
from volcano_metronome.sim.engine import Engine
from volcano_metronome.sim.policies import POLICIES, Context, SimPolicy, make, parse_names
from volcano_metronome.sim.policies.common import placeable
from volcano_metronome.sim.workload import SimScenario, parse_sim
from volcano_metronome.core.errors import InvalidInput

PROFILE = Profile(200.0, (Window(100.0, 50.0, 80.0),), 0.0)


def ctx(racks: int = 2, nodes: int = 4, gpus: int = 4, nic: float = 100.0, uplink: float = 200.0,
        policy: dict[str, object] | None = None) -> Context:
    data = {"name": "t", "topology": {"racks": racks, "nodes_per_rack": nodes, "gpus_per_node": gpus,
                                      "nic_gbps": nic, "uplink_gbps": uplink},
            "policy": policy or {},
            "jobs": [{"name": "x", "workers": 1, "profile": PROFILE.to_dict()}]}
    scenario = parse(data)
    return Context(scenario, scenario.topology.build(), seed=0)


def job(name: str, workers: int, gpus: int = 1, priority: int = 0, arrival: float = 0.0,
        profile: Profile = PROFILE) -> JobSpec:
    return JobSpec(name, arrival, workers, gpus, 10, priority, profile)


def placed(policy: SimPolicy, *jobs: JobSpec, now: float = 0.0) -> dict[str, tuple[list[int], list[int], float | None]]:
    return {p.uid: (p.nodes.tolist(), p.members.tolist(), p.offset_ms) for p in policy.schedule(now, list(jobs))}


def test_default_spreads_members_over_the_least_allocated_nodes() -> None:
    policy = make("default", ctx())
    out = placed(policy, job("a", 6))
    nodes, members, offset = out["a"]
    assert len(nodes) == 6 and members == [1] * 6 and offset is None


def test_volcano_topology_packs_into_one_node_then_one_rack_binpacked() -> None:
    policy = make("volcano-topology", ctx())
    out = placed(policy, job("one-node", 3), job("one-rack", 6))
    assert out["one-node"][0] == [0] and out["one-node"][1] == [3]
    # Binpack: the fuller rack (rack 0, where one-node sits) and its fullest node (the 1 GPU left) first.
    nodes, members, _ = out["one-rack"]
    assert nodes == [0, 1, 2] and members == [1, 4, 1]


def test_volcano_topology_spans_the_fewest_racks_when_no_rack_fits() -> None:
    policy = make("volcano-topology", ctx())
    nodes, members, _ = placed(policy, job("big", 20))["big"]
    assert sum(members) == 20 and len(nodes) == 5


def test_exclusive_admits_only_when_the_peak_fits_every_link_else_waits() -> None:
    policy = make("exclusive", ctx(racks=1, nodes=2, gpus=4))
    assert placed(policy, job("a", 2, gpus=3))["a"][0] == [0, 1]
    # c fits only across both nodes (1 GPU left on each), whose NICs hold a's 80 Gbps: 80 + 80 > 100.
    assert placed(policy, job("c", 2, gpus=1)) == {}
    # A gang that fits on one node loads no link and is admitted.
    policy.release(1.0, "a")
    assert placed(policy, job("c", 2, gpus=1)) == {"c": ([0], [2], None)}


# One node holds one of two 4-GPU gangs: the one the queue puts first runs. ``high`` (priority 10)
# arrives after ``low`` (priority 0); with aging (1 point a minute) ``low`` has caught up after 10
# minutes of ``high``'s arrival, not after 100 s.
QUEUE_CASES = [
    ({"ordering": "FIFO"}, 1.0, 1.0, "low"),
    ({"ordering": "StrictPriority"}, 1.0, 1.0, "high"),
    ({}, 1.0, 1.0, "high"),  # the default QueuePolicy orders StrictPriority
    ({"ordering": "PriorityWithAging", "aging_per_minute": 1.0}, 100.0, 200.0, "high"),
    ({"ordering": "PriorityWithAging", "aging_per_minute": 1.0}, 700.0, 1000.0, "low"),
]


@pytest.mark.parametrize("name", sorted(POLICIES))
@pytest.mark.parametrize(("queue", "high_arrives", "now", "first"), QUEUE_CASES)
def test_every_policy_orders_its_queue_as_the_scenario_says(name: str, queue: dict[str, object], high_arrives: float,
                                                            now: float, first: str) -> None:
    # The queue order is the host scheduler's, so the policies differ in placement and timing only.
    low, high = job("low", 4, arrival=0.0), job("high", 4, priority=10, arrival=high_arrives)
    policy = make(name, ctx(racks=1, nodes=1, gpus=4, policy=queue))
    assert list(placed(policy, low, high, now=now)) == [first]


def test_cassini_rotates_the_second_gang_into_the_first_ones_gap() -> None:
    policy = make("cassini", ctx(racks=1, nodes=2, gpus=4))
    a = placed(policy, job("a", 2, gpus=3))["a"]
    b = placed(policy, job("b", 2, gpus=1))["b"]
    assert a[0] == b[0] == [0, 1]
    # Windows of 50 ms in 200 ms at 80 of 100 Gbps: b must not overlap a's window.
    assert a[2] is not None and b[2] is not None and (b[2] - a[2]) % 200 >= 50 and (a[2] - b[2]) % 200 >= 50


def test_cassini_discards_candidates_whose_affinity_graph_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    from volcano_metronome.sim.policies import cassini

    proposals = {"a": [[0, 1]], "b": [[1, 2]], "g": [[0, 2], [2, 3]], "h": [[0, 3]]}

    def lowest_tier(free: np.ndarray, rack: np.ndarray, spec: JobSpec) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(np.array(nodes), np.ones(len(nodes), dtype=np.int64)) for nodes in proposals[spec.name]]

    monkeypatch.setattr(cassini, "lowest_tier", lowest_tier)
    policy = make("cassini", ctx(racks=1, nodes=4, gpus=4))
    placed(policy, job("a", 2))
    placed(policy, job("b", 2))  # shares node 1's NIC with a: one component {a, b}
    # g on nodes 0 and 2 would meet that component twice (a on NIC 0, b on NIC 2): a loop, discarded.
    assert placed(policy, job("g", 2))["g"][0] == [2, 3]
    assert policy.counts["discarded_loops"] == 1  # type: ignore[attr-defined]
    # h on nodes 0 and 3 meets a on NIC 0 and g on NIC 3, again one component: only candidate, taken anyway.
    assert placed(policy, job("h", 2))["h"][0] == [0, 3]
    assert policy.counts["looped_all"] == 1  # type: ignore[attr-defined]


def test_cassini_keeps_a_gang_joining_two_components_clear_of_both() -> None:
    policy = make("cassini", ctx(racks=1, nodes=4, gpus=4))
    a = placed(policy, job("a", 2, gpus=3))["a"]  # nodes 0, 1
    b = placed(policy, job("b", 2, gpus=3))["b"]  # nodes 2, 3
    assert a[0] == [0, 1] and b[0] == [2, 3] and a[2] == b[2] == 0.0
    # c needs nodes 1 and 2 (1 GPU left on each node): it meets a on NIC 1 and b on NIC 2, two components.
    c = placed(policy, job("c", 4, gpus=1))["c"]
    moved = dict(policy.shifts())
    offsets = {"a": moved.get("a", a[2]), "b": moved.get("b", b[2]), "c": c[2]}
    for other in ("a", "b"):
        gap = (offsets["c"] - offsets[other]) % 200  # type: ignore[operator]
        assert 50 <= gap <= 150, (other, offsets)


def placed_nodes(policy: SimPolicy, uid: str) -> list[int]:
    return policy.snapshot.placed[uid].nodes.tolist()  # type: ignore[attr-defined, no-any-return]


def test_metronome_decides_with_the_core_and_times_each_decision() -> None:
    policy = make("metronome", ctx(racks=1, nodes=2, gpus=4))
    a = placed(policy, job("a", 2, gpus=3))["a"]
    assert a[2] is None and policy.shifts() == []  # alone on its NICs: no offset published, it runs free
    b = placed(policy, job("b", 2, gpus=1))["b"]
    (lock,) = policy.shifts()  # b shares a's NICs: a is locked at its provisional offset
    assert lock[0] == "a" and lock[1] is not None
    assert a[0] == b[0] == [0, 1] and b[2] is not None
    assert (b[2] - lock[1]) % 200 >= 50 and (lock[1] - b[2]) % 200 >= 50
    assert len(policy.stats.decision_ms) == 2 and all(ms > 0 for ms in policy.stats.decision_ms)
    policy.finish()
    assert policy.stats.extra["link_sharing_decisions"] == 1
    assert policy.stats.extra["zero_overflow_fraction"] == 1.0
    policy.release(1.0, "a")
    assert "a" not in policy.snapshot.placed  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_times_the_decisions_that_placed_a_gang_and_only_those(name: str) -> None:
    """``decision_ms`` compares like with like: a gang that does not fit is retried every cycle, untimed."""
    policy = make(name, ctx(racks=1, nodes=2, gpus=4))
    out = placed(policy, job("fits", 2, gpus=4), job("never", 3, gpus=4))  # 12 GPUs asked of 8
    assert set(out) == {"fits"} and len(policy.stats.decision_ms) == 1
    placed(policy, job("never", 3, gpus=4), now=1.0)
    assert len(policy.stats.decision_ms) == 1


def test_a_gang_on_one_node_gets_no_offset_under_phased_policies() -> None:
    for name in ("metronome", "cassini"):
        out = placed(make(name, ctx()), job("tiny", 2))
        assert out["tiny"][0] == [0] and out["tiny"][2] is None


def test_policy_names_are_checked() -> None:
    assert parse_names("metronome, default,metronome") == ["metronome", "default"]
    with pytest.raises(InvalidInput, match=r"^--policies: got 'kube', expected one of default, volcano-topology"):
        parse_names("kube")
    with pytest.raises(InvalidInput, match=r"^policy: got 'x', expected one of"):
        make("x", ctx())


@pytest.mark.parametrize("name", ["metronome", "cassini"])
def test_a_gang_with_a_free_choice_gets_the_offset_that_starts_at_once(name: str) -> None:
    from volcano_metronome.core.grid import SlotGrid
    from volcano_metronome.sim.policies.common import first_slot

    # The engine starts compute at placement, so the burst is ready at now + window start: offset = now.
    assert first_slot(12.3456, SlotGrid(), 40) == 30  # 12345.6 ms -> slot 2470 (rounded up) -> 2470 % 40
    assert first_slot(0.0, SlotGrid(), 40) == 0
    policy = make(name, ctx(racks=1, nodes=2, gpus=4))
    now = 7.013  # 7013 ms: slot 1403 rounded up, 1403 % 40 = 3, i.e. 15 ms
    (a,) = policy.schedule(now, [job("a", 2, gpus=3, arrival=now)])
    # b must avoid a's window (150..200 ms of a's period, shifted by a's offset): the soonest free offset
    # counted from b's own phase wins among the equally good ones.
    later = 7.201  # 7201 ms -> slot 1441, 1441 % 40 = 1, i.e. 5 ms
    (b,) = policy.schedule(later, [job("b", 2, gpus=1, arrival=later)])
    # metronome publishes a's (provisional) offset only when b locks it.
    a_offset = a.offset_ms if name == "cassini" else dict(policy.shifts())["a"]
    assert a_offset == 15.0
    assert b.offset_ms is not None
    assert (b.offset_ms - a_offset) % 200 >= 50 and (a_offset - b.offset_ms) % 200 >= 50
    lateness = (b.offset_ms - 5.0) % 200
    for offset in range(0, 200, 5):
        clear = (offset - a_offset) % 200 >= 50 and (a_offset - offset) % 200 >= 50
        if clear:
            assert lateness <= (offset - 5.0) % 200, (offset, b.offset_ms)


def test_a_gang_placed_on_a_quiet_network_starts_without_padding(sanity: SimScenario) -> None:
    from volcano_metronome.sim.engine import Engine

    late = JobSpec("late", 0.337, 2, 6, 20, 0, PROFILE)
    # cassini aligns every gang: the earliest tie-break makes it start within one 5 ms slot, not a period.
    (run,) = Engine(sanity, [late], "cassini").run().jobs
    assert run.aligned and run.first_wait_s < 0.005
    assert run.end_s - run.start_s == pytest.approx(run.isolated_s, abs=0.005)
    # metronome does not align a gang nobody shares links with (lock on demand): no wait at all.
    (run,) = Engine(sanity, [late], "metronome").run().jobs
    assert not run.aligned and run.padded_s == 0.0
    assert run.end_s - run.start_s == pytest.approx(run.isolated_s)


def test_metronome_free_places_like_metronome_but_publishes_no_phase() -> None:
    jobs = [job("a", 2, gpus=3), job("b", 2, gpus=1)]  # both must span the two nodes
    ours, free = make("metronome", ctx(racks=1, nodes=2, gpus=4)), make("metronome-free", ctx(racks=1, nodes=2, gpus=4))
    theirs = {p.uid: p for p in ours.schedule(0.0, jobs)}
    mine = {p.uid: p for p in free.schedule(0.0, jobs)}
    assert list(mine) == list(theirs)
    for uid, p in mine.items():
        assert p.nodes.tolist() == theirs[uid].nodes.tolist() and p.members.tolist() == theirs[uid].members.tolist()
        assert p.offset_ms is None and p.period_ms is None
    assert any(p.period_ms is not None for p in theirs.values())  # metronome phases at least one of them
    ours.release(1.0, "a")
    free.release(1.0, "a")
    ours.schedule(1.0, [])
    free.schedule(1.0, [])
    assert free.shifts() == []


def _room_now(free: np.ndarray, spec: JobSpec) -> bool:
    """The obvious check, made afresh: do the free GPUs hold every worker?"""
    return spec.gpus_per_worker == 0 or int((np.maximum(free, 0) // spec.gpus_per_worker).sum()) >= spec.workers


@settings(max_examples=200, deadline=None)
@given(free=st.lists(st.integers(0, 8), min_size=1, max_size=6),
       shapes=st.lists(st.tuples(st.integers(1, 12), st.sampled_from([0, 1, 2, 4, 8]), st.booleans()), max_size=30))
def test_placeable_skips_exactly_the_gangs_with_no_room_as_they_come_up(
        free: list[int], shapes: list[tuple[int, int, bool]]) -> None:
    # A policy between the yields takes GPUs (free only shrinks within a cycle): the memo of shapes found
    # without room must never skip a gang the free GPUs hold at its turn, nor offer one they do not.
    gpus = np.array(free, dtype=np.int64)
    jobs = [job(f"j{i}", workers, gpus=per) for i, (workers, per, _) in enumerate(shapes)]
    take = {f"j{i}": taken for i, (_, _, taken) in enumerate(shapes)}
    offered = iter(placeable(jobs, gpus))
    for spec in jobs:
        if _room_now(gpus, spec):
            assert next(offered).name == spec.name
            if take[spec.name] and spec.gpus_per_worker:
                left = spec.workers
                for node in range(len(gpus)):  # first fit, as any placement: only shrinks free
                    n = min(left, int(gpus[node]) // spec.gpus_per_worker)
                    gpus[node] -= n * spec.gpus_per_worker
                    left -= n
    assert next(offered, None) is None


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_skipping_gangs_without_room_changes_no_placement(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A long queue on a full cluster, mixed shapes and priorities: every job's start and end are those of
    # a run that offers each policy the whole queue every cycle.
    data = {"name": "queue", "topology": {"racks": 2, "nodes_per_rack": 2, "gpus_per_node": 4,
                                          "nic_gbps": 100, "uplink_gbps": 100},
            "generate": {"count": 60, "seed": 7, "arrival": {"process": "poisson", "rate_per_min": 600},
                         "mix": {"vgg11": 1, "bert-base": 1},
                         "shapes": [{"workers": 2, "gpus_per_worker": 1, "weight": 2},
                                    {"workers": 3, "gpus_per_worker": 2, "weight": 1},
                                    {"workers": 1, "gpus_per_worker": 4, "weight": 1},
                                    {"workers": 6, "gpus_per_worker": 2, "weight": 1}],
                         "iterations": [5, 40], "priorities": {0: 1, 10: 1}}}
    sim = parse_sim(data)
    jobs = sim.jobs(0)

    def times() -> list[tuple[str, float, float]]:
        run = Engine(sim, jobs, name, 0).run()
        return [(j.spec.name, j.start_s, j.end_s) for j in run.jobs]

    skipping = times()
    for module in [m for n, m in sys.modules.items() if n.startswith("volcano_metronome.sim.policies.")]:
        if hasattr(module, "placeable"):
            monkeypatch.setattr(module, "placeable", lambda jobs, free: iter(jobs))
    assert times() == skipping
    assert max(start - j.arrival_s for j, (_, start, _) in zip(jobs, skipping)) > 30.0  # the queue was long
