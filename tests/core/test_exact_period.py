"""Identical jobs need no snapping (issue 12): a lock at the exact period the gangs of its links share."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.core.builders import empty, gang, ring, two_nodes
from volcano_metronome.core.cycle import commit
from volcano_metronome.core.decision import Decision, decide
from volcano_metronome.core.grid import SlotGrid, lay_out
from volcano_metronome.core.model import Gang, Policy
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.core.traffic import scaled

POLICY = Policy()


def placed_alone(first: Gang) -> Snapshot:
    """Two nodes with ``first`` placed on them as the core decides it, alone."""
    snap = empty(two_nodes(), 8)
    commit(snap, first, decide(snap, first, POLICY))
    return snap


def locked_beside_a(snap: Snapshot, b: Gang) -> tuple[Decision, dict[str, tuple[int, bool]]]:
    """``b`` decided beside the free gang ``a``, which it must lock; committed, both clean. The decision, and
    each gang's period (slots) and whether it is locked."""
    d = decide(snap, b, POLICY)
    assert isinstance(d, Decision) and d.locked and d.locks == ("a",)
    commit(snap, b, d)
    assert snap.clean("a") and snap.clean("b")
    return d, {u: (p.pattern.slots, p.locked) for u, p in snap.placed.items()}


def test_exact_is_the_slot_ceiling_and_off_the_grid():
    grid = SlotGrid()
    assert grid.exact(245.7).slots == 50 and grid.snap(245.7).slots == 56  # measured vgg11 at 100 Gbps
    assert grid.exact(190.0).slots == 38 and grid.max_hyperperiod_slots % 38
    assert grid.exact(240.0).slots == grid.snap(240.0).slots == 48


def test_identical_gangs_lock_at_their_exact_period_and_the_free_neighbour_is_re_laid():
    # 10 ms bursts in a 190 ms period: at the grid's 200 ms a lock pads 10 ms per iteration each, more than
    # the rare collisions cost; at 190 ms (38 slots, off the grid) it pads nothing.
    snap = placed_alone(gang("a", 2, 5, period=190.0, start=150.0, length=10.0))
    assert snap.placed["a"].pattern.slots == 40 and not snap.placed["a"].locked  # alone: free, on the grid
    d = decide(snap, gang("b", 2, 3, period=190.0, start=150.0, length=10.0), POLICY)
    assert isinstance(d, Decision) and d.locked and d.locks == ("a",)
    assert d.period_ms == 190.0 and d.periods == (("a", 190.0),) and d.padding_ms == 0.0 < d.free_delay_ms
    assert snap.placed["a"].pattern.slots == 40 and snap.hyperperiod == 40  # deciding changed nothing
    commit(snap, gang("b", 2, 3, period=190.0, start=150.0, length=10.0), d)
    assert {u: (p.pattern.slots, p.locked) for u, p in snap.placed.items()} == {"a": (38, True), "b": (38, True)}
    assert snap.clean("a") and snap.clean("b")


def test_a_neighbour_locked_on_another_period_keeps_the_newcomer_on_the_grid():
    snap = empty(two_nodes(), 8)
    a = gang("a", 2, 5, period=190.0, start=150.0, length=10.0)
    snap.assume(a, np.array([0, 1]), np.array([1, 1]), 0, hold_gpus=False, locked=True)  # held to 200 ms
    d = decide(snap, gang("b", 2, 3, period=190.0, start=150.0, length=10.0), POLICY)
    assert isinstance(d, Decision) and d.period_ms == 200.0 and d.periods == ()


def test_gangs_whose_exact_periods_nearly_divide_lock_at_commensurate_periods():
    # 100 ms bursts every 250 and 465 ms on the same NICs. Their grid snaps, 280 and 525 ms, are incommensurate:
    # every relative phase comes round and no offset avoids the collisions, so both ran free. 465 ms held to 500
    # (7.5 % longer, within STRETCH) is twice 250: the free neighbour is re-laid at its exact 250 ms, and both lock.
    snap = placed_alone(gang("a", 2, 5, period=250.0, start=150.0, length=100.0))
    assert snap.placed["a"].pattern.slots == 56 and not snap.placed["a"].locked  # alone: free, on the grid
    d, placed = locked_beside_a(snap, gang("b", 2, 3, period=465.0, start=365.0, length=100.0))
    assert d.feasible
    assert d.period_ms == 500.0 and d.periods == (("a", 250.0),) and d.padding_ms < d.free_delay_ms
    assert placed == {"a": (50, True), "b": (100, True)}


