"""Lock only where it pays (issue 12): no overflow, a clean closure of neighbours, saving above padding."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.core import reference
from tests.core.builders import empty, gang, ring, two_nodes
from volcano_metronome.core.cycle import commit
from volcano_metronome.core.decision import MAX_LOCKS, Decision, _unlocked_closure, decide, score_offsets
from volcano_metronome.core.grid import lay_out
from volcano_metronome.core.model import Policy
from volcano_metronome.core.placement import candidates
from volcano_metronome.core.reoptimize import reoptimise, total_overflow
from volcano_metronome.core.topology import leaf_spine
from volcano_metronome.core.traffic import loaded_links
from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.policies.volcano_topology import lowest_tier

POLICY = Policy()


def test_a_gang_whose_best_offset_still_overflows_runs_free_and_locks_nobody():
    snap = empty(two_nodes(), 8)
    a = gang("a", 2, 5, start=0.0, length=150.0)  # 75% duty at line rate
    commit(snap, a, decide(snap, a, POLICY))
    # 100 ms every 190 ms, 53 % more: no offset without overflow, and not an identical job, so not held at the
    # 250 ms at which the two would fit end to end (within STRETCH of neither period).
    b = gang("b", 2, 3, period=190.0, start=0.0, length=100.0)
    d = decide(snap, b, POLICY)
    assert isinstance(d, Decision) and d.overflow_gbps_ms > 0
    assert not d.locked and d.locks == ()
    commit(snap, b, d)
    assert not snap.placed["a"].locked and not snap.placed["b"].locked


def test_a_lock_whose_padding_exceeds_the_collisions_it_saves_is_not_taken():
    # 10 ms bursts in 190 and 192 ms periods: they rarely collide, but a lock holds both to 200 ms (their
    # exact periods, 190 and 195 ms, differ: no exact lock), padding 10 and 8 ms per iteration.
    snap = empty(two_nodes(), 8)
    a = gang("a", 2, 5, period=190.0, start=150.0, length=10.0)
    commit(snap, a, decide(snap, a, POLICY))
    d = decide(snap, gang("b", 2, 3, period=192.0, start=150.0, length=10.0), POLICY)
    assert isinstance(d, Decision) and d.overflow_gbps_ms == 0.0
    assert 0.0 < d.free_delay_ms < d.padding_ms and not d.locked and d.locks == ()
    assert d.expected_ms == d.free_delay_ms


def test_a_lock_that_saves_more_than_it_pads_is_taken_and_says_both():
    snap = empty(two_nodes(), 8)
    a = gang("a", 2, 5)
    commit(snap, a, decide(snap, a, POLICY))
    d = decide(snap, gang("b", 2, 3), POLICY)  # half duty at line rate, on the grid: no padding at all
    assert isinstance(d, Decision) and d.locked and d.locks == ("a",)
    assert d.padding_ms == 0.0 < d.free_delay_ms and d.expected_ms == 0.0


def test_the_closure_takes_unlocked_neighbours_of_neighbours_along():
    snap = empty(ring(5), 8)
    for i in range(3):  # g0 on n0-n1, g1 on n1-n2, g2 on n2-n3, all free, bursts far apart
        snap.assume(gang(f"g{i}", 2, 1, 60.0, 0.0, 10.0), np.array([i, i + 1]), np.array([1, 1]), 4 * i, locked=False)
    links, mult = loaded_links(snap.topology, np.array([3, 4]))
    extra = mult * 100_000
    direct = snap.neighbours(snap.contended(links, extra))
    assert direct == {"g2"}
    assert _unlocked_closure(snap, direct, links, extra) == {"g0", "g1", "g2"}
    snap.lock("g1")  # a locked gang is already aligned: the closure stops there
    assert _unlocked_closure(snap, direct, links, extra) == {"g2"}


def test_a_gang_whose_lock_would_reach_past_max_locks_runs_free_and_counts_its_collisions():
    # A chain of MAX_LOCKS + 1 free gangs, each sharing a NIC with the next; the newcomer shares the last one's.
    chain = MAX_LOCKS + 1
    snap = empty(ring(chain + 2), 8)
    for i in range(chain):
        snap.assume(gang(f"g{i}", 2, 1, 60.0, 0.0, 10.0), np.array([i, i + 1]), np.array([1, 1]), 4 * (i % 3),
                    locked=False)
    last = frozenset({f"n{chain}", f"n{chain + 1}"})
    d = decide(snap, dataclasses.replace(gang("new", 2, 5, 60.0, 0.0, 40.0), nodes=last), POLICY)
    assert isinstance(d, Decision) and not d.locked and d.locks == ()
    assert d.free_delay_ms > 0 and d.expected_ms == d.free_delay_ms  # not 0, as if it shared no contended link


def test_a_neighbour_sitting_in_overflow_is_never_locked():
    snap = empty(ring(4), 8)
    # g0 and g1 collide on n1 (both send in slots 0..5 of 12); g2 on n2-n3 sends elsewhere.
    snap.assume(gang("g0", 2, 1, 60.0, 0.0, 30.0), np.array([0, 1]), np.array([1, 1]), 0, hold_gpus=False, locked=False)
    snap.assume(gang("g1", 2, 1, 60.0, 0.0, 30.0), np.array([1, 2]), np.array([1, 1]), 0, hold_gpus=False, locked=False)
    assert not snap.clean("g0") and not snap.clean("g1")
    d = decide(snap, gang("g2", 2, 1, 60.0, 0.0, 30.0), POLICY)  # can only share n2 or n3 with g1
    assert isinstance(d, Decision) and not d.locked and d.locks == ()


def test_reoptimisation_never_moves_an_unlocked_gang():
    snap = empty(ring(4), 8)
    for i in range(4):
        snap.assume(gang(f"g{i}", 2, 1, 60.0, 0.0, 30.0), np.array([i, (i + 1) % 4]), np.array([1, 1]), 0,
                    locked=i < 2)
    result = reoptimise(snap, POLICY, max_moves=16)
    assert {m.uid for m in result.moves} <= {"g0", "g1"}
    assert snap.placed["g2"].offset == 0 and snap.placed["g3"].offset == 0
    assert not snap.placed["g2"].locked and not snap.placed["g3"].locked


def test_a_free_gang_on_a_much_longer_grid_snap_counts_its_collisions_at_its_own_period():
    # 8,710 ms snaps to 12,600 (2,520 slots; the divisor of the cap below it is 1,680): laid there, the gang would
    # seem to burst a third less often than it does running free (fuzz 32962: a moe-gpt gang throttled to that
    # period took the node set that crossed the thin uplinks more, its collisions underestimated, 1.10 x
    # volcano-topology's average JCT).
    snap = empty(two_nodes(), 8)
    a = gang("a", 2, 5, period=12600.0, start=0.0, length=6000.0)
    commit(snap, a, decide(snap, a, POLICY))
    nodes = np.array([0, 1])
    gangs = {p: gang("b", 2, 3, period=p, start=1000.0, length=1500.0) for p in (12600.0, 8710.0)}
    laid = {p: lay_out(g.profile, snap.grid) for p, g in gangs.items()}
    assert {pattern.slots for pattern in laid.values()} == {2520}
    free = {p: score_offsets(snap, g, laid[p], nodes, POLICY).free_delay for p, g in gangs.items()}
    assert free[12600.0] > 0 and np.isclose(free[8710.0], free[12600.0] * 12600.0 / 8710.0)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_free_delay_is_the_reference_overflow_averaged_over_every_offset(data):
    topo = leaf_spine(1, 3, 100.0)
    snap = empty(topo, 8)
    for i in range(data.draw(st.integers(1, 3))):
        nodes = data.draw(st.lists(st.integers(0, 2), min_size=2, max_size=3, unique=True))
        g = gang(f"g{i}", len(nodes), 1, data.draw(st.sampled_from([40.0, 60.0])), 0.0,
                 data.draw(st.sampled_from([10.0, 20.0, 30.0])), data.draw(st.sampled_from([40.0, 70.0, 100.0])))
        snap.assume(g, np.array(sorted(nodes)), np.ones(len(nodes), dtype=np.int64),
                    data.draw(st.integers(0, 11)), locked=False)
    # 57 ms snaps to 60: free, the gang iterates every 57 ms, so its collisions come 60 / 57 as often.
    period = data.draw(st.sampled_from([60.0, 57.0]))
    new = gang("new", 2, 1, period, 20.0, data.draw(st.sampled_from([10.0, 30.0])), 100.0)
    pattern = lay_out(new.profile, snap.grid)
    nodes = np.array([0, 1])
    scores = score_offsets(snap, new, pattern, nodes, POLICY)
    links, mult = loaded_links(topo, nodes)
    cap = topo.capacity_mbps[links]
    over = reference.added_overflow(snap.rows(links, pattern.slots), cap, mult, pattern.rates)
    expected = float(np.mean([max(over[l, o] / cap[l] for l in range(len(links))) for o in range(pattern.slots)]))
    expected *= 60.0 / period
    if not len(snap.contended(links, mult * int(pattern.rates.max()))):
        expected = 0.0
    assert np.isclose(scores.free_delay, expected)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 8), min_size=12, max_size=12), st.integers(1, 10), st.sampled_from([1, 2, 4, 8]),
       st.lists(st.integers(0, 100), min_size=30, max_size=30))
def test_the_first_candidate_is_volcano_topologys_binpack(free: list[int], workers: int, gpus: int,
                                                          loads: list[int]):
    # Never place worse than Volcano's topology plugin: its choice is always the first candidate.
    topo = leaf_spine(3, 4, 100.0, 200.0)
    free_gpus = np.array(free, dtype=np.int64)
    job = JobSpec("j", 0.0, workers, gpus, 10, 0, gang("j").profile)
    rack = topo.domain_of(1)
    theirs = lowest_tier(free_gpus, rack, job)
    link_mean = np.resize(np.array(loads, dtype=float), len(topo.links))  # whatever the links carry
    found = candidates(topo, free_gpus, link_mean, job.gang(), 8)
    assert bool(theirs) == bool(found.primary)
    if theirs:
        nodes, members = theirs[0]
        first = found.primary[0]
        assert list(first.nodes) == list(nodes) and list(first.members) == list(members)


def test_a_lock_moves_the_provisional_offsets_of_the_free_gangs_it_takes_along():
    snap = empty(ring(4), 8)
    # g0 on n0-n1 sends in slots 0..5 of 12, g1 on n2-n3 in slots 3..8: both free, so both provisional.
    snap.assume(gang("g0", 2, 8, 60.0, 0.0, 30.0), np.array([0, 1]), np.array([1, 1]), 0, hold_gpus=False, locked=False)
    snap.assume(gang("g1", 2, 8, 60.0, 0.0, 30.0), np.array([2, 3]), np.array([1, 1]), 3, hold_gpus=False, locked=False)
    new = dataclasses.replace(gang("new", 2, 8, 60.0, 0.0, 30.0), nodes=frozenset({"n1", "n2"}))
    # Against those offsets every phase of new overflows on n1 or n2; with g1 moved onto g0's slots, none does.
    d = decide(snap, new, POLICY)
    assert isinstance(d, Decision) and d.locked and set(d.locks) == {"g0", "g1"}
    assert d.relocations and d.overflow_gbps_ms == 0.0
    # Its fit and peak are judged where g1 moves to: it fits there at line rate (judged where g1 had been, it did not).
    assert d.feasible and d.peak_utilisation == 1.0
    commit(snap, new, d)
    assert all(snap.placed[u].locked and snap.clean(u) for u in ("g0", "g1", "new"))
    assert total_overflow(snap) == 0


def test_without_a_joint_fit_nothing_moves_and_nobody_locks():
    snap = empty(ring(4), 8)
    snap.assume(gang("g0", 2, 8, 60.0, 0.0, 40.0), np.array([0, 1]), np.array([1, 1]), 0, hold_gpus=False, locked=False)
    snap.assume(gang("g1", 2, 8, 60.0, 0.0, 40.0), np.array([2, 3]), np.array([1, 1]), 3, hold_gpus=False, locked=False)
    before = {u: snap.placed[u].offset for u in ("g0", "g1")}
    new = dataclasses.replace(gang("new", 2, 8, 60.0, 0.0, 30.0), nodes=frozenset({"n1", "n2"}))
    d = decide(snap, new, POLICY)  # 40 + 30 ms of bursts in a 60 ms period: no phase avoids overflow
    assert isinstance(d, Decision) and not d.locked and d.locks == () and d.relocations == ()
    assert {u: snap.placed[u].offset for u in ("g0", "g1")} == before
    assert not snap.placed["g0"].locked and not snap.placed["g1"].locked and set(snap.placed) == {"g0", "g1"}


def test_a_newcomer_beside_locked_gangs_with_no_clean_offset_re_arranges_them_and_locks():
    # As above, but g0 and g1 are already locked: a newcomer used to run free beside them, colliding every
    # iteration, because only free gangs could move. CASSINI re-arranges the jobs on a link; so does the core now.
    snap = empty(ring(4), 8)
    snap.assume(gang("g0", 2, 8, 60.0, 0.0, 30.0), np.array([0, 1]), np.array([1, 1]), 0, hold_gpus=False)
    snap.assume(gang("g1", 2, 8, 60.0, 0.0, 30.0), np.array([2, 3]), np.array([1, 1]), 3, hold_gpus=False)
    new = dataclasses.replace(gang("new", 2, 8, 60.0, 0.0, 30.0), nodes=frozenset({"n1", "n2"}))
    d = decide(snap, new, POLICY)
    assert isinstance(d, Decision) and d.locked and d.locks == () and d.overflow_gbps_ms == 0.0
    assert d.relocations and {u for u, _ in d.relocations} <= {"g0", "g1"}
    assert d.feasible and d.peak_utilisation == 1.0  # where they are re-arranged to
    assert snap.placed["g1"].offset == 3  # deciding changes nothing: commit does
    commit(snap, new, d)
    assert all(snap.placed[u].locked and snap.clean(u) for u in ("g0", "g1", "new"))
    assert total_overflow(snap) == 0


def test_locked_gangs_that_cannot_make_room_are_left_where_they_were():
    snap = empty(ring(4), 8)
    snap.assume(gang("g0", 2, 8, 60.0, 0.0, 40.0), np.array([0, 1]), np.array([1, 1]), 0, hold_gpus=False)
    snap.assume(gang("g1", 2, 8, 60.0, 0.0, 40.0), np.array([2, 3]), np.array([1, 1]), 3, hold_gpus=False)
    new = dataclasses.replace(gang("new", 2, 8, 60.0, 0.0, 30.0), nodes=frozenset({"n1", "n2"}))
    d = decide(snap, new, POLICY)  # 40 + 30 ms of bursts in a 60 ms period: no arrangement avoids overflow
    assert isinstance(d, Decision) and not d.locked and d.locks == () and d.relocations == ()
    assert {u: (snap.placed[u].offset, snap.placed[u].locked) for u in ("g0", "g1")} == {"g0": (0, True),
                                                                                         "g1": (3, True)}
    assert set(snap.placed) == {"g0", "g1"}


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_re_arrangement_leaves_every_locked_gang_clean_and_moves_nothing_when_it_fails(data):
    snap = empty(ring(4), 8)
    for i in range(data.draw(st.integers(1, 4))):  # locked gangs, each clean where it lands (else left out)
        first = data.draw(st.integers(0, 3))
        g = gang(f"g{i}", 2, 1, data.draw(st.sampled_from([30.0, 60.0])), 0.0,
                 data.draw(st.sampled_from([10.0, 15.0, 20.0])), data.draw(st.sampled_from([60.0, 100.0])))
        snap.assume(g, np.array(sorted({first, (first + 1) % 4})), np.array([1, 1]),
                    data.draw(st.integers(0, 11)), hold_gpus=False)
        if not all(snap.clean(u) for u in snap.placed):
            snap.forget(g.uid)
    before = {u: (p.offset, p.locked) for u, p in snap.placed.items()}
    first = data.draw(st.integers(0, 3))
    new = dataclasses.replace(gang("new", 2, 8, 60.0, 0.0, data.draw(st.sampled_from([10.0, 20.0, 30.0]))),
                              nodes=frozenset({f"n{first}", f"n{(first + 1) % 4}"}))
    d = decide(snap, new, POLICY)
    assert isinstance(d, Decision)
    assert {u: (p.offset, p.locked) for u, p in snap.placed.items()} == before  # deciding changes nothing
    moved = dict(d.relocations)
    event(f"locked={d.locked}, locked gangs moved={bool(moved)}")
    assert set(moved) <= set(before) and all(before[u][1] for u in moved)  # only locked gangs here
    if not d.locked:
        assert not moved
    commit(snap, new, d)
    assert all(snap.placed[u].locked and snap.placed[u].offset == before[u][0] for u in before if u not in moved)
    if d.locked:
        assert all(snap.clean(u) for u in snap.placed)  # the newcomer and every locked gang, moved or not
    # The fit and peak it reports are the newcomer's where everyone ends up, as a fresh scoring finds them.
    placed = snap.forget("new")
    scores = score_offsets(snap, new, placed.pattern, placed.nodes, POLICY, placed.members)
    assert d.feasible == bool(scores.fits[d.offset_slots])
    assert d.peak_utilisation == pytest.approx(float(scores.peak[d.offset_slots]))
