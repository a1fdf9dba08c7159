"""Figures of runs, and the JSON report comparing policies over seeds.

Definitions (also in docs/simulator.md):

* JCT = end - arrival (queueing included); ``p50``/``p99`` are linear-interpolated percentiles.
* slowdown = JCT / the job's time alone: the same iterations, jitter draws and window rates with
  no other job anywhere and no queueing (on links at least as fast as its window rates that is
  ``iterations x period`` minus the jitter draws). 1.0 is ideal.
* A link's *occupied time* is the time during which at least one running gang loads it (is placed
  across it, communicating or not). A link's utilisation is ``carried / (capacity x occupied)``.
* ``avg_link_utilization``: total carried over total ``capacity x occupied``, over every link.
* ``bottleneck_utilization``: the same over the policy's *bottleneck links*, the 5% of links (at least
  one) that carried the most traffic in that run.
* ``avg_padding_s``: time per job the runtime helper held bursts back to their slots, split in
  ``avg_first_slot_wait_s`` (before the first burst), ``avg_reanchor_s`` (re-anchoring on a new
  grid later: locks, moved offsets), ``avg_snapping_s`` (the part grid snapping imposes:
  ``snapped period - period`` for every aligned iteration that followed an aligned one on the same
  grid) and the rest, jitter and contention absorbed. ``aligned_iteration_share``: the share of
  networked jobs' iterations the helper aligned (1.0 without lock on demand).
* contention excess: for every completed job that loads links, its communication time (every
  burst from the moment it is sent to the moment it is through, padding excluded) minus the same
  bursts' uncontended time (volume / the window's rate, capped by the slowest link of the gang).
  ``avg_contention_excess_s`` is its sum over completed jobs divided by their number;
  ``contention_excess`` is its sum divided by the jobs' summed running time (end - start, queueing
  excluded): the share of running time lost to sharing links, the ceiling any offset policy can win
  back. ``contention_excess_recovered_pct`` (in ``metronome_vs_X``) is ``100 (E_X - E_m) / E_X`` of
  ``avg_contention_excess_s`` (the same jobs under both policies), None when X had no excess.
* gains ``metronome_vs_X``: ``100 (X - metronome) / X`` for JCTs, ``100 (metronome - X) / X`` for
  bottleneck utilisation; ``queueing_share_pct``, the part of the average JCT gap that is queueing,
  ``100 (Q_X - Q_metronome) / (JCT_X - JCT_metronome)`` (the rest is running time; None where the two
  averages are within 1 %). Where the two policies completed different numbers of jobs (a policy that
  admits by bandwidth, ``exclusive``, may never run a gang whose peak fits no link), their averages are
  over different jobs: every figure of that gain is None and ``not_compared`` says why; the do-no-harm
  ratios are then not judged, or missed where metronome completed fewer. With several seeds every
  figure and gain is the median over seeds, except
  ``link_sharing_decisions`` and the lock-on-demand counts (``placed_unlocked``, ``placed_locked``:
  networked gangs placed running free or aligned; ``locks``: running gangs a placement locked;
  ``unlocks``), summed over seeds, and the zero-overflow and guarded-fit fractions of those
  decisions (pooled over seeds).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Mapping, Sequence

import numpy as np

from volcano_metronome.sim.engine import JobRun, RunResult

BOTTLENECK_SHARE = 0.05
#: Average JCTs within this share of each other have no gap to split into queueing and running time
#: (docs/simulator-rounds.md, round 6, showed the split where the gap was at least 1 %).
SAME_JCT = 0.01

#: metronome's lock-on-demand counts and its gangs held back (``core.holding``), summed over seeds like
#: ``link_sharing_decisions``.
DECISION_COUNTS = ("placed_unlocked", "placed_locked", "locks", "unlocks", "exact_locks", "held_gangs",
                   "holds_overtaken")

#: The issue's targets on cluster-256: (gain key, figure, comparison, threshold).
TARGETS = (
    ("metronome_vs_default", "avg_jct_reduction_pct", ">=", 25.0),
    ("metronome_vs_default", "p99_jct_reduction_pct", ">=", 40.0),
    ("metronome_vs_default", "bottleneck_utilization_gain_pct", ">=", 25.0),
    ("metronome_vs_volcano-topology", "avg_jct_reduction_pct", ">=", 10.0),
)


def figures(run: RunResult) -> dict[str, Any]:
    """The figures of one run."""
    done = [j for j in run.jobs if not math.isnan(j.end_s)]
    out: dict[str, Any] = {"jobs": len(run.jobs), "completed": len(done)}
    out.update(_job_figures(done))
    occupied = run.occupied_s > 0
    out["bottleneck_utilization"] = _utilisation(run, bottleneck_links(run))
    out["avg_link_utilization"] = _utilisation(run, np.flatnonzero(occupied))
    out["makespan_s"] = _r(max((j.end_s for j in done), default=0.0) - min((j.spec.arrival_s for j in run.jobs), default=0.0))
    priorities = sorted({j.spec.priority for j in run.jobs}, reverse=True)
    out["by_priority"] = {
        str(p): {"jobs": sum(1 for j in run.jobs if j.spec.priority == p),
                 "completed": sum(1 for j in done if j.spec.priority == p),
                 **_job_figures([j for j in done if j.spec.priority == p])}
        for p in priorities
    }
    out["decision_ms_p50"] = _pct(run.decision_ms, 50)
    out["decision_ms_p99"] = _pct(run.decision_ms, 99)
    networked = [j for j in done if len(j.links)]
    ideal = sum(j.comm_ideal_s for j in networked)
    out["comm_stretch"] = _r(sum(j.comm_s for j in networked) / ideal) if ideal else 1.0
    out["networked_jobs"] = len(networked)
    # Contention excess: communication time beyond the uncontended time (the ceiling offsets can win back).
    excess = sum(max(0.0, j.comm_s - j.comm_ideal_s) for j in networked)  # no float residue below zero
    running = sum(j.end_s - j.start_s for j in done)
    out["avg_contention_excess_s"] = _r(excess / len(done)) if done else None
    out["contention_excess"] = _r(excess / running) if running > 0 else 0.0
    out["avg_padding_s"] = _r(sum(j.padded_s for j in done) / len(done)) if done else None
    out["avg_first_slot_wait_s"] = _r(sum(j.first_wait_s for j in done) / len(done)) if done else None
    out["avg_reanchor_s"] = _r(sum(j.reanchor_s for j in done) / len(done)) if done else None
    # The part of the padding that grid snapping imposes: an aligned iteration lasts the snapped period.
    snapping = sum(j.steady * (j.grid_period_s - j.period_s) for j in done if j.steady)
    out["avg_snapping_s"] = _r(snapping / len(done)) if done else None
    iterations = sum(j.spec.iterations for j in networked)
    out["aligned_iteration_share"] = _r(sum(j.aligned_iterations for j in networked) / iterations) if iterations else 0.0
    out.update({k: (_r(v) if isinstance(v, float) else v) for k, v in run.extra.items()})
    out["sim_events"] = run.events
    out["wall_s"] = _r(run.wall_s)
    return out


def bottleneck_links(run: RunResult) -> np.ndarray:
    """The run's bottleneck links: the top 5% (at least one) by carried volume, among links that carried any."""
    used = np.flatnonzero(run.carried > 0)
    if not len(used):
        return used
    count = max(1, math.ceil(BOTTLENECK_SHARE * len(run.carried)))
    return used[np.argsort(-run.carried[used], kind="stable")[:count]]


