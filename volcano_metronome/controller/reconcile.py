"""From the observed world and the core's decisions to a plan of writes. PURE (no I/O, no clock).

Level-triggered: every write is the difference between what the objects say and what they should
say, so planning twice over the same world plans the same writes, and planning over a world in
which the writes landed plans none. Per gang the writes are ordered so that a crash between any two
of them loses nothing and duplicates nothing:

1. the STBandwidthClaim (created if needed, then its status: the durable record of the decision);
2. each gated pod: required node affinity pinning it to the node of its rank's slot, or the pods of a
   Volcano task role to the role's node set (``controller.constraints``), the annotations
   ``metronome.dev/offset-ms``, ``period-ms``, ``epoch``, and removal of our gate only (other gates
   stay), in one conditional patch;
3. the Kueue Workload's AdmissionCheck state, then an Event.

A restarted controller finds the claim and finishes steps 2 and 3 from it, never deciding again.

Lock on demand (``core.decision``): a gang that shares no contended link (where the gangs' peak rates
add up to more than the capacity, so bursts could collide) is recorded with ``status.locked: false``
and its pods get ``period-ms`` but no ``offset-ms``/``epoch``, so its runtime runs free. When a
decision makes one of its links contended, the decision names it in ``Decision.locks``; its claim then
gets ``locked: true`` and a future epoch (the phase it already has stays: its offset is folded for the
new epoch), then its pods get ``offset-ms`` and that epoch, then an Event ``Locked``. A lock may re-lay
the gang at a period in step with the deciding gang's (its exact period or a few slots longer, equal to
the deciding gang's, dividing it or a multiple of it: ``Decision.periods``): the new ``periodMs`` goes
into the same claim write as the lock, then onto its pods. The deciding gang's claim writes wait for the
locks of the gangs its decision names (``GangWrites.requires``): the core leaves gangs free on contended
links on purpose where locking would not pay, so a lock cannot be inferred later, and a controller killed
between the writes must leave at worst a locked gang whose decider is decided again, never a decision
recorded without its locks. The periodic re-optimisation pass unlocks locked gangs left with no contended link
(``Snapshot.unlockable``): ``locked: false``, then ``offset-ms``/``epoch`` removed from their pods,
then an Event ``Unlocked``.

Time: the core's offsets are relative to the Unix epoch modulo the period. Epochs written on claims
and pods are points of the lattice ``k * maxHyperperiodMs``, and the offset written next to an epoch
is relative to it, ``(origin offset - epoch) mod period`` (``epochs.relative_offset``): unchanged for
a grid period (it divides the lattice step), folded for an exact period off the grid (say 195 ms), so
offsets from different decisions compose on shared links whatever their periods.
A re-optimised gang gets the first lattice point at least ``reconfigureLeadMs`` in the future: the
new offset takes effect there.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Mapping, Sequence

import numpy as np

from volcano_metronome import api
from volcano_metronome.controller import objects, podless, ranks, statuses, vanished
from volcano_metronome.controller.quiet import Quiet, share_of
from volcano_metronome.controller.epochs import epoch_at_or_after, epoch_at_or_before, relative_offset
from volcano_metronome.controller.constraints import assign
from volcano_metronome.shapes import JSON
from volcano_metronome.controller.views import (GANG_API_VERSIONS, HELD_SINCE, PODS_TIMEOUT, RELEASED, WORKLOAD,
                                                ClaimView, GangKey, GangView, PodView, World)
from volcano_metronome.controller.owners import owning_jobs
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core.decision import Decision, NoFit, free_reason
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.placement import member_room
from volcano_metronome.core.reoptimize import Move
from volcano_metronome.core.topology import Topology
from volcano_metronome.controller.queuepolicy import ClassEnv
from volcano_metronome.shapes.slots import class_annotations, timing_annotations
from volcano_metronome.controller.deciding import (HELD_FOR_CONTENTION, UNDECIDABLE, Decided, Reoptimised,
                                                   no_fit_category, policy_view)
from volcano_metronome.controller.writes import LOCKED, REDECIDING, TIMED_OUT, UNLOCKED, ClaimStatus, CreateClaim, DeleteClaim, DeletePod, Event, GangWrites, Plan, PodPatch, WorkloadCheck
from volcano_metronome.shapes.profiles import profile_to_spec
from volcano_metronome.shapes.times import format_time


PLACED, NOFIT, RECONFIGURED = "Placed", "NoFit", "Reconfigured"
# A held gang whose room a gang of lower priority took (``core.holding.passes``).
HOLD_OVERTAKEN = "HoldOvertaken"
DRIFTED, OUTSIDE_NODE_SET, AS_DECIDED = "Drifted", "BoundOutsideNodeSet", "AsDecided"
PER_POD, CACHE_RISK, SHARED_PER_ROLE = "PerPodConstraints", "VolcanoPredicateErrorCache", "SharedPerRole"


# ------------------------------------------------------------------------------------------- planning
def plan(world: World, decided: Decided, settings: Settings, now_s: float,
         reoptimised: Reoptimised = Reoptimised(), reported: Mapping[str, str] = {}, quiet: Quiet | None = None) -> Plan:
    """The writes that bring the cluster in line with the world and this cycle's decisions.

    ``reported`` maps gang keys to the last no-fit reason an Event announced (for gangs without a
    claim to remember it), so an unchanged reason is not announced every cycle. ``quiet``: see :class:`Quiet`.
    """
    now_ms = now_s * 1000.0
    moves = reoptimised.moves
    moved = {m.uid: m for m in moves}
    unlocks = set(reoptimised.unlocks)
    # The gangs a decision locks or moves: their writes go first (``GangWrites.requires``).
    named = {u for r in decided.results.values() if isinstance(r, Decision) for u in (*r.locks, *dict(r.relocations))}
    live = frozenset(world.topology.nodes)
    index = world.index if world.index or not world.gangs else {g.key: g for g in world.gangs}
    q = quiet if quiet is not None else Quiet()
    gangs: Sequence[GangView]
    if world.changed is not None and world.serial == q.serial + 1 and all(
            hit[1] is world.topology for hit in itertools.islice(q.gangs.values(), 1)):
        for key in world.changed:
            q.index(key, index.get(key))
        involved = {*decided.results, *moved, *unlocks, *decided.locks, *decided.relocations, *named,
                    *decided.locks.values()}
        visit = q.loud | world.changed | {k for u in involved for k in q.uids.get(u, ())}
        for key in visit:
            q.drop(key)
        gangs = [index[k] for k in sorted(visit) if k in index]  # GangKey's order: world.gangs'
    else:  # every gang visited; the quiet ones still skipped (their kept views are the ones checked)
        kept = q.gangs
        q.__init__()  # type: ignore[misc]
        q.gangs = kept
        for gang in world.gangs:
            q.index(gang.key, gang)
        gangs = world.gangs
    q.serial = world.serial
    deciders = set(decided.locks.values()) | set(decided.moved_by.values())
    keys = {index[k].uid: str(k) for u in named | deciders for k in q.uids.get(u, ()) if k in index}
    gang_writes: list[GangWrites] = []
    loud: set[GangKey] = set()
    drifted = pending = placed = 0
    wake: float | None = None  # the first moment a claim held for pods that have not come is released
    counts: dict[str, list[int]] = {}
    for gang in gangs:
        uid = gang.uid
        result = decided.results.get(uid)
        calm = quiet is not None and result is None and uid not in moved and uid not in unlocks and (
            uid not in decided.locks and uid not in decided.relocations)
        share = share_of(gang, isinstance(result, Decision))
        hit = q.gangs.pop(gang.key, None)
        if calm and hit is not None and hit[0] is gang and hit[1] is world.topology:
            q.keep(gang.key, hit, share)
            continue
        drift = gang.placed and not gang.finished and gang.claim is not None and bool(drift_message(gang.claim,
                                                                                                    gang.pods))
        cacheable = True
        due = podless.deadline(gang, settings.pods_timeout_s)
        if due is not None:  # visited every cycle until its pods come or it is released: the clock decides
            cacheable = False
        if gang.finished:
            w = _release(gang.claim, gang, now_s)
        elif gang.placed and gang.unreserved:  # evicted, preempted or requeued by Kueue: its nodes go back
            w = _release(gang.claim, gang, now_s, UNRESERVED, settings.events)
        elif (lost := vanished.loss(gang, live)) is not None:
            w = _redecide(gang, lost, settings, now_s)
        elif due is not None and due <= now_s:
            w = _time_out(gang, settings, now_s)
        elif isinstance(result, Decision):
            view = policy_view(world, gang.policy)
            w = _place(gang, result, settings, now_s, now_ms, locked=result.locked or gang.uid in decided.locks,
                       topology=world.topology, classes=view.traffic_classes if view is not None else ())
            w = dataclasses.replace(w, requires=tuple(sorted({keys[u] for u in (*result.locks, *dict(result.relocations))
                                                              if u in keys})))
            if settings.pods_timeout_s > 0 and podless.awaiting_pods(gang):  # a hold from now (decidedAt)
                due = now_s + settings.pods_timeout_s
        elif isinstance(result, NoFit):
            w = _no_fit(gang, result.reason, world, now_s, reported, settings.events, decided.held.get(gang.uid),
                        decided.overtaken.get(uid))
        elif gang.placed and gang.claim is not None:
            lock = gang.uid in decided.locks
            by = decided.locks.get(gang.uid)
            locker = keys.get(by, "a new gang") if by is not None else "a new gang"
            move, why = moved.get(gang.uid), "re-optimisation"
            if move is None and gang.uid in decided.relocations:
                offset_ms = decided.relocations[gang.uid]
                slots = round(offset_ms / settings.grid.slot_ms)
                why = (f"moved to lock with {locker}" if by is not None else
                       f"moved to make room for {keys.get(decided.moved_by.get(gang.uid, ''), 'a new gang')}")
                move = Move(gang.uid, slots, slots, offset_ms)
            period_ms = decided.periods.get(gang.uid)  # re-laid by its lock, in step with the decider
            if move is None and period_ms is not None:
                why = f"re-laid to lock with {locker}"
            w = _follow(gang, gang.claim, move, settings, now_s, now_ms, lock=lock,
                        unlock=gang.uid in unlocks and not lock, why=why, period_ms=period_ms, shares=locker)
        elif not gang.placed and gang.profile is None and not gang.waiting_for:
            w = _no_fit(gang, gang.profile_error, world, now_s, reported, settings.events)
            cacheable = False  # whether it never fits depends on the cluster's GPUs, not on its view alone
        else:
            w = GangWrites(str(gang.key))  # waiting for its pods or its object: nothing to write
        if calm and cacheable and not w:
            q.keep(gang.key, (gang, world.topology, drift), share)
            continue
        loud.add(gang.key)
        drifted += drift
        pending += share.pending
        placed += share.placed
        count = counts.setdefault(share.policy, [0, 0])
        count[0] += share.governed
        count[1] += share.governing_placed
        if due is not None and due > now_s:
            wake = due if wake is None else min(wake, due)
        if w:
            gang_writes.append(w)
    q.loud = loud
    if gangs is world.gangs:  # gangs no longer in the world are no longer quiet
        for key in [k for k in q.gangs if k not in index]:
            del q.gangs[key]
    released = {g.claim.key for g in world.gangs if g.finished and g.claim is not None} if world.orphans else set()
    for claim in world.orphans:
        if claim.key in released:
            continue  # released above with its gang
        w = _release(claim, None, now_s)
        if w:
            gang_writes.append(w)
    for name, c in q.counts.items():
        count = counts.setdefault(name, [0, 0])
        count[0] += c[0]
        count[1] += c[1]
    other = statuses.admission_checks_active(world, now_s) + statuses.policy_statuses(
        world, decided, now_s, {name: (c[0], c[1]) for name, c in counts.items()}) + statuses.capacity_statuses(
        world, now_s)
    return Plan(tuple(gang_writes), tuple(other), tuple(decided.results.values()), tuple(moves),
                pending + q.totals[0], placed + q.totals[1], drifted + q.totals[2], wake_at_s=wake)


def regarding(gang: GangView) -> JSON:
    """The Event's involvedObject for a gang: its object when seen, else its claim."""
    if gang.obj is not None:
        meta = objects.meta(gang.obj)
        return {"apiVersion": gang.obj.get("apiVersion") or GANG_API_VERSIONS[gang.key.kind], "kind": gang.key.kind,
                "name": gang.key.name, "namespace": gang.key.namespace, "uid": meta.get("uid", "")}
    return {"apiVersion": api.API_VERSION, "kind": "STBandwidthClaim", "name": gang.claim_name,
            "namespace": gang.key.namespace}


