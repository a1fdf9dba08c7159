"""The report's definitions, on hand-made runs whose figures are known."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from volcano_metronome.core.profile import Profile, Window
from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.engine import JobRun, RunResult
from volcano_metronome.sim.report import (bottleneck_links, compare, figures, gains, issue12_targets, regime, table,
                                         utilisation_series)


def job(name: str, arrival: float, start: float, end: float, priority: int = 0) -> JobRun:
    run = JobRun(JobSpec(name, arrival, 2, 1, 10, priority, Profile(100.0, (Window(50.0, 50.0, 10.0),))), 0, 0)
    run.start_s, run.end_s, run.isolated_s = start, end, 1.0
    return run


def result(jobs: list[JobRun], carried: list[float], occupied: list[float], policy: str = "p") -> RunResult:
    links = len(carried)
    return RunResult(
        scenario="s", policy=policy, seed=0, jobs=jobs, capacity=np.full(links, 10.0), carried=np.array(carried),
        demanded=np.array(carried), occupied_s=np.array(occupied), sample_times=np.array([0.0, 1.0, 2.0]),
        samples=np.array([[0.0] * links, [5.0] + [0.0] * (links - 1), [15.0] + [0.0] * (links - 1)]),
        link_names=tuple(f"l{i}" for i in range(links)), decision_ms=[1.0, 2.0, 3.0], extra={})


def test_job_figures_and_utilisations() -> None:
    jobs = [job("a", 0.0, 0.0, 2.0, priority=5), job("b", 1.0, 2.0, 4.0)]
    run = result(jobs, carried=[15.0, 5.0] + [0.0] * 38, occupied=[3.0, 5.0] + [0.0] * 38)
    f = figures(run)
    assert f["avg_jct_s"] == 2.5 and f["avg_queue_s"] == 0.5 and f["avg_slowdown"] == 2.5
    assert f["p99_jct_s"] == pytest.approx(2.99)
    # 5% of 40 links = 2 bottleneck links: 20 Gb over 10 Gbps x (3 + 5) s.
    assert list(bottleneck_links(run)) == [0, 1]
    assert f["bottleneck_utilization"] == pytest.approx(20 / 80)
    assert f["avg_link_utilization"] == pytest.approx(20 / 80)
    assert f["by_priority"]["5"]["avg_jct_s"] == 2.0 and f["by_priority"]["0"]["avg_queue_s"] == 1.0
    assert f["makespan_s"] == 4.0 and f["decision_ms_p50"] == 2.0
    times, util = utilisation_series(run, 0)
    assert times.tolist() == [0.5, 1.5] and util.tolist() == [0.5, 1.0]


def test_gains_and_medians_over_seeds() -> None:
    def fig(avg: float, p99: float, util: float, excess: float) -> dict[str, Any]:
        return {"avg_jct_s": avg, "p99_jct_s": p99, "bottleneck_utilization": util, "avg_contention_excess_s": excess}

    g = gains({"metronome": fig(75.0, 50.0, 0.6, 1.0), "default": fig(100.0, 100.0, 0.5, 4.0)})
    assert g == {"metronome_vs_default": {"not_compared": None, "avg_jct_reduction_pct": 25.0, "p99_jct_reduction_pct": 50.0,
                                          "bottleneck_utilization_gain_pct": 20.0,
                                          "contention_excess_recovered_pct": 75.0, "queueing_share_pct": None}}
    # No excess to recover: no figure (not 0 %, not 100 %).
    g = gains({"metronome": fig(75.0, 50.0, 0.6, 0.0), "default": fig(100.0, 100.0, 0.5, 0.0)})
    assert g["metronome_vs_default"]["contention_excess_recovered_pct"] is None

    def run(policy: str, end: float) -> RunResult:
        return result([job("a", 0.0, 0.0, end)], [1.0] * 20, [1.0] * 20, policy)

    report = compare("s", [0, 1, 2], {"metronome": [run("metronome", e) for e in (1.0, 2.0, 9.0)],
                                      "default": [run("default", e) for e in (2.0, 2.0, 3.0)]})
    assert report["policies"]["metronome"]["avg_jct_s"] == 2.0  # median of 1, 2, 9
    # Gains are medians of the per-seed gains (50%, 0%, -200%).
    assert report["gains"]["metronome_vs_default"]["avg_jct_reduction_pct"] == 0.0
    assert [s["seed"] for s in report["per_seed"]] == [0, 1, 2]
    assert report["targets"]["metronome_vs_default.avg_jct_reduction_pct"]["met"] is False


def test_the_gap_to_a_policy_is_split_into_queueing_and_running_time() -> None:
    def fig(avg: float, queue: float) -> dict[str, Any]:
        return {"avg_jct_s": avg, "avg_queue_s": queue, "p99_jct_s": avg, "bottleneck_utilization": 0.5}

    # 100 -> 80 s, of which the queue 30 -> 15 s: 15 of the 20 s are queueing.
    g = gains({"metronome": fig(80.0, 15.0), "default": fig(100.0, 30.0)})["metronome_vs_default"]
    assert g["queueing_share_pct"] == 75.0
    # The queue shrank by more than the gap: running times grew (a share above 100 %).
    assert gains({"metronome": fig(90.0, 0.0), "default": fig(100.0, 20.0)})["metronome_vs_default"][
        "queueing_share_pct"] == 200.0
    # Within 1 %: no gap to split, whatever the queues did.
    assert gains({"metronome": fig(99.05, 0.0), "default": fig(100.0, 20.0)})["metronome_vs_default"][
        "queueing_share_pct"] is None
    # Issue 12's bar against default carries the split, and the table says it.
    report = {"policies": {"metronome": fig(80.0, 15.0), "default": fig(100.0, 30.0)},
              "gains": gains({"metronome": fig(80.0, 15.0), "default": fig(100.0, 30.0)})}
    t = issue12_targets(report)["vs_default.avg_jct_reduction_pct"]
    assert (t["value"], t["met"], t["queueing_share_pct"]) == (20.0, True, 75.0)
    assert issue12_targets({**report, "gains": gains({"metronome": fig(81.0, 15.0), "default": fig(100.0, 30.0)})})[
        "vs_default.avg_jct_reduction_pct"]["met"] is False  # -19 % is short of -19.5 %


def test_the_table_says_how_much_of_a_gap_is_queueing() -> None:
    def run(policy: str, start: float, end: float) -> RunResult:
        return result([job("a", 0.0, start, end)], [1.0] * 20, [1.0] * 20, policy)

    text = table(compare("s", [0], {"metronome": [run("metronome", 1.0, 5.0)], "default": [run("default", 4.0, 10.0)]}))
    # JCT 10 -> 5 s, queue 4 -> 1 s: 60 % of the gap is queueing.
    assert "vs default            avg JCT -50.0% (60% of it queueing)" in text
    assert "vs_default.avg_jct_reduction_pct" in text and "met (50.0; 60% of it queueing)" in text


def test_a_policy_that_completed_other_jobs_is_not_compared() -> None:
    def run(policy: str, ends: list[float]) -> RunResult:
        return result([job(f"j{i}", 0.0, 0.0, e) for i, e in enumerate(ends)], [1.0] * 20, [1.0] * 20, policy)

    nan = float("nan")  # a job that never ran
    # exclusive never ran the long job: its average (1 s) is over one job, metronome's (5 s) over two.
    report = compare("s", [0], {"metronome": [run("metronome", [1.0, 9.0])], "exclusive": [run("exclusive", [1.0, nan])],
                                "volcano-topology": [run("volcano-topology", [1.0, 9.0])]})
    g = report["gains"]["metronome_vs_exclusive"]
    assert g["not_compared"] == "exclusive completed 1 of 2 jobs, metronome 2 of 2: their averages are over different jobs"
    assert all(g[figure] is None for figure in g if figure != "not_compared")
    assert report["gains"]["metronome_vs_volcano-topology"]["not_compared"] is None
    assert "vs exclusive          not compared: exclusive completed 1 of 2 jobs" in table(report)
    # One seed of two is enough: a median over unlike seeds is no comparison either.
    report = compare("s", [0, 1], {"metronome": [run("metronome", [1.0, 9.0])] * 2,
                                   "exclusive": [run("exclusive", [1.0, 9.0]), run("exclusive", [1.0, nan])]})
    assert report["gains"]["metronome_vs_exclusive"]["not_compared"].startswith("on 1 of 2 seeds, exclusive completed 1")
    assert report["gains"]["metronome_vs_exclusive"]["avg_jct_reduction_pct"] is None


def test_do_no_harm_is_missed_where_metronome_completed_fewer_jobs_and_not_judged_where_more() -> None:
    def run(policy: str, ends: list[float]) -> RunResult:
        return result([job(f"j{i}", 0.0, 0.0, e) for i, e in enumerate(ends)], [1.0] * 20, [1.0] * 20, policy)

    nan = float("nan")
    fewer = compare("s", [0], {"metronome": [run("metronome", [1.0, nan])], "cassini": [run("cassini", [1.0, 9.0])]})
    t = fewer["targets"]["no_harm.avg_jct_s_vs_cassini"]
    assert t["met"] is False and t["value"] is None and "metronome 1 of 2" in t["not_compared"]
    assert "NOT met (cassini completed 2 of 2 jobs, metronome 1 of 2" in table(fewer)  # its 1 s average is not a win
    more = compare("s", [0], {"metronome": [run("metronome", [1.0, 9.0])], "cassini": [run("cassini", [1.0, nan])]})
    t = more["targets"]["no_harm.avg_jct_s_vs_cassini"]
    assert t["applies"] is False and "met" not in t


def test_link_sharing_counts_are_summed_and_fractions_pooled_over_seeds() -> None:
    def run(sharing: int, zero: float | None) -> RunResult:
        r = result([job("a", 0.0, 0.0, 1.0)], [1.0] * 20, [1.0] * 20, "metronome")
        r.extra = {"link_sharing_decisions": sharing, "zero_overflow_fraction": zero, "guarded_fit_fraction": zero,
                   "placed_unlocked": 100 - sharing, "placed_locked": sharing, "locks": sharing // 10,
                   "unlocks": sharing // 5}
        return r

    report = compare("s", [0, 1, 2], {"metronome": [run(10, 0.5), run(0, None), run(30, 1.0)]})
    ours = report["policies"]["metronome"]
    assert ours["link_sharing_decisions"] == 40
    assert ours["zero_overflow_fraction"] == pytest.approx(35 / 40)  # not the median of 0.5 and 1.0
    assert (ours["placed_unlocked"], ours["placed_locked"], ours["locks"], ours["unlocks"]) == (260, 40, 4, 8)


def test_alignment_costs_split_the_padding() -> None:
    a = job("a", 0.0, 0.0, 3.0)  # period 0.1 s, 10 iterations
    a.links = np.array([0])
    a.grid_period_s, a.padded_s, a.first_wait_s, a.reanchor_s = 0.11, 0.5, 0.05, 0.07
    # Aligned for 6 iterations, one of which re-anchored (a lock): 5 held the snapped period.
    a.aligned_iterations, a.steady = 6, 5
    free = job("b", 0.0, 0.0, 1.0)  # ran free throughout: no padding, no snapping
    free.links = np.array([1])
    f = figures(result([a, free], [1.0] * 20, [1.0] * 20))
    assert f["avg_padding_s"] == 0.25 and f["avg_first_slot_wait_s"] == 0.025 and f["avg_reanchor_s"] == 0.035
    assert f["avg_snapping_s"] == pytest.approx(5 * 0.01 / 2)
    assert f["aligned_iteration_share"] == pytest.approx(6 / 20)


def test_issue12_targets_are_ratios_to_each_baseline() -> None:
    def fig(avg: float, p99: float) -> dict[str, Any]:
        return {"avg_jct_s": avg, "p99_jct_s": p99}

    report = {"policies": {"metronome": fig(98.0, 105.0), "volcano-topology": {**fig(100.0, 100.0), "contention_excess": 0.05},
                           "metronome-free": fig(97.0, 100.0)},
              "gains": {"metronome_vs_volcano-topology": {"contention_excess_recovered_pct": 40.0}}}
    t = issue12_targets(report)
    assert t["no_harm.avg_jct_s_vs_volcano-topology"]["met"] is True
    assert t["no_harm.avg_jct_s_vs_metronome-free"]["met"] is False  # 98 / 97 > 1.005
    assert t["no_harm.p99_jct_s_vs_volcano-topology"]["met"] is True  # 1.05 exactly
    assert "no_harm.avg_jct_s_vs_cassini" not in t  # cassini was not run
    assert t["win_if_contended.avg_jct_vs_volcano-topology"]["met"] is True
    assert t["win_if_contended.excess_recovered_vs_volcano-topology"]["met"] is False

    # Uncontended: the win targets are reported as not applying, never as met.
    report["policies"]["volcano-topology"]["contention_excess"] = 0.001
    t = issue12_targets(report)
    assert t["win_if_contended"]["applies"] is False and not any(k.startswith("win_if_contended.") for k in t)


def test_regime_says_whether_offsets_can_matter() -> None:
    def report(excess: float) -> dict[str, Any]:
        return {"policies": {"volcano-topology": {"contention_excess": excess}, "metronome": {}},
                "gains": {"metronome_vs_volcano-topology": {"contention_excess_recovered_pct": 60.0},
                          "metronome_vs_metronome-free": {"contention_excess_recovered_pct": 55.0,
                                                          "avg_jct_reduction_pct": 3.0}}}

    assert "OFFSETS CANNOT MATTER" in regime(report(0.004))
    shared = regime(report(0.08))
    assert "LINKS ARE SHARED" in shared and "8.0%" in shared and "recovered 60.0%" in shared and "-3.0%" in shared
    assert "unknown" in regime({"policies": {"metronome": {}}, "gains": {}})


def test_a_figure_wider_than_its_column_keeps_a_space_before_it() -> None:
    # A start-up delay of most of a year gives queue figures of eight digits: they used to run into the slowdown.
    jobs = [job("a", 0.0, 47_950_484.8, 47_950_490.0), job("b", 0.0, 0.0, 2.0)]
    report = compare("s", [0], {"p": [result(jobs, carried=[1.0], occupied=[1.0])]})
    row = next(line for line in table(report).splitlines() if line.startswith("p "))
    assert " 23975242.4 " in row  # the average queue, after a space, before the next column's
    assert len(row.split()) == 11
