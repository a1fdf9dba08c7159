"""Gangs planned as they run on links slower than their bursts (``core.bottleneck``, issue 12 round 11)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.builders import empty, gang
from volcano_metronome.core.bottleneck import as_run, bottleneck_mbps
from volcano_metronome.core.cycle import commit
from volcano_metronome.core.decision import Decision, decide
from volcano_metronome.core.grid import SlotGrid
from volcano_metronome.core.model import ClusterState, Policy, Running
from volcano_metronome.core.profile import ALL_TO_ALL, RING, Profile, Window
from volcano_metronome.core.snapshot import Snapshot
from volcano_metronome.core.topology import leaf_spine
from volcano_metronome.core.traffic import loaded_links, scaled

POLICY = Policy()
CAP = SlotGrid().max_hyperperiod_ms


def thin(racks: int = 2, nodes_per_rack: int = 1):
    """Racks whose uplink (50 Gbps) is half a NIC (100 Gbps): a ring across racks runs at 50 Gbps alone."""
    return leaf_spine(racks, nodes_per_rack, 100.0, 50.0)


def test_a_throttled_window_moves_its_volume_at_the_cap_and_pushes_the_rest_back():
    p = Profile(200.0, (Window(50.0, 10.0, 40.0), Window(150.0, 20.0, 100.0), Window(180.0, 10.0, 80.0)))
    t = p.throttled(50.0)
    # The 40 Gbps window is under the cap; the 100 Gbps one takes twice as long, the 80 Gbps one 1.6 times,
    # and each pushes what follows (the compute between them unchanged) and the period back.
    assert t.windows == (Window(50.0, 10.0, 40.0), Window(150.0, 40.0, 50.0), Window(200.0, 16.0, 50.0))
    assert t.period_ms == pytest.approx(226.0)
    assert p.throttled(100.0) is p and p.throttled(500.0) is p


@given(st.lists(st.tuples(st.floats(1.0, 30.0), st.floats(1.0, 30.0), st.floats(1.0, 400.0)), min_size=1,
                max_size=4),
       st.floats(0.5, 400.0))
@settings(max_examples=200, deadline=None)
def test_throttling_keeps_volumes_and_compute_and_adds_exactly_the_stretch(gaps, cap):
    windows, t = [], 0.0
    for gap, length, gbps in gaps:
        windows.append(Window(t + gap, length, gbps))
        t += gap + length
    p = Profile(t + 5.0, tuple(windows))
    q = p.throttled(cap)
    stretch = sum(w.len_ms * w.gbps / min(w.gbps, cap) - w.len_ms for w in p.windows)
    assert q.period_ms == pytest.approx(p.period_ms + stretch, abs=1e-5)
    ends = [0.0] + [w.start_ms + w.len_ms for w in q.windows[:-1]]
    old_ends = [0.0] + [w.start_ms + w.len_ms for w in p.windows[:-1]]
    for w, v, end, old_end in zip(q.windows, p.windows, ends, old_ends):
        assert w.len_ms * w.gbps == pytest.approx(v.len_ms * v.gbps, rel=1e-6)  # the same volume
        assert w.gbps == min(v.gbps, cap)
        assert w.start_ms - end == pytest.approx(v.start_ms - old_end, abs=1e-5)  # the same compute before it


def test_a_window_that_ends_with_the_period_still_does_once_throttled():
    # gpt1 on H100 at MFU 0.5 behind a 25 Gbps uplink (fuzz scenario 18066): start and length rounded apart ended
    # the window 1 ns past the rounded period, the profile was invalid, and the gang was planned at 40 Gbps.
    p = Profile(171.044164843276, (Window(12.933952507583417, 158.1102123356926, 40.0),))
    q = p.throttled(25.0)
    assert q.windows[0].start_ms + q.windows[0].len_ms == pytest.approx(q.period_ms, abs=1e-9)
    assert q.windows[0].gbps == 25.0 and q.period_ms == pytest.approx(171.044164843276 + 158.1102123356926 * 0.6)


@given(st.lists(st.tuples(st.floats(0.001, 300.0), st.floats(0.001, 300.0), st.floats(1.0, 400.0)), min_size=1,
                max_size=4),
       st.floats(0.0, 1.0), st.floats(0.5, 400.0))
@settings(max_examples=300, deadline=None)
def test_any_profile_throttles_to_a_valid_one_whether_or_not_its_last_window_ends_with_the_period(gaps, tail, cap):
    windows, t = [], 0.0
    for gap, length, gbps in gaps:
        windows.append(Window(t + gap, length, gbps))
        t += gap + length
    p = Profile(t + tail, tuple(windows), jitter_ms=min(gaps[0][0], t) / 3)  # tail 0: the catalog's usual shape
    for q in (p.throttled(cap), p.slow_end().throttled(cap), p.throttled(cap).slow_end()):  # raised before round 24
        assert q.period_ms >= max(w.start_ms + w.len_ms for w in q.windows) - 1e-9
        for w, v in zip(q.windows, p.windows):
            # The same volume, but for the nanosecond roundings of each window's edges (two per transform).
            assert w.len_ms * w.gbps == pytest.approx(v.len_ms * v.gbps, rel=1e-6, abs=4e-6 * v.gbps)


def test_the_bottleneck_is_the_slowest_link_per_worker():
    topo = thin(2, 2)
    assert bottleneck_mbps(topo, np.array([0, 1]), None, RING) == 100_000  # one rack: its NICs
    assert bottleneck_mbps(topo, np.array([0, 2]), None, RING) == 50_000  # across: the uplink
    # All-to-all, two workers in each rack: the uplink carries 2 x 2 / 3 of a worker's rate.
    assert bottleneck_mbps(topo, np.array([0, 1, 2, 3]), None, ALL_TO_ALL) == 37_500
    assert bottleneck_mbps(topo, np.array([0]), None, RING) == float("inf")


def test_as_run_throttles_only_where_a_link_is_slower_and_never_past_the_cap():
    topo = thin(2, 2)
    g = gang("a", 2, 4, period=200.0, start=150.0, length=20.0, gbps=100.0)
    assert as_run(g, topo, np.array([0, 1]), None, CAP) is g
    slow = as_run(g, topo, np.array([0, 2]), None, CAP)
    assert slow.profile == g.profile.throttled(50.0) and slow.profile.period_ms == 220.0
    assert as_run(g, topo, np.array([0, 2]), None, 210.0) is g  # longer than any grid could hold: as declared


def test_gangs_across_a_thin_uplink_interleave_as_they_run():
    # Two gangs of two whole-node workers, each held (by its pods' selectors) to one node in each of two
    # racks. Each one's 100 Gbps burst overflows the 50 Gbps uplinks alone, so at its nominal rate every
    # offset overflows and none was ever clean; planned at the 50 Gbps it runs at (40 ms bursts in
    # 220 ms), the second interleaves with the first.
    topo = thin(2, 2)
    snap = empty(topo, 8)
    a = dataclasses.replace(gang("a", 2, 8, period=200.0, start=150.0, length=20.0, gbps=100.0),
                            nodes=frozenset({"rack-0-node-0", "rack-1-node-0"}))
    b = dataclasses.replace(gang("b", 2, 8, period=200.0, start=150.0, length=20.0, gbps=100.0),
                            nodes=frozenset({"rack-0-node-1", "rack-1-node-1"}))
    da = decide(snap, a, POLICY)
    assert isinstance(da, Decision) and da.profile == a.profile.throttled(50.0) and da.racks == 2
    commit(snap, a, da)
    assert snap.placed["a"].gang.profile.period_ms == 220.0  # the snapshot plans it as it runs
    db = decide(snap, b, POLICY)
    assert isinstance(db, Decision) and db.locked and db.overflow_gbps_ms == 0.0 and db.locks == ("a",)
    assert db.profile == b.profile.throttled(50.0)
    commit(snap, b, db)
    assert snap.clean("a") and snap.clean("b")
    assert (snap.load <= snap.topology.capacity_mbps[:, None]).all()


def test_a_gang_that_fits_in_one_rack_is_not_throttled():
    snap = empty(thin(2, 2), 8)
    d = decide(snap, gang("a", 2, 4, period=200.0, start=150.0, length=20.0, gbps=100.0), POLICY)
    assert isinstance(d, Decision) and d.profile is None and d.racks == 1


def test_a_running_gang_is_laid_out_as_it_runs_on_its_nodes():
    topo = thin(2, 1)
    g = gang("a", 2, 4, period=200.0, start=150.0, length=20.0, gbps=100.0)
    state = ClusterState(topo, (4, 4), (Running(g, ("rack-0-node-0", "rack-1-node-0"), (1, 1), 0.0, True, 220.0),))
    snap = Snapshot.build(state, SlotGrid())
    placed = snap.placed["a"]
    assert placed.gang.profile.period_ms == 220.0 and placed.pattern.slots == 44
    links, mult = loaded_links(topo, placed.nodes, placed.members, RING)
    assert int(scaled(mult, placed.pattern.rates.max()).max()) == 50_000  # at the uplink's capacity, not over it
