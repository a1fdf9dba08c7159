"""Offset search kernels: score every phase offset of a gang at once, jointly over all its links.

Notation: ``L`` links, hyperperiod ``H`` slots, the gang's period ``P`` slots (``P`` divides ``H``).
``base`` is the current load of the links (Mbps, ``(L, H)``); the gang adds ``rates[(t - o) % P]``
times the link's multiplier (to the nearest Mbps, ``core.traffic.scaled``) at slot ``t`` when it runs at offset ``o``.

Folding ``base`` to ``(L, H/P, P)`` turns every question about offset ``o`` into a question about
the residues ``(s + o) % P`` that the gang's windows cover, so each kernel is one pass over ``base``
followed by circular window sums or maxima over ``(L, P)`` arrays (the maxima from one sparse table,
:class:`WindowMaxima`, shared by every run of the pattern): all ``P`` offsets for the price of a few.
``tests/core/reference.py`` answers the same questions with plain loops.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volcano_metronome.core.traffic import scaled


@dataclass(frozen=True)
class Run:
    """A maximal run of slots with the same non-zero rate: ``rates[start:start + length] == value``."""

    start: int
    length: int
    value: int


def runs(rates: np.ndarray) -> tuple[Run, ...]:
    """Split a pattern into its runs of constant non-zero rate."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], rates, [0]])) != 0)
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        if rates[a] != 0:
            out.append(Run(int(a), int(b - a), int(rates[a])))
    return tuple(out)


def fold(base: np.ndarray, period: int) -> np.ndarray:
    """View ``(L, H)`` as ``(L, H/period, period)``: row ``k`` is the ``k``-th repetition of the period."""
    links, hyper = base.shape
    if hyper % period:
        raise ValueError(f"period {period} does not divide the hyperperiod {hyper}")
    return base.reshape(links, hyper // period, period)


@dataclass(frozen=True)
class WindowMaxima:
    """Circular window maxima of ``values`` over its last axis, for every window up to ``longest`` slots.

    A sparse table: ``levels[k][..., i]`` is the maximum over ``2**k`` slots from ``i`` of ``values``
    repeated twice, built once in ``log2(longest)`` passes, so that every run of every pattern scored
    against the same loads costs two gathers instead of passes of its own.
    """

    levels: tuple[np.ndarray, ...]
    period: int

    @classmethod
    def of(cls, values: np.ndarray, longest: int) -> WindowMaxima:
        """The table for ``values`` (``(..., P)``) and windows of at most ``longest`` slots."""
        period = values.shape[-1]
        level, width = np.concatenate([values, values], axis=-1), 1
        levels = [level]
        while width * 2 <= longest:
            level = np.maximum(level[..., :-width], level[..., width:])
            levels.append(level)
            width *= 2
        return cls(tuple(levels), period)

    def window(self, start: int, length: int) -> np.ndarray:
        """``out[..., o] = max(values[..., (start + o + j) % P] for j in range(length))`` for every ``o``."""
        k = length.bit_length() - 1
        if not 0 <= k < len(self.levels):
            raise ValueError(f"window of {length} slots: the table holds windows of 1 to "
                             f"{2 ** len(self.levels) - 1} slots")
        level, width, period = self.levels[k], 1 << k, self.period
        start %= period
        if start + length <= period + 1:  # every run of a pattern: two slices of the doubled table, no gather
            tail = start + length - width
            return np.asarray(np.maximum(level[..., start:start + period], level[..., tail:tail + period]))
        idx = (start + np.arange(period)) % period
        return np.asarray(np.maximum(level[..., idx], level[..., idx + length - width]))


def longest_run(*patterns: np.ndarray) -> int:
    """The longest run of constant non-zero rate in any of ``patterns`` (0 if all are silent)."""
    return max((run.length for rates in patterns for run in runs(rates)), default=0)


def circular_window_sum(values: np.ndarray, start: int, length: int) -> np.ndarray:
    """``out[..., o] = sum(values[..., (start + o + j) % P] for j in range(length))`` for every ``o``."""
    period = values.shape[-1]
    doubled = np.concatenate([values, values], axis=-1)
    csum = np.concatenate([np.zeros(values.shape[:-1] + (1,), dtype=values.dtype),
                           np.cumsum(doubled, axis=-1)], axis=-1)
    idx = (start + np.arange(period)) % period
    return np.asarray(csum[..., idx + length] - csum[..., idx])


def fits(maxima: WindowMaxima, capacity: np.ndarray, multiplier: np.ndarray, guarded: np.ndarray) -> np.ndarray:
    """Offsets at which the guarded pattern keeps every link within capacity in every slot.

    ``maxima`` is over ``peak_load``: ``base`` folded and maxed over repetitions, ``(L, P)``.
    """
    ok = np.ones(maxima.period, dtype=bool)
    for run in runs(guarded):
        least = capacity[:, None] - maxima.window(run.start, run.length)  # the least headroom in the window
        ok &= (least >= scaled(multiplier, run.value)[:, None]).all(axis=0)
    return ok


def peak_utilisation(peak_load: np.ndarray, maxima: WindowMaxima, capacity: np.ndarray, multiplier: np.ndarray,
                     rates: np.ndarray) -> np.ndarray:
    """Highest load / capacity on any link in any slot, for every offset (``maxima`` over ``peak_load``)."""
    out = np.full(peak_load.shape[1], float((peak_load.max(axis=1, initial=0) / capacity).max(initial=0.0)))
    for run in runs(rates):
        top = maxima.window(run.start, run.length)
        np.maximum(out, ((top + scaled(multiplier, run.value)[:, None]) / capacity[:, None]).max(axis=0), out=out)
    return out


def added_overflow(folded: np.ndarray, capacity: np.ndarray, multiplier: np.ndarray,
                   rates: np.ndarray) -> np.ndarray:
    """Overflow (Mbps x slots over the hyperperiod) the gang adds on each link, ``(L, P)``."""
    cap = capacity[:, None, None]
    before = np.maximum(folded - cap, 0).sum(axis=1)
    out = np.zeros((folded.shape[0], folded.shape[2]), dtype=np.int64)
    pattern_runs = runs(rates)
    for value in sorted({r.value for r in pattern_runs}):
        extra = scaled(multiplier, value)[:, None, None]
        delta = np.maximum(folded + extra - cap, 0).sum(axis=1) - before
        for run in pattern_runs:
            if run.value == value:
                out += circular_window_sum(delta, run.start, run.length)
    return out


def damage(folded: np.ndarray, higher: np.ndarray, capacity: np.ndarray, multiplier: np.ndarray,
           rates: np.ndarray) -> np.ndarray:
    """Bandwidth (Mbps x slots) higher-priority gangs lose on each link, ``(L, P)``.

    When a slot is over capacity every flow on it is slowed in proportion (``capacity / load``), so
    higher-priority traffic ``h`` in a slot loaded ``x`` loses ``h * max(0, x - c) / x``.
    """
    cap = capacity[:, None, None]

    def lost(load: np.ndarray) -> np.ndarray:
        over = np.maximum(load - cap, 0)
        return np.asarray(higher * np.divide(over, load, out=np.zeros(load.shape), where=load > 0))

    before = lost(folded).sum(axis=1)
    out = np.zeros((folded.shape[0], folded.shape[2]))
    pattern_runs = runs(rates)
    for value in sorted({r.value for r in pattern_runs}):
        delta = lost(folded + scaled(multiplier, value)[:, None, None]).sum(axis=1) - before
        for run in pattern_runs:
            if run.value == value:
                out += circular_window_sum(delta, run.start, run.length)
    return out