def _claim_body(gang: GangView) -> JSON:
    meta: JSON = {"name": gang.claim_name, "namespace": gang.key.namespace, "labels": {api.MANAGED_LABEL: "true"}}
    jobs = owning_jobs(gang.obj) if gang.key.kind == WORKLOAD and gang.obj is not None else []
    if jobs:  # the identity its pods name, and with it their runtime helpers' reports (agent/reports)
        meta["annotations"] = {api.GANG_KIND: jobs[0][0], api.GANG_NAME: jobs[0][1]}
    if gang.obj is not None and objects.meta(gang.obj).get("uid"):
        meta["ownerReferences"] = [{
            "apiVersion": gang.obj.get("apiVersion") or GANG_API_VERSIONS[gang.key.kind], "kind": gang.key.kind,
            "name": gang.key.name, "uid": objects.meta(gang.obj)["uid"], "blockOwnerDeletion": False,
            "controller": False}]
    spec: JSON = {"gangRef": {"apiVersion": GANG_API_VERSIONS[gang.key.kind], "kind": gang.key.kind,
                              "name": gang.key.name},
                  "priority": gang.priority}
    if gang.profile is not None:
        spec["profile"] = profile_to_spec(gang.profile)
    if gang.policy:
        spec["queuePolicy"] = gang.policy
    return {"apiVersion": api.API_VERSION, "kind": "STBandwidthClaim", "metadata": meta, "spec": spec}


