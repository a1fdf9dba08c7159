"""Finding the period of a rate series: autocorrelation peaks, then harmonics resolved by folding.

1. The autocorrelation (FFT, unbiased) of the mean-removed rate, up to half the series. A periodic
   series peaks at every multiple of its period; with independent per-iteration jitter those peaks
   are about equally high, so the highest one says little about which multiple it is.
   The autocorrelation is smoothed over a quarter of its lag-0 lobe: jitter makes peaks broad and
   jagged.
2. The candidate is the shortest peak at least 0.8 of the highest: some small multiple of the
   period, or a sub-multiple when the pattern nearly repeats within itself (two similar bursts half
   a period apart).
3. Harmonics are resolved: the candidate is divided by 2, 3, 5 or 7 while the autocorrelation
   peaks (at least 0.6 of the candidate's) at every multiple of the quotient; then multiplied by
   2 to 8 while the copies in the longer fold differ significantly and materially
   (``fold.repeats_within``), which is what tells two unequal bursts half a period apart from two
   equal ones.
4. The period is refined by least squares over the peaks at its multiples (parabolic sub-sample
   peak positions), so its error shrinks with the number of periods in the trace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from volcano_metronome.profiling.fold import fold, repeats_within

#: The autocorrelation at the period's multiples must average this much (``comb``), and its highest
#: peak must rise this much above the dip before it.
MIN_PEAK = 0.2
#: A sub-multiple of a candidate period is the period when the autocorrelation there is this share of the candidate's.
DIVIDE_SHARE = 0.6
#: Standard errors of chance correlation the comb must clear (``periodic_above``).
NOISE_SIGMAS = 4.0
#: Fewest periods a trace must cover for its period to be claimed.
MIN_PERIODS = 5
#: The most copies of one pattern a period is checked for (undoing a sub-multiple of the period).
MAX_PARTS = 8
#: Shortest lag looked at, in samples: a pattern must span a few samples to be resolved at all.
MIN_LAG = 4


@dataclass(frozen=True)
class Found:
    """A period (in samples, fractional) and the autocorrelation at it."""

    period: float
    correlation: float


@dataclass(frozen=True)
class NoPeriod:
    """Why no period was found: the highest peak's lag and correlation (lag 0 when there is no peak)."""

    lag: int
    correlation: float


def autocorrelation(x: np.ndarray) -> np.ndarray:
    """Unbiased, normalised autocorrelation of ``x`` (mean removed) for lags ``0 .. len(x) - 1``."""
    n = x.size
    peak = float(np.max(np.abs(x))) if n else 0.0
    if peak == 0.0:
        return np.zeros(n)
    # Scaled to a peak of 1 (the result does not depend on scale): the products of a tiny signal would
    # otherwise fall into subnormal floats and lose their digits.
    centred = x / peak - np.mean(x / peak)
    size = 1 << int(math.ceil(math.log2(max(2, 2 * n))))
    spectrum = np.fft.rfft(centred, size)
    raw = np.fft.irfft(spectrum * np.conj(spectrum), size)[:n]
    unbiased = raw / (n - np.arange(n))
    return unbiased / unbiased[0] if unbiased[0] > FLAT else np.zeros(n)


#: The variance (of the signal scaled to a peak of 1) below which it is constant up to rounding, and has
#: no autocorrelation to speak of.
FLAT = 1e-18


