"""The snapshot's incremental loads equal loads summed from scratch."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core import reference
from tests.core.builders import empty, gang
from volcano_metronome.core.grid import SlotGrid
from volcano_metronome.core.model import ClusterState, Running
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.core.topology import leaf_spine

TOPOLOGY = leaf_spine(2, 3, 100.0, 100.0)
PERIODS = [20.0, 30.0, 40.0, 60.0]  # 4, 6, 8, 12 slots: hyperperiods grow and shrink


@st.composite
def operations(draw):
    ops = []
    live: list[str] = []
    for i in range(draw(st.integers(1, 12))):
        if live and draw(st.booleans()):
            uid = draw(st.sampled_from(live))
            live.remove(uid)
            ops.append(("forget", uid))
        else:
            period = draw(st.sampled_from(PERIODS))
            start = draw(st.integers(0, int(period) // 5 - 1)) * 5.0
            length = draw(st.integers(1, int(period - start) // 5)) * 5.0
            nodes = draw(st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True))
            offset = draw(st.integers(0, 50))
            uid = f"g{i}"
            live.append(uid)
            ops.append(("assume", uid, gang(uid, len(nodes), 1, period, start, length, draw(st.integers(1, 90))),
                        nodes, offset))
    return ops


@given(operations())
@settings(max_examples=80, deadline=None)
def test_incremental_loads_equal_loads_from_scratch(ops):
    snap = empty(TOPOLOGY)
    for op in ops:
        if op[0] == "assume":
            _, uid, g, nodes, offset = op
            snap.assume(g, np.array(nodes), np.ones(len(nodes), dtype=np.int64), offset)
        else:
            snap.forget(op[1])
    placements = [(p.pattern.rates, p.nodes, p.offset) for p in snap.placed.values()]
    expected = reference.link_loads(TOPOLOGY, placements, snap.hyperperiod)
    np.testing.assert_array_equal(snap.load, expected)
    np.testing.assert_allclose(snap.link_mean, expected.mean(axis=1), atol=1e-6)
    used = sum(len(p.nodes) for p in snap.placed.values())
    assert snap.free_gpus.sum() == 8 * len(TOPOLOGY.nodes) - used


def test_build_accounts_running_gangs_without_taking_their_gpus_twice():
    a = gang("a", 2, 6)
    state = ClusterState(TOPOLOGY, tuple([2, 2] + [8] * 4), (Running(a, ("rack-0-node-0", "rack-0-node-1"), (1, 1), 40.0),))
    snap = Snapshot.build(state, SlotGrid())
    assert list(snap.free_gpus) == [2, 2, 8, 8, 8, 8]
    assert snap.placed["a"].offset == 8
    assert snap.hyperperiod == 40
    nic = TOPOLOGY.link_index["nic:rack-0-node-0:up"]
    assert snap.load[nic].sum() == 100_000 * 20


def test_hyperperiod_is_the_lcm_of_the_periods_present():
    snap = empty(TOPOLOGY)
    snap.assume(gang("a", period=200.0, start=0.0, length=50.0), np.array([0, 1]), np.array([1, 1]), 0)
    snap.assume(gang("b", period=300.0, start=0.0, length=50.0), np.array([0, 1]), np.array([1, 1]), 0)
    assert snap.hyperperiod * snap.grid.slot_ms == 600.0
    assert snap.hyperperiod == math.lcm(40, 60)


def _run(snap: Snapshot, ops, prefix: str = "", fold: bool = False) -> None:
    for op in ops:
        if op[0] == "assume":
            _, uid, g, nodes, offset = op
            g = dataclasses.replace(g, uid=prefix + uid)
            snap.assume(g, np.array(nodes), np.ones(len(nodes), dtype=np.int64), offset)
        else:
            snap.forget(prefix + op[1])
        if fold:
            snap.fold()


@given(operations())
@settings(max_examples=80, deadline=None)
def test_folded_loads_equal_loads_from_scratch_after_every_change(ops):
    snap = empty(TOPOLOGY)
    for op in ops:
        _run(snap, [op], fold=True)
        assert snap.hyperperiod == math.lcm(1, *(p.pattern.slots for p in snap.placed.values()))
        placements = [(p.pattern.rates, p.nodes, p.offset) for p in snap.placed.values()]
        expected = reference.link_loads(TOPOLOGY, placements, snap.hyperperiod)
        np.testing.assert_array_equal(snap.load, expected)
        np.testing.assert_allclose(snap.link_mean, expected.mean(axis=1), atol=1e-6)


def test_a_hyperperiod_that_shrinks_and_grows_back_copies_no_loads():
    snap = empty(TOPOLOGY)
    snap.assume(gang("a", period=40.0, start=0.0, length=10.0), np.array([0, 1]), np.array([1, 1]), 0)
    snap.assume(gang("b", period=60.0, start=0.0, length=10.0), np.array([0, 1]), np.array([1, 1]), 3)
    wide = snap.load
    snap.forget("b")
    snap.fold()
    assert snap.hyperperiod == 8 and np.shares_memory(snap.load, wide)
    snap.assume(gang("b", period=60.0, start=0.0, length=10.0), np.array([0, 1]), np.array([1, 1]), 3)
    assert snap.hyperperiod == 24 and np.shares_memory(snap.load, wide)
    np.testing.assert_array_equal(snap.load, wide)


@given(operations(), operations())
@settings(max_examples=60, deadline=None)
def test_rollback_undoes_every_change_since_touched_was_set(before, cycle):
    snap = empty(TOPOLOGY)
    _run(snap, before, fold=True)
    load, hyper, peaks, mean = snap.load.copy(), snap.hyperperiod, snap.link_peaks.copy(), snap.link_mean.copy()
    placed = {uid: (p.offset, p.locked, tuple(p.nodes)) for uid, p in snap.placed.items()}
    snap.touched = {}
    for uid in list(snap.placed)[:1]:
        snap.lock(uid) if not snap.placed[uid].locked else snap.unlock(uid)
    for uid in list(snap.placed)[1:2]:
        snap.forget(uid)
    _run(snap, cycle, prefix="c")
    snap.rollback()
    assert snap.touched is None and snap.hyperperiod == hyper
    np.testing.assert_array_equal(snap.load, load)
    np.testing.assert_array_equal(snap.link_peaks, peaks)
    np.testing.assert_array_equal(snap.link_mean, mean)
    assert {uid: (p.offset, p.locked, tuple(p.nodes)) for uid, p in snap.placed.items()} == placed
