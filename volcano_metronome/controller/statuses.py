"""Status of the cluster-scoped objects a cycle keeps: our AdmissionChecks (Active), QueuePolicies and
STBandwidthCapacities. PURE."""

from __future__ import annotations

from typing import Mapping

from volcano_metronome import api
from volcano_metronome.controller import objects
from volcano_metronome.controller.deciding import Decided
from volcano_metronome.controller.queuepolicy import QueuePolicyView
from volcano_metronome.controller.views import World
from volcano_metronome.controller.writes import StatusPatch
from volcano_metronome.core.decision import Decision


def admission_checks_active(world: World, now_s: float) -> list[StatusPatch]:
    """Mark our AdmissionChecks Active (Kueue holds Workloads behind a check with no active controller)."""
    out = []
    for ac in world.admission_checks:
        if objects.name(ac) not in world.our_checks or objects.condition_true(ac, "Active"):
            continue
        conds = objects.set_condition((ac.get("status") or {}).get("conditions") or [], "Active", "True", "Active",
                                      f"{api.ADMISSION_CHECK_CONTROLLER} is running", now_s,
                                      int(objects.meta(ac).get("generation") or 0))
        out.append(StatusPatch("AdmissionCheck", objects.name(ac), {"conditions": conds}))
    return out


def capacity_statuses(world: World, now_s: float) -> list[StatusPatch]:
    """Each STBandwidthCapacity's status: generation seen, nodes it applies to, Ready (False: NoNodes, Conflict or
    Invalid, with the reason's message); only where it says something else already."""
    out = []
    for cap in world.capacities:
        ready = ("False", cap.reason, cap.message) if cap.reason else (
            "True", "InTopology", f"part of the network the controller schedules with (switch tiers from "
                                  f"{world.topology_source})")
        prior = cap.status
        conds = objects.set_condition(prior.get("conditions") or [], "Ready", *ready, now_s, cap.generation)
        if (prior.get("observedGeneration") == cap.generation and prior.get("matchedNodes") == cap.matched
                and objects.same_conditions(conds, prior.get("conditions") or [])):
            continue
        out.append(StatusPatch("STBandwidthCapacity", cap.name, {"observedGeneration": cap.generation,
                                                                 "matchedNodes": cap.matched, "conditions": conds}))
    return out


def policy_statuses(world: World, decided: Decided, now_s: float,
                    counts: Mapping[str, tuple[int, int]] | None = None) -> list[StatusPatch]:
    """Each QueuePolicy's status: generation seen, pending and placed gangs, Ready (``counts``: QueuePolicy ->
    its unfinished gangs and the placed ones among them, when the caller keeps them)."""
    out = []
    for view in world.policies:
        if counts is not None:
            governing, placed = counts.get(view.name, (0, 0))
        else:
            governed = [g for g in world.gangs if g.policy == view.name and not g.finished]
            governing = len(governed)
            placed = sum(1 for g in governed if g.placed or isinstance(decided.results.get(g.uid), Decision))
        pending = governing - placed
        out_status = policy_status(view, pending, placed, now_s)
        if out_status is not None:
            out.append(out_status)
    return out


def policy_status(view: QueuePolicyView, pending: int, placed: int, now_s: float) -> StatusPatch | None:
    """One QueuePolicy's status patch (None when it says so already)."""
    ready = ("False", "Invalid", view.error) if view.error else ("True", "Valid", "policy in effect")
    prior = view.status
    conds = objects.set_condition(prior.get("conditions") or [], "Ready", ready[0], ready[1], ready[2], now_s,
                                  view.generation)
    if (prior.get("observedGeneration") == view.generation and prior.get("pendingGangs") == pending
            and prior.get("placedGangs") == placed and objects.same_conditions(conds, prior.get("conditions") or [])):
        return None
    return StatusPatch("QueuePolicy", view.name, {"observedGeneration": view.generation, "pendingGangs": pending,
                                                  "placedGangs": placed, "conditions": conds})
