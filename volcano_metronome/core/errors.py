"""The one small error hierarchy of volcano-metronome.

Broken input raises :class:`InvalidInput` (it names the field, the value and what was expected);
a gang that cannot be placed is not an error but a value (``core.decision.NoFit``).
"""

from __future__ import annotations

from typing import Any


class MetronomeError(Exception):
    """Base class of every error volcano-metronome raises on purpose."""


class InvalidInput(MetronomeError, ValueError):
    """Input that cannot be used as given: names the field, the value and the expected form."""

    def __init__(self, field: str, value: Any, expected: str) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(f"{field}: got {_show(value)}, expected {expected}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
