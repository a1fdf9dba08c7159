"""The training-side helper: start each communication burst in the gang's slot.

The controller publishes, on every pod of a placed gang, the snapped period, the gang's offset and a
cluster-wide epoch (annotations ``metronome.dev/period-ms``, ``offset-ms``, ``epoch``); the webhook
exposes them as the environment variables ``METRONOME_PERIOD_MS``, ``METRONOME_OFFSET_MS`` and
``METRONOME_EPOCH`` through the downward API. Call :meth:`Metronome.wait` right before the
all-reduce of every iteration::

    from volcano_metronome.runtime import Metronome
    metronome = Metronome.from_env()          # None-safe: a no-op when the gang is not managed
    for batch in loader:
        loss = model(batch).backward()
        metronome.wait()                      # pads to the gang's slot
        all_reduce(gradients)

The helper keeps the index of the slot it aims at. Early, it pads; late (contention, a slow step),
it goes at once and aims the next burst at the next slot, so lateness is absorbed by the next early
arrival instead of shifting the schedule; more than a whole period late, it skips the slots it
missed. This is the behaviour the simulator models (``volcano_metronome.sim.engine``).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from volcano_metronome import api
from volcano_metronome.core.errors import InvalidInput


def next_start_ms(now_ms: float, epoch_ms: float, period_ms: float, offset_ms: float, window_ms: float = 0.0) -> float:
    """The earliest time >= ``now_ms`` congruent to ``epoch + offset + window`` modulo the period."""
    phase = epoch_ms + offset_ms + window_ms
    return phase + math.ceil((now_ms - phase) / period_ms - 1e-12) * period_ms


def aim(now_ms: float, phase_ms: float, period_ms: float, previous: int | None) -> int:
    """Index ``m`` of the slot ``phase + m * period`` the next burst aims at (see the module docstring)."""
    if previous is None:
        return math.ceil((now_ms - phase_ms) / period_ms - 1e-12)
    slot = previous + 1
    if phase_ms + (slot + 1) * period_ms <= now_ms:  # a whole period late: skip the missed slots
        slot = math.floor((now_ms - phase_ms) / period_ms + 1e-12)
    return slot


@dataclass
class Metronome:
    """The gang's slot: period, offset and epoch (all in ms), and the offset of its first window."""

    period_ms: float
    offset_ms: float
    epoch_ms: float
    window_ms: float = 0.0
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    slot: int | None = None  # the slot index the last burst aimed at

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, window_ms: float = 0.0) -> "Metronome | None":
        """The slot published to this pod, or None when the pod's gang is not managed (variables unset or empty)."""
        env = os.environ if env is None else env
        raw = {key: env.get(key, "") for key in (api.ENV_PERIOD_MS, api.ENV_OFFSET_MS, api.ENV_EPOCH)}
        if not all(raw.values()):
            return None
        values = {}
        for key, text in raw.items():
            try:
                values[key] = float(text)
            except ValueError:
                raise InvalidInput(key, text, "a number of milliseconds") from None
        if not values[api.ENV_PERIOD_MS] > 0:
            raise InvalidInput(api.ENV_PERIOD_MS, raw[api.ENV_PERIOD_MS], "a period > 0 ms")
        return cls(values[api.ENV_PERIOD_MS], values[api.ENV_OFFSET_MS], values[api.ENV_EPOCH], window_ms)

    @property
    def phase_ms(self) -> float:
        """Start of slot 0: epoch + offset + the first window's start."""
        return self.epoch_ms + self.offset_ms + self.window_ms

    def wait(self) -> float:
        """Sleep until this burst's slot (no sleep when late); returns the milliseconds waited."""
        now = self.clock() * 1000.0
        self.slot = aim(now, self.phase_ms, self.period_ms, self.slot)
        delay = self.phase_ms + self.slot * self.period_ms - now
        if delay > 0:
            self.sleep(delay / 1000.0)
        return max(0.0, delay)
