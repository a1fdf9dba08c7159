"""Max-min fair sharing (and strict priority between traffic classes): the vectorised solver against a
textbook one, and conservation of bytes."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from volcano_metronome.core.topology import leaf_spine
from volcano_metronome.core.traffic import link_shares, loaded_links
from volcano_metronome.sim import fluid
from volcano_metronome.sim.fluid import Fluid, max_min, mirror_of, strict_priority
from volcano_metronome.sim.kernel import Kernel


def reference_max_min(cap: list[float], paths: list[list[int]], link_cap: list[float],
                      weights: list[dict[int, float]] | None = None) -> list[float]:
    """Progressive filling, one flow at a time, in plain loops: obviously correct, slow.

    ``weights[f][l]``: flow ``f`` loads link ``l`` with that many times its rate (default 1)."""
    w = weights or [{l: 1.0 for l in p} for p in paths]
    rate = [0.0] * len(cap)
    frozen = [False] * len(cap)
    while not all(frozen):
        room = []
        for link, capacity in enumerate(link_cap):
            users = [f for f in range(len(cap)) if link in paths[f] and not frozen[f]]
            if users:
                used = sum(rate[f] * w[f][link] for f in range(len(cap)) if link in paths[f] and frozen[f])
                room.append(((capacity - used) / sum(w[f][link] for f in users), link))
        level = min([r for r, _ in room] + [cap[f] for f in range(len(cap)) if not frozen[f]])
        for f in range(len(cap)):
            if frozen[f]:
                continue
            on_full = any(link in paths[f] and r <= level + 1e-9 for r, link in room)
            if cap[f] <= level + 1e-9 or on_full:
                rate[f] = min(cap[f], level)
                frozen[f] = True
    return rate


@st.composite
def problems(draw: st.DrawFn) -> tuple[list[float], list[list[int]], list[float]]:
    links = draw(st.integers(1, 6))
    flows = draw(st.integers(1, 7))
    link_cap = [float(draw(st.sampled_from([50, 100, 200, 400]))) for _ in range(links)]
    paths = [sorted(draw(st.sets(st.integers(0, links - 1), min_size=1, max_size=links))) for _ in range(flows)]
    cap = [float(draw(st.sampled_from([20, 40, 80, 100, 160, 1000]))) for _ in range(flows)]
    return cap, paths, link_cap


def _incidence(paths: list[list[int]], links: int) -> np.ndarray:
    inc = np.zeros((len(paths), links))
    for f, path in enumerate(paths):
        inc[f, path] = 1.0
    return inc


@settings(max_examples=300, deadline=None)
@given(problems(), st.booleans())
def test_vectorised_max_min_equals_the_textbook_one(problem: tuple[list[float], list[list[int]], list[float]],
                                                    sparse: bool) -> None:
    cap, paths, link_cap = problem
    with patch.object(fluid, "DENSE_CELLS", 0 if sparse else fluid.DENSE_CELLS):
        fast = max_min(np.array(cap), _incidence(paths, len(link_cap)), np.array(link_cap))
    assert fast == pytest.approx(reference_max_min(cap, paths, link_cap), rel=1e-9, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(problems())
def test_max_min_is_feasible_and_every_flow_has_a_bottleneck(problem: tuple[list[float], list[list[int]], list[float]]) -> None:
    cap, paths, link_cap = problem
    inc = _incidence(paths, len(link_cap))
    rate = max_min(np.array(cap), inc, np.array(link_cap))
    load = rate @ inc
    assert (load <= np.array(link_cap) * (1 + 1e-9)).all()
    for f in range(len(cap)):
        at_cap = rate[f] >= cap[f] * (1 - 1e-9)
        # A bottleneck: a saturated link on which no flow gets more than f.
        bottleneck = any(load[l] >= link_cap[l] * (1 - 1e-9) and rate[f] >= rate[inc[:, l] > 0].max() * (1 - 1e-9)
                         for l in paths[f])
        assert at_cap or bottleneck


@settings(max_examples=200, deadline=None)
@given(problems(), st.booleans(), st.data())
def test_weighted_max_min_equals_the_textbook_one(problem: tuple[list[float], list[list[int]], list[float]],
                                                  sparse: bool, data: st.DataObject) -> None:
    cap, paths, link_cap = problem
    weights = [{l: data.draw(st.sampled_from([1.0, 4 / 3, 2.0, 64 / 15])) for l in p} for p in paths]
    inc = np.zeros((len(paths), len(link_cap)))
    for f, w in enumerate(weights):
        for l, v in w.items():
            inc[f, l] = v
    with patch.object(fluid, "DENSE_CELLS", 0 if sparse else fluid.DENSE_CELLS):
        fast = max_min(np.array(cap), inc, np.array(link_cap))
    assert fast == pytest.approx(reference_max_min(cap, paths, link_cap, weights), rel=1e-9, abs=1e-9)
    assert (fast @ inc <= np.array(link_cap) * (1 + 1e-9)).all()


def test_fractional_weights_leave_no_residue_that_stalls_the_filling() -> None:
    # Found by search: the summed weights left on link 0 went to 4e-16 instead of 0, its share to 0,
    # and the filling froze nobody, forever.
    cap = np.array([100.0, 100.0, 20.0, 20.0, 20.0])
    inc = np.array([[16 / 7, 0.0, 0.3], [4 / 3, 2.4, 0.1], [64 / 15, 12 / 7, 64 / 15], [4 / 3, 0.1, 0.0],
                    [0.0, 0.3, 0.0]])
    link_cap = np.array([3200.0, 100.0, 3200.0])
    paths = [[l for l in range(3) if row[l]] for row in inc]
    weights = [{l: float(row[l]) for l in p} for row, p in zip(inc, paths)]
    for sparse in (False, True):
        with patch.object(fluid, "DENSE_CELLS", 0 if sparse else fluid.DENSE_CELLS):
            fast = max_min(cap, inc, link_cap)
        assert fast == pytest.approx(reference_max_min(cap.tolist(), paths, link_cap.tolist(), weights))


def test_an_all_to_all_burst_is_held_by_its_most_loaded_cut_and_conserves_bytes() -> None:
    topo = leaf_spine(2, 2, 100.0, 100.0)
    kernel = Kernel()
    net = Fluid(kernel, topo)
    nodes = np.arange(4)  # two one-worker nodes per rack: the uplink cut carries 2 x 2 / 3 of the rate
    links, shares = link_shares(topo, nodes, None, "all-to-all")
    route = net.route(links, shares)
    assert route.floor == pytest.approx(75.0)  # 100 Gbps of uplink / (4 / 3)
    ends: list[float] = []
    net.start(route, 80.0, 8.0, lambda: ends.append(kernel.now))
    kernel.run()
    assert ends == [pytest.approx(8.0 / 75.0)]
    assert net.carried() == pytest.approx(8.0 * np.bincount(links, weights=shares, minlength=len(topo.links)))
    ring_links, _ = link_shares(topo, nodes, None, "ring")
    net.start(net.route(ring_links), 80.0, 8.0, lambda: ends.append(kernel.now))
    kernel.run()
    assert ends[1] - ends[0] == pytest.approx(0.1)  # the ring's one edge per cut fits at 80 Gbps


def test_duplex_directions_are_solved_as_one_link() -> None:
    topo = leaf_spine(2, 2, 100.0, 100.0)
    canon = mirror_of(topo)
    for i, link in enumerate(topo.links):
        partner = topo.links[canon[i]]
        assert partner.nodes == link.nodes and partner.tier == link.tier
    assert len(set(canon.tolist())) == len(topo.links) // 2


def test_bytes_carried_equal_bytes_demanded_on_every_link() -> None:
    topo = leaf_spine(2, 3, 100.0, 150.0)
    kernel = Kernel()
    net = Fluid(kernel, topo)
    rng = np.random.default_rng(7)
    finished: list[int] = []
    expected = np.zeros(len(topo.links))
    for i in range(60):
        nodes = rng.choice(len(topo.nodes), size=int(rng.integers(2, 5)), replace=False)
        links, _ = loaded_links(topo, nodes)
        volume = float(rng.uniform(0.5, 20.0))
        rate = float(rng.choice([40.0, 80.0, 100.0]))
        expected[links] += volume
        route = net.route(links)
        kernel.at(float(rng.uniform(0, 2.0)), net.start, route, rate, volume, lambda i=i: finished.append(i))
    kernel.run()
    assert sorted(finished) == list(range(60))
    assert net.carried() == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert net.demanded == pytest.approx(expected)
    assert net.in_flight == 0 and (net.link_rate == pytest.approx(0.0, abs=1e-9))


def test_a_burst_alone_runs_at_its_rate_and_two_share_a_link_fairly() -> None:
    topo = leaf_spine(1, 2, 100.0)
    kernel = Kernel()
    net = Fluid(kernel, topo)
    links, _ = loaded_links(topo, np.array([0, 1]))
    route = net.route(links)
    ends: dict[str, float] = {}
    net.start(route, 80.0, 8.0, lambda: ends.__setitem__("alone", kernel.now))
    kernel.run()
    assert ends["alone"] == pytest.approx(0.1)  # 8 Gb at 80 Gbps
    kernel.at(1.0, net.start, route, 100.0, 10.0, lambda: ends.__setitem__("a", kernel.now))
    kernel.at(1.0, net.start, route, 100.0, 5.0, lambda: ends.__setitem__("b", kernel.now))
    kernel.run()
    # Both at 50 Gbps until b has moved its 5 Gb (0.1 s), then a alone at 100 Gbps for its last 5 Gb.
    assert ends["b"] == pytest.approx(1.1) and ends["a"] == pytest.approx(1.15)


@pytest.mark.parametrize(("classes", "seed"), [(1, 11), (3, 13)])
def test_rates_in_flight_are_those_of_a_full_solve_after_every_event(classes: int, seed: int) -> None:
    # The solver skips the re-solve when a start or an end cannot change anybody's rate, and solves only
    # binding links; after every event the rates must still be those of a full solve (max-min fair with
    # one class, strict priority with several).
    topo = leaf_spine(3, 4, 100.0, 200.0)
    kernel = Kernel()
    net = Fluid(kernel, topo)
    rng = np.random.default_rng(seed)
    for _ in range(120):
        nodes = rng.choice(len(topo.nodes), size=int(rng.integers(2, 6)), replace=False)
        route = net.route(loaded_links(topo, nodes)[0], klass=int(rng.integers(0, classes)))
        rate = float(rng.choice([30.0, 60.0, 80.0, 100.0]))
        kernel.at(float(rng.uniform(0, 3.0)), net.start, route, rate, float(rng.uniform(0.5, 10.0)), lambda: None)
    checked = 0
    while kernel.pending:
        kernel.run(stop=lambda: True)  # one event at a time
        live = np.flatnonzero(net.alive)
        if len(live):
            full = strict_priority(net.cap[live], net.incidence[live], net.capacity, net.klass[live])
            assert net.rate[live] == pytest.approx(full, rel=1e-9, abs=1e-9)
            checked += 1
    assert checked > 100 and net.solves > 20 and net.in_flight == 0


def reference_strict_priority(cap: list[float], paths: list[list[int]], link_cap: list[float],
                              klass: list[int]) -> list[float]:
    """The textbook filling class by class, 0 first, each on what the classes before it left: slow, plain."""
    rate = [0.0] * len(cap)
    room = list(link_cap)
    for k in sorted(set(klass)):
        mine = [f for f in range(len(cap)) if klass[f] == k]
        got = reference_max_min([cap[f] for f in mine], [paths[f] for f in mine], room)
        for f, r in zip(mine, got):
            rate[f] = r
            for link in paths[f]:
                room[link] = max(0.0, room[link] - r)
    return rate


@settings(max_examples=300, deadline=None)
@given(problems(), st.data())
def test_strict_priority_equals_the_textbook_filling_class_by_class(
        problem: tuple[list[float], list[list[int]], list[float]], data: st.DataObject) -> None:
    cap, paths, link_cap = problem
    klass = [data.draw(st.integers(0, 3)) for _ in cap]
    inc = _incidence(paths, len(link_cap))
    fast = strict_priority(np.array(cap), inc, np.array(link_cap), np.array(klass))
    assert fast == pytest.approx(reference_strict_priority(cap, paths, link_cap, klass), rel=1e-9, abs=1e-9)
    load = fast @ inc
    assert (load <= np.array(link_cap) * (1 + 1e-9)).all()
    # A class is served as if the classes below it were not there.
    top = np.array(klass) == min(klass)
    assert fast[top] == pytest.approx(max_min(np.array(cap)[top], inc[top], np.array(link_cap)), rel=1e-9, abs=1e-9)
    # Work-conserving: a flow below its cap crosses a full link.
    for f in range(len(cap)):
        assert fast[f] >= cap[f] * (1 - 1e-9) or any(load[l] >= link_cap[l] * (1 - 1e-9) for l in paths[f])


def test_one_class_is_plain_max_min() -> None:
    cap, inc, link_cap = np.array([100.0, 60.0]), np.array([[1.0, 1.0], [1.0, 0.0]]), np.array([100.0, 100.0])
    assert strict_priority(cap, inc, link_cap, np.array([2, 2])) == pytest.approx(max_min(cap, inc, link_cap))


def test_a_burst_of_a_lower_class_waits_for_the_higher_one_and_bytes_are_kept() -> None:
    topo = leaf_spine(1, 2, 100.0)
    kernel = Kernel()
    net = Fluid(kernel, topo)
    links, _ = loaded_links(topo, np.array([0, 1]))
    ends: dict[str, float] = {}
    net.start(net.route(links, klass=1), 100.0, 10.0, lambda: ends.__setitem__("low", kernel.now))
    kernel.at(0.05, net.start, net.route(links, klass=0), 100.0, 5.0, lambda: ends.__setitem__("high", kernel.now))
    kernel.run()
    # low moves 5 Gb alone, stops while high moves its 5 Gb at the full 100 Gbps, then moves its last 5.
    assert ends["high"] == pytest.approx(0.1) and ends["low"] == pytest.approx(0.15)
    assert net.carried() == pytest.approx(15.0 * np.bincount(links, minlength=len(topo.links)))
    # Under fair sharing both would have been stretched: high to 0.15 s, low to 0.15 s.


def test_a_burst_pre_empted_the_instant_it_is_through_still_ends() -> None:
    # Its completion is due at the very time a higher class arrives and takes the link: rate 0, nothing left.
    topo = leaf_spine(1, 2, 100.0)
    kernel = Kernel()
    net = Fluid(kernel, topo)
    links, _ = loaded_links(topo, np.array([0, 1]))
    ends: list[str] = []
    net.start(net.route(links, klass=1), 100.0, 10.0, lambda: ends.append("low"))
    # Ranked before the network's own events, so the start comes first at 0.1 s.
    kernel.at(0.1, net.start, net.route(links, klass=0), 100.0, 5.0, lambda: ends.append("high"), rank=-1)
    kernel.run()
    assert ends == ["low", "high"] and net.in_flight == 0
    assert kernel.now == pytest.approx(0.15)
