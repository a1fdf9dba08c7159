"""Traffic classes served in strict priority (``execution.traffic_classes``): the class rule, known answers,
on a fabric that gives every gang a class by start order and on one where only metronome publishes them."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from volcano_metronome.commands.files import scenario_data
from volcano_metronome.sim.engine import Engine, traffic_class
from volcano_metronome.sim.report import table
from volcano_metronome.sim.runner import simulate
from volcano_metronome.sim.workload import parse_sim


def users(*rows: list[int]) -> np.ndarray:
    return np.array(rows, dtype=np.int64)


def test_a_gang_alone_takes_the_first_class() -> None:
    assert traffic_class(users([0, 0, 0, 0], [0, 0, 0, 0])) == 0


def test_a_newcomer_goes_after_the_lowest_served_class_on_any_of_its_links() -> None:
    assert traffic_class(users([1, 0, 0, 0], [0, 0, 0, 0])) == 1
    assert traffic_class(users([1, 0, 0, 0], [0, 0, 1, 0])) == 3  # class 2 on the second link
    assert traffic_class(users([0, 1, 0, 0])) == 2  # not the first free one: never above an incumbent


def test_once_the_classes_run_out_newcomers_share_the_last() -> None:
    assert traffic_class(users([0, 0, 0, 1])) == 3
    assert traffic_class(users([0, 1])) == 1
    assert traffic_class(users([1])) == 0  # one class: plain fair sharing


def sanity(classes: int, extra_jobs: list[dict[str, Any]] | None = None, classes_from: str = "start-order") -> Any:
    data = copy.deepcopy(scenario_data("sanity-2jobs"))
    data["execution"] = {"traffic_classes": classes, "classes_from": classes_from}
    data["jobs"] += copy.deepcopy(extra_jobs or [])
    return parse_sim(data)


def test_two_classes_interleave_two_colliding_jobs_without_any_offset() -> None:
    # sanity-2jobs: a and b need both NICs, burst at the NIC's rate half the time, and start together.
    # Fair sharing: every burst collides and takes twice as long (300 ms iterations). Strict priority: a
    # never waits; b waits out a's first burst (100 ms), then its bursts fill a's compute, and the two
    # interleave from then on, as metronome's offsets make them.
    fair, classes = sanity(1), sanity(2)
    for policy in ("volcano-topology", "default"):
        run = Engine(fair, fair.jobs(0), policy).run()
        assert [j.end_s - j.start_s for j in run.jobs] == [pytest.approx(30.0), pytest.approx(30.0)]
        run = Engine(classes, classes.jobs(0), policy).run()
        assert [j.route.klass for j in run.jobs] == [0, 1]
        assert [j.end_s - j.start_s for j in run.jobs] == [pytest.approx(20.0), pytest.approx(20.1)]
    # Metronome's offsets interleave them already: the classes change nothing there.
    assert [j.end_s for j in Engine(classes, classes.jobs(0), "metronome").run().jobs] == \
        [j.end_s for j in Engine(fair, fair.jobs(0), "metronome").run().jobs]


def test_published_classes_are_metronome_s_alone() -> None:
    # The same fabric, each gang in the class its scheduler published: Volcano publishes none, so its two jobs
    # share class 0 and collide as on the fair network; metronome-free publishes metronome's classes and, with
    # no offset at all, gets the interleave that the start-order fabric gave everyone above.
    fair, published = sanity(1), sanity(2, classes_from="scheduler")
    run = Engine(published, published.jobs(0), "volcano-topology").run()
    assert [j.route.klass for j in run.jobs] == [0, 0]
    assert [j.end_s - j.start_s for j in run.jobs] == [pytest.approx(30.0), pytest.approx(30.0)]
    run = Engine(published, published.jobs(0), "metronome-free").run()
    assert [j.route.klass for j in run.jobs] == [0, 1]
    assert [j.end_s - j.start_s for j in run.jobs] == [pytest.approx(20.0), pytest.approx(20.1)]
    run = Engine(published, published.jobs(0), "metronome").run()
    assert [j.route.klass for j in run.jobs] == [0, 1]
    assert [j.end_s for j in run.jobs] == [j.end_s for j in Engine(fair, fair.jobs(0), "metronome").run().jobs]


def test_a_class_is_free_again_once_its_gang_has_ended() -> None:
    late = {"name": "c", "arrival_s": 100, "workers": 2, "gpus_per_worker": 6, "iterations": 10, "priority": 0,
            "profile": {"period_ms": 200, "windows": [{"start_ms": 100, "len_ms": 100, "gbps": 100}], "jitter_ms": 0}}
    sim = sanity(2, [late])
    run = Engine(sim, sim.jobs(0), "volcano-topology").run()
    assert {j.spec.name: j.route.klass for j in run.jobs} == {"a": 0, "b": 1, "c": 0}
    c = next(j for j in run.jobs if j.spec.name == "c")
    assert c.end_s - c.start_s == pytest.approx(2.0)


def test_one_class_is_the_fair_network_of_every_earlier_run() -> None:
    plain = scenario_data("sanity-2jobs")
    one = parse_sim({**plain, "execution": {"traffic_classes": 1}})
    default = parse_sim(plain)
    for policy in ("volcano-topology", "metronome", "cassini"):
        assert [j.end_s for j in Engine(one, one.jobs(0), policy).run().jobs] == \
            [j.end_s for j in Engine(default, default.jobs(0), policy).run().jobs]


def test_a_report_under_classes_says_so_and_a_fair_one_says_nothing() -> None:
    report, _ = simulate(sanity(2), ["metronome", "volcano-topology"], [0])
    assert report["traffic_classes"] == 2
    assert "network: 2 traffic classes in strict priority" in table(report)
    assert "for every policy" in table(report)
    published, _ = simulate(sanity(2, classes_from="scheduler"), ["metronome", "volcano-topology"], [0])
    assert published["classes_from"] == "scheduler" and "0 for every other policy" in table(published)
    assert report["gains"]["metronome_vs_volcano-topology"]["avg_jct_reduction_pct"] == pytest.approx(0.0)
    fair, _ = simulate(sanity(1), ["metronome", "volcano-topology"], [0])
    assert "traffic_classes" not in fair and "network:" not in table(fair)
