"""Synthetic byte-counter traces with a known profile: exact bytes, per-iteration jitter and noise.

Obviously correct by construction: every burst is an interval ``[start, start + len)`` at a constant
rate, and the counter at time ``t`` is the sum over bursts of ``rate x (time of the burst before t)``
plus the background bytes sent so far. Nothing is resampled or filtered.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volcano_metronome.profiling.trace import HEADER, row


@dataclass(frozen=True)
class Spec:
    """A periodic job as a trace generator sees it; times in ms, rates in Gbps."""

    period_ms: float
    windows: tuple[tuple[float, float, float], ...]  # (start_ms, len_ms, gbps), inside the period
    periods: float = 20.0  # length of the trace in periods
    hz: float = 1000.0
    jitter_ms: float = 0.0  # every burst of iteration k starts late by u_k x jitter_ms, u_k ~ U[0, 1)
    rate_noise: float = 0.0  # every burst's rate is multiplied by max(0, 1 + N(0, rate_noise)), centred
    background_gbps: float = 0.0  # mean rate of random background traffic (exponential bytes per sample)
    irregular: float = 0.0  # sampling intervals uniform in (1 +- irregular) / hz
    phase_ms: float = 0.0  # the first iteration starts this long before the first sample


def samples(spec: Spec, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sample times (s, from 0) and the cumulative counter (whole bytes) at them."""
    rng = np.random.default_rng(seed)
    span_s = spec.periods * spec.period_ms / 1000.0
    n = int(span_s * spec.hz) + 1
    steps = (1.0 + spec.irregular * rng.uniform(-1.0, 1.0, n - 1)) / spec.hz
    times = np.concatenate(([0.0], np.cumsum(steps)))
    iterations = np.arange(-1, int(np.ceil(spec.periods)) + 2)
    late = rng.uniform(size=iterations.size) * spec.jitter_ms
    # Centred so that over the whole iterations inside the trace each window's mean rate is its nominal one.
    factors = rng.normal(0.0, spec.rate_noise, size=(iterations.size, len(spec.windows)))
    inside = (iterations >= 1) & (iterations < int(spec.periods) - 1)
    inside = inside if inside.any() else np.ones_like(inside)
    factors = np.maximum(0.0, 1.0 + factors - factors[inside].mean(axis=0))
    starts, lens, rates = [], [], []
    for i, k in enumerate(iterations):
        for w, (start_ms, len_ms, gbps) in enumerate(spec.windows):
            starts.append((k * spec.period_ms + start_ms + late[i] - spec.phase_ms) / 1000.0)
            lens.append(len_ms / 1000.0)
            rates.append(gbps * factors[i, w] * 1e9 / 8.0)  # bytes/s
    s, l, r = np.array(starts), np.array(lens), np.array(rates)
    counter = np.zeros(n)
    for lo in range(0, n, 4096):
        t = times[lo: lo + 4096, None]
        counter[lo: lo + 4096] = np.clip(t - s[None, :], 0.0, l[None, :]) @ r
    if spec.background_gbps > 0:
        gaps = np.diff(times, prepend=0.0)
        counter += np.cumsum(rng.exponential(spec.background_gbps * 1e9 / 8.0 * gaps))
    return times, np.floor(counter).astype(np.int64) + 10**12  # a counter that has been running a while


def csv(spec: Spec, seed: int) -> str:
    """The trace as ``profile record`` writes it."""
    times, counter = samples(spec, seed)
    return HEADER + "\n" + "".join(row(float(t), int(c)) for t, c in zip(times, counter))
