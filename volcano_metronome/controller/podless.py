"""Claims held for Volcano PodGroups decided before their pods, whose pods do not come. PURE (the clock is passed in).

The controller decides a PodGroup of a Volcano Job before Volcano creates its pods (``gangs.decidable_before_pods``),
and its claim holds the nodes in our accounting from then on. Volcano creates the pods only once it enqueues the
group; if it never does (the queue's capability, an overcommitted queue, a Job deleted without its group), the
nodes would be held forever. So a claim whose gang still has no pod ``podsTimeoutSeconds`` after the claim's
``decidedAt`` is released (``Placed=False``, reason :data:`~.views.PODS_TIMEOUT`), and the gang waits for its pods:
they are created gated (the claim holds no nodes) and it is decided again once they are all there.
"""

from __future__ import annotations

from volcano_metronome.controller import gangs
from volcano_metronome.controller.views import PODGROUP, GangView
from volcano_metronome.shapes.times import parse_time


def awaiting_pods(gang: GangView) -> bool:
    """A PodGroup none of whose pods exists, and whose pods have never run (Volcano has not enqueued it)."""
    return (gang.key.kind == PODGROUP and gang.obj is not None and not gang.pods and not gang.finished
            and gangs.before_pods(gang.obj))


def holding(gang: GangView) -> bool:
    """Its claim holds nodes for a PodGroup whose pods are still to come."""
    return gang.placed and awaiting_pods(gang)


def deadline(gang: GangView, timeout_s: float) -> float | None:
    """When the claim held for ``gang``'s pods is released (Unix seconds); None when it is not such a hold, the
    timeout is off (0), or the claim records no ``decidedAt`` to count from."""
    if timeout_s <= 0 or not holding(gang) or gang.claim is None:
        return None
    decided = parse_time(gang.claim.status.get("decidedAt"))
    return None if decided is None else decided + timeout_s


def message(timeout_s: float) -> str:
    """The claim condition's and the Event's message."""
    return (f"no pod of the gang was created within podsTimeoutSeconds ({timeout_s:g} s) of its decision "
            f"(Volcano has not enqueued its PodGroup): nodes released; decided again once its pods are created")
