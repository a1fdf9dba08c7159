"""The epoch lattice: epochs written on claims and pods are points ``k * step`` where every snapped period
divides ``step`` (the hyperperiod cap, in whole milliseconds), so offsets from different decisions compose. PURE."""

from __future__ import annotations

import math

from volcano_metronome.controller.settings import Settings


def epoch_step_ms(settings: Settings) -> int:
    """The lattice step: the smallest whole-millisecond multiple of the hyperperiod cap."""
    h = settings.max_hyperperiod_ms
    for k in range(1, 10001):
        if abs(h * k - round(h * k)) < 1e-6:
            return int(round(h * k))
    return int(round(h))


def epoch_at_or_before(now_ms: float, settings: Settings) -> int:
    """The latest lattice epoch not after ``now_ms``."""
    step = epoch_step_ms(settings)
    return int(now_ms // step) * step


def epoch_at_or_after(t_ms: float, settings: Settings) -> int:
    """The first lattice epoch not before ``t_ms``."""
    step = epoch_step_ms(settings)
    return int(math.ceil(t_ms / step)) * step