def _ensure_claim(gang: GangView) -> tuple[CreateClaim, ...]:
    if gang.claim is not None or gang.profile is None:  # the CRD requires a profile
        return ()
    return (CreateClaim(gang.key.namespace, gang.claim_name, _claim_body(gang)),)


def _class_status(klass: int | None, env: ClassEnv, prior: Mapping[str, object]) -> JSON:
    """The claim status fields of a decision's traffic class (withdrawn where it has none but had one)."""
    if klass is not None:
        return {"trafficClass": klass, "trafficClassEnv": dict(env)}
    return {key: None for key in ("trafficClass", "trafficClassEnv") if key in prior}


def _class_note(klass: int | None, env: ClassEnv, count: int) -> str:
    if klass is None:
        return ""
    return f"; traffic class {klass} of {count}" + "".join(f", {k}={v}" for k, v in env)


def _place(gang: GangView, d: Decision, settings: Settings, now_s: float, now_ms: float,
           locked: bool, topology: Topology | None = None, classes: Sequence[ClassEnv] = ()) -> GangWrites:
    if topology is not None:  # the claim lists its nodes in ring order: those of a rack consecutive
        nodes, members = ranks.ring_nodes(topology, d.nodes, d.members)
        d = dataclasses.replace(d, nodes=nodes, members=members)
    epoch = epoch_at_or_before(now_ms, settings)
    offset = relative_offset(d.offset_ms, epoch, d.period_ms)  # the core's offset is the Unix epoch's
    prior = gang.claim.conditions if gang.claim is not None else ()
    klass = d.traffic_class if d.traffic_class is not None and d.traffic_class < len(classes) else None
    env = classes[klass] if klass is not None else ()
    message = (f"{gang.size} members on {len(d.nodes)} node(s) {', '.join(d.nodes)}; offset {offset:g} ms of "
               f"{d.period_ms:g} ms; " + ("feasible" if d.feasible else
                                          f"predicted overflow {d.overflow_gbps_ms:.3g} Gbps*ms per period")
               + ("" if locked else f"; {free_reason(d)}")
               + _class_note(klass, env, len(classes)))
    conds = objects.set_condition(prior, PLACED, "True", PLACED, message, now_s)
    conds = objects.set_condition(conds, NOFIT, "False", PLACED, "placed", now_s)
    if any(c.get("type") == vanished.VANISHED and c.get("status") == "True" for c in prior):
        conds = objects.set_condition(conds, vanished.VANISHED, "False", vanished.REDECIDED,
                                      "decided again on nodes the cluster has", now_s)
    status: JSON = {
        "nodes": list(d.nodes), "members": list(d.members), "offsetMs": offset, "periodMs": d.period_ms,
        "epoch": epoch, "links": list(d.links), "predictedOverflowGbpsMs": round(d.overflow_gbps_ms, 6),
        "feasible": d.feasible, "locked": locked, "decidedAt": format_time(now_s), "conditions": conds,
        **_class_status(klass, env, gang.claim.status if gang.claim is not None else {}),
    }
    if gang.claim is not None and HELD_SINCE in gang.claim.status:
        status[HELD_SINCE] = None  # merge patch: removed
    if gang.claim is not None:
        status["observedGeneration"] = gang.claim.generation
    rv = gang.claim.resource_version if gang.claim is not None else None
    claim = ClaimView(namespace=gang.key.namespace, name=gang.claim_name, resource_version=rv or "",
                      generation=gang.claim.generation if gang.claim else 1, gang_ref=gang.key, ours=True,
                      profile=gang.profile, priority=gang.priority, queue_policy=gang.policy or None, placed=True,
                      nodes=d.nodes, members=d.members, offset_ms=offset, period_ms=d.period_ms, epoch_ms=epoch,
                      conditions=tuple(conds), status=status, locked=locked, traffic_class=klass,
                      traffic_class_env=env)
    follow = _follow(gang, claim, None, settings, now_s, now_ms)
    for write in follow.claim:  # a drift already visible at placement goes into the same status write
        if isinstance(write, ClaimStatus):
            status["conditions"] = write.status.get("conditions", conds)
    after: tuple[WorkloadCheck | Event, ...] = follow.after
    if settings.events:
        after = after + (Event(regarding(gang), PLACED, message),)
    return GangWrites(str(gang.key), _ensure_claim(gang) + (ClaimStatus(gang.key.namespace, gang.claim_name, rv, status),),
                      follow.pods, after, placed=True, traffic_class=klass)


