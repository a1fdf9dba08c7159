"""Slow, obviously correct loop versions of the profiling kernels (for cross-checks only)."""

from __future__ import annotations

import math

import numpy as np


def autocorrelation(x):
    """acf[k] = mean of (x[i] - m)(x[i + k] - m) over the n - k pairs, over the same at lag 0 (zeros if x is flat)."""
    n = len(x)
    peak = max(abs(v) for v in x)
    if peak == 0:
        return np.zeros(n)
    x = [v / peak for v in x]  # the result does not depend on scale; this keeps tiny signals' products normal floats
    m = sum(x) / n
    c = [x_i - m for x_i in x]
    raw = [sum(c[i] * c[i + k] for i in range(n - k)) / (n - k) for k in range(n)]
    flat = 1e-18  # constant up to rounding (a peak of 1): no autocorrelation
    return np.array([r / raw[0] for r in raw]) if raw[0] > flat else np.zeros(n)


def fold(rate, period, bins):
    """rows[k][b]: mean of the samples whose centre (i + 0.5) falls in iteration k, phase bin b; NaN if none."""
    iterations = int(math.floor(len(rate) / period))
    sums = [[0.0] * bins for _ in range(iterations)]
    counts = [[0] * bins for _ in range(iterations)]
    for i, value in enumerate(rate):
        centre = i + 0.5
        k = int(math.floor(centre / period))
        if k >= iterations:
            continue
        b = min(int((centre % period) / period * bins), bins - 1)
        sums[k][b] += value
        counts[k][b] += 1
    return np.array([[sums[k][b] / counts[k][b] if counts[k][b] else math.nan for b in range(bins)]
                     for k in range(iterations)])


def shift_back(row, lateness):
    """out[b] = row at position b + lateness (circular), linear between bins."""
    bins = len(row)
    out = []
    for b in range(bins):
        x = b + lateness
        lo = math.floor(x)
        f = x - lo
        out.append((1 - f) * row[lo % bins] + f * row[(lo + 1) % bins])
    return np.array(out)


def rate_from_counter(times, counts, dt):
    """Mean Gbps over [t0 + j dt, t0 + (j + 1) dt): counter interpolated linearly between samples."""
    def counter_at(t):
        for i in range(len(times) - 1):
            if times[i] <= t <= times[i + 1]:
                w = (t - times[i]) / (times[i + 1] - times[i])
                return counts[i] + w * (counts[i + 1] - counts[i])
        return counts[-1]
    steps = int(math.floor((times[-1] - times[0]) / dt + 1e-9))
    grid = [times[0] + j * dt for j in range(steps + 1)]
    values = [counter_at(t) for t in grid]
    return np.array([(values[j + 1] - values[j]) * 8 / dt / 1e9 for j in range(steps)])
