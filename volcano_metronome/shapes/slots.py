"""A placed gang's slot as its pods carry it, and which member node a rank takes. PURE.

Shared by the controller, which writes these onto gated pods, and the admission webhook, which
writes them onto pods created after their gang's claim was decided (``admission.placed``): both
must produce the same text, or the controller would patch a pod the webhook already placed.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence

from volcano_metronome import api
from volcano_metronome.core.model import MAX_TRAFFIC_CLASSES

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


def traffic_class(status: Mapping[str, Any]) -> tuple[int, dict[str, str]] | None:
    """A claim status's ``trafficClass`` and the environment that selects it; None where it has none (or not
    as the controller writes it: an index and a mapping of strings)."""
    klass, env = status.get("trafficClass"), status.get("trafficClassEnv") or {}
    if isinstance(klass, bool) or not isinstance(klass, int) or not 0 <= klass < MAX_TRAFFIC_CLASSES or \
            not isinstance(env, Mapping):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        return None
    return klass, dict(env)


def class_annotations(klass: int | None, env: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The pod annotations that carry a placed gang's traffic class ``klass`` selected by ``env`` (none for None).

    Written once, before the gate is removed: NCCL reads its class when it makes a communicator, so a gang
    keeps its class to the end and the annotations are never withdrawn.
    """
    if klass is None:
        return {}
    return {api.TRAFFIC_CLASS: str(klass),
            api.TRAFFIC_CLASS_ENV: json.dumps(dict(env), sort_keys=True, separators=(",", ":"))}


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
