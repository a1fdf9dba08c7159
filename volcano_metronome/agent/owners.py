"""Which gang a node's NIC measures, from the claims: pure, no I/O.

The byte counter is per interface: it tells one gang's profile only where that gang is the only one
placed on the node. A gang spans several nodes, and every agent on them could fit it; so that one
write per gang lands, the agent of the gang's first node (in the claim's order) that no other gang
shares is its *reporter*. A node several gangs share reports nothing (the sum of their traffic is no
gang's profile).

The runtime helper's reports (its own timing) are per process, not per NIC: the gang's *first* node
reports them, shared or not (:func:`runtime_reported`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class Owner:
    """What the node's agent should do: ``claim`` (namespace, name) to report, or why none."""

    claim: tuple[str, str] | None
    gangs_on_node: int
    why: str = ""  # when claim is None: "idle", "shared" or "another node reports it"


def _placed(claim: Mapping[str, Any]) -> list[str]:
    status = claim.get("status") or {}
    nodes = [str(n) for n in status.get("nodes") or []]
    members = list(status.get("members") or [])
    released = any(c.get("type") == "Placed" and c.get("status") != "True" for c in status.get("conditions") or [])
    if released or len(nodes) != len(members):
        return []
    return [n for n, m in zip(nodes, members) if isinstance(m, int) and m > 0]


def owner(node: str, claims: Sequence[Mapping[str, Any]]) -> Owner:
    """The claim this node's agent reports for (see the module docstring)."""
    users: dict[str, list[tuple[str, str]]] = defaultdict(list)
    spans: dict[tuple[str, str], list[str]] = {}
    for c in claims:
        meta = c.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        spans[key] = _placed(c)
        for n in spans[key]:
            users[n].append(key)
    here = users.get(node, [])
    if not here:
        return Owner(None, 0, "idle")
    if len(here) > 1:
        return Owner(None, len(here), "shared")
    (key,) = here
    reporter = next((n for n in spans[key] if len(users[n]) == 1), None)
    if reporter != node:
        return Owner(None, 1, "another node reports it")
    return Owner(key, 1)


def runtime_reported(node: str, claims: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The placed claims whose first node is ``node``: the gangs whose runtime reports this node's agent writes."""
    return [c for c in claims if _placed(c)[:1] == [node]]
