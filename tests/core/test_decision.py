"""Decisions: sanity cases, capacity safety, priority protection, determinism, optimality."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core import reference
from tests.core.builders import empty, gang, two_nodes
from volcano_metronome.core.cycle import commit, schedule
from volcano_metronome.core.decision import OVERFILL, Decision, NoFit, decide, free_reason
from volcano_metronome.core.grid import SlotGrid, dilate, lay_out
from volcano_metronome.core.model import Policy
from volcano_metronome.core.ordering import order
from volcano_metronome.core.topology import leaf_spine
from volcano_metronome.core.traffic import loaded_links

POLICY = Policy()


def test_two_full_rate_half_duty_gangs_interleave_100_ms_apart():
    snap = empty(two_nodes(), 8)
    a, b = gang("a", 2, 6), gang("b", 2, 2)
    da = decide(snap, a, POLICY)
    assert isinstance(da, Decision)
    commit(snap, a, da)
    db = decide(snap, b, POLICY)
    assert isinstance(db, Decision) and db.feasible
    assert db.overflow_gbps_ms == 0.0
    assert (db.offset_ms - da.offset_ms) % 200.0 == 100.0
    assert set(db.nodes) == set(da.nodes) == {"rack-0-node-0", "rack-0-node-1"}


def test_a_gang_that_fits_on_one_node_loads_no_link():
    snap = empty(two_nodes(), 8)
    d = decide(snap, gang("a", 4, 2), POLICY)
    assert isinstance(d, Decision) and d.links == () and len(d.nodes) == 1 and d.feasible


def test_mean_load_above_capacity_is_infeasible_at_every_offset():
    always = Policy(lock_on_demand=False)  # every gang locked at its grid snap: no period is stretched
    snap = empty(two_nodes(), 8)
    commit(snap, g := gang("a", 2, 5, start=0.0, length=150.0), decide(snap, g, always))  # 75% duty at line rate
    second = gang("b", 2, 3, start=0.0, length=100.0, priority=0)  # 50% more: mean 125% of capacity
    d = decide(snap, second, always)
    assert isinstance(d, Decision) and not d.feasible
    assert d.overflow_gbps_ms == pytest.approx(4 * 100 * 50.0)  # 4 directed NIC links x 100 Gbps x 50 ms


def test_gangs_of_one_period_whose_bursts_overfill_it_take_turns_at_the_link_s_own_pace():
    # The same two gangs with lock on demand: of one exact period, so held up to OVERFILL longer; at 250 ms their
    # bursts fit end to end, the shortest cycle the link allows them anyway (250 ms of bursts at its capacity).
    snap = empty(two_nodes(), 8)
    commit(snap, g := gang("a", 2, 5, start=0.0, length=150.0), decide(snap, g, POLICY))
    d = decide(snap, gang("b", 2, 3, start=0.0, length=100.0, priority=0), POLICY)
    assert isinstance(d, Decision) and d.locked and d.feasible and d.overflow_gbps_ms == 0.0
    assert d.period_ms == 250.0 and d.periods == (("a", 250.0),)


def test_insufficient_gpus_is_a_no_fit_with_the_numbers():
    snap = empty(two_nodes(), 8)
    d = decide(snap, gang("a", 3, 8), POLICY)
    assert isinstance(d, NoFit)
    assert "insufficient GPUs" in d.reason and "3 members x 8 GPUs" in d.reason


def test_a_gang_restricted_to_some_nodes_is_placed_only_there():
    topo = leaf_spine(2, 4, 100.0, 200.0)
    snap = empty(topo, 8)
    allowed = frozenset(topo.nodes[4:7])  # three nodes of the second rack
    d = decide(snap, dataclasses.replace(gang("a", 3, 8), nodes=allowed), POLICY)
    assert isinstance(d, Decision) and set(d.nodes) == allowed
    d = decide(snap, dataclasses.replace(gang("b", 4, 8), nodes=allowed), POLICY)
    assert isinstance(d, NoFit) and "room for 3 members" in d.reason and "admit 3 of 8 nodes" in d.reason
    d = decide(snap, dataclasses.replace(gang("c", 1, 8), nodes=frozenset({"not-a-node"})), POLICY)
    assert isinstance(d, NoFit) and "admit 0 of 8 nodes" in d.reason


@settings(max_examples=40, deadline=None)
@given(st.sets(st.integers(0, 7), min_size=1), st.integers(1, 4), st.integers(1, 8))
def test_a_decision_never_leaves_the_nodes_its_gang_may_use(allowed: set[int], size: int, gpus: int):
    topo = leaf_spine(2, 4, 100.0, 200.0)
    names = frozenset(topo.nodes[i] for i in allowed)
    d = decide(empty(topo, 8), dataclasses.replace(gang("a", size, gpus), nodes=names), POLICY)
    fits = sum(8 // gpus for _ in allowed) >= size
    assert isinstance(d, Decision) == fits
    if isinstance(d, Decision):
        assert set(d.nodes) <= names


def test_a_lower_priority_gang_may_not_push_a_higher_one_into_overflow():
    snap = empty(two_nodes(), 8)
    high = gang("high", 2, 5, start=0.0, length=150.0, priority=10)
    commit(snap, high, decide(snap, high, POLICY))
    low = gang("low", 2, 3, start=0.0, length=100.0, priority=1)
    # Without lock on demand every gang is locked at its offset, so the tolerance decides admission.
    blocked = decide(snap, low, Policy(overflow_tolerance=0.0, lock_on_demand=False))
    assert isinstance(blocked, NoFit) and "priority protection" in blocked.reason
    allowed = decide(snap, low, Policy(overflow_tolerance=1.0, lock_on_demand=False))
    assert isinstance(allowed, Decision) and not allowed.feasible


def test_with_lock_on_demand_a_gang_that_would_overflow_a_higher_one_runs_free_instead_of_waiting():
    snap = empty(two_nodes(), 8)
    high = gang("high", 2, 5, start=0.0, length=150.0, priority=10)
    commit(snap, high, decide(snap, high, POLICY))
    low = gang("low", 2, 3, start=0.0, length=100.0, priority=1)
    strict = Policy(overflow_tolerance=0.0)
    free = decide(snap, low, strict)
    # Every offset overflows: no lock is possible, so its phase is not ours and it is not held back.
    assert isinstance(free, Decision) and not free.feasible and free.overflow_gbps_ms > 0
    assert not free.locked and free.locks == ()
    # The offset it is given provisionally is the least costly one, as with any tolerance.
    assert free.offset_slots == decide(snap, low, Policy(overflow_tolerance=1.0)).offset_slots


def test_a_higher_priority_gang_is_not_held_back_by_lower_ones():
    snap = empty(two_nodes(), 8)
    low = gang("low", 2, 5, start=0.0, length=150.0, priority=1)
    commit(snap, low, decide(snap, low, POLICY))
    high = gang("high", 2, 3, start=0.0, length=100.0, priority=10)
    assert isinstance(decide(snap, high, Policy(overflow_tolerance=0.0)), Decision)


def test_cushion_slots_keep_a_guard_between_windows():
    snap = empty(two_nodes(), 8)
    a = gang("a", 2, 5, start=0.0, length=95.0)
    commit(snap, a, decide(snap, a, POLICY))
    b = gang("b", 2, 3, start=0.0, length=95.0)
    assert decide(snap, b, Policy(cushion_slots=1)).feasible
    assert not decide(snap, b, Policy(cushion_slots=2)).feasible  # 10 ms of gaps cannot hold 2 x 2 guard slots


def test_cross_rack_candidates_are_used_only_when_no_rack_works():
    topo = leaf_spine(2, 2, 100.0, 100.0)
    snap = empty(topo, 8)
    d = decide(snap, gang("a", 2, 8), POLICY)
    assert isinstance(d, Decision) and d.racks == 1 and not any(l.startswith("rack:") for l in d.links)


@st.composite
def workloads(draw):
    racks = draw(st.integers(1, 2))
    topo = leaf_spine(racks, draw(st.integers(2, 3)), 100.0, 100.0 if racks > 1 else None)
    gangs = []
    for i in range(draw(st.integers(1, 8))):
        period = draw(st.sampled_from([40.0, 60.0, 80.0]))
        start = draw(st.integers(0, int(period) // 10 - 1)) * 10.0
        length = draw(st.integers(1, int(period - start) // 10)) * 10.0
        gangs.append(gang(f"g{i}", draw(st.integers(1, 4)), draw(st.integers(1, 4)), period, start, length,
                          draw(st.sampled_from([20.0, 50.0, 100.0])), draw(st.integers(0, 2)), float(i)))
    policy = Policy(cushion_slots=draw(st.integers(0, 1)), overflow_tolerance=draw(st.sampled_from([0.0, 0.05, 1.0])))
    return topo, gangs, policy


@given(workloads())
@settings(max_examples=60, deadline=None)
def test_feasible_decisions_never_exceed_capacity_and_gpus_never_go_negative(case):
    topo, gangs, policy = case
    snap = empty(topo, 4)
    for g in order(gangs, policy):
        result = decide(snap, g, policy)
        if not isinstance(result, Decision):
            continue
        commit(snap, g, result)
        assert (snap.free_gpus >= 0).all()
        if result.feasible:  # right after it is assumed: later misfits may overload the link on purpose
            placed = snap.placed[result.uid]
            links, _ = loaded_links(topo, placed.nodes)
            mask = np.tile(np.roll(placed.pattern.rates, placed.offset), snap.hyperperiod // placed.pattern.slots) > 0
            assert (snap.load[links][:, mask] <= topo.capacity_mbps[links][:, None]).all()


@given(workloads())
@settings(max_examples=30, deadline=None)
def test_schedule_is_deterministic_whatever_the_input_order(case):
    topo, gangs, policy = case
    first = schedule(empty(topo, 4), gangs, policy)
    second = schedule(empty(topo, 4), list(reversed(gangs)), policy)
    assert first == second


@given(workloads())
@settings(max_examples=40, deadline=None)
def test_chosen_offset_is_the_best_of_a_brute_force_search_on_the_chosen_nodes(case):
    topo, gangs, policy = case
    snap = empty(topo, 4)
    for g in gangs:
        d = decide(snap, g, policy)
        if not isinstance(d, Decision):
            continue
        pattern = lay_out(g.profile, snap.grid)
        links, mult = loaded_links(topo, topo.nodes_of(d.nodes))
        if len(links):
            base = snap.rows(links, pattern.slots)
            cap = topo.capacity_mbps[links]
            guarded = dilate(pattern.rates, pattern.guard_slots + policy.cushion_slots)
            fits = reference.fits(base, cap, mult, guarded)
            assert d.feasible == bool(fits[d.offset_slots])
            if fits.any():
                peaks = reference.peak_utilisation(base, cap, mult, pattern.rates)
                best = min(o for o in range(pattern.slots) if fits[o] and peaks[o] == peaks[fits].min())
                assert d.offset_slots == best
            elif snap.higher_rows(links, g.priority, pattern.slots) is None:
                over = reference.added_overflow(base, cap, mult, pattern.rates).sum(axis=0)
                assert over[d.offset_slots] == over.min()
        commit(snap, g, d)


def test_earliest_breaks_the_last_tie_towards_the_soonest_offset():
    snap = empty(two_nodes(), 8)
    a = gang("a", 2, 5)
    assert decide(snap, a, POLICY).offset_slots == 0
    assert decide(snap, a, POLICY, earliest=13).offset_slots == 13  # every offset is free: start soonest
    commit(snap, a, decide(snap, a, POLICY))  # a sends in slots 20..39
    b = gang("b", 2, 3)
    # b's window (slots 20..39 of its period) must land on 0..19: only offset 20 fits, whatever earliest says.
    assert decide(snap, b, POLICY, earliest=5).offset_slots == 20


def test_lock_on_demand_a_gang_runs_free_until_another_shares_its_links():
    snap = empty(two_nodes(), 8)
    a, b = gang("a", 2, 5), gang("b", 2, 3)
    da = decide(snap, a, POLICY)
    assert not da.locked and da.locks == ()
    commit(snap, a, da)
    assert not snap.placed["a"].locked
    db = decide(snap, b, POLICY)
    assert db.locked and db.locks == ("a",)
    commit(snap, b, db)
    assert snap.placed["a"].locked and snap.placed["b"].locked
    snap.forget("b")
    assert snap.unlockable() == ["a"]  # alone again: it may stop padding


def test_without_lock_on_demand_every_gang_is_locked():
    snap = empty(two_nodes(), 8)
    d = decide(snap, gang("a", 2, 5), Policy(lock_on_demand=False))
    assert d.locked and d.locks == ()


def test_without_lock_on_demand_a_short_iteration_on_long_slots_runs_free():
    # 6 ms iterations on 20 ms slots: a lock would hold each to 20 ms, 233 % longer (OVERFILL: 50 %).
    slots = SlotGrid.from_ms(20.0)
    always = Policy(lock_on_demand=False)
    snap = empty(two_nodes(), 8, slots)
    short = gang("short", 2, 5, period=6.0, start=1.0, length=2.0)
    d = decide(snap, short, always)
    assert isinstance(d, Decision) and not d.locked and d.period_ms == 20.0 and d.snapping_error > OVERFILL
    commit(snap, short, d)
    # A gang sharing its NICs is locked at its own grid snap (200 ms), and its lock does not take the short one along.
    long = gang("long", 2, 3, period=200.0)
    d = decide(snap, long, always)
    assert isinstance(d, Decision) and d.locked and d.locks == () and d.period_ms == 200.0
    commit(snap, long, d)
    assert not snap.placed["short"].locked and snap.placed["long"].locked


def test_why_a_gang_runs_free_is_said():
    snap = empty(two_nodes(), 8, SlotGrid.from_ms(20.0))
    short = decide(snap, gang("short", 2, 5, period=6.0, start=1.0, length=2.0), Policy(lock_on_demand=False))
    assert isinstance(short, Decision)
    assert free_reason(short) == "runs free: the grid would hold its iterations to 20 ms, 233% longer (at most 50%)"
    snap = empty(two_nodes(), 8)
    high = gang("high", 2, 5, start=0.0, length=150.0, priority=10)
    alone = decide(snap, high, POLICY)
    assert isinstance(alone, Decision) and free_reason(alone).startswith("shares no contended link: runs free")
    commit(snap, high, alone)
    # Every offset overflows (as above): no lock can be taken, so it runs free.
    low = decide(snap, gang("low", 2, 3, start=0.0, length=100.0, priority=1), Policy(overflow_tolerance=0.0))
    assert isinstance(low, Decision) and not low.locked and low.free_delay_ms > 0
    assert free_reason(low).startswith("runs free: a lock on its contended links would overflow, or pad more than it "
                                       "spares (collisions expected: ")


def test_without_lock_on_demand_a_gang_that_runs_free_is_not_refused_by_the_tolerance():
    slots = SlotGrid.from_ms(20.0)
    snap = empty(two_nodes(), 8, slots)
    high = gang("high", 2, 5, period=200.0, start=0.0, length=150.0, priority=10)
    commit(snap, high, decide(snap, high, Policy(lock_on_demand=False)))
    # Its burst overflows the NICs at its only offset; free, its phase is not ours, so it is not held back.
    low = gang("low", 2, 3, period=6.0, start=1.0, length=4.0, priority=1)
    d = decide(snap, low, Policy(overflow_tolerance=0.0, lock_on_demand=False))
    assert isinstance(d, Decision) and not d.locked and not d.feasible


def test_gangs_that_cannot_collide_are_not_locked():
    snap = empty(two_nodes(), 8)
    a = gang("a", 2, 5, gbps=40.0)
    commit(snap, a, decide(snap, a, POLICY))
    b = gang("b", 2, 3, gbps=50.0)  # 40 + 50 <= 100 Gbps: whatever their phases, the NICs never overflow
    db = decide(snap, b, POLICY)
    assert not db.locked and db.locks == ()
    commit(snap, b, db)
    assert not snap.placed["a"].locked and not snap.placed["b"].locked


def test_unlock_makes_an_offset_provisional_again():
    snap = empty(two_nodes(), 8)
    a, b = gang("a", 2, 5), gang("b", 2, 3)
    commit(snap, a, decide(snap, a, POLICY))
    commit(snap, b, decide(snap, b, POLICY))
    snap.forget("b")
    for uid in snap.unlockable():
        snap.unlock(uid)
    assert not snap.placed["a"].locked and snap.unlockable() == []


@st.composite
def sharing_pairs(draw):
    """A higher-priority gang and a lower one forced onto the same two NICs (5 + 3 of 8 GPUs a node)."""
    period = draw(st.sampled_from([100.0, 200.0]))

    def window():
        start = draw(st.integers(0, int(period) // 10 - 1)) * 10.0
        return start, draw(st.integers(1, int(period - start) // 10)) * 10.0, draw(st.sampled_from([40.0, 60.0, 100.0]))

    (s1, l1, g1), (s2, l2, g2) = window(), window()
    high = gang("high", 2, 5, period, s1, l1, g1, priority=10)
    low = gang("low", 2, 3, period, s2, l2, g2, priority=1, created=1.0)
    return high, low, Policy(overflow_tolerance=draw(st.sampled_from([0.0, 0.05, 1.0])))


@given(sharing_pairs())
@settings(max_examples=80, deadline=None)
def test_a_locked_gang_never_takes_anything_from_a_higher_priority_one(case):
    high, low, policy = case
    snap = empty(two_nodes(), 8)
    commit(snap, high, decide(snap, high, policy))
    d = decide(snap, low, policy)
    assert isinstance(d, Decision)  # with lock on demand nobody is held back by protection
    pattern = lay_out(low.profile, snap.grid)
    links, mult = loaded_links(snap.topology, snap.topology.nodes_of(d.nodes))
    higher = snap.higher_rows(links, low.priority, pattern.slots)
    assert higher is not None
    lost = reference.damage(snap.rows(links, pattern.slots), higher, snap.topology.capacity_mbps[links], mult,
                            pattern.rates)
    if d.locked:
        assert np.allclose(lost[:, d.offset_slots], 0.0)
