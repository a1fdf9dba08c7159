"""The queue's own noise: how far a policy's average JCT moves when one job runs one iteration longer.

An A/A comparison: nothing changes but one job running one iteration longer (a fraction of a second
in minutes). Gangs that do not fit let the ones behind them go on, so the end of one job decides which
gang takes its nodes, and every start after that moves. Issue 12's do-no-harm bound asks metronome to
stay within 0.5 % of each baseline on one seed; this says how often a baseline leaves that band
against itself, on the same scenario and seed, by the smallest change there is. A ratio inside the
floor is not evidence either way (docs/simulator.md, "The queue's own noise").

Each run lengthens one job, at a quarter, half and three quarters of the arrival order (``PICKS``),
and divides its average JCT by the unchanged run's. ``bench floor``, ``bench fuzz --floor`` and
``simulate --floor`` report it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.engine import Engine
from volcano_metronome.sim.report import figures
from volcano_metronome.sim.workload import SimScenario

#: The baseline whose noise the do-no-harm bound is read against.
BASELINE = "volcano-topology"
#: Where in the arrival order the lengthened job sits (shares of the job count).
PICKS = (0.25, 0.5, 0.75)
#: The do-no-harm bound's band (issue 12: 1.005 x).
BAND = 0.005


def picks(count: int) -> list[int]:
    """The indices of the jobs lengthened, one run each (distinct; fewer for a handful of jobs)."""
    return sorted({min(count - 1, int(share * count)) for share in PICKS}) if count else []


def lengthened(jobs: Sequence[JobSpec], index: int) -> tuple[JobSpec, ...]:
    """``jobs`` with job ``index`` one iteration longer."""
    out = list(jobs)
    out[index] = dataclasses.replace(out[index], iterations=out[index].iterations + 1)
    return tuple(out)


def self_ratios(sim: SimScenario, seed: int, policy: str = BASELINE, base: float | None = None) -> list[float]:
    """``policy``'s average JCT with each pick lengthened, over its average JCT on the jobs as drawn (``base``
    where the caller already ran it, else run here)."""
    jobs = sim.jobs(seed)
    if base is None:
        base = figures(Engine(sim, jobs, policy, seed).run())["avg_jct_s"]
    if not base:
        return []
    return [round(figures(Engine(sim, lengthened(jobs, i), policy, seed).run())["avg_jct_s"] / base, 4)
            for i in picks(len(jobs))]


def summary(ratios: Sequence[float]) -> dict[str, Any]:
    """How many runs moved beyond ``BAND``, and the extremes."""
    return {"runs": len(ratios), "beyond_band": sum(abs(r - 1.0) > BAND for r in ratios),
            "slower_beyond_band": sum(r > 1.0 + BAND for r in ratios),
            "lowest": min(ratios, default=None), "highest": max(ratios, default=None)}


def line(s: dict[str, Any], policy: str = BASELINE) -> str:
    """The summary in one sentence."""
    if not s["runs"]:
        return f"{policy} against itself: no run"
    return (f"{policy} against itself (one job one iteration longer): {s['beyond_band']} of {s['runs']} runs moved "
            f"avg JCT by more than {100 * BAND:g} % ({s['slower_beyond_band']} slower); range {s['lowest']:.4f} "
            f"to {s['highest']:.4f}")


def known_bases(report: Mapping[str, Any], policy: str = BASELINE) -> dict[int, float]:
    """``policy``'s average JCT per seed from a report that ran it (``sim.report.compare``): no need to run it again."""
    return {s["seed"]: s["policies"][policy]["avg_jct_s"] for s in report["per_seed"] if policy in s["policies"]}


def measure(sim: SimScenario, seeds: Sequence[int], policy: str = BASELINE,
            bases: Mapping[int, float] | None = None) -> dict[str, Any]:
    """``self_ratios`` on every seed, and their ``summary``: the report's ``floor`` (``bases``: ``known_bases``)."""
    known = bases or {}
    ratios = {seed: self_ratios(sim, seed, policy, known.get(seed)) for seed in seeds}
    return {"policy": policy, "picks": list(PICKS),
            "per_seed": [{"seed": seed, "ratios": r} for seed, r in ratios.items()],
            "summary": summary([v for r in ratios.values() for v in r])}
