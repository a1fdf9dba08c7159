"""Traffic classes (``core.classes``): the rule, and the class a decision carries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.core.builders import empty, gang, ring, two_nodes
from volcano_metronome.core.classes import next_class
from volcano_metronome.core.cycle import commit
from volcano_metronome.core.decision import Decision, decide
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.grid import SlotGrid
from volcano_metronome.core.model import MAX_TRAFFIC_CLASSES, ClusterState, Policy, Running
from volcano_metronome.core.snapshot import Snapshot

CLASSES = Policy(traffic_classes=4)


def placed(snap: Snapshot, g, policy: Policy = CLASSES) -> Decision:
    d = decide(snap, g, policy)
    assert isinstance(d, Decision)
    commit(snap, g, d)
    return d


def test_the_rule_never_serves_a_newcomer_before_an_incumbent() -> None:
    assert next_class([], 4) == 0
    assert next_class([0], 4) == 1
    assert next_class([2, 0], 4) == 3  # after the lowest-served, not into the first free class
    assert next_class([3], 4) == 3  # the classes ran out: newcomers share the last
    assert next_class([None], 4) == 1  # a gang given no class runs in the fabric's default, counted as 0


@given(st.lists(st.one_of(st.none(), st.integers(0, 15)), max_size=8), st.integers(2, 16))
def test_the_rule_against_its_statement(neighbours: list[int | None], classes: int) -> None:
    neighbours = [k if k is None else min(k, classes - 1) for k in neighbours]
    got = next_class(neighbours, classes)
    assert 0 <= got < classes
    served = [0 if k is None else k for k in neighbours]
    if not served:
        assert got == 0
    elif max(served) < classes - 1:
        assert got == max(served) + 1  # right after the lowest-served incumbent
    else:
        assert got == classes - 1


def test_a_decision_carries_a_class_only_where_the_policy_hands_them_out() -> None:
    snap = empty(two_nodes(), 8)
    assert placed(snap, gang("a", 2, 6), Policy()).traffic_class is None
    snap = empty(two_nodes(), 8)
    assert placed(snap, gang("a", 2, 6)).traffic_class == 0
    one_node = decide(snap, gang("c", 1, 2), CLASSES)  # loads no link: shares none with a
    assert placed(snap, gang("b", 2, 2)).traffic_class == 1  # shares both NICs with a
    assert isinstance(one_node, Decision) and one_node.links == () and one_node.traffic_class == 0


def test_only_the_gangs_on_its_links_count() -> None:
    snap = empty(ring(4), 1)
    first = placed(snap, gang("a", 2, 1))
    second = placed(snap, gang("b", 2, 1))
    assert first.traffic_class == 0
    # b shares no NIC with a (four nodes, one GPU each): it is served first too
    assert set(first.nodes).isdisjoint(second.nodes) and second.traffic_class == 0


def test_running_gangs_bring_their_published_class_into_the_snapshot() -> None:
    topo = two_nodes()
    a = gang("a", 2, 6)
    running = Running(a, tuple(topo.nodes), (1, 1), 0.0, traffic_class=2)
    snap = Snapshot.build(ClusterState(topo, (2, 2), (running,)), SlotGrid())
    assert snap.classes == {"a": 2}
    d = decide(snap, gang("b", 2, 2), CLASSES)
    assert isinstance(d, Decision) and d.traffic_class == 3


@pytest.mark.parametrize("value", [-1, MAX_TRAFFIC_CLASSES + 1, 2.0, True, "4"])
def test_a_policy_s_class_count_is_bounded(value: object) -> None:
    with pytest.raises(InvalidInput, match="policy.traffic_classes"):
        Policy(traffic_classes=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, MAX_TRAFFIC_CLASSES, 1.0, True])
def test_a_running_gang_s_class_is_bounded(value: object) -> None:
    topo = two_nodes()
    with pytest.raises(InvalidInput, match="traffic_class"):
        Running(gang("a", 2, 6), tuple(topo.nodes), (1, 1), 0.0, traffic_class=value)  # type: ignore[arg-type]


def three_on_two_nodes(policy: Policy) -> list[Decision]:
    """Gangs of two members, 5, 2 and 1 GPUs each: every one spans both nodes and shares both NICs, contended
    (80 Gbps bursts on 100 Gbps NICs)."""
    snap = empty(two_nodes(), 8)
    return [placed(snap, gang(uid, 2, gpus, start=176, length=24, gbps=80), policy)
            for uid, gpus in (("a", 5), ("b", 2), ("c", 1))]


def test_a_gang_beside_gangs_of_other_classes_runs_free_where_it_would_have_locked() -> None:
    plain, classed = three_on_two_nodes(Policy()), three_on_two_nodes(Policy(traffic_classes=2))
    assert [d.traffic_class for d in classed] == [0, 1, 1]
    # Placement and offsets are the same; the priority interleaves b beside a, so b locks nobody.
    for d, e in zip(plain, classed):
        assert (d.nodes, d.members, d.offset_ms) == (e.nodes, e.members, e.offset_ms)
    assert plain[1].locked and plain[1].locks == ("a",)
    assert not classed[1].locked and classed[1].locks == () and classed[1].relocations == ()
    # The classes ran out: c shares b's class, and is locked as decided, with the gangs it must align.
    assert classed[2].locked and set(classed[2].locks) == {"a", "b"}


def test_a_gang_whose_bursts_cannot_fit_beside_theirs_shares_their_class_instead_of_starving() -> None:
    # Bursts of 120 ms in 200 on both NICs: no offset keeps the two apart, so a class below a's would
    # leave b only a's gaps, too short for its bursts; it shares class 0 with a, fairly.
    snap = empty(two_nodes(), 8)
    a = placed(snap, gang("a", 2, 5, start=80, length=120, gbps=80))
    b = placed(snap, gang("b", 2, 2, start=80, length=120, gbps=80))
    assert b.overflow_gbps_ms > 0 and (a.traffic_class, b.traffic_class) == (0, 0)


def test_the_snapshot_drops_a_class_with_its_gang_and_with_the_cycle_that_placed_it() -> None:
    snap = empty(two_nodes(), 8)
    placed(snap, gang("a", 2, 6))
    snap.touched = {}  # a cycle: b placed, then undone
    placed(snap, gang("b", 2, 2))
    assert snap.classes == {"a": 0, "b": 1}
    snap.rollback()
    assert snap.classes == {"a": 0}
    snap.depart("a")
    assert snap.classes == {} and "a" not in snap.placed


def test_a_running_gang_without_a_class_clears_the_one_its_uid_had() -> None:
    topo = two_nodes()
    snap = empty(topo, 8)
    a = gang("a", 2, 6)
    snap.assume_running(Running(a, tuple(topo.nodes), (1, 1), 0.0, traffic_class=2))
    snap.forget("a")
    snap.assume_running(Running(a, tuple(topo.nodes), (1, 1), 0.0))  # placed again where the policy lists none
    assert snap.classes == {}