def _follow(gang: GangView, claim: ClaimView, move: Move | None, settings: Settings, now_s: float,
            now_ms: float, lock: bool = False, unlock: bool = False, why: str = "re-optimisation",
            period_ms: float | None = None, shares: str = "a new gang") -> GangWrites:
    """Writes that make a placed gang's pods and Workload agree with its claim (and apply a move, a lock,
    a new period or an unlock to the claim first).

    A move, a lock or a new period (``period_ms``: the period a lock re-lays it at, in step with
    ``shares``'s) takes effect at the first lattice epoch ``reconfigureLeadMs`` ahead; until
    then the runtime keeps its previous slot (or, unlocked, keeps running free). The offset written is
    relative to that epoch: ``move``'s origin offset, else the claim's own origin-relative phase.
    """
    status: JSON = {}
    after: list[WorkloadCheck | Event] = []
    offset, period, epoch, locked = claim.offset_ms, claim.period_ms, claim.epoch_ms, claim.locked
    future = epoch_at_or_after(now_ms + settings.reconfigure_lead_ms, settings)
    transition = ""
    relaid = period_ms is not None and period_ms > 0 and period_ms != claim.period_ms
    if move is not None or relaid:
        if relaid:
            period = status["periodMs"] = float(period_ms or period)
        epoch, locked = future, True
        # A move's offset is the core's (Unix-epoch relative); a gang re-laid in place keeps its phase.
        offset = relative_offset(move.offset_ms if move is not None else claim.origin_offset_ms(), epoch, period)
        change = f"period {claim.period_ms:g} -> {period:g} ms, in step with {shares}'s; " if relaid else ""
        note = (f"{change}offset {claim.offset_ms:g} -> {offset:g} ms of {period:g} ms from epoch {epoch} "
                f"({why})")
        conds = objects.set_condition(claim.conditions, RECONFIGURED, "True", RECONFIGURED, note, now_s)
        status.update({"offsetMs": offset, "epoch": epoch, "conditions": conds})
        if settings.events:
            after.append(Event(regarding(gang), RECONFIGURED, note))
    if (lock or move is not None or relaid) and not claim.locked:
        # The phase it was placed at stays (the gangs now contending for its links were fitted around it),
        # but not the offset: it is relative to the new epoch, which a period off the grid does not divide.
        if move is None and not relaid:
            epoch = future
            offset = relative_offset(claim.origin_offset_ms(), epoch, period)
            if offset != claim.offset_ms:
                status["offsetMs"] = offset
        locked, transition = True, LOCKED
        status.update({"locked": True, "epoch": epoch})
        if settings.events:
            change = f"; period {claim.period_ms:g} -> {period:g} ms, in step with {shares}'s" if (
                relaid) else ""
            after.append(Event(regarding(gang), LOCKED,
                               f"a gang on its links could now collide with it: bursts aligned at offset "
                               f"{offset:g} ms of {period:g} ms from epoch {epoch}{change}"))
    elif unlock and claim.locked and move is None:
        locked, transition = False, UNLOCKED
        status["locked"] = False
        if settings.events:
            after.append(Event(regarding(gang), UNLOCKED,
                               "no gang on its links could collide with it any more: offset and epoch withdrawn, "
                               "runs free"))
    drift = drift_message(claim, gang.pods)
    shown = next((c for c in claim.conditions if c.get("type") == DRIFTED), None)
    if drift and (shown is None or shown.get("status") != "True" or shown.get("message") != drift):
        status["conditions"] = objects.set_condition(status.get("conditions", claim.conditions), DRIFTED, "True",
                                                     OUTSIDE_NODE_SET, drift, now_s)
        if settings.events:
            after.append(Event(regarding(gang), DRIFTED, drift, type="Warning"))
    elif not drift and shown is not None and shown.get("status") == "True":
        status["conditions"] = objects.set_condition(status.get("conditions", claim.conditions), DRIFTED, "False",
                                                     AS_DECIDED, "every bound pod is on a node of its node set", now_s)
    assignment = assign(claim, gang.pods, gang.hostnames)
    status, cache_events = _role_constraints(gang, claim, assignment.blocked, status, settings, now_s)
    after.extend(cache_events)
    writes: tuple[ClaimStatus, ...] = ()
    if status:
        writes = (ClaimStatus(claim.namespace, claim.name, claim.resource_version, status),)
    ann = {**timing_annotations(period, offset, epoch, locked),
           **class_annotations(claim.traffic_class, claim.traffic_class_env)}
    pods = tuple(p for p in (_pod_patch(t.pod, t.nodes, ann, gang.hostnames) for t in assignment.targets)
                 if p is not None)
    if gang.check is not None and gang.obj is not None and gang.check.state != "Ready":
        after.insert(0, _check(gang, "Ready", _ready_message(claim), now_s, ann, claim))
    return GangWrites(str(gang.key), writes, pods, tuple(after), transition=transition)


