"""Queue ordering: which pending gang is considered first (deterministic for equal inputs)."""

from __future__ import annotations

from typing import Callable, Sequence

from volcano_metronome.core.model import Gang, Ordering, Policy

#: What ``order`` sorts by: smaller first.
Key = tuple[float, float, str]


def effective_priority(gang: Gang, policy: Policy, now_s: float) -> float:
    """Priority plus aging: a waiting gang gains ``aging_per_minute`` points per minute."""
    if policy.ordering is not Ordering.PRIORITY_WITH_AGING:
        return float(gang.priority)
    return gang.priority + policy.aging_per_minute * max(0.0, now_s - gang.created_s) / 60.0


def sort_key(policy: Policy, now_s: float = 0.0) -> Callable[[Gang], Key]:
    """The key ``order`` sorts by at ``now_s``; FIFO and then uid break every tie."""
    if policy.ordering is Ordering.FIFO:
        return lambda g: (0.0, g.created_s, g.uid)
    if policy.ordering is Ordering.STRICT_PRIORITY:  # effective_priority without aging, inlined: queues are long
        return lambda g: (-float(g.priority), g.created_s, g.uid)
    return lambda g: (-effective_priority(g, policy, now_s), g.created_s, g.uid)


def order(pending: Sequence[Gang], policy: Policy, now_s: float = 0.0) -> list[Gang]:
    """``pending`` in the order the policy considers them."""
    return sorted(pending, key=sort_key(policy, now_s))