def busiest_link(run: RunResult) -> int | None:
    """The link that carried the most (None if none carried anything)."""
    return int(np.argmax(run.carried)) if run.carried.max(initial=0.0) > 0 else None


def utilisation_series(run: RunResult, link: int) -> tuple[np.ndarray, np.ndarray]:
    """``(times, utilisation)`` of ``link`` over the sampling intervals (interval midpoints)."""
    times, cumulative = run.sample_times, run.samples[:, link] if len(run.samples) else np.zeros(0)
    if len(times) < 2:
        return np.zeros(0), np.zeros(0)
    dt = np.diff(times)
    keep = dt > 0
    util = np.diff(cumulative)[keep] / (run.capacity[link] * dt[keep])
    return (times[:-1][keep] + times[1:][keep]) / 2, util


def compare(scenario: str, seeds: Sequence[int], runs: Mapping[str, Sequence[RunResult]]) -> dict[str, Any]:
    """The report: per-seed figures and gains, and their medians over seeds."""
    per_seed: list[dict[str, Any]] = []
    for i, seed in enumerate(seeds):
        policies = {name: figures(rs[i]) for name, rs in runs.items()}
        per_seed.append({"seed": seed, "policies": policies, "gains": gains(policies)})
    report: dict[str, Any] = {
        "scenario": scenario,
        "seeds": list(seeds),
        "policies": {name: _median([s["policies"][name] for s in per_seed]) for name in runs},
        "gains": _median([s["gains"] for s in per_seed]) if per_seed else {},
    }
    for key in report["gains"]:
        whys = [s["gains"][key]["not_compared"] for s in per_seed if s["gains"][key]["not_compared"]]
        if whys:  # one seed's averages over different jobs make the median no comparison either
            report["gains"][key] = _not_compared(
                whys[0] if len(per_seed) == 1 else f"on {len(whys)} of {len(per_seed)} seeds, {whys[0]}")
    _pool_sharing(report["policies"], per_seed)
    report["targets"] = targets(report, per_seed)
    report["per_seed"] = per_seed
    return report


