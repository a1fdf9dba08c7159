"""QueuePolicy objects as core :class:`Policy` values, and which policy governs a gang."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from volcano_metronome.catalog import Catalog, builtin
from volcano_metronome.controller import objects
from volcano_metronome.core import fields
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.grid import SlotGrid
from volcano_metronome.core.model import MAX_HOLD_S, MAX_TRAFFIC_CLASSES, Ordering, Policy
from volcano_metronome.core.profile import Profile
from volcano_metronome.shapes.profiles import parse_profile

DEFAULT_NAME = ""  # the built-in policy used when no QueuePolicy governs a gang
#: An environment variable's name, as a container's ``env`` takes it (the API server's C identifier rule).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Most variables one traffic class may set (the CRD's maxProperties).
MAX_CLASS_ENV = 8
MAX_CLASS_VALUE = 256  # characters of one value (the CRD's maxLength)

#: One traffic class: the environment variables that select it, sorted by name.
ClassEnv = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Reoptimization:
    """``spec.reoptimization``: periodic re-solving of running gangs' offsets."""

    enabled: bool = True  # the CRD's defaults
    interval_s: float = 60.0
    max_moves: int = 16


@dataclass(frozen=True)
class QueuePolicyView:
    """One QueuePolicy: its core policy, what it governs, and its controller-side knobs."""

    name: str
    policy: Policy
    volcano_queues: frozenset[str] = frozenset()
    kueue_cluster_queues: frozenset[str] = frozenset()
    default_profile: Profile | None = None
    reoptimization: Reoptimization = field(default_factory=Reoptimization)
    # ``spec.trafficClasses``: the fabric's classes in priority order, each as the environment that selects it;
    # as many as ``policy.traffic_classes``.
    traffic_classes: tuple[ClassEnv, ...] = ()
    generation: int = 0
    error: str = ""  # why the object could not be used as written (then it governs nothing)
    status: Mapping[str, Any] = field(default_factory=dict, compare=False)  # as observed

    @property
    def catch_all(self) -> bool:
        """A policy that names no queue governs every gang no other policy claims."""
        return not self.volcano_queues and not self.kueue_cluster_queues


def parse(obj: Mapping[str, Any], grid: SlotGrid, nic_gbps: float, catalog: Catalog | None = None) -> QueuePolicyView:
    """The view of one QueuePolicy object; a broken spec yields a view with ``error`` set."""
    name = objects.name(obj)
    generation = int(objects.meta(obj).get("generation") or 0)
    status = dict(obj.get("status") or {})
    try:
        view = _parse(obj, name, generation, grid, nic_gbps, catalog or builtin())
    except InvalidInput as exc:
        view = QueuePolicyView(name, Policy(grid=grid), generation=generation, error=str(exc))
    return dataclasses.replace(view, status=status)


def _parse(obj: Mapping[str, Any], name: str, generation: int, grid: SlotGrid, nic_gbps: float,
           catalog: Catalog) -> QueuePolicyView:
    spec = obj.get("spec") or {}
    where = f"QueuePolicy {name}: spec"
    defaults = Policy()
    ordering = fields.choice(spec.get("ordering", defaults.ordering.value), f"{where}.ordering",
                             (o.value for o in Ordering))
    policy = Policy(
        ordering=Ordering(ordering),
        aging_per_minute=_num(spec, "agingPerMinute", defaults.aging_per_minute, where, 0.0),
        priority_weight=_num(spec, "priorityWeight", defaults.priority_weight, where, 0.0),
        cushion_slots=_int(spec, "cushionSlots", defaults.cushion_slots, where, 0, 100),
        overflow_tolerance=_num(spec, "overflowTolerance", defaults.overflow_tolerance, where, 0.0, 1.0),
        max_candidates=_int(spec, "maxCandidates", defaults.max_candidates, where, 1, 256),
        lock_on_demand=fields.boolean(spec.get("lockOnDemand", defaults.lock_on_demand),
                                      f"{where}.lockOnDemand"),
        max_hold_s=float(_int(spec, "maxHoldSeconds", int(defaults.max_hold_s), where, 0, int(MAX_HOLD_S))),
        traffic_classes=len(classes := _classes(spec.get("trafficClasses"), f"{where}.trafficClasses")),
        grid=grid,
    )
    reopt_raw = spec.get("reoptimization") or {}
    if not isinstance(reopt_raw, Mapping):
        raise InvalidInput(f"{where}.reoptimization", reopt_raw, "a mapping {enabled, intervalSeconds, maxMovesPerCycle}")
    base = Reoptimization()
    reopt = Reoptimization(
        enabled=fields.boolean(reopt_raw.get("enabled", base.enabled), f"{where}.reoptimization.enabled"),
        interval_s=float(_int(reopt_raw, "intervalSeconds", int(base.interval_s), f"{where}.reoptimization", 10, 86400)),
        max_moves=_int(reopt_raw, "maxMovesPerCycle", base.max_moves, f"{where}.reoptimization", 0, 10000),
    )
    return QueuePolicyView(
        name=name,
        policy=policy,
        volcano_queues=_names(spec.get("volcanoQueues"), f"{where}.volcanoQueues"),
        kueue_cluster_queues=_names(spec.get("kueueClusterQueues"), f"{where}.kueueClusterQueues"),
        default_profile=default_profile(spec.get("defaultProfile"), f"{where}.defaultProfile", nic_gbps, catalog),
        reoptimization=reopt,
        traffic_classes=classes,
        generation=generation,
    )