def test_no_commensurate_lock_where_no_multiple_is_within_the_stretch():
    # 250 and 400 ms: twice 250 is 25 % more than 400, past STRETCH; no period re-laid, nothing off the grid.
    snap = placed_alone(gang("a", 2, 5, period=250.0, start=150.0, length=100.0))
    d = decide(snap, gang("b", 2, 3, period=400.0, start=300.0, length=100.0), POLICY)
    assert isinstance(d, Decision) and d.periods == ()
    assert snap.grid.max_hyperperiod_slots % int(round(d.period_ms / snap.grid.slot_ms)) == 0  # a grid period


def test_no_exact_period_beyond_the_hyperperiod_cap():
    snap = empty(two_nodes(), 8, SlotGrid(5.0, 40))  # a cap of 40 slots: 38 and 40 have lcm 760
    a = gang("a", 2, 5, period=190.0, start=150.0, length=10.0)
    commit(snap, a, decide(snap, a, POLICY))
    d = decide(snap, gang("b", 2, 3, period=190.0, start=150.0, length=10.0), POLICY)
    assert isinstance(d, Decision) and d.period_ms == 200.0 and not d.locked and d.periods == ()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_an_exact_lock_leaves_every_locked_gang_clean_and_deciding_changes_nothing(data):
    snap = empty(ring(4), 8)
    # Exact 38, 39, 40 and 76 slots: the first three snap to 40 on the grid, 380 ms to 80; 76 is twice 38.
    periods = st.sampled_from([190.0, 192.0, 200.0, 380.0])
    for i in range(data.draw(st.integers(1, 4))):
        first = data.draw(st.integers(0, 3))
        g = gang(f"g{i}", 2, 1, data.draw(periods), 0.0, data.draw(st.sampled_from([20.0, 40.0, 60.0])), 100.0)
        snap.assume(g, np.array(sorted({first, (first + 1) % 4})), np.array([1, 1]),
                    data.draw(st.integers(0, 79)), hold_gpus=False, locked=data.draw(st.booleans()))
        if not all(snap.clean(u) for u in snap.placed if snap.placed[u].locked):
            snap.forget(g.uid)
    snap.fold()
    before = {u: (p.offset, p.locked, p.pattern.slots) for u, p in snap.placed.items()}
    first = data.draw(st.integers(0, 3))
    new = dataclasses.replace(gang("new", 2, 8, data.draw(periods), 0.0, data.draw(st.sampled_from([20.0, 40.0]))),
                              nodes=frozenset({f"n{first}", f"n{(first + 1) % 4}"}))
    d = decide(snap, new, POLICY)
    assert isinstance(d, Decision)
    assert {u: (p.offset, p.locked, p.pattern.slots) for u, p in snap.placed.items()} == before
    event(f"locked={d.locked}, re-laid={len(d.periods)}, exact={d.period_ms not in (200.0, 400.0)}, "
          f"commensurate={any(ms != d.period_ms for _, ms in d.periods)}")
    if d.periods:
        assert d.locked and {u for u, _ in d.periods} <= set(d.locks)
        # Each re-laid period divides the newcomer's or is a multiple of it.
        assert all(max(ms, d.period_ms) % min(ms, d.period_ms) == 0 for _, ms in d.periods)
        assert all(not before[u][1] for u, _ in d.periods)
    commit(snap, new, d)
    for uid, ms in d.periods:
        assert snap.placed[uid].pattern.period.ms == ms
    if d.locked:
        assert all(snap.clean(u) for u in snap.placed if snap.placed[u].locked)
    assert snap.hyperperiod <= snap.grid.max_hyperperiod_slots