def drift_message(claim: ClaimView, pods: Sequence[PodView]) -> str:
    """How the gang departs from its decision: pods bound outside its node set ("" when none is).

    Required node affinity keeps the pods we ungate on their nodes; a pod bound by other means (a
    scheduler that ignores affinity, a direct Binding, a pod created with ``nodeName``) is reported,
    not moved: the links it loads are not the ones the decision reserved.
    """
    outside = sorted(f"{p.name} on {p.node_name}" for p in pods if p.node_name and p.node_name not in claim.nodes)
    if not outside:
        return ""
    listed = ", ".join(outside[:5]) + (f" and {len(outside) - 5} more" if len(outside) > 5 else "")
    return f"{len(outside)} pod(s) bound outside the node set {', '.join(claim.nodes)}: {listed}"


def _role_constraints(gang: GangView, claim: ClaimView, blocked: str, status: JSON, settings: Settings,
                      now_s: float) -> tuple[JSON, list[Event]]:
    """The claim's PerPodConstraints condition (and a Warning Event) when pods of one Volcano task role need
    different node constraints (``constraints.assign``); cleared once they no longer do."""
    shown = next((c for c in claim.conditions if c.get("type") == PER_POD), None)
    events: list[Event] = []
    conds = status.get("conditions", claim.conditions)
    if blocked and (shown is None or shown.get("status") != "True" or shown.get("message") != blocked):
        status = {**status, "conditions": objects.set_condition(conds, PER_POD, "True", CACHE_RISK, blocked, now_s)}
        if settings.events and (shown is None or shown.get("status") != "True"):
            events.append(Event(regarding(gang), PER_POD, blocked, type="Warning"))
    elif not blocked and shown is not None and shown.get("status") == "True":
        status = {**status, "conditions": objects.set_condition(conds, PER_POD, "False", SHARED_PER_ROLE,
                                                                "the pods of each Volcano task role share their node "
                                                                "constraints", now_s)}
    return status, events


