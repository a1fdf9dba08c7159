"""A placed gang's slot as its pods carry it, and which member node a rank takes. PURE.

Shared by the controller, which writes these onto gated pods, and the admission webhook, which
writes them onto pods created after their gang's claim was decided (``admission.placed``): both
must produce the same text, or the controller would patch a pod the webhook already placed.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from volcano_metronome import api

#: kube-scheduler's name (``spec.schedulerName`` empty or this: not Volcano's; Volcano's name is configurable).
DEFAULT_SCHEDULER = "default-scheduler"


def number_text(x: float) -> str:
    """A number as an annotation value: integral values without a decimal point."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def timing_annotations(period_ms: float, offset_ms: float, epoch_ms: int, locked: bool) -> dict[str, str | None]:
    """The pod annotations of a placed gang; None removes one (an unlocked gang's runtime runs free)."""
    return {api.PERIOD_MS: number_text(period_ms),
            api.OFFSET_MS: number_text(offset_ms) if locked else None,
            api.EPOCH: str(epoch_ms) if locked else None}


def slot_node(nodes: Sequence[str], members: Sequence[int], position: int) -> str | None:
    """The node of the ``position``-th member (0-based) when members fill the nodes in order; None past the last."""
    if position < 0:
        return None
    for node, count in zip(nodes, members):
        if position < count:
            return node
        position -= max(0, count)
    return None


def scheduled_by_volcano(pod: Mapping[str, Any]) -> bool:
    """Whether a scheduler other than kube-scheduler places the pod (Volcano's name is configurable)."""
    return (pod.get("spec") or {}).get("schedulerName") not in (None, "", DEFAULT_SCHEDULER)
