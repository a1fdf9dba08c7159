"""Fitting a bandwidth profile to a byte-counter trace, or saying why it cannot be done.

Pure: a :class:`~volcano_metronome.profiling.trace.Trace` in, a :class:`Fit` or a :class:`Refusal`
out (a refusal is a value, like the core's ``NoFit``: the trace was readable, it just does not
support a profile). The steps: resample the counter on a uniform grid (``trace.uniform``), find the
period (``period.find``), fold at it, align the iterations and find the windows
(``windows.align`` / ``windows.bursts``), then express them as a :class:`core.profile.Profile`.

Refusals, each saying which:

* ``too-short``: fewer than :data:`MIN_PERIODS` periods in the trace (the fold would average too few
  iterations to tell a window from one noisy iteration, and the period's error would be large);
* ``too-coarse``: the sampling interval is longer than a quarter of the shortest window found
  (a sliver, a run shorter than that carrying under :data:`SLIVER_SHARE` of the largest window's
  bytes, is not a window: its bytes are left to the baseline, see :func:`_without_slivers`);
* ``aperiodic``: the autocorrelation at the multiples of the best period within half the trace
  averages less than ``period.MIN_PEAK`` (random traffic stays under 0.1; see docs/profiles.md);
* ``gap``: the samples stop for more than :data:`MAX_GAP_SHARE` of the trace (the recorder stalled):
  its bytes would be spread evenly over the gap, and what repeats across it cannot be told;
* ``too-long``: more than :data:`MAX_STEPS` sampling intervals (the fit holds a few arrays of that length);
* ``implausible``: a burst faster than any node sends (``core.profile.MAX_GBPS``): the counter jumped
  (a glitch, or not a byte counter), and a profile would carry a rate nobody sent.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from volcano_metronome import api
from volcano_metronome.core.profile import MAX_GBPS, MAX_WINDOWS, Profile, Window
from volcano_metronome.profiling import period as periods
from volcano_metronome.profiling.fold import align, explained, fold
from volcano_metronome.profiling.trace import Rate, Trace, uniform
from volcano_metronome.profiling.windows import Burst, bursts, quietest

#: Fewest periods a trace must cover.
MIN_PERIODS = periods.MIN_PERIODS
#: A window must span at least this many sampling intervals.
SAMPLES_PER_WINDOW = 4
#: A run too short to resolve is a sliver, not a window, when its bytes above baseline are under this
#: share of the largest window's (the bytes analogue of ``windows.MIN_SHARE``, the height a run needs).
SLIVER_SHARE = 0.1
#: Fewest samples worth looking at.
MIN_SAMPLES = 16
#: Jitter is the spread between these percentiles of the iterations' lateness.
JITTER_PERCENTILES = (2.5, 97.5)
#: Longest pause in the samples, as a share of the trace, that a fit accepts.
MAX_GAP_SHARE = 0.1
#: Most sampling intervals one fit resamples (70 minutes at 1 kHz): a day-long pause at 1 ms used to ask for GiBs.
MAX_STEPS = 2**22

# no-rate: the runtime helper timed its bursts without their bytes (its measurement has no rate to report).
Reason = Literal["too-short", "too-coarse", "aperiodic", "gap", "too-long", "implausible", "no-rate"]


@dataclass(frozen=True)
class Refusal:
    """Why the trace gives no profile: ``reason`` is one of ``Reason`` (the module docstring says when)."""

    reason: Reason
    detail: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


@dataclass(frozen=True)
class Fit:
    """A fitted profile and what it rests on."""

    profile: Profile
    confidence: float  # share of the rate's variance the periodic pattern explains, in [0, 1]
    periods: int  # complete iterations folded
    sample_interval_ms: float
    longest_gap_ms: float
    span_s: float
    baseline_gbps: float  # median rate outside the windows (traffic the windows do not carry)

    def to_dict(self) -> dict[str, Any]:
        """The profile's mapping form plus the fit's figures (what ``profile fit --json`` prints)."""
        return {**self.profile.to_dict(), "confidence": round(self.confidence, 3), "periods": self.periods,
                "sample_interval_ms": _round(self.sample_interval_ms, 4),
                "longest_gap_ms": _round(self.longest_gap_ms, 4), "span_s": _round(self.span_s, 4),
                "baseline_gbps": _round(self.baseline_gbps, 4), "annotations": self.annotations()}

    def annotations(self) -> dict[str, str]:
        """The ``metronome.dev/*`` annotations that declare this profile, at its slow end (``Profile.slow_end``):
        the fit gives the mean iteration, a locked gang must be held to its slow iterations."""
        data = self.profile.slow_end().to_dict()
        return {api.PERIOD_MS: f"{data['period_ms']}",
                api.WINDOWS: json.dumps(data["windows"], separators=(",", ":")),
                api.JITTER_MS: f"{data['jitter_ms']}"}


def fit(trace: Trace) -> Fit | Refusal:
    """The profile of the periodic traffic in ``trace``, or the reason there is none."""
    if trace.samples < MIN_SAMPLES:
        return Refusal("too-short", f"{trace.samples} samples; at least {MIN_SAMPLES} and {MIN_PERIODS} periods "
                                    "are needed")
    gaps = np.diff(trace.time_s)
    if gaps.max() > MAX_GAP_SHARE * trace.span_s:
        at = int(np.argmax(gaps))
        return Refusal("gap", f"no sample for {gaps[at]:.4g} s after t = {trace.time_s[at]:.6g} s, more than "
                              f"{MAX_GAP_SHARE:.0%} of the {trace.span_s:.4g} s trace: record again, or fit the rows "
                              f"before or after the gap")
    if trace.span_s / trace.interval_s > MAX_STEPS:
        return Refusal("too-long", f"{trace.span_s / trace.interval_s:.3g} sampling intervals of "
                                   f"{trace.interval_s * 1000:.4g} ms; at most {MAX_STEPS}: fit a shorter stretch "
                                   f"(a minute covers hundreds of periods)")
    rate = uniform(trace)
    dt_ms = rate.dt_s * 1000.0
    found = periods.find(rate.gbps)
    if isinstance(found, periods.NoPeriod):
        return Refusal("aperiodic", _no_period(found, trace, dt_ms))
    result = _fit_at(trace, rate, found.period)
    if isinstance(result, Fit):
        parts = _repeats(result.profile, dt_ms)
        if parts > 1:  # k equal bursts evenly spaced: the fundamental is 1/k of what was folded
            shorter = _fit_at(trace, rate, found.period / parts)
            if isinstance(shorter, Fit):
                return shorter
    return result


def _repeats(profile: Profile, dt_ms: float) -> int:
    """``k`` > 1 when the windows are ``k`` copies of one pattern shifted by a ``k``-th of the period.

    Folding tells two unequal bursts half a period apart from two equal ones only up to noise; when
    the fitted windows themselves come out equal and evenly spaced, the period is the shorter one.
    """
    windows, period = profile.windows, profile.period_ms
    n = len(windows)
    for parts in (2, 3, 5, 7):
        if n % parts:
            continue
        step, shift = period / parts, n // parts
        alike = True
        for i, w in enumerate(windows):
            v = windows[(i + shift) % n]
            gap = (v.start_ms - w.start_ms) % period
            if (abs(gap - step) > max(2.0 * dt_ms, 0.02 * period)
                    or abs(v.len_ms - w.len_ms) > max(2.0 * dt_ms, 0.1 * w.len_ms)
                    or abs(v.gbps - w.gbps) > 0.1 * max(v.gbps, w.gbps)):
                alike = False
                break
        if alike:
            return parts
    return 1


def _fit_at(trace: Trace, rate: Rate, period: float) -> Fit | Refusal:
    """The profile folded at ``period`` samples of the uniform ``rate``."""
    dt_ms = rate.dt_s * 1000.0
    period_ms = period * dt_ms
    cover = trace.span_s * 1000.0 / period_ms
    if cover < MIN_PERIODS:
        return Refusal("too-short", f"the traffic repeats about every {period_ms:.4g} ms but the trace covers "
                                    f"{trace.span_s:.4g} s, {math.floor(cover * 100) / 100:g} periods; at least {MIN_PERIODS} are needed: "
                                    f"record {MIN_PERIODS * period_ms / 1000.0:.3g} s or more")
    first = fold(rate.gbps, period)
    # Rows begin in the middle of the longest quiet stretch, so no burst straddles two rows.
    series = rate.gbps[int(round(quietest(first.profile()) * period / first.bins)):]
    folded = fold(series, period)
    aligned = align(folded)
    drift = _trend(aligned.lateness, folded.bins)[0]
    if drift != 0.0:  # the bursts' own timing pins the mean iteration down better than the autocorrelation
        folded = fold(series, period * (1.0 + drift / folded.bins))
        aligned = align(folded)
        period_ms = folded.period * dt_ms
    found_bursts, baseline = bursts(aligned.profile, aligned.stderr)
    if not found_bursts:
        return Refusal("aperiodic", f"the rate repeats every {period_ms:.4g} ms but shows no burst above its "
                                    f"baseline of {baseline:.4g} Gbps")
    bin_ms = period_ms / folded.bins
    found_bursts = _without_slivers(found_bursts, baseline, dt_ms * SAMPLES_PER_WINDOW / bin_ms)
    shortest = min(b.length for b in found_bursts) * bin_ms
    if dt_ms * SAMPLES_PER_WINDOW > shortest:
        return Refusal("too-coarse", f"sampled every {dt_ms:.4g} ms, slower than a quarter of the shortest window "
                                     f"({shortest:.4g} ms): sample at least every {shortest / SAMPLES_PER_WINDOW:.4g} "
                                     f"ms (--hz {math.ceil(1000.0 * SAMPLES_PER_WINDOW / shortest)} or more)")
    fastest = max(b.gbps for b in found_bursts)
    if fastest > MAX_GBPS:
        return Refusal("implausible", f"a burst at {fastest:.4g} Gbps, above the {MAX_GBPS:g} Gbps any node sends: "
                                      f"the counter jumped (a glitch, or not tx_bytes); record again")
    jitter_ms = _jitter(aligned.lateness, folded.bins) * bin_ms
    return Fit(_profile(found_bursts, folded.bins, period_ms, jitter_ms), explained(folded), folded.iterations,
               dt_ms, trace.longest_gap_s * 1000.0, trace.span_s, baseline)


def _without_slivers(found: list[Burst], baseline: float, resolvable: float) -> list[Burst]:
    """``found`` less the runs shorter than ``resolvable`` bins that carry under SLIVER_SHARE of the largest one's bytes.

    A burst broken up by CPU contention leaves, in the fold, a precursor or a trailer a bin or two
    long that just clears the detection height: the sampling cannot place its edges, and its bytes
    are too few to matter to a schedule. A short run carrying a material share is kept (and the fit is
    refused as too coarse): the sampling cannot tell its shape, and it does matter.
    """
    largest = max((b.gbps - baseline) * b.length for b in found)
    return [b for b in found if b.length >= resolvable or (b.gbps - baseline) * b.length >= SLIVER_SHARE * largest]


def _no_period(found: periods.NoPeriod, trace: Trace, dt_ms: float) -> str:
    longer = (f"aperiodic, or its period is longer than half the trace ({trace.span_s / 2:.4g} s; a trace must cover "
              f"at least {MIN_PERIODS} periods)")
    if found.lag == 0:
        return f"no repeating pattern: the traffic is {longer}"
    return (f"the best repeat, every {found.lag * dt_ms:.4g} ms, correlates {found.correlation:.2f} with itself at "
            f"its multiples; at least {periods.MIN_PEAK} is needed to call it periodic: the traffic is {longer}")


def _trend(lateness: np.ndarray, bins: int) -> tuple[float, np.ndarray]:
    """Slope (bins per iteration) of the iterations' lateness, and what is left around that line."""
    unwrapped = np.unwrap(lateness, period=bins)
    if unwrapped.size < 3:
        return 0.0, unwrapped - unwrapped.mean()
    k = np.arange(unwrapped.size, dtype=np.float64)
    slope, intercept = np.polyfit(k, unwrapped, 1)
    return float(slope), unwrapped - (slope * k + intercept)


def _jitter(lateness: np.ndarray, bins: int) -> float:
    """Spread of the iterations' lateness in bins, net of a linear trend (a residual error in the period)."""
    low, high = np.percentile(_trend(lateness, bins)[1], JITTER_PERCENTILES)
    return float(high - low)


def _profile(found: list[Burst], bins: int, period_ms: float, jitter_ms: float) -> Profile:
    """The windows rounded to 0.1 ms and 4 significant Gbps digits, rotated so the longest gap comes first."""
    found = _at_most(sorted(found, key=lambda b: b.start), MAX_WINDOWS, bins)
    scale = period_ms / bins
    # The origin of a period is free: put it where the longest quiet stretch begins, so compute comes
    # first and the last window ends the period (the duty-cycle shorthand's convention).
    gaps = [((found[(i + 1) % len(found)].start - (b.start + b.length)) % bins, i) for i, b in enumerate(found)]
    _, last = max(gaps)
    origin = found[last].start + found[last].length - bins
    period = round(period_ms, 1)
    windows = []
    for b in found[last + 1:] + found[: last + 1]:
        start = round(((b.start - origin) % bins) * scale, 1)
        # ``fit`` refused faster bursts; four digits may still round one up past the bound.
        windows.append([start, round(b.length * scale, 1), float(f"{min(b.gbps, MAX_GBPS):.4g}")])
    # Rounding may push an edge past its neighbour or the period's end by a tenth of a millisecond.
    for i, w in enumerate(windows):
        end = windows[i + 1][0] if i + 1 < len(windows) else period
        w[0] = min(w[0], max(0.0, end - 0.1))
        w[1] = max(0.1, round(min(w[1], end - w[0]), 1))
    jitter = min(round(jitter_ms, 1), round(period - 0.1, 1))
    return Profile(period, tuple(Window(s, n, g) for s, n, g in windows), jitter)


def _at_most(found: list[Burst], limit: int, bins: int) -> list[Burst]:
    """Merge the two windows with the shortest gap between them until at most ``limit`` remain."""
    found = list(found)
    while len(found) > limit:
        gaps = [((found[i + 1].start - found[i].start - found[i].length), i) for i in range(len(found) - 1)]
        _, i = min(gaps)
        a, b = found[i], found[i + 1]
        length = b.start + b.length - a.start
        found[i: i + 2] = [Burst(a.start, length, (a.gbps * a.length + b.gbps * b.length) / length)]
    return found


def _round(x: float, digits: int) -> float:
    return float(f"{x:.{digits}g}")