def find(rate: np.ndarray) -> Found | NoPeriod:
    """The fundamental period of ``rate`` in samples, or why there is none up to half its length."""
    raw = autocorrelation(rate)
    top = rate.size // 2
    lobe = _lobe(raw, top)
    acf = _smooth(raw, max(1, lobe // 4))
    peaks = _peaks(acf, lobe, top)
    if peaks.size == 0:
        return NoPeriod(0, 0.0)
    highest = int(peaks[np.argmax(acf[peaks])])
    if acf[highest] - float(np.min(acf[:highest])) < MIN_PEAK:
        return NoPeriod(highest, float(acf[highest]))
    # The shortest peak nearly as high as the highest: a small multiple of the period (or a sub-multiple).
    first = int(peaks[np.argmax(acf[peaks] >= 0.8 * acf[highest])])
    candidate = _refine(acf, float(first), top)
    candidate = _divide_while_peaked(acf, candidate, lobe)
    correlation = comb(acf, candidate, top)
    if correlation < periodic_above(candidate, lobe, rate.size):
        return NoPeriod(int(round(candidate)), correlation)
    candidate = _multiply_while_differing(rate, candidate)
    candidate = _refine(acf, candidate, top)
    return Found(candidate, comb(acf, candidate, top))


def periodic_above(period: float, lobe: int, n: int) -> float:
    """The ``comb`` a period needs: MIN_PEAK, or NOISE_SIGMAS standard errors of a mean of chance correlations.

    An autocorrelation estimated from ``n`` samples of a process correlated over ``lobe`` lags
    scatters by about ``sqrt(lobe / n)`` at each lag, and a mean over ``m`` multiples by ``1 / sqrt(m)``
    of that: slowly varying traffic (a long lobe) in a short trace needs a stronger repeat. With a
    single multiple in reach (under four periods in the trace) one lag must carry the claim, so the
    floor doubles.
    """
    multiples = max(1, int((n // 2 - 1) / period))
    floor = MIN_PEAK if multiples > 1 else 2 * MIN_PEAK
    return max(floor, NOISE_SIGMAS * math.sqrt(max(lobe, 1) / n / multiples))


def comb(acf: np.ndarray, period: float, top: int) -> float:
    """Mean autocorrelation at the multiples of ``period`` below ``top``: high only if every multiple repeats.

    Noise makes isolated peaks; a period makes them at every multiple, so the mean over them tells
    a weak but steady pattern (bursts whose rate flickers within) from a lucky lag.
    """
    lags = period * np.arange(1, max(2, int((top - 1) / period) + 1))
    return float(np.mean(np.interp(lags, np.arange(acf.size), acf)))


def _lobe(acf: np.ndarray, top: int) -> int:
    """First lag at which ``acf`` goes negative (the end of the lag-0 lobe), ``top`` if it never does."""
    below = np.flatnonzero(acf[:top] < 0.0)
    return int(below[0]) if below.size else top


def _smooth(acf: np.ndarray, width: int) -> np.ndarray:
    """A centred moving average over ``2 * width + 1`` lags: peaks of bursts smeared by jitter are broad and jagged."""
    if width <= 1:
        return acf
    kernel = np.ones(2 * width + 1) / (2 * width + 1)
    padded = np.concatenate((acf[width:0:-1], acf, acf[-2:-width - 2:-1]))
    return np.convolve(padded, kernel, mode="valid")


def _peaks(acf: np.ndarray, lobe: int, top: int) -> np.ndarray:
    """Local maxima of ``acf`` in ``[max(MIN_LAG, lobe), top)``."""
    start = max(MIN_LAG, lobe)
    lags = np.arange(start, max(start, top - 1))
    if lags.size == 0:
        return lags
    mid = acf[lags]
    is_peak = (mid > acf[lags - 1]) & (mid >= acf[lags + 1])
    return lags[is_peak]


def _divide_while_peaked(acf: np.ndarray, period: float, lobe: int) -> float:
    """Divide ``period`` by 2, 3, 5 or 7 while the autocorrelation peaks at every multiple of the quotient too."""
    for _ in range(16):
        reach = max(2, lobe // 2)
        height = _near_max(acf, period, reach)
        for parts in (2, 3, 5, 7):
            shorter = period / parts
            if shorter > max(lobe, MIN_LAG) and all(_near_max(acf, j * shorter, reach) >= DIVIDE_SHARE * height
                                                    for j in range(1, parts)):
                period = shorter
                break
        else:
            return period
    return period


def _near_max(acf: np.ndarray, lag: float, reach: int) -> float:
    """The highest autocorrelation within ``reach`` lags of ``lag`` (a fixed reach: a wider one favours long lags)."""
    centre = int(round(lag))
    return float(np.max(acf[max(0, centre - reach): min(acf.size, centre + reach + 1)]))


def _multiply_while_differing(rate: np.ndarray, period: float) -> float:
    """Multiply ``period`` by the fewest parts (2 to 8) whose copies in the longer period really differ, while any do.

    A longer period is only claimed when the trace covers it MIN_PERIODS times: over fewer, a few
    noisy iterations alternate by chance as often as a real pattern does. Every part count is tried, not just primes: four unequal bursts a quarter period apart differ
    between every fourth iteration, while every other iteration still mixes two kinds of burst.
    """
    for _ in range(8):
        for parts in range(2, MAX_PARTS + 1):
            if rate.size < MIN_PERIODS * parts * period:
                break
            if not repeats_within(fold(rate, period), parts):
                period *= parts
                break
        else:
            return period
        if rate.size < MIN_PERIODS * 2 * period:
            return period
    return period


def _refine(acf: np.ndarray, period: float, top: int) -> float:
    """Least-squares period through the parabolic peaks near each multiple of ``period`` below ``top``."""
    multiples, lags = [], []
    reach = max(1, int(round(period / 4)))
    for j in range(1, int((top - 2) / period) + 1):
        centre = int(round(j * period))
        low, high = max(1, centre - reach), min(top - 1, centre + reach + 1)
        if high <= low:
            break
        k = low + int(np.argmax(acf[low:high]))
        if k <= 0 or k >= acf.size - 1:
            continue
        multiples.append(j)
        lags.append(k + _vertex(acf[k - 1], acf[k], acf[k + 1]))
    if not multiples:
        return period
    m = np.asarray(multiples, dtype=np.float64)
    return float(np.dot(m, lags) / np.dot(m, m))


def _vertex(left: float, centre: float, right: float) -> float:
    """Offset in [-0.5, 0.5] of the vertex of the parabola through three equally spaced points."""
    curvature = left - 2.0 * centre + right
    if curvature >= 0.0:
        return 0.0
    return float(np.clip(0.5 * (left - right) / curvature, -0.5, 0.5))