def _pod_patch(pod: PodView, nodes: tuple[str, ...], ann: Mapping[str, str | None],
               hostnames: Mapping[str, str] = {}) -> PodPatch | None:
    patch: JSON = {}
    changed = {k: v for k, v in ann.items() if pod.annotations.get(k) != v}
    if pod.gated and not nodes:
        return None  # no member slot: stays gated (more pods than the gang's size)
    if changed:
        patch["metadata"] = {"annotations": changed}
    spec: JSON = {}
    if pod.gated:
        if pod.allowed != nodes and pod.node_name is None:
            terms = objects.pinned_terms(pod.obj, nodes, hostnames)
            if terms is None:
                return None  # not expressible (constraints.assign pins such pods one by one): stays gated
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms}}}
        rest = [{"name": g} for g in pod.gates if g != api.SCHEDULING_GATE]
        spec["schedulingGates"] = rest or None
    if spec:
        patch["spec"] = spec
    if not patch:
        return None
    return PodPatch(pod.namespace, pod.name, pod.resource_version, patch, ungates=pod.gated)


def _ready_message(claim: ClaimView) -> str:
    return (f"placed by {api.ADMISSION_CHECK_CONTROLLER}: claim {claim.name}, {sum(claim.members)} members on "
            f"{len(claim.nodes)} node(s), offset {claim.offset_ms:g} ms of {claim.period_ms:g} ms")


def _check(gang: GangView, state: str, message: str, now_s: float, ann: Mapping[str, str | None] | None = None,
           claim: ClaimView | None = None) -> WorkloadCheck:
    assert gang.check is not None and gang.obj is not None
    entry: JSON = {"name": gang.check.name, "state": state, "message": message[:32768],
                   "lastTransitionTime": format_time(now_s)}
    if state == "Ready" and ann is not None:
        entry["podSetUpdates"] = [_pod_set_update(ps, ann, claim) for ps in gang.check.pod_sets]
    entries = [e for e in gang.check.entries if e.get("name") != gang.check.name] + [entry]
    return WorkloadCheck(gang.key.namespace, gang.key.name, objects.resource_version(gang.obj), tuple(entries), state)


