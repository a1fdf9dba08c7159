"""The cluster's network as a core :class:`Topology`, from the first source that describes it.

Sources, in order (docs/controller.md, "Topology"): STBandwidthCapacity objects; Volcano HyperNodes,
whose tiers get the default capacities of the settings; node labels (the configurable rack label is tier 1, the zone
label tier 2). Every node always gets a NIC (tier 0) link: from a tier-0 STBandwidthCapacity that
lists it, else the default NIC capacity. A source that cannot be used (overlapping link sets within
a tier, say) is reported in ``warnings`` and the next one is tried.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from volcano_metronome.controller import objects
from volcano_metronome.controller.settings import DefaultCapacities
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.topology import DOWN, UP, Link, Topology, duplex
from volcano_metronome.shapes.selectors import label_selector_matches

CAPACITIES = "STBandwidthCapacity"
HYPERNODES = "HyperNode"
LABELS = "node labels"


#: Why an STBandwidthCapacity is not part of the topology (its Ready condition's reason).
NO_NODES, CONFLICT, INVALID = "NoNodes", "Conflict", "Invalid"


@dataclass(frozen=True)
class CapacityState:
    """What the controller made of one STBandwidthCapacity: the nodes it applies to, and whether it is used
    (``reason`` empty) or why not (``NO_NODES``, ``CONFLICT``, ``INVALID``, with ``message``)."""

    name: str
    generation: int
    status: Mapping[str, Any]  # as observed
    matched: int
    tier: int = 0
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class Network:
    """The topology, which source it came from, and what could not be used."""

    topology: Topology
    source: str
    warnings: tuple[str, ...] = ()
    capacities: tuple[CapacityState, ...] = ()


def build(nodes: Sequence[Mapping[str, Any]], capacities: Sequence[Mapping[str, Any]],
          hypernodes: Sequence[Mapping[str, Any]], defaults: DefaultCapacities, rack_label: str,
          zone_label: str) -> Network:
    """The network of ``nodes`` (see the module docstring for the order of sources)."""
    names = tuple(sorted(objects.name(n) for n in nodes))
    node_labels = {objects.name(n): objects.labels(n) for n in nodes}
    warnings: list[str] = []
    nic_links, upper, cap_warn, states = _from_capacities(capacities, names, node_labels)
    warnings += cap_warn
    nics = _nics(names, nic_links, defaults.nic_gbps)
    if upper:  # NIC-only capacities leave the switch tiers to HyperNodes or labels
        topo = _try(names, nics + upper, CAPACITIES, warnings)
        if topo is not None:
            return Network(topo, CAPACITIES, tuple(warnings), tuple(states))
        # The switch tiers' link sets overlap (the reason is what _try just reported): none of them is used,
        # the NICs still are.
        states = [dataclasses.replace(s, reason=CONFLICT, message=warnings[-1]) if not s.reason and s.tier > 0
                  else s for s in states]
    verdicts = tuple(states)
    if hypernodes:
        links, hn_warn = _from_hypernodes(hypernodes, names, node_labels, defaults)
        warnings += hn_warn
        topo = _try(names, nics + links, HYPERNODES, warnings)
        if topo is not None:
            return Network(topo, HYPERNODES, tuple(warnings), verdicts)
    links = _from_labels(names, node_labels, defaults, rack_label, zone_label)
    topo = _try(names, nics + links, LABELS, warnings)
    if topo is None:  # overlapping label domains cannot happen, but never fail the cycle over topology
        topo = Topology(names, tuple(nics))
    return Network(topo, LABELS, tuple(warnings), verdicts)


def _try(names: tuple[str, ...], links: list[Link], source: str, warnings: list[str]) -> Topology | None:
    try:
        return Topology(names, tuple(links))
    except InvalidInput as exc:
        warnings.append(f"{source}: {exc}; ignoring this source")
        return None


def _nics(names: Iterable[str], given: Mapping[str, list[Link]], nic_gbps: float) -> list[Link]:
    out: list[Link] = []
    for n in names:
        out.extend(given.get(n) or duplex(f"nic:{n}", nic_gbps, [n], 0))
    return out


def _from_capacities(capacities: Sequence[Mapping[str, Any]], names: tuple[str, ...],
                     node_labels: Mapping[str, Mapping[str, str]]
                     ) -> tuple[dict[str, list[Link]], list[Link], list[str], list[CapacityState]]:
    """NIC links per node (tier-0 objects: one NIC per node they name), switch links (higher tiers), the
    warnings, and what became of each object."""
    known = set(names)
    nic: dict[str, list[Link]] = {}
    upper: list[Link] = []
    warnings: list[str] = []
    states: list[CapacityState] = []
    for obj in sorted(capacities, key=objects.name):
        cname = objects.name(obj)
        spec = obj.get("spec") or {}
        state = CapacityState(cname, int(objects.meta(obj).get("generation") or 0), obj.get("status") or {}, 0)
        try:
            gbps = float(spec.get("capacityGbps", 0))
            tier = int(spec.get("tier", 0))
            if not gbps > 0 or tier < 0:
                raise ValueError
        except (TypeError, ValueError):
            message = (f"capacityGbps {spec.get('capacityGbps')!r} / tier {spec.get('tier')!r} unusable; "
                       "expected a positive capacity and a tier >= 0")
            warnings.append(f"STBandwidthCapacity {cname}: {message}")
            states.append(dataclasses.replace(state, reason=INVALID, message=message))
            continue
        members = _capacity_nodes(spec, names, node_labels)
        stray = sorted(set(spec.get("nodes") or []) - known)
        if stray:
            warnings.append(f"STBandwidthCapacity {cname}: nodes {stray} do not exist; ignored")
        members = [m for m in members if m in known]
        state = dataclasses.replace(state, matched=len(members), tier=tier)
        if not members:
            states.append(dataclasses.replace(state, reason=NO_NODES, message="no existing node matches it"))
            continue
        direction = spec.get("direction", "Both")
        if direction not in ("Both", "Up", "Down"):
            message = f"direction {direction!r}; expected Both, Up or Down"
            warnings.append(f"STBandwidthCapacity {cname}: {message}")
            states.append(dataclasses.replace(state, reason=INVALID, message=message))
            continue
        states.append(state)
        if tier == 0:
            # Tier 0 describes NICs: one link of this capacity per node it names (CRD semantics).
            for node in members:
                suffix = f"{cname}:{node}" if len(members) > 1 else cname
                nic.setdefault(node, []).extend(_directed(f"cap:{suffix}", gbps, [node], 0, direction))
        else:
            upper.extend(_directed(f"cap:{cname}", gbps, members, tier, direction))
    return nic, upper, warnings, states


def _directed(name: str, gbps: float, members: Sequence[str], tier: int, direction: str) -> list[Link]:
    if direction == "Both":
        return list(duplex(name, gbps, members, tier))
    d = UP if direction == "Up" else DOWN
    return [Link(f"{name}:{d}", gbps, frozenset(members), tier, d)]


def _capacity_nodes(spec: Mapping[str, Any], names: Sequence[str],
                    node_labels: Mapping[str, Mapping[str, str]]) -> list[str]:
    listed = spec.get("nodes")
    if listed:
        return [str(n) for n in listed]
    selector = spec.get("nodeSelector")
    if not isinstance(selector, Mapping) or not selector:
        return []
    return [n for n in names if label_selector_matches(selector, node_labels.get(n, {}))]


def _from_hypernodes(hypernodes: Sequence[Mapping[str, Any]], names: tuple[str, ...],
                     node_labels: Mapping[str, Mapping[str, str]],
                     defaults: DefaultCapacities) -> tuple[list[Link], list[str]]:
    by_name = {objects.name(h): h for h in hypernodes}
    warnings: list[str] = []
    resolved: dict[str, frozenset[str]] = {}

    def nodes_of(hn: str, trail: tuple[str, ...]) -> frozenset[str]:
        if hn in resolved:
            return resolved[hn]
        if hn in trail:
            warnings.append(f"HyperNode {hn}: member cycle {' -> '.join(trail + (hn,))}; ignored")
            return frozenset()
        out: set[str] = set()
        for member in (by_name[hn].get("spec") or {}).get("members") or []:
            selector = member.get("selector") or {}
            if member.get("type") == "HyperNode":
                for child in _select(selector, sorted(by_name), {}):
                    out |= nodes_of(child, trail + (hn,))
            else:
                out |= set(_select(selector, names, node_labels))
        resolved[hn] = frozenset(out)
        return resolved[hn]

    links: list[Link] = []
    for hn in sorted(by_name):
        tier = int((by_name[hn].get("spec") or {}).get("tier") or 0)
        members = nodes_of(hn, ())
        if tier < 1 or not members:
            continue
        links.extend(duplex(f"hypernode:{hn}", defaults.tier(tier), members, tier))
    return links, warnings


def _select(selector: Mapping[str, Any], candidates: Sequence[str],
            node_labels: Mapping[str, Mapping[str, str]]) -> list[str]:
    if "exactMatch" in selector:
        want = (selector.get("exactMatch") or {}).get("name")
        return [c for c in candidates if c == want]
    if "regexMatch" in selector:
        pattern = (selector.get("regexMatch") or {}).get("pattern") or ""
        try:
            rx = re.compile(pattern)
        except re.error:
            return []
        return [c for c in candidates if rx.match(c)]
    if "labelMatch" in selector:
        return [c for c in candidates if label_selector_matches(selector.get("labelMatch") or {}, node_labels.get(c, {}))]
    return []


def _from_labels(names: tuple[str, ...], node_labels: Mapping[str, Mapping[str, str]], defaults: DefaultCapacities,
                 rack_label: str, zone_label: str) -> list[Link]:
    links: list[Link] = []
    for tier, label, prefix in ((1, rack_label, "rack"), (2, zone_label, "zone")):
        if not label:
            continue
        groups: dict[str, list[str]] = {}
        for n in names:
            value = node_labels.get(n, {}).get(label)
            if value:
                groups.setdefault(value, []).append(n)
        if tier == 2 and len(groups) <= 1:
            continue  # a single zone adds a link no gang ever crosses
        for value in sorted(groups):
            links.extend(duplex(f"{prefix}:{value}", defaults.tier(tier), groups[value], tier))
    return links