def test_a_grid_period_that_would_take_the_hyperperiod_past_the_cap_fits_beside_exact_ones():
    # An exact 38-slot pair and a free 40-slot gang make a hyperperiod of 760 slots; a newcomer's grid snap of
    # 36 slots (176 ms) would take it to 6,840, past the cap of 5,040: the shortest period that fits is 38.
    snap = empty(ring(6), 8)
    for uid, nodes in (("a", [0, 1]), ("b", [0, 1])):
        g = gang(uid, 2, 1, period=190.0, start=150.0, length=10.0)
        snap.assume(g, np.array(nodes), np.array([1, 1]), 0 if uid == "a" else 20,
                    lay_out(g.profile, snap.grid, snap.grid.exact(190.0)), hold_gpus=False)
    snap.assume(gang("c", 2, 1), np.array([2, 3]), np.array([1, 1]), 0, hold_gpus=False, locked=False)
    assert snap.hyperperiod == 760
    new = dataclasses.replace(gang("new", 2, 1, period=176.0, start=0.0, length=50.0), nodes=frozenset({"n4", "n5"}))
    d = decide(snap, new, POLICY)
    assert isinstance(d, Decision) and d.period_ms == 190.0
    commit(snap, new, d)
    assert snap.hyperperiod == 760 and snap.clean("a")
    assert SlotGrid().fitting(176.0, 760).slots == 38 and SlotGrid().fitting(176.0, 40).slots == 36
    assert SlotGrid(5.0, 40).fitting(196.0, 38) is None  # 40 slots with 38: 760, past a cap of 40


def test_a_snapshot_grown_past_its_widest_hyperperiod_keeps_every_load():
    # Hyperperiods of 40 then 760 slots: the wide array is rebuilt at 760 (lcm with 5,040 is past the cap).
    snap = empty(ring(4), 8)
    others = [gang(f"g{p}", 2, 1, period=p * 5.0, start=0.0, length=25.0) for p in (35, 36, 40, 48)]
    for g in others:
        snap.assume(g, np.array([0, 1]), np.array([1, 1]), 0, hold_gpus=False, locked=False)
    assert snap.hyperperiod == 5040
    for g in others[:2] + others[3:]:
        snap.forget(g.uid)
    snap.fold()
    e = gang("e", 2, 1, period=190.0, start=0.0, length=25.0)
    snap.assume(e, np.array([0, 1]), np.array([1, 1]), 3, lay_out(e.profile, snap.grid, snap.grid.exact(190.0)))
    assert snap.hyperperiod == 760 and snap._wide.shape[1] <= snap.grid.max_hyperperiod_slots
    expected = snap.placed["g40"].row(760) + snap.placed["e"].row(760)
    nic = snap.placed["e"].links
    assert (snap.load[nic] == scaled(snap.placed["e"].multiplier[:, None], expected[None, :])).all()


def test_identical_gangs_whose_bursts_overfill_the_period_by_a_slot_lock_a_little_longer():
    # 91 ms bursts every 180 ms (36 slots, on the grid and exact): each covers 19 slots, so two need 38 and
    # overlap at every offset of 36. Held to 190 ms (38 slots: 10 ms of padding per iteration each) they
    # interleave, which costs far less than the collisions of two bursts of half a period at a random phase.
    snap = placed_alone(gang("a", 2, 5, period=180.0, start=80.0, length=91.0))
    assert snap.placed["a"].pattern.slots == 36 and not snap.placed["a"].locked
    d, placed = locked_beside_a(snap, gang("b", 2, 3, period=180.0, start=80.0, length=91.0))
    assert d.period_ms == 190.0 and d.periods == (("a", 190.0),) and 0.0 < d.padding_ms < d.free_delay_ms
    assert placed == {"a": (38, True), "b": (38, True)}


def test_identical_gangs_whose_bursts_fill_most_of_the_period_lock_up_to_overfill_longer():
    # 110 ms bursts every 180 ms (22 slots each): two interleave only from 44 slots, 22 % longer than the
    # period, within OVERFILL: both are held to 220 ms, 40 ms of padding per iteration each.
    snap = placed_alone(gang("a", 2, 5, period=180.0, start=70.0, length=110.0))
    d, placed = locked_beside_a(snap, gang("b", 2, 3, period=180.0, start=70.0, length=110.0))
    assert d.period_ms == 220.0 and d.periods == (("a", 220.0),) and 0.0 < d.padding_ms < d.free_delay_ms
    assert placed == {"a": (44, True), "b": (44, True)}


def test_bursts_that_would_need_a_period_much_longer_than_their_own_run_free():
    # 140 ms bursts every 180 ms would interleave only at 280 ms, 56 % longer, past OVERFILL.
    snap = placed_alone(gang("a", 2, 5, period=180.0, start=40.0, length=140.0))
    d = decide(snap, gang("b", 2, 3, period=180.0, start=40.0, length=140.0), POLICY)
    assert isinstance(d, Decision) and not d.locked and d.period_ms == 180.0 and d.periods == ()