def default_profile(data: Any, where: str, nic_gbps: float, catalog: Catalog) -> Profile | None:
    """``defaultProfile``: ``{model: NAME}`` (catalog, at the NIC rate) or ``{periodMs, windows, jitterMs}``."""
    if data is None or (isinstance(data, Mapping) and not data):
        return None
    return parse_profile(data, where, catalog, nic_gbps)


def select(policies: Sequence[QueuePolicyView], *, volcano_queue: str | None = None,
           cluster_queue: str | None = None, named: str | None = None) -> QueuePolicyView | None:
    """The policy governing a gang: the one named (claim ``spec.queuePolicy``), else the first by name
    listing the gang's queue, else the first catch-all; None means the built-in default."""
    usable = sorted((p for p in policies if not p.error), key=lambda p: p.name)
    if named:
        for p in usable:
            if p.name == named:
                return p
    for p in usable:
        if (volcano_queue and volcano_queue in p.volcano_queues) or (
                cluster_queue and cluster_queue in p.kueue_cluster_queues):
            return p
    for p in usable:
        if p.catch_all:
            return p
    return None


def _classes(value: Any, where: str) -> tuple[ClassEnv, ...]:
    """``trafficClasses``: ``[{env: {NAME: value}}, ...]``, first served first; none, or 2 to the most a fabric has."""
    if value is None or value == []:
        return ()
    if not isinstance(value, list) or not 2 <= len(value) <= MAX_TRAFFIC_CLASSES:
        raise InvalidInput(where, value, f"a list of 2 to {MAX_TRAFFIC_CLASSES} classes, each {{env: {{NAME: value}}}}")
    out = []
    for i, item in enumerate(value):
        env = fields.mapping(item, f"{where}[{i}]", {"env"}).get("env") or {}
        fields.mapping(env, f"{where}[{i}].env")
        if len(env) > MAX_CLASS_ENV:
            raise InvalidInput(f"{where}[{i}].env", env, f"at most {MAX_CLASS_ENV} variables")
        for name, text in env.items():
            if not (isinstance(name, str) and ENV_NAME.fullmatch(name)):
                raise InvalidInput(f"{where}[{i}].env", name, "environment variable names (letters, digits, _)")
            if len(fields.string(text, f"{where}[{i}].env.{name}", allow_empty=True)) > MAX_CLASS_VALUE:
                raise InvalidInput(f"{where}[{i}].env.{name}", text, f"at most {MAX_CLASS_VALUE} characters")
        out.append(tuple(sorted(env.items())))
    return tuple(out)


def _names(value: Any, where: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(where, value, "a list of names")
    return frozenset(value)


def _num(spec: Mapping[str, Any], key: str, default: float, where: str, minimum: float,
         maximum: float | None = None) -> float:
    """``spec[key]`` within the CRD's bounds, the field named as the user wrote it."""
    value = spec.get(key, default)
    if isinstance(value, str):
        try:  # Kubernetes CRDs often carry fractions as strings (no floats in some schemas)
            value = float(value)
        except ValueError:
            pass
    return fields.number(value, f"{where}.{key}", minimum=minimum, maximum=maximum)


def _int(spec: Mapping[str, Any], key: str, default: int, where: str, minimum: int, maximum: int) -> int:
    """``spec[key]`` within the CRD's bounds, the field named as the user wrote it."""
    return fields.integer(spec.get(key, default), f"{where}.{key}", minimum, maximum)