def _pod_set_update(pod_set: Mapping[str, Any], ann: Mapping[str, str | None], claim: ClaimView | None) -> JSON:
    """Annotations Kueue will add to the pod set (only keys the template lacks or already agrees with:
    Kueue refuses updates that change existing keys): the timing and the claim's name, with which the
    webhook admits the pods placed (``admission.placed``); a node selector only for a one-node gang."""
    template = pod_set.get("template") or {}
    existing = (template.get("metadata") or {}).get("annotations") or {}
    update: JSON = {"name": pod_set.get("name", "main")}
    carried = {**ann, api.PLACEMENT_CLAIM: claim.name} if claim is not None else ann
    keep = {k: v for k, v in carried.items() if v is not None and existing.get(k, v) == v}
    if keep:
        update["annotations"] = keep
    selector = (template.get("spec") or {}).get("nodeSelector") or {}
    if claim is not None and len(claim.nodes) == 1 and "kubernetes.io/hostname" not in selector:
        update["nodeSelector"] = {"kubernetes.io/hostname": claim.nodes[0]}
    return update


def _no_fit(gang: GangView, reason: str, world: World, now_s: float, reported: Mapping[str, str],
            events: bool, held_since: float | None = None, overtaken: tuple[str, int] | None = None) -> GangWrites:
    """``held_since``: when the gang was first held back, while it counts (``Decided.held``), kept in the claim;
    ``overtaken``: the gang of lower priority that took room the held gang waits for this cycle, and its priority
    (``Decided.overtaken``), announced by a Warning Event."""
    category = no_fit_category(reason)
    prior = gang.claim.conditions if gang.claim is not None else ()
    conds = objects.set_condition(prior, NOFIT, "True", category, reason, now_s)
    conds = objects.set_condition(conds, PLACED, "False", "Pending", "waiting for a placement", now_s)
    claim_writes: list[CreateClaim | ClaimStatus | DeleteClaim] = list(_ensure_claim(gang))
    status: JSON = {"conditions": conds}
    held = format_time(held_since) if held_since is not None else None
    if held != (gang.claim.status.get(HELD_SINCE) if gang.claim is not None else None):
        status[HELD_SINCE] = held
    if (claim_writes or gang.claim is not None) and (
            gang.claim is None or HELD_SINCE in status or not objects.same_conditions(conds, prior)):
        rv = gang.claim.resource_version if gang.claim is not None else None
        claim_writes.append(ClaimStatus(gang.key.namespace, gang.claim_name, rv, status))
    after: list[WorkloadCheck | Event] = []
    old = next((c for c in prior if c.get("type") == NOFIT), None)
    announced = (old is not None and old.get("message") == reason and old.get("status") == "True") or (
        reported.get(str(gang.key)) == reason)
    if events and not announced:
        after.append(Event(regarding(gang), NOFIT, reason, "Warning"))
    if events and overtaken is not None:
        by, priority = overtaken
        after.append(Event(regarding(gang), HOLD_OVERTAKEN, (
            f"held back for contention at priority {gang.priority}, and {by} of priority {priority} was placed on "
            f"GPUs its best node set needs; once its hold runs out it waits for room like any gang that does not "
            f"fit (maxHoldSeconds: 0 on its QueuePolicy never holds)"), "Warning"))
    if gang.check is not None and gang.obj is not None:
        state, message = ("Rejected" if category == UNDECIDABLE or _never_fits(gang, world) else "Retry"), reason
        if category == HELD_FOR_CONTENTION:
            # It fits, and waits a bounded time (core.holding): Retry would give its quota back and requeue it
            # behind Kueue's backoff, for longer than the hold.
            state = "Pending"
        elif state == "Retry" and (leaving := _fits_once_evicted_pods_leave(gang, world)):
            # Kueue reserves quota for a preemptor as soon as it evicts, before the evicted job's pods are gone:
            # Retry would give that reservation back and requeue the preemptor behind its own preemption.
            state, message = "Pending", (f"{reason}; waiting for the {leaving} GPUs that pods of Workloads Kueue "
                                         f"evicted still hold (Kueue is stopping their jobs)")
        if gang.check.state != state or gang.check.message != message:
            after.insert(0, _check(gang, state, message, now_s))
    return GangWrites(str(gang.key), tuple(claim_writes), (), tuple(after))


def _fits_once_evicted_pods_leave(gang: GangView, world: World) -> int:
    """The GPUs bound pods of evicted Workloads hold, where the gang has room for all its members once they are
    free; else 0."""
    if gang.profile is None:
        return 0
    index = world.topology.node_index
    leaving = np.zeros(len(world.free_gpus), np.int64)
    for other in world.gangs:
        if other.unreserved and other is not gang:
            for p in other.pods:
                if p.node_name in index and not objects.pod_terminal(p.obj):
                    leaving[index[p.node_name]] += p.gpus
    total = int(leaving.sum())
    if not total:
        return 0
    room = member_room(np.array(world.free_gpus, dtype=np.int64) + leaving, gang.core_gang())
    return total if int(room.sum()) >= gang.size else 0


