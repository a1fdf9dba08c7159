"""The fitter's accuracy on synthetic jobs: the strategy of jobs, the error measures, and a runner.

``python3 -m tests.profiling.accuracy --examples 300`` fits that many hypothesis-drawn jobs and prints
the worst error of each kind (what docs/profiles.md quotes); the property test asserts the targets
on the same strategy. ``--corner`` measures the domain's hardest corner instead (``corner``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.profiling.synth import Spec, csv
from volcano_metronome.profiling.fit import Fit, Refusal, fit
from volcano_metronome.profiling.trace import parse

#: The targets of issue 16.
PERIOD_TOLERANCE = 0.02  # of the period
LENGTH_TOLERANCE = 0.10  # of the period
RATE_TOLERANCE = 0.10  # of the rate


@st.composite
def jobs(draw: st.DrawFn) -> tuple[Spec, int]:
    """A job with 1-4 windows, one of them dominant, and noise, jitter, irregular sampling, background.

    The ranges are the fitter's documented domain: every window spans at least 8 samples and every
    gap at least 6 (and a twentieth of the period); the jitter is at most a third of the shortest window
    and 5 % of the period; the dominant window's rate is at least 1.4x every other's, so the
    pattern does not repeat within its period; a trace covers at least 10 periods. (Up to half the
    shortest window, hypothesis found misses: two 8-sample bursts of 1 and 0.5 Gbps half a period
    apart, late by up to half their length, miss a target in about 1 trace of 16: ``corner``. Within a
    third, about 1 in 1,000 still misses near that corner: docs/profiles.md.)
    """
    hz = draw(st.sampled_from([500.0, 1000.0, 2000.0]))
    sample_ms = 1000.0 / hz
    count = draw(st.integers(1, 4))
    min_len = 8 * sample_ms
    min_gap = 6 * sample_ms
    lowest = count * (min_len + min_gap) * 2.5
    period = draw(st.floats(max(40.0, lowest), 1000.0))
    slot = period / count
    gap_floor = max(min_gap, period / 20.0)
    windows = []
    top = draw(st.floats(1.0, 400.0))
    for i in range(count):
        length = draw(st.floats(min_len, max(min_len, 0.6 * slot - gap_floor)))
        start = i * slot + draw(st.floats(0.0, max(0.0, slot - length - gap_floor)))
        gbps = top if i == 0 else draw(st.floats(0.2, 0.7)) * top
        windows.append((start, length, gbps))
    shortest = min(w[1] for w in windows)
    spec = Spec(
        period_ms=period,
        windows=tuple(windows),
        periods=draw(st.floats(10.0, 30.0)),
        hz=hz,
        jitter_ms=draw(st.floats(0.0, min(shortest / 3.0, 0.05 * period))),
        rate_noise=draw(st.floats(0.0, 0.1)),
        background_gbps=draw(st.floats(0.0, 0.01)) * top,
        irregular=draw(st.floats(0.0, 0.4)),
        phase_ms=draw(st.floats(0.0, period, exclude_max=True)),
    )
    return spec, draw(st.integers(0, 2**32 - 1))


@dataclass(frozen=True)
class Errors:
    """Relative errors of one fit against the job that made the trace (lengths and gaps over the period)."""

    period: float
    length: float
    rate: float
    placement: float
    windows_found: int
    windows_true: int


def errors(spec: Spec, result: Fit) -> Errors:
    """The worst error over the windows, with fitted windows matched to true ones in circular order."""
    period_error = abs(result.profile.period_ms - spec.period_ms) / spec.period_ms
    found = result.profile.windows
    true = sorted(spec.windows)
    if len(found) != len(true):
        return Errors(period_error, math.inf, math.inf, math.inf, len(found), len(true))
    best = (math.inf, math.inf, math.inf, math.inf)  # (score against the targets, length, rate, placement)
    n = len(true)
    for shift in range(n):
        matched = [found[(i + shift) % n] for i in range(n)]
        length = max(abs(f.len_ms - t[1]) / spec.period_ms for f, t in zip(matched, true))
        # The fitter reports the whole rate in a window, background included.
        rate = max(abs(f.gbps - (t[2] + spec.background_gbps)) / (t[2] + spec.background_gbps)
                   for f, t in zip(matched, true))
        placement = max(abs(_circular(matched[(i + 1) % n].start_ms - matched[i].start_ms, result.profile.period_ms)
                            - _circular(true[(i + 1) % n][0] - true[i][0], spec.period_ms)) / spec.period_ms
                        for i in range(n)) if n > 1 else 0.0
        score = max(length / LENGTH_TOLERANCE, rate / RATE_TOLERANCE, placement / LENGTH_TOLERANCE)
        best = min(best, (score, length, rate, placement))
    return Errors(period_error, best[1], best[2], best[3], len(found), len(true))


def within_targets(e: Errors) -> bool:
    """Whether one fit meets every target."""
    return (e.windows_found == e.windows_true and e.period <= PERIOD_TOLERANCE and e.length <= LENGTH_TOLERANCE
            and e.rate <= RATE_TOLERANCE and e.placement <= LENGTH_TOLERANCE)


def _circular(x: float, period: float) -> float:
    return x % period


def measure(examples: int) -> dict[str, object]:
    """Fit ``examples`` drawn jobs; the worst errors and the refusals."""
    seen: list[Errors] = []
    refused: list[str] = []
    missed: list[str] = []

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(jobs())
    def one(job: tuple[Spec, int]) -> None:
        spec, seed = job
        result = fit(parse(csv(spec, seed)))
        if isinstance(result, Refusal):
            refused.append(f"{spec} seed={seed}: {result}")
        else:
            seen.append(errors(spec, result))
            if not within_targets(seen[-1]):
                missed.append(f"{spec} seed={seed}: {seen[-1]} fitted {result.profile}")

    one()
    return {
        "examples": len(seen) + len(refused),
        "refused": refused,
        "missed_targets": missed,
        "worst_period_error": max(e.period for e in seen),
        "worst_length_error_of_period": max(e.length for e in seen),
        "worst_rate_error": max(e.rate for e in seen),
        "worst_placement_error_of_period": max(e.placement for e in seen),
        "window_count_wrong": sum(e.windows_found != e.windows_true for e in seen),
    }


def corner(traces: int = 60, shares: tuple[float, ...] = (0.25, 1.0 / 3.0, 0.5)) -> dict[str, dict[str, int]]:
    """How often the targets are missed at the corner of the domain, by jitter as a share of the bursts.

    Two bursts of the fewest samples (8), of 1 and 0.5 Gbps, half a period apart, no other noise: the pattern
    nearest to repeating at half its period; ``traces`` seeds each at 5 periods, 2 trace lengths and 3 sampling
    rates, at each lateness of ``shares``."""
    phases = random.Random(5)
    out = {}
    for share in shares:
        missed = total = 0
        for period in (40.0, 66.0, 100.0, 140.5, 300.0):
            for periods in (10.0, 15.75):
                for hz in (500.0, 1000.0, 2000.0):
                    length = 8 * 1000.0 / hz
                    if period < 2 * (length + 6 * 1000.0 / hz) * 2.5:  # as ``jobs`` draws them
                        continue
                    for seed in range(traces):
                        spec = Spec(period, ((0.0, length, 1.0), (period / 2, length, 0.5)), periods=periods, hz=hz,
                                    jitter_ms=min(share * length, 0.05 * period),
                                    phase_ms=phases.uniform(0.0, period))
                        result = fit(parse(csv(spec, seed)))
                        total += 1
                        missed += isinstance(result, Refusal) or not within_targets(errors(spec, result))
        out[f"jitter {share:.2f} of the bursts"] = {"traces": total, "missed": missed}
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--corner", action="store_true", help="measure the domain's corner (corner) instead")
    args = parser.parse_args()
    print(json.dumps(corner() if args.corner else measure(args.examples), indent=2))
