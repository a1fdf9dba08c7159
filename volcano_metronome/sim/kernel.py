"""A tiny deterministic discrete-event kernel, in the spirit of SimPy but with plain callbacks.

Events fire in order of ``(time, rank, sequence)``: at equal times the lower rank fires first, and
among equal ranks the one scheduled first. Nothing depends on hashing or wall-clock time, so a run
is a pure function of its inputs. Cancelling is lazy: a cancelled event stays in the heap and is
skipped when it comes up, which keeps rescheduling O(log n).
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable

#: Ranks for events at the same instant: network first, then job life-cycle, then scheduling.
NETWORK = 0
LIFECYCLE = 1
SCHEDULING = 2
SAMPLING = 3


class Event:
    """A scheduled callback; ``cancel()`` it to stop it from firing."""

    __slots__ = ("time", "callback", "args", "cancelled")

    def __init__(self, time: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.time = time
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        """Do not fire this event."""
        self.cancelled = True


class Kernel:
    """The event queue and the simulated clock (seconds)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.fired = 0
        self._heap: list[tuple[float, int, int, Event]] = []
        self._sequence = itertools.count()

    def at(self, time: float, callback: Callable[..., Any], *args: Any, rank: int = LIFECYCLE) -> Event:
        """Fire ``callback(*args)`` at ``time`` (never before now)."""
        event = Event(max(time, self.now), callback, args)
        heapq.heappush(self._heap, (event.time, rank, next(self._sequence), event))
        return event

    def after(self, delay: float, callback: Callable[..., Any], *args: Any, rank: int = LIFECYCLE) -> Event:
        """Fire ``callback(*args)`` after ``delay`` seconds."""
        return self.at(self.now + delay, callback, *args, rank=rank)

    def run(self, until: float = float("inf"), stop: Callable[[], bool] | None = None) -> None:
        """Fire events in order until none is left, the next is after ``until``, or ``stop()`` is true."""
        heap = self._heap
        while heap:
            time, _, _, event = heap[0]
            if time > until:
                break
            heapq.heappop(heap)
            if event.cancelled:
                continue
            self.now = time
            self.fired += 1
            event.callback(*event.args)
            if stop is not None and stop():
                break

    @property
    def pending(self) -> int:
        """Events still queued (cancelled ones included until they come up)."""
        return len(self._heap)
