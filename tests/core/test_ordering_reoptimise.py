"""Queue ordering and re-optimisation of running offsets (including cycles)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.builders import empty, gang, ring
from volcano_metronome.core.model import Ordering, Policy
from volcano_metronome.core.ordering import order
from volcano_metronome.core.reoptimize import reoptimise, total_overflow


def test_strict_priority_then_fifo_then_uid():
    gangs = [gang("c", priority=1, created=5.0), gang("a", priority=5, created=9.0), gang("b", priority=1, created=5.0)]
    assert [g.uid for g in order(gangs, Policy())] == ["a", "b", "c"]


def test_fifo_ignores_priority():
    gangs = [gang("x", priority=9, created=3.0), gang("y", priority=0, created=1.0)]
    assert [g.uid for g in order(gangs, Policy(ordering=Ordering.FIFO))] == ["y", "x"]


def test_aging_lets_a_long_waiting_gang_overtake():
    old = gang("old", priority=0, created=0.0)
    new = gang("new", priority=2, created=590.0)
    policy = Policy(ordering=Ordering.PRIORITY_WITH_AGING, aging_per_minute=0.5)
    assert [g.uid for g in order([new, old], policy, now_s=600.0)][0] == "old"  # 0 + 5 points beats 2 + 0.08
    assert [g.uid for g in order([new, old], policy, now_s=60.0)][0] == "new"


def _reference_order(gangs, policy, now_s):
    """The rule made afresh: highest effective priority (FIFO: none; aging: points per minute waited), then the
    earliest created, then uid."""
    def priority(g):
        if policy.ordering is Ordering.FIFO:
            return 0.0
        if policy.ordering is Ordering.STRICT_PRIORITY:
            return g.priority
        return g.priority + policy.aging_per_minute * max(0.0, now_s - g.created_s) / 60.0
    out = list(gangs)
    for i in range(len(out)):  # selection sort: slow and obvious
        best = min(range(i, len(out)), key=lambda j: (-priority(out[j]), out[j].created_s, out[j].uid))
        out[i], out[best] = out[best], out[i]
    return out


@settings(max_examples=200, deadline=None)
@given(spec=st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 20)), max_size=12),
       ordering=st.sampled_from(list(Ordering)), aging=st.sampled_from([0.0, 0.5, 6.0]),
       now=st.sampled_from([0.0, 60.0, 600.0]))
def test_order_matches_the_obvious_rule(spec, ordering, aging, now):
    gangs = [gang(f"g{i % 5}-{i}", priority=p, created=float(c)) for i, (p, c) in enumerate(spec)]
    policy = Policy(ordering=ordering, aging_per_minute=aging)
    assert [g.uid for g in order(gangs, policy, now)] == [g.uid for g in _reference_order(gangs, policy, now)]


def place_cycle(n: int, duty_slots: int, period_slots: int):
    """Gang i on nodes (i, i+1 mod n): consecutive gangs share a NIC; all start at offset 0."""
    slot = 5.0
    snap = empty(ring(n), 8)
    for i in range(n):
        g = gang(f"g{i}", 2, 1, period_slots * slot, 0.0, duty_slots * slot, 100.0)
        snap.assume(g, np.array([i, (i + 1) % n]), np.array([1, 1]), 0)
    return snap


def test_reoptimisation_solves_an_odd_cycle_that_needs_three_phases():
    snap = place_cycle(5, duty_slots=4, period_slots=12)  # each gang needs a third of the period
    assert total_overflow(snap) > 0
    result = reoptimise(snap, Policy(), max_moves=16)
    assert result.overflow_after_gbps_ms == 0.0 < result.overflow_before_gbps_ms
    assert total_overflow(snap) == 0
    offsets = [snap.placed[f"g{i}"].offset for i in range(5)]
    for i in range(5):  # neighbours on the ring keep their 4-slot windows apart
        gap = (offsets[i] - offsets[(i + 1) % 5]) % 12
        assert 4 <= gap <= 8


def test_reoptimisation_solves_an_even_cycle_with_two_phases():
    snap = place_cycle(4, duty_slots=6, period_slots=12)
    reoptimise(snap, Policy())
    assert total_overflow(snap) == 0


def test_moves_are_bounded_and_highest_priority_moves_first():
    snap = place_cycle(4, duty_slots=6, period_slots=12)
    result = reoptimise(snap, Policy(), max_moves=1)
    assert len(result.moves) == 1
    assert result.overflow_after_gbps_ms < result.overflow_before_gbps_ms


def test_reoptimisation_leaves_a_conflict_free_cluster_alone():
    snap = place_cycle(4, duty_slots=6, period_slots=12)
    reoptimise(snap, Policy())
    again = reoptimise(snap, Policy())
    assert again.moves == () and again.passes == 1
