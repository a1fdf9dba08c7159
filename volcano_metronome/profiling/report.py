"""The runtime helper's measurement as it travels to the node agent: a JSON report per process. PURE.

The helper (:meth:`volcano_metronome.runtime.Stopwatch.publish`) writes one report file per process
into a directory the node agent reads (``profile agent --runtime-dir``); the agent prefers it to
its own NIC fit for the gang it names, because it is that gang's own timing, even on a NIC several
gangs share. The report is :meth:`Measured.to_dict` (the fitter's terms) plus who measured it and when::

    {"namespace": "team-a", "gang_kind": "PodGroup", "gang_name": "llm", "pod": "llm-worker-0",
     "measured_at_s": 1700000000.0, "period_ms": 315.8,
     "windows": [{"start_ms": 252.5, "len_ms": 63.3, "gbps": 2.035}],
     "jitter_ms": 35.0, "periods": 21, "padding_ms": 182.3, "source": "runtime"}
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.profiling.timed import Measured, MeasuredWindow

IDENTITY = ("namespace", "gang_kind", "gang_name", "pod")


@dataclass(frozen=True)
class RuntimeReport:
    """One process's measured profile, the gang it belongs to, and when (Unix seconds) it was measured."""

    namespace: str
    gang_kind: str  # the pod's metronome.dev/gang-kind: PodGroup, Job, Workload, JobSet, ...
    gang_name: str  # the pod's metronome.dev/gang-name
    pod: str
    measured_at_s: float
    measured: Measured

    @property
    def gang(self) -> tuple[str, str, str]:
        """``(namespace, kind, name)``: what a claim's ``spec.gangRef`` names, in its namespace."""
        return self.namespace, self.gang_kind, self.gang_name

    def to_json(self) -> str:
        """The report as one JSON object (the file's content)."""
        return json.dumps({"namespace": self.namespace, "gang_kind": self.gang_kind, "gang_name": self.gang_name,
                           "pod": self.pod, "measured_at_s": self.measured_at_s, **self.measured.to_dict()},
                          separators=(",", ":"))


def parse_report(text: str, where: str) -> RuntimeReport:
    """The report in ``text``; bad input raises :class:`InvalidInput` naming ``where``, the field and the value."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(where, text[:60], f"a JSON object ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidInput(where, data, "a JSON object")
    names = {}
    for key in IDENTITY:
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise InvalidInput(f"{where}: {key}", value, "a non-empty string")
        names[key] = value
    windows = data.get("windows")
    if not isinstance(windows, list) or not windows:
        raise InvalidInput(f"{where}: windows", windows, "a non-empty list of {start_ms, len_ms, gbps}")
    parsed = []
    for i, w in enumerate(windows):
        if not isinstance(w, dict):
            raise InvalidInput(f"{where}: windows[{i}]", w, "an object {start_ms, len_ms, gbps}")
        gbps = w.get("gbps")
        parsed.append(MeasuredWindow(_number(w, "start_ms", f"{where}: windows[{i}]", minimum=0.0),
                                     _number(w, "len_ms", f"{where}: windows[{i}]", above=0.0),
                                     None if gbps is None else _number(w, "gbps", f"{where}: windows[{i}]", above=0.0)))
    periods = data.get("periods")
    if not isinstance(periods, int) or isinstance(periods, bool) or periods < 0:
        raise InvalidInput(f"{where}: periods", periods, "a whole number of iterations >= 0")
    measured = Measured(_number(data, "period_ms", where, above=0.0), tuple(parsed),
                        _number(data, "jitter_ms", where, minimum=0.0), periods,
                        _number(data, "padding_ms", where, minimum=0.0))
    try:
        measured.profile()  # the rules of every profile: windows inside the period, apart, jitter below it
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc.field}", exc.value, exc.expected) from None
    return RuntimeReport(**names, measured_at_s=_number(data, "measured_at_s", where, minimum=0.0),
                         measured=measured)


def _number(data: Mapping[str, Any], key: str, where: str, *, minimum: float | None = None,
            above: float | None = None) -> float:
    value = data.get(key)
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    ok = math.isfinite(number) and (minimum is None or number >= minimum) and (above is None or number > above)
    if not ok:
        bound = f">= {minimum:g}" if minimum is not None else f"> {above:g}"
        raise InvalidInput(f"{where}: {key}", value, f"a number {bound}")
    return number


__all__ = ["RuntimeReport", "parse_report"]