def _pool_sharing(policies: dict[str, Any], per_seed: Sequence[Mapping[str, Any]]) -> None:
    """Link-sharing counts of phased policies are summed over seeds, and the fractions pooled (not medians)."""
    for name, figures_ in policies.items():
        rows = [s["policies"][name] for s in per_seed]
        if "link_sharing_decisions" not in figures_:
            continue
        total = sum(r["link_sharing_decisions"] for r in rows)
        figures_["link_sharing_decisions"] = total
        for key in DECISION_COUNTS:
            if key in figures_:
                figures_[key] = sum(r[key] for r in rows)
        for key in ("zero_overflow_fraction", "guarded_fit_fraction"):
            hits = sum(r[key] * r["link_sharing_decisions"] for r in rows if r[key] is not None)
            figures_[key] = _r(hits / total) if total else None


#: The figures of every ``metronome_vs_X`` gain.
GAIN_FIGURES = ("avg_jct_reduction_pct", "p99_jct_reduction_pct", "bottleneck_utilization_gain_pct",
                "contention_excess_recovered_pct", "queueing_share_pct")


def unlike(name: str, theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> str | None:
    """Why ``name``'s figures cannot be set against metronome's (they completed different numbers of jobs), or None."""
    if theirs.get("completed") == ours.get("completed"):
        return None
    return (f"{name} completed {theirs['completed']} of {theirs['jobs']} jobs, metronome {ours['completed']} of "
            f"{ours['jobs']}: their averages are over different jobs")


def _not_compared(why: str) -> dict[str, Any]:
    return {figure: None for figure in GAIN_FIGURES} | {"not_compared": why}


def gains(policies: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """metronome against every other policy present."""
    ours = policies.get("metronome")
    if ours is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for name, theirs in policies.items():
        if name == "metronome":
            continue
        if (why := unlike(name, theirs, ours)) is not None:
            out[f"metronome_vs_{name}"] = _not_compared(why)
            continue
        out[f"metronome_vs_{name}"] = {
            "not_compared": None,
            "avg_jct_reduction_pct": _negated(_change_pct(theirs["avg_jct_s"], ours["avg_jct_s"])),
            "p99_jct_reduction_pct": _negated(_change_pct(theirs["p99_jct_s"], ours["p99_jct_s"])),
            "bottleneck_utilization_gain_pct": _change_pct(theirs["bottleneck_utilization"],
                                                           ours["bottleneck_utilization"]),
            "contention_excess_recovered_pct": _recovered(theirs.get("avg_contention_excess_s"),
                                                          ours.get("avg_contention_excess_s")),
            "queueing_share_pct": _queueing_share(theirs, ours),
        }
    return out


def targets(report: Mapping[str, Any], per_seed: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The issue's targets, evaluated on this report (meaningful on cluster-256)."""
    out: dict[str, Any] = {}
    for key, figure, op, threshold in TARGETS:
        value = report["gains"].get(key, {}).get(figure)
        if value is not None:
            out[f"{key}.{figure}"] = {"target": f"{op} {threshold:g}", "value": value, "met": value >= threshold}
    if "cassini" in report["policies"] and "metronome" in report["policies"]:
        worse = [s["seed"] for s in per_seed
                 if s["policies"]["metronome"]["avg_jct_s"] is not None and s["policies"]["cassini"]["avg_jct_s"] is not None
                 and s["policies"]["metronome"]["avg_jct_s"] > s["policies"]["cassini"]["avg_jct_s"]]
        out["metronome_vs_cassini.avg_jct_no_worse_on_any_seed"] = {"target": "no seed worse", "seeds_worse": worse,
                                                                     "met": not worse}
    out.update(issue12_targets(report))
    ours = report["policies"].get("metronome")
    if ours:
        top = ours["by_priority"].get(str(max(int(p) for p in ours["by_priority"])), {}) if ours["by_priority"] else {}
        slowdown = top.get("avg_slowdown")
        if slowdown is not None:
            out["metronome.high_priority_avg_slowdown"] = {"target": "<= 1.1", "value": slowdown, "met": slowdown <= 1.10}
        if "zero_overflow_fraction" in ours:
            out["metronome.zero_overflow_fraction"] = {"target": "report", "value": ours["zero_overflow_fraction"]}
    return out


#: Below this share of running time lost to contention under volcano-topology, offsets cannot matter.
SHARED_EXCESS = 0.01

#: Issue 12's ratios: (policy X, figure, metronome's figure <= bound x X's).
NO_HARM = (("volcano-topology", "avg_jct_s", 1.005), ("metronome-free", "avg_jct_s", 1.005),
           ("cassini", "avg_jct_s", 1.005), ("volcano-topology", "p99_jct_s", 1.05))
WIN_JCT, WIN_RECOVERED_PCT = 0.98, 50.0
#: Issue 12's bar against ``default``: the paper's headline, -19.5 % average JCT.
VS_DEFAULT_PCT = 19.5


def issue12_targets(report: Mapping[str, Any]) -> dict[str, Any]:
    """Issue 12's do-no-harm ratios (every scenario) and win targets (meant for the contended ones)."""
    policies = report["policies"]
    out: dict[str, Any] = {}
    ours = policies.get("metronome")
    if not ours:
        return out
    for name, figure, bound in NO_HARM:
        if (why := report["gains"].get(f"metronome_vs_{name}", {}).get("not_compared")) is not None:
            fewer = ours["completed"] < policies[name]["completed"]
            out[f"no_harm.{figure}_vs_{name}"] = {"target": f"<= {bound:g}x", "value": None, "not_compared": why,
                                                  **({"met": False} if fewer else {"applies": False})}
            continue
        theirs = policies.get(name, {}).get(figure)
        if theirs and ours.get(figure) is not None:
            ratio = _r(ours[figure] / theirs)
            out[f"no_harm.{figure}_vs_{name}"] = {"target": f"<= {bound:g}x", "value": ratio, "met": ratio <= bound}
    vs_default = report["gains"].get("metronome_vs_default", {})
    if vs_default.get("avg_jct_reduction_pct") is not None:
        reduction = vs_default["avg_jct_reduction_pct"]
        out["vs_default.avg_jct_reduction_pct"] = {"target": f">= {VS_DEFAULT_PCT:g}", "value": reduction,
                                                   "met": reduction >= VS_DEFAULT_PCT,
                                                   "queueing_share_pct": vs_default.get("queueing_share_pct")}
    excess = policies.get("volcano-topology", {}).get("contention_excess")
    if excess is not None and excess < SHARED_EXCESS:
        # Nothing for offsets to win back: the win targets do not apply (reported, not judged).
        out["win_if_contended"] = {"target": f"volcano-topology excess >= {100 * SHARED_EXCESS:g}%",
                                   "value": excess, "applies": False}
        return out
    theirs = policies.get("volcano-topology", {}).get("avg_jct_s")
    if theirs and ours.get("avg_jct_s") is not None:
        ratio = _r(ours["avg_jct_s"] / theirs)
        out["win_if_contended.avg_jct_vs_volcano-topology"] = {"target": f"<= {WIN_JCT:g}x", "value": ratio,
                                                               "met": ratio <= WIN_JCT}
    recovered = report["gains"].get("metronome_vs_volcano-topology", {}).get("contention_excess_recovered_pct")
    if recovered is not None:
        out["win_if_contended.excess_recovered_vs_volcano-topology"] = {
            "target": f">= {WIN_RECOVERED_PCT:g}%", "value": recovered, "met": recovered >= WIN_RECOVERED_PCT}
    return out


def regime(report: Mapping[str, Any]) -> str:
    """One line saying whether offsets can matter on this run (from volcano-topology's contention excess)."""
    policies = report["policies"]
    base = "volcano-topology" if "volcano-topology" in policies else None
    if base is None or policies[base].get("contention_excess") is None:
        return "regime: unknown (run volcano-topology to see how much contention packing leaves)"
    excess = policies[base]["contention_excess"]
    if excess < SHARED_EXCESS:
        return (f"regime: OFFSETS CANNOT MATTER HERE: under volcano-topology contention costs {100 * excess:.1f}% of "
                "running time, so any difference between the policies is placement and queueing, not time-division")
    gains = report["gains"]
    vt = gains.get("metronome_vs_volcano-topology", {}).get("contention_excess_recovered_pct")
    free = gains.get("metronome_vs_metronome-free", {}).get("contention_excess_recovered_pct")
    jct = gains.get("metronome_vs_metronome-free", {}).get("avg_jct_reduction_pct")
    return (f"regime: LINKS ARE SHARED, OFFSETS CAN MATTER: under volcano-topology contention costs {100 * excess:.1f}% of "
            f"running time; metronome recovered {_fmt(vt, 1)}% of it; the offsets alone (metronome vs metronome-free) "
            f"recovered {_fmt(free, 1)}% of metronome-free's and changed avg JCT by {_signed(_neg(jct))}")


def _job_figures(done: Sequence[JobRun]) -> dict[str, Any]:
    if not done:
        return {"avg_jct_s": None, "p50_jct_s": None, "p99_jct_s": None, "avg_slowdown": None, "avg_queue_s": None}
    jct = np.array([j.end_s - j.spec.arrival_s for j in done])
    alone = np.array([j.isolated_s for j in done])
    queue = np.array([j.start_s - j.spec.arrival_s for j in done])
    return {
        "avg_jct_s": _r(jct.mean()), "p50_jct_s": _r(np.percentile(jct, 50)), "p99_jct_s": _r(np.percentile(jct, 99)),
        "avg_slowdown": _r((jct / alone).mean()), "avg_queue_s": _r(queue.mean()),
    }


def _utilisation(run: RunResult, links: np.ndarray) -> float:
    if not len(links):
        return 0.0
    offered = float((run.capacity[links] * run.occupied_s[links]).sum())
    return _r(float(run.carried[links].sum()) / offered) if offered > 0 else 0.0


def _change_pct(base: float | None, new: float | None) -> float | None:
    """``100 (new - base) / base``, or None when either is missing or the base is zero."""
    if base is None or new is None or base == 0:
        return None
    return _r(100.0 * (new - base) / base)


def _recovered(theirs: float | None, ours: float | None) -> float | None:
    """``100 (theirs - ours) / theirs``: the share of their contention excess metronome did not suffer."""
    if theirs is None or ours is None or theirs <= 0:
        return None
    return _r(100.0 * (theirs - ours) / theirs)


def _queueing_share(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> float | None:
    """How much of the gap between two average JCTs is queueing: ``100 (Q_X - Q_m) / (JCT_X - JCT_m)``.

    JCT is queueing plus running time, so the rest of the gap is running time; a share above 100 % means
    the running times moved the other way. None where either figure is missing or the averages are within
    ``SAME_JCT`` of each other (a share of nothing).
    """
    jct_x, jct_m = theirs.get("avg_jct_s"), ours.get("avg_jct_s")
    queue_x, queue_m = theirs.get("avg_queue_s"), ours.get("avg_queue_s")
    if jct_x is None or jct_m is None or queue_x is None or queue_m is None or abs(jct_x - jct_m) <= SAME_JCT * jct_x:
        return None
    return _r(100.0 * (queue_x - queue_m) / (jct_x - jct_m))


def _negated(x: float | None) -> float | None:
    return None if x is None else _r(-x)


def _median(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Median of every numeric leaf over ``rows`` (mappings of the same shape); others from the first row."""
    out: dict[str, Any] = {}
    for key, first in rows[0].items():
        values = [r.get(key) for r in rows]
        if isinstance(first, Mapping):
            out[key] = _median([v for v in values if isinstance(v, Mapping)])
        elif isinstance(first, (int, float)) and not isinstance(first, bool) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            med = statistics.median(float(v) for v in values if v is not None)
            out[key] = int(med) if isinstance(first, int) and float(med).is_integer() else _r(float(med))
        else:
            out[key] = first
    return out


def _pct(values: Sequence[float], q: float) -> float | None:
    return _r(float(np.percentile(values, q))) if len(values) else None


def _r(x: float) -> float:
    return round(float(x), 4)


def table(report: Mapping[str, Any]) -> str:
    """The comparison as a plain-text table (medians over seeds), gains and targets."""
    seeds = report["seeds"]
    lines = [f"scenario {report['scenario']}, seeds {', '.join(map(str, seeds))}"
             + (" (medians over seeds)" if len(seeds) > 1 else "")]
    if report.get("traffic_classes", 1) > 1:
        lines.append(f"network: {report['traffic_classes']} traffic classes in strict priority, " + (
            "each gang in the class after those running on its links, for every policy (classes_from: start-order)"
            if report.get("classes_from") == "start-order" else
            "each gang in the class its scheduler published: metronome's (core.classes), 0 for every other policy"))
    head = (f"{'policy':<17}{'done':>9}{'avg JCT s':>11}{'p99 JCT s':>11}{'slowdown':>10}{'queue s':>9}"
            f"{'bottleneck':>12}{'avg link':>10}{'comm x':>8}{'excess':>8}{'decide ms p50/p99':>19}")
    lines += [head, "-" * len(head)]
    for name, f in report["policies"].items():
        decide = f"{_fmt(f['decision_ms_p50'], 2)}/{_fmt(f['decision_ms_p99'], 1)}"
        lines.append(
            f"{name:<17}{f['completed']:>4}/{f['jobs']:<4}{_col(_fmt(f['avg_jct_s'], 1), 11)}"
            f"{_col(_fmt(f['p99_jct_s'], 1), 11)}{_col(_fmt(f['avg_slowdown'], 3), 10)}"
            f"{_col(_fmt(f['avg_queue_s'], 1), 9)}{_col(_fmt(f['bottleneck_utilization'], 3), 12)}"
            f"{_col(_fmt(f['avg_link_utilization'], 3), 10)}{_col(_fmt(f['comm_stretch'], 2), 8)}"
            f"{_col(_pct_of(f.get('contention_excess')), 8)}{_col(decide, 19)}")
    if report["gains"]:
        lines += ["", "metronome relative to each policy (negative JCT change = faster):"]
        for key, g in report["gains"].items():
            if g.get("not_compared"):
                lines.append(f"  vs {key[len('metronome_vs_'):]:<18} not compared: {g['not_compared']}")
                continue
            queueing = g.get("queueing_share_pct")
            lines.append(f"  vs {key[len('metronome_vs_'):]:<18} avg JCT {_signed(_neg(g['avg_jct_reduction_pct']))}"
                         + ("" if queueing is None else f" ({queueing:.0f}% of it queueing)") + ", "
                         f"p99 JCT {_signed(_neg(g['p99_jct_reduction_pct']))}, "
                         f"bottleneck utilisation {_signed(g['bottleneck_utilization_gain_pct'])}, "
                         f"contention excess recovered {_fmt(g.get('contention_excess_recovered_pct'), 1)}%")
        lines.append("  (excess = communication time beyond the uncontended time, share of running time; "
                     "recovered = 100 (E_X - E_metronome) / E_X of the excess seconds per job; queueing = the share of "
                     "the avg JCT gap that is time in the queue, the rest is running time)")
        vt = report["gains"].get("metronome_vs_volcano-topology")
        free = report["gains"].get("metronome_vs_metronome-free")
        if vt is not None:
            share = report["policies"].get("volcano-topology", {}).get("contention_excess")
            lines.append(f"  metronome recovered {_fmt(vt.get('contention_excess_recovered_pct'), 1)}% of volcano-topology's "
                         f"contention excess ({_pct_of(share)} of its running time)" + ("" if free is None else
                         f"; the offsets alone (vs metronome-free) {_fmt(free.get('contention_excess_recovered_pct'), 1)}%"))
    ours = report["policies"].get("metronome")
    if ours and ours.get("link_sharing_decisions") is not None:
        lines.append("")
        fraction = ours.get("zero_overflow_fraction")
        lines.append(f"metronome: {ours['link_sharing_decisions']} decisions shared a loaded link (all seeds); a "
                     f"zero-overflow offset was found for {_fmt(None if fraction is None else 100 * fraction, 1)}% of them")
    # Phased policies: those that padded, and metronome even when lock on demand spared it all padding.
    aligned = [(name, f) for name, f in report["policies"].items() if f.get("avg_padding_s") or name == "metronome"]
    if aligned:
        lines += ["", "runtime alignment (s per job): padding = first slot + re-anchoring + grid snapping + jitter "
                  "and contention; share of iterations aligned"]
        for name, f in aligned:
            first, again = f.get("avg_first_slot_wait_s") or 0.0, f.get("avg_reanchor_s") or 0.0
            snapping = f.get("avg_snapping_s") or 0.0
            rest = f["avg_padding_s"] - first - again - snapping
            lines.append(f"  {name:<17} padding {f['avg_padding_s']:.2f} = {first:.2f} + {again:.2f} + {snapping:.2f} "
                         f"+ {rest:.2f}; aligned {_fmt(f.get('aligned_iteration_share'), 3)}")
    if ours and ours.get("locks") is not None:
        lines.append(f"metronome lock on demand: {ours['placed_unlocked']} gangs placed running free, "
                     f"{ours['placed_locked']} locked ({ours.get('exact_locks', 0)} at their exact period, off the "
                     f"grid); {ours['locks']} locks, {ours['unlocks']} unlocks; {ours.get('held_gangs', 0)} gangs held "
                     f"back where every node set collided heavily, {ours.get('holds_overtaken', 0)} times a gang of "
                     f"lower priority took room a held one waited for (all seeds)")
    if report.get("targets"):
        lines += ["", "targets (issue 2's were set for cluster-256; issue 12's no_harm for every scenario, "
                  "win_if_contended for contended ones, vs_default the paper's headline; medians over seeds):"]
        for key, t in report["targets"].items():
            if "met" in t:
                shown = t.get("value", t.get("seeds_worse"))
                if t.get("queueing_share_pct") is not None:
                    shown = f"{shown}; {t['queueing_share_pct']:.0f}% of it queueing"
                if t.get("not_compared"):
                    shown = t["not_compared"]
                lines.append(f"  {key:<58} {t['target']:>14}  {'met' if t['met'] else 'NOT met'} ({shown})")
    return "\n".join(lines)


def _col(text: str, width: int) -> str:
    """``text`` right-aligned in ``width``, with at least one space before it: a figure wider than its
    column (a year-long run's seconds) pushes the row along instead of running into its neighbour."""
    return f"{' ' + text:>{width}}"


def _fmt(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _pct_of(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _neg(x: float | None) -> float | None:
    return None if x is None else -x


def _signed(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}%"