def test_gangs_that_are_not_identical_are_held_no_more_than_stretch_longer():
    # The 110 ms bursts above, one gang every 180 ms and the other every 185: they would interleave from 44
    # slots, 22 % longer than the first's, within OVERFILL but past STRETCH, and they are not identical jobs.
    snap = placed_alone(gang("a", 2, 5, period=180.0, start=70.0, length=110.0))
    d = decide(snap, gang("b", 2, 3, period=185.0, start=75.0, length=110.0), POLICY)
    assert isinstance(d, Decision) and not d.locked and d.periods == ()
    assert snap.placed["a"].pattern.slots == 36


def test_a_lower_priority_gang_never_stretches_a_higher_priority_ones_period():
    # 30 ms at 60 Gbps and 80 ms at 100 Gbps every 100 ms overlap at every offset (6 + 16 slots of 20);
    # at 110 ms both would fit, but only by padding the higher-priority gang 10 ms per iteration for the
    # lower one's sake: the lower one runs free instead, and nobody's period changes.
    snap = placed_alone(gang("high", 2, 5, period=100.0, start=0.0, length=30.0, gbps=60.0, priority=10))
    d = decide(snap, gang("low", 2, 3, period=100.0, start=0.0, length=80.0, priority=1, created=1.0), POLICY)
    assert isinstance(d, Decision) and not d.locked and d.period_ms == 100.0 and d.periods == ()
    # The other way round the newcomer is the one that pays: the lower-priority gang is re-laid at 110 ms.
    snap = placed_alone(gang("low", 2, 5, period=100.0, start=0.0, length=80.0, priority=1))
    d = decide(snap, gang("high", 2, 3, period=100.0, start=0.0, length=30.0, gbps=60.0, priority=10,
                          created=1.0), POLICY)
    assert isinstance(d, Decision) and d.locked and d.period_ms == 110.0 and d.periods == (("low", 110.0),)


def free_chain(length: int) -> Snapshot:
    """A row of NICs, ``length`` identical gangs running free on node pairs (i, i + 1), each pair of neighbours on
    one NIC: 100 ms bursts at 80 Gbps every 180 ms, so two on one 100 Gbps NIC collide at every offset. Every
    node but the last two is full (a filler with no traffic on the first), so a newcomer of 12 GPUs must share
    the last gang's NIC."""
    snap = empty(ring(length + 2), 8)
    snap.assume(gang("filler", 1, 4, period=180.0, start=0.0, length=10.0), np.array([0]), np.array([1]), 0)
    for i in range(length):
        snap.assume(gang(f"g{i}", 2, 4, period=180.0, start=80.0, length=100.0, gbps=80.0),
                    np.array([i, i + 1]), np.array([1, 1]), 0, locked=False)
    snap.fold()
    return snap


def test_a_lock_that_takes_a_chain_of_identical_gangs_along_counts_the_collisions_it_spares_them():
    # The newcomer shares one NIC with g1, and g1 one with g0: locked at 200 ms (40 slots), the three take
    # turns on both NICs. That pads each of them 20 ms per iteration, 60 ms in all, about as much as the
    # newcomer's own collisions cost (67 ms per 180 ms, both sides); but g0 and g1 collide as much again whether
    # or not it runs free, and the lock spares that too. g0 shares no link with the newcomer and is re-laid with
    # the chain: an identical job, held as long as the gangs of the newcomer's links may be.
    snap = free_chain(2)
    b = gang("b", 3, 4, period=180.0, start=80.0, length=100.0, gbps=80.0, created=1.0)
    d = decide(snap, b, POLICY)
    assert isinstance(d, Decision) and d.nodes == ("n2", "n3")
    assert d.locked and d.locks == ("g0", "g1") and d.period_ms == 200.0
    assert d.periods == (("g0", 200.0), ("g1", 200.0)) and 0.0 < d.padding_ms < d.free_delay_ms
    commit(snap, b, d)
    assert {u: (p.pattern.slots, p.locked) for u, p in snap.placed.items() if u != "filler"} == \
        {"g0": (40, True), "g1": (40, True), "b": (40, True)}
    assert all(snap.clean(u) for u in ("g0", "g1", "b"))
