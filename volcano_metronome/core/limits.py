"""Every limit the scheduling core enforces on a profile, in one place.

The webhook admits a profile only if the controller could place it, so both read these: the
absolute bounds of a profile (``MAX_*``) and the one bound that depends on the deployment, the
hyperperiod cap (``maxHyperperiodMs``, which the Helm chart passes to the webhook and the controller
alike). A period longer than the cap cannot be snapped to the slot grid, so no decision exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from volcano_metronome.core.errors import InvalidInput

if TYPE_CHECKING:
    from volcano_metronome.core.profile import Profile

#: Largest rate any window may ask for, per worker: a worker sends through every NIC of its GPUs (rails), so
#: this is eight rails of 800 Gbps (6.4 Tbps), above every node sold today (a DGX H100 has eight of 400 Gbps).
MAX_GBPS = 6400.0
#: Longest period any profile may have before grid snapping (the hyperperiod cap bounds it further).
MAX_PERIOD_MS = 3_600_000.0
#: Most windows per period (the STBandwidthClaim CRD's maxItems, which bounds its CEL cost).
MAX_WINDOWS = 32
#: The slot width and its bounds.
DEFAULT_SLOT_MS = 5.0
MIN_SLOT_MS, MAX_SLOT_MS = 0.1, 1000.0
#: The hyperperiod cap in slots: 5040 (25.2 s at 5 ms) has 60 divisors, so snapping errors stay small.
DEFAULT_MAX_HYPERPERIOD_SLOTS = 5040
MAX_HYPERPERIOD_SLOTS = 100_000
DEFAULT_MAX_HYPERPERIOD_MS = DEFAULT_MAX_HYPERPERIOD_SLOTS * DEFAULT_SLOT_MS

# Float noise allowance when comparing a period with the cap (the grid snaps with the same slack).
_EPS_MS = 1e-6


def beyond_cap(field: str, period_ms: float, max_hyperperiod_ms: float) -> InvalidInput:
    """The error for a period the grid cannot snap: longer than the hyperperiod cap."""
    return InvalidInput(field, period_ms, f"at most the hyperperiod cap {max_hyperperiod_ms:g} ms "
                                          f"(maxHyperperiodMs): no longer period can be placed")


def check_placeable(profile: "Profile", max_hyperperiod_ms: float, field: str = "profile.period_ms") -> None:
    """Raise :class:`InvalidInput` naming ``field`` unless the controller could lay ``profile`` on its grid."""
    if profile.period_ms > max_hyperperiod_ms + _EPS_MS:
        raise beyond_cap(field, profile.period_ms, max_hyperperiod_ms)


def check_cap(max_hyperperiod_ms: float, field: str = "maxHyperperiodMs") -> float:
    """``max_hyperperiod_ms`` if it is a usable cap (positive, at most ``MAX_PERIOD_MS``), else :class:`InvalidInput`."""
    if not 0.0 < max_hyperperiod_ms <= MAX_PERIOD_MS:
        raise InvalidInput(field, max_hyperperiod_ms, f"a number of milliseconds in (0, {MAX_PERIOD_MS:.0f}]")
    return max_hyperperiod_ms
