"""The model catalog: modelled (not measured) bandwidth profiles of well-known training jobs.

Rates are fractions of the NIC line rate, so one entry serves any cluster: ``entry.profile(200)``
is the profile on 200 Gbps NICs. An entry is derived for a reference NIC (``reference_gbps``); on
another NIC each window moves the same volume at the same fraction of the new line rate, so it
lasts ``reference / line rate`` as long, and the windows after it, and the period, move by the time
saved (compute time does not change). On named hardware (``compute_scale``: a GPU's dense bf16
peak at a model-FLOPs utilisation) every compute gap scales by ``reference_tflops / (peak x mfu)``;
with overlap, part of a window hides under the compute before it (``ModelWindow.overlap``). Each
entry carries the derivation of its numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.fields import choice, number, string
from volcano_metronome.core.profile import Profile, Window


#: With overlap, the share of a window that always stays exposed (the last of about ten gradient
#: buckets, PyTorch DDP's 25 MB default on models of a few hundred MB, is reduced after backward).
EXPOSED_MIN = 0.1

#: Dense bf16/fp16 tensor-core peak of the named GPUs, TFLOPS (NVIDIA datasheets: A100 SXM 312,
#: H100 SXM 989; the sparsity figures, twice these, are not used).
GPU_PEAK_TFLOPS: dict[str, float] = {"a100": 312.0, "h100": 989.0}


@dataclass(frozen=True)
class ModelWindow:
    """An on-window whose rate is a fraction of line rate.

    ``overlap``: the share of the compute gap before the window during which its traffic can
    already flow (DDP-style bucketed all-reduce under the backward pass); 0 for blocking collectives.
    """

    start_ms: float
    len_ms: float
    fraction: float
    overlap: float = 0.0
    #: The volume is one GPU's own (an all-to-all exchange): a worker of several GPUs moves it once per GPU.
    per_gpu: bool = False


@dataclass(frozen=True)
class CatalogEntry:
    """A named model: its iteration period, windows, jitter and how those numbers were derived."""

    name: str
    period_ms: float
    windows: tuple[ModelWindow, ...]
    jitter_ms: float = 0.0
    derivation: str = ""
    reference_gbps: float = 100.0
    #: Sustained TFLOPS per GPU the compute times above were derived at.
    reference_tflops: float = 25.0
    #: How the traffic spreads between workers (``core.traffic``): ``ring`` or ``all-to-all``.
    collective: str = "ring"

    def profile(self, line_rate_gbps: float, compute_scale: float = 1.0, overlap: bool = False,
                volume_scale: float = 1.0) -> Profile:
        """The profile on NICs of ``line_rate_gbps``: same volumes, windows rescaled.

        ``compute_scale`` multiplies every compute gap (``reference_tflops`` / the sustained TFLOPS
        of the hardware, see ``compute_scale``). With ``overlap`` each window hides up to
        ``overlap x`` the compute gap before it under that compute: only the rest, the exposed
        communication, is a window (and the period shrinks by what was hidden). ``volume_scale``
        multiplies the volume of every ``per_gpu`` window (a worker of several GPUs exchanging each GPU's own data).
        """
        if not line_rate_gbps > 0:
            raise InvalidInput("line_rate_gbps", line_rate_gbps, "a NIC line rate > 0 Gbps")
        if not compute_scale > 0:
            raise InvalidInput("compute_scale", compute_scale, "a factor > 0")
        if not volume_scale > 0:
            raise InvalidInput("volume_scale", volume_scale, "a factor > 0")
        scale = self.reference_gbps / line_rate_gbps
        shift = 0.0  # how much later than ``start x compute_scale`` the next window starts
        end = 0.0  # reference end of the previous window
        windows = []
        for w in sorted(self.windows, key=lambda w: w.start_ms):
            length = w.len_ms * scale * (volume_scale if w.per_gpu else 1.0)
            if overlap and w.overlap > 0:
                # The last gradient bucket cannot go before the backward pass ends: keep EXPOSED_MIN.
                length -= min((1.0 - EXPOSED_MIN) * length, w.overlap * (w.start_ms - end) * compute_scale)
            windows.append(Window(w.start_ms * compute_scale + shift, length, w.fraction * line_rate_gbps))
            shift += length - w.len_ms * compute_scale
            end = w.start_ms + w.len_ms
        return Profile(self.period_ms * compute_scale + shift, tuple(windows),
                       self.jitter_ms * compute_scale, self.collective)


def compute_scale(entry: CatalogEntry, gpu: str | None, mfu: float | None) -> float:
    """How much longer (> 1) or shorter compute lasts on ``gpu`` at ``mfu`` than in ``entry``'s derivation."""
    if gpu is None:
        return 1.0
    choice(gpu, "topology.gpu", GPU_PEAK_TFLOPS)
    if mfu is None or not 0.0 < mfu <= 1.0:
        raise InvalidInput("topology.mfu", mfu, "a model-FLOPs utilisation in (0, 1]")
    return entry.reference_tflops / (GPU_PEAK_TFLOPS[gpu] * mfu)


class Catalog:
    """Entries by lower-case name."""

    def __init__(self, entries: Iterable[CatalogEntry]) -> None:
        self._entries = {e.name.lower(): e for e in entries}

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._entries

    def names(self) -> list[str]:
        """Every entry name, sorted."""
        return sorted(self._entries)

    def get(self, name: str, field: str = "model") -> CatalogEntry:
        """The entry called ``name`` (case-insensitive), or an error listing the known names."""
        entry = self._entries.get(name.lower()) if isinstance(name, str) else None
        if entry is None:
            raise InvalidInput(field, name, f"a catalog model, one of {', '.join(self.names())}")
        return entry

    def with_entries(self, entries: Iterable[CatalogEntry]) -> "Catalog":
        """A catalog with ``entries`` added (replacing built-ins of the same name)."""
        return Catalog([*self._entries.values(), *entries])


def entry_from_mapping(name: str, data: Any, field: str) -> CatalogEntry:
    """Parse a user entry: ``{period_ms, windows: [{start_ms, len_ms, fraction}], jitter_ms, derivation, reference_gbps,
    collective}``."""
    if not isinstance(data, Mapping):
        raise InvalidInput(field, data, "a mapping with period_ms and windows")
    unknown = sorted(set(data) - {"period_ms", "windows", "jitter_ms", "derivation", "reference_gbps", "collective"})
    if unknown:
        raise InvalidInput(f"{field}.{unknown[0]}", data[unknown[0]],
                           "one of period_ms, windows, jitter_ms, derivation, reference_gbps, collective")
    raw = data.get("windows")
    if not isinstance(raw, list) or not raw:
        raise InvalidInput(f"{field}.windows", raw, "a non-empty list of {start_ms, len_ms, fraction}")
    windows = []
    for i, w in enumerate(raw):
        where = f"{field}.windows[{i}]"
        if not isinstance(w, Mapping) or set(w) != {"start_ms", "len_ms", "fraction"}:
            raise InvalidInput(where, w, "a mapping with exactly start_ms, len_ms, fraction")
        fraction = number(w["fraction"], f"{where}.fraction")
        if not 0.0 < fraction <= 1.0:
            raise InvalidInput(f"{where}.fraction", fraction, "a fraction of line rate in (0, 1]")
        windows.append(ModelWindow(number(w["start_ms"], f"{where}.start_ms"), number(w["len_ms"], f"{where}.len_ms"),
                                   fraction))
    entry = CatalogEntry(name, number(data.get("period_ms"), f"{field}.period_ms"), tuple(windows),
                         number(data.get("jitter_ms", 0.0), f"{field}.jitter_ms"),
                         string(data.get("derivation", ""), f"{field}.derivation", allow_empty=True),
                         number(data.get("reference_gbps", 100.0), f"{field}.reference_gbps", above=0.0),
                         collective=string(data.get("collective", "ring"), f"{field}.collective"))
    try:
        entry.profile(100.0)
    except InvalidInput as exc:
        raise InvalidInput(f"{field}: {exc.field}", exc.value, exc.expected) from None
    return entry


def builtin() -> Catalog:
    """The built-in catalog."""
    from volcano_metronome.catalog.models import ALL_TO_ALL_MODELS, MODELS

    return Catalog(MODELS + ALL_TO_ALL_MODELS)
