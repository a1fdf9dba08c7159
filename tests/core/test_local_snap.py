"""Local-hyperperiod snapping (issue 12, round 5): a locked gang's period is made commensurate with its neighbours'."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core import reference
from tests.core.builders import empty, gang, two_nodes
from volcano_metronome.core.cycle import commit
from volcano_metronome.core.decision import Decision, decide
from volcano_metronome.core.grid import SlotGrid
from volcano_metronome.core.model import ClusterState, Policy, Running
from volcano_metronome.core.snapshot import Snapshot

POLICY = Policy()


@settings(max_examples=200, deadline=None)
@given(cap=st.sampled_from([5040, 720, 360, 2520, 97]), period=st.floats(0.2, 60.0),
       others=st.lists(st.integers(1, 200), max_size=4))
def test_commensurate_matches_the_loop_reference(cap, period, others):
    grid = SlotGrid(5.0, cap)
    got = grid.commensurate(period * 5.0, np.array(others, dtype=np.int64))
    want = reference.commensurate(grid.periods.tolist(), period, others)
    assert (None if got is None else got.slots) == want
    if got is not None:
        assert got.ms >= period * 5.0 - 1e-6 and got.error >= -1e-9


def test_commensurate_with_nobody_is_the_grid_snap_and_identical_periods_need_no_more():
    grid = SlotGrid()
    assert grid.commensurate(188.0, np.array([], dtype=np.int64)).slots == grid.snap(188.0).slots == 40
    assert grid.commensurate(188.0, np.array([40])).slots == 40  # the same snap: nothing to add


def test_an_incommensurate_newcomer_is_snapped_to_its_neighbours_period_and_locked_without_overflow():
    snap = empty(two_nodes(), 8)
    a = gang("a", 2, 5, period=200.0, start=100.0, length=60.0)  # 40 slots, 30 % duty at line rate
    commit(snap, a, decide(snap, a, POLICY))
    b = gang("b", 2, 3, period=176.0, start=80.0, length=60.0)  # grid snap 36 slots: lcm with 40 is 360
    assert snap.grid.snap(176.0).slots == 36
    d = decide(snap, b, POLICY)
    assert isinstance(d, Decision)
    # At 180 ms it would sweep every phase of a's 200 ms (no clean offset); at 200 ms one exists, and the
    # 24 ms of padding per iteration cost less than the collisions of two 30 % bursts at a random phase.
    assert d.period_ms == 200.0 and d.overflow_gbps_ms == 0.0 and d.locked and d.locks == ("a",)
    assert 0.0 < d.padding_ms < d.free_delay_ms
    assert abs(d.snapping_error - (200.0 - 176.0) / 176.0) < 1e-9
    commit(snap, b, d)
    assert snap.placed["b"].pattern.slots == 40 and snap.placed["b"].locked and snap.placed["a"].locked
    assert snap.clean("a") and snap.clean("b") and snap.hyperperiod == 40


def test_a_local_snap_whose_padding_exceeds_the_collisions_is_not_taken():
    snap = empty(two_nodes(), 8)
    a = gang("a", 2, 5, period=200.0, start=150.0, length=10.0)  # 5 % duty: collisions are rare
    commit(snap, a, decide(snap, a, POLICY))
    d = decide(snap, gang("b", 2, 3, period=176.0, start=150.0, length=10.0), POLICY)
    assert isinstance(d, Decision) and not d.locked and d.locks == ()
    assert d.period_ms == 180.0  # free, it keeps its grid snap


def test_a_running_gang_keeps_the_period_published_for_it():
    topo = two_nodes()
    b = gang("b", 2, 3, period=176.0, start=80.0, length=60.0)
    state = ClusterState(topo, (3, 5), (Running(b, topo.nodes,
                                                (1, 1), 0.0, period_ms=200.0),))
    snap = Snapshot.build(state, SlotGrid())
    assert snap.placed["b"].pattern.slots == 40
    grid = SlotGrid()
    assert grid.held(176.0, None).slots == 36  # nothing published: its snap
    assert grid.held(176.0, 0.0).slots == 36
    assert grid.held(176.0, 170.0).slots == 36  # shorter than the profile: not holdable
    assert grid.held(176.0, 187.5).slots == 36  # not a whole number of slots
    assert grid.held(176.0, 205.0).slots == 41  # an exact period (off the grid) is held too
    assert grid.held(176.0, 25205.0).slots == 36  # beyond the cap: not holdable
    assert grid.held(176.0, 200.0).slots == 40
