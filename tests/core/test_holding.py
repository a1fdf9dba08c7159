"""Holding a gang back where every node set it fits would collide heavily (core.holding)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.core.builders import empty, gang, two_nodes
from volcano_metronome.core.cycle import commit
from volcano_metronome.core.decision import Decision, NoFit, decide
from volcano_metronome.core.holding import HELD, HOLD_COST, Hold, collision_share, decide_or_hold, hold, passes
from volcano_metronome.core.model import Gang, Policy
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.core.topology import leaf_spine

POLICY = Policy()


def beside_a_twin(burst_ms: float, period_ms: float = 200.0, start_ms: float = 0.0) -> tuple[Snapshot, Decision]:
    """Gang b's decision on two nodes whose NICs gang a, its twin (a full-rate burst of ``burst_ms`` every
    ``period_ms``), already loads: 3 GPUs a node, a takes 2 on each, so b's two 1-GPU members can only go one to
    a node."""
    snap = empty(two_nodes(), 3)
    a = gang("a", gpus=2, period=period_ms, start=start_ms, length=burst_ms)
    first = decide(snap, a, POLICY)
    assert isinstance(first, Decision)
    commit(snap, a, first)
    second = decide(snap, gang("b", gpus=1, period=period_ms, start=start_ms, length=burst_ms), POLICY)
    assert isinstance(second, Decision) and len(second.nodes) == 2
    return snap, second


@pytest.mark.parametrize("burst_ms", [140.0, 160.0, 180.0, 195.0])
def test_the_collision_share_is_both_sides_overlap_at_a_random_phase(burst_ms: float) -> None:
    # Two full-rate bursts of L ms every P ms overlap L^2 / P ms a period on average over the phase; the overflow
    # drains at the link's rate, and each collision delays both gangs: 2 L^2 / P^2 of the time.
    snap, d = beside_a_twin(burst_ms)
    assert not d.locked
    assert collision_share(snap, d) == pytest.approx(2 * burst_ms ** 2 / 200.0 ** 2, rel=0.02)


def test_a_gang_that_would_more_than_double_its_neighbours_time_waits_up_to_max_hold_seconds() -> None:
    snap, d = beside_a_twin(180.0)  # 1.62 x the time in collisions
    for held_s in (0.0, 59.9):
        held = hold(snap, d, POLICY, held_s)
        assert isinstance(held, NoFit) and held.uid == "b"
        assert held.reason.startswith(HELD) and "1.62 x" in held.reason and "maxHoldSeconds (60 s)" in held.reason
    assert hold(snap, d, POLICY, 60.0) is None  # waited long enough: placed where it fits
    assert hold(snap, d, dataclasses.replace(POLICY, max_hold_s=0.0), 0.0) is None  # 0 never holds


def test_lighter_collisions_locked_gangs_and_gangs_on_no_link_are_never_held() -> None:
    snap, d = beside_a_twin(140.0)  # 0.98 x the time: below the threshold
    assert collision_share(snap, d) < HOLD_COST and hold(snap, d, POLICY, 0.0) is None
    snap, d = beside_a_twin(100.0)  # half the period: they interleave, b is locked
    assert d.locked and collision_share(snap, d) == 0.0 and hold(snap, d, POLICY, 0.0) is None
    alone = decide(empty(two_nodes(), 3), gang("c", gpus=1, start=0.0, length=195.0), POLICY)
    assert isinstance(alone, Decision) and not alone.links and hold(snap, alone, POLICY, 0.0) is None


def test_bursts_shorter_than_their_slots_are_weighed_by_their_volume() -> None:
    # Round 33 (fuzz 586): a 4 ms burst every 8.4 ms on 5 ms slots was laid as two whole slots at line rate, a
    # burst as long as its period, so the core expected collisions of 2 x the time and held the gang. At a
    # random phase two such twins collide 2 L^2 / P^2 = 0.45 x the time, under the hold's threshold.
    snap, d = beside_a_twin(4.0, period_ms=8.4, start_ms=2.0)
    assert collision_share(snap, d) < HOLD_COST
    assert hold(snap, d, POLICY, 0.0) is None


def test_a_gang_about_to_be_held_takes_an_untouched_rack_where_one_holds_it_cleanly() -> None:
    """Binpacking keeps a rack no gang uses whole (core.placement), so b's only candidates share a NIC with a;
    before holding b, the untouched rack is offered, and taken. Where b would not be held, the binpack stands."""
    for burst_ms, held in ((180.0, True), (100.0, False)):
        snap = empty(leaf_spine(2, 3, 100.0, 400.0), 2)  # nodes of 2 GPUs: no gang of 3 fits one
        a = gang("a", size=3, gpus=1, start=0.0, length=burst_ms)
        first = decide(snap, a, POLICY)
        assert isinstance(first, Decision) and {n[:6] for n in first.nodes} == {"rack-0"}
        commit(snap, a, first)
        b = gang("b", size=3, gpus=1, start=0.0, length=burst_ms)
        packed = decide(snap, b, POLICY)
        assert isinstance(packed, Decision) and {n[:6] for n in packed.nodes} == {"rack-0"}
        assert (hold(snap, packed, POLICY, 0.0) is not None) is held
        chosen = decide_or_hold(snap, b, POLICY, 0.0)
        assert isinstance(chosen, Decision)
        assert {n[:6] for n in chosen.nodes} == ({"rack-1"} if held else {"rack-0"})
        assert chosen.nodes == packed.nodes or collision_share(snap, chosen) == 0.0


def test_with_no_untouched_rack_the_gang_is_held() -> None:
    snap, d = beside_a_twin(180.0)
    held, expected = decide_or_hold(snap, gang("b", gpus=1, start=0.0, length=180.0), POLICY, 0.0), hold(snap, d, POLICY, 0.0)
    assert isinstance(held, NoFit) and expected is not None and held.reason == expected.reason
    assert isinstance(decide_or_hold(snap, gang("b", gpus=1, start=0.0, length=180.0), POLICY, 60.0), Decision)


def held_on_seven_gpu_nodes(priority: int) -> tuple[Snapshot, list[tuple[Gang, Hold]]]:
    """Twins a and b on two nodes of 7 GPUs: a takes 4 on each; b (``priority``, members of 2 GPUs) can only go
    one to a node, and is held, its best node set both nodes."""
    snap = empty(two_nodes(), 7)
    a = gang("a", gpus=4, start=0.0, length=180.0)
    first = decide(snap, a, POLICY)
    assert isinstance(first, Decision)
    commit(snap, a, first)
    b = gang("b", gpus=2, start=0.0, length=180.0, priority=priority)
    why = decide_or_hold(snap, b, POLICY, 0.0)
    assert isinstance(why, Hold) and sorted(why.best.nodes) == sorted(snap.topology.nodes)
    return snap, [(b, why)]


@pytest.mark.parametrize("gpus, priority, passed", [
    (2, 0, True),  # lower priority, leaves the node 1 GPU where b's member needs 2
    (1, 0, False),  # lower priority, leaves the 2 GPUs b's member needs
    (2, 5, False),  # the same priority: the queue's order stands
    (2, 9, False),  # higher priority
])
def test_a_lower_priority_passes_a_held_gang_only_where_it_takes_the_room_the_held_gang_needs(
        gpus: int, priority: int, passed: bool) -> None:
    snap, held = held_on_seven_gpu_nodes(priority=5)
    later = gang("d", size=1, gpus=gpus, priority=priority, start=0.0, length=10.0)
    d = decide(snap, later, POLICY)
    assert isinstance(d, Decision) and len(d.nodes) == 1
    assert passes(snap, held, later, d) == (held[0] if passed else None)


def test_a_hold_is_a_no_fit_that_keeps_the_decision_it_was_held_from() -> None:
    snap, [(b, why)] = held_on_seven_gpu_nodes(priority=0)
    assert isinstance(why, NoFit) and why.reason.startswith(HELD)
    assert why.best.uid == "b" and not why.best.locked
    assert collision_share(snap, why.best) >= HOLD_COST


@pytest.mark.parametrize("value", [-1.0, 3600.5, float("nan"), True])
def test_max_hold_seconds_is_bounded(value: object) -> None:
    with pytest.raises(Exception, match="max_hold_s"):
        Policy(max_hold_s=value)  # type: ignore[arg-type]