def _never_fits(gang: GangView, world: World) -> bool:
    if gang.profile is None:
        return True
    try:
        room = member_room(np.array(world.allocatable, dtype=np.int64), gang.core_gang())
    except InvalidInput:
        return True
    return int(room.sum()) < gang.size


def _redecide(gang: GangView, lost: vanished.Loss, settings: Settings, now_s: float) -> GangWrites:
    """Release a claim holding a vanished node, then (next cycle) delete the gang's stranded pods
    (``controller.vanished``); the gang is decided again once its members are back. Announced once: with
    the claim's condition."""
    claim = gang.claim
    workload = gang.check is not None and gang.obj is not None
    message = lost.message(workload)
    status: JSON = {}
    prior = claim.conditions if claim is not None else ()
    conds = objects.set_condition(prior, vanished.VANISHED, "True", lost.reason, message, now_s)
    if lost.release:
        conds = objects.set_condition(conds, PLACED, "False", vanished.VANISHED, message, now_s)
        status = {"nodes": [], "members": [], "links": [], "conditions": conds}
    elif claim is not None and not objects.same_conditions(conds, prior):
        status = {"conditions": conds}
    writes = (ClaimStatus(claim.namespace, claim.name, claim.resource_version, status),) if (
        claim is not None and status) else ()
    after: list[WorkloadCheck | Event] = []
    if settings.events and writes:  # the claim's condition changes with it: announced once
        after.append(Event(regarding(gang), vanished.VANISHED, message, "Warning"))
        if gang.obj is not None and claim is not None:
            after.append(Event({"apiVersion": api.API_VERSION, "kind": "STBandwidthClaim", "name": claim.name,
                                "namespace": claim.namespace}, vanished.VANISHED, message, "Warning"))
    if workload and lost.release:
        after.insert(0, _check(gang, "Retry", message, now_s))
    # The deletes come the cycle after the release (planned from the released claim), so that the Events,
    # which follow the claim's writes, never depend on the deletes landing.
    deletes = () if workload or lost.release else tuple(
        DeletePod(p.namespace, p.name, str(objects.meta(p.obj).get("uid") or ""), p.resource_version)
        for p in lost.doomed)
    return GangWrites(str(gang.key), writes, deletes, tuple(after), transition=REDECIDING if lost.release else "",
                      vanished=lost.nodes)


def _time_out(gang: GangView, settings: Settings, now_s: float) -> GangWrites:
    """Release a claim held for a PodGroup whose pods did not come within ``podsTimeoutSeconds`` (``controller.podless``);
    the gang waits for its pods (``gangs._waiting``) and is decided again once they are there."""
    claim = gang.claim
    assert claim is not None
    message = podless.message(settings.pods_timeout_s)
    conds = objects.set_condition(claim.conditions, PLACED, "False", PODS_TIMEOUT, message, now_s)
    status = {"nodes": [], "members": [], "links": [], "conditions": conds}
    after = (Event(regarding(gang), PODS_TIMEOUT, message, "Warning"),) if settings.events else ()
    return GangWrites(str(gang.key), (ClaimStatus(claim.namespace, claim.name, claim.resource_version, status),),
                      (), after, transition=TIMED_OUT)


UNRESERVED = ("Kueue no longer reserves quota for its Workload (evicted, preempted or requeued): "
              "decided again when Kueue reserves quota")


def _release(claim: ClaimView | None, gang: GangView | None, now_s: float, why: str = "",
             events: bool = False) -> GangWrites:
    if claim is None or not claim.placed:
        return GangWrites(str(gang.key) if gang else "")
    label = str(gang.key) if gang is not None else f"{claim.namespace}/{claim.name}"
    if gang is None and claim.ours:
        return GangWrites(label, (DeleteClaim(claim.namespace, claim.name, claim.resource_version),))
    why = why or ("the gang finished" if gang is not None else "the gang no longer exists")
    message = f"links released: {why}"
    conds = objects.set_condition(claim.conditions, PLACED, "False", RELEASED, message, now_s)
    status = {"nodes": [], "members": [], "links": [], "conditions": conds}
    after = (Event(regarding(gang), RELEASED, message),) if events and gang is not None else ()
    return GangWrites(label, (ClaimStatus(claim.namespace, claim.name, claim.resource_version, status),), (), after)
