"""The STBandwidthClaims a cycle reads, kept from cycle to cycle by the Observer. PURE.

Views by key, the claims naming each gang (``spec.gangRef``), and which gangs looked each claim up by
name (``gangs.find_claim``): so a changed claim names the gangs whose views may change with it, and a
cycle re-derives only those. Also the claims' predicted overflow summed, patched per changed claim.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from volcano_metronome.controller.views import ClaimView, GangKey

Key = tuple[str, str]


class Claims:
    """Every claim's view, kept current from whole lists or from the keys the informer reported."""

    def __init__(self, parse: Any) -> None:
        self._parse = parse  # object -> ClaimView (observe.claim_view)
        self.views: dict[Key, ClaimView] = {}
        self.by_ref: dict[GangKey, list[ClaimView]] = {}
        self._users: dict[Key, set[GangKey]] = {}  # claim key -> gangs whose view looked it up by name
        self._named: dict[GangKey, tuple[Key, ...]] = {}  # gang -> the claim keys it looked up
        # Each claim's part in the predicted overflow, and their sum kept exact as a whole number of 2**-1074 (every
        # finite float is one): adding and taking away floats would drift from a fresh sum over time.
        self._overflow: dict[Key, float] = {}
        self._overflow_sum = 0

    def replace_all(self, objs: Sequence[Mapping[str, Any]]) -> tuple[set[GangKey], set[Key]]:
        """Read every claim (unchanged resourceVersions reuse their view); the gangs and claims affected."""
        seen: dict[Key, Mapping[str, Any]] = {}
        for obj in objs:
            m = obj.get("metadata") or {}
            seen[(str(m.get("namespace") or ""), str(m.get("name", "")))] = obj
        gangs: set[GangKey] = set()
        keys: set[Key] = set()
        for key in [k for k in self.views if k not in seen]:
            self._set(key, None, gangs, keys)
        for key, obj in seen.items():
            old = self.views.get(key)
            rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            if old is None or not rv or old.resource_version != rv:
                self._set(key, self._parse(obj), gangs, keys)
        self._reorder(seen)
        return gangs, keys

    def apply(self, changed: Mapping[Key, Mapping[str, Any] | None]) -> tuple[set[GangKey], set[Key]]:
        """Read only the changed claims (None: deleted); the gangs and claims affected."""
        gangs: set[GangKey] = set()
        keys: set[Key] = set()
        for key, obj in changed.items():
            self._set(key, self._parse(obj) if obj is not None else None, gangs, keys)
        return gangs, keys

    def _set(self, key: Key, view: ClaimView | None, gangs: set[GangKey], keys: set[Key]) -> None:
        old = self.views.pop(key, None) if view is None else self.views.get(key)
        if old is not None and old.gang_ref is not None:
            refs = self.by_ref.get(old.gang_ref, [])
            refs[:] = [c for c in refs if c.key != key]
            if not refs:
                self.by_ref.pop(old.gang_ref, None)
            gangs.add(old.gang_ref)
        if view is not None:
            self.views[key] = view
            if view.gang_ref is not None:
                self.by_ref.setdefault(view.gang_ref, []).append(view)
                gangs.add(view.gang_ref)
        if old is not None or view is not None:
            keys.add(key)
            gangs.update(self._users.get(key, ()))
        part = view.overflow_gbps_ms if view is not None else 0.0
        was = self._overflow.pop(key, 0.0)
        if part:
            self._overflow[key] = part
        if part != was:
            self._overflow_sum += _units(part) - _units(was)

    @property
    def overflow(self) -> float:
        """The claims' predicted overflow, summed (``ClaimView.overflow_gbps_ms``; rounded once, like ``math.fsum``)."""
        try:
            return self._overflow_sum / _ONE  # int / int is correctly rounded
        except OverflowError:
            return math.inf if self._overflow_sum > 0 else -math.inf

    def _reorder(self, seen: Mapping[Key, Any]) -> None:
        """Views in the informer's order (a fresh build's), so that whatever iterates them agrees with one."""
        if list(self.views) != list(seen):
            self.views = {k: self.views[k] for k in seen}

    def looked_up(self, gang: GangKey, names: Sequence[Key]) -> None:
        """Record the claim keys ``gang``'s view depends on by name (a change to any re-derives it)."""
        old = self._named.get(gang, ())
        if tuple(names) == old:
            return
        for k in old:
            users = self._users.get(k)
            if users is not None:
                users.discard(gang)
                if not users:
                    del self._users[k]
        if names:
            self._named[gang] = tuple(names)
            for k in names:
                self._users.setdefault(k, set()).add(gang)
        else:
            self._named.pop(gang, None)


_SHIFT = 1074  # 2**-1074 is the smallest float: every finite float is a whole number of it
_ONE = 1 << _SHIFT


def _units(value: float) -> int:
    """A finite float as a whole number of 2**-1074, exactly."""
    num, den = value.as_integer_ratio()  # den is a power of two
    return num << (_SHIFT - den.bit_length() + 1)
