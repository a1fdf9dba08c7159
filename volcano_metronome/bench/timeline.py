"""Where a gang's start latency goes: a per-gang timeline of the ``pipeline`` benchmark, stage by stage.

Every mark is a time on the bench's own monotonic clock: the moment the bench sent the gang's create
(``submitted``), the moment that call returned (``created``, so it includes every admission webhook),
and otherwise the moment one of the bench's watches first *received* an object in a given state. The
objects' own timestamps (``creationTimestamp``, condition ``lastTransitionTime``, a claim's
``decidedAt``) are whole seconds in Kubernetes, too coarse for stages of tens of milliseconds, so
none is used; a watch receive time lags the API server's commit by the watch's delivery (the same
for both arms, but longer when the machine is loaded and the bench waits for a core).

:class:`Recorder` turns watch events into marks (thread-safe; fed by several informers);
:func:`stage_stats`, :func:`compare` and :func:`table` are pure functions over the recorded marks.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from volcano_metronome.bench.workload import JSON, percentile

# Every mark a gang can have, in the order the pipeline passes them (a stage is the time between two
# consecutive marks a gang has). ``claim`` / ``claim_decided`` / ``check_ready`` exist with metronome only.
MARKS = {
    "volcano": ("submitted", "created", "podgroup", "claim", "claim_decided", "inqueue",
                "pods_first", "pods_last", "ungated_last", "bound_last"),
    "kueue": ("submitted", "created", "workload", "quota_reserved", "claim", "claim_decided", "check_ready",
              "admitted", "unsuspended", "pods_first", "pods_last", "ungated_last", "bound_last"),
}
MEANING = {
    "submitted": "the bench sends the gang's create",
    "created": "the create call returned (every admission webhook included)",
    "podgroup": "the Volcano PodGroup seen (vc-controller-manager created it)",
    "workload": "the Kueue Workload seen (Kueue's job controller created it)",
    "quota_reserved": "the Workload seen with QuotaReserved=True",
    "claim": "our STBandwidthClaim of the gang seen (controller)",
    "claim_decided": "the claim seen with a decision in its status (nodes)",
    "check_ready": "the Workload seen with an AdmissionCheck Ready (ours: Kueue then admits)",
    "admitted": "the Workload seen with Admitted=True",
    "inqueue": "the PodGroup seen Inqueue (or later): Volcano's enqueue let it in",
    "unsuspended": "the Job seen with spec.suspend false (Kueue started it)",
    "pods_first": "the gang's first pod seen",
    "pods_last": "the gang's last pod seen (all created)",
    "ungated_last": "the last of the gang's pods seen without scheduling gates",
    "bound_last": "the last of the gang's pods seen bound (spec.nodeName)",
}
RESOLUTION = ("watch receive times in the bench process (time.monotonic), seconds; object timestamps "
              "are whole seconds in Kubernetes and are not used")
_ENQUEUED = frozenset({"Inqueue", "Running", "Completed", "Unknown"})


class Recorder:
    """The marks of every gang of one arm, from the bench's submissions and its watches' events."""

    def __init__(self, scheduler: str, size: int, gang_label: str, clock: Callable[[], float] = time.monotonic) -> None:
        if scheduler not in MARKS:
            raise ValueError(f"scheduler: got {scheduler!r}, expected one of {', '.join(MARKS)}")
        self.scheduler, self.size, self.gang_label, self.clock = scheduler, size, gang_label, clock
        self._gangs: dict[str, dict[str, float]] = {}
        self._objects: dict[tuple[str, str], dict[str, float]] = {}  # PodGroup / Workload by name, until resolved
        self._owner: dict[tuple[str, str], str] = {}  # (kind, name) -> the gang (its Job's name)
        self._claims: dict[str, tuple[str, str]] = {}  # claim name -> the (kind, name) of its gangRef
        self._pods: dict[str, dict[str, set[str]]] = {}  # gang -> created / ungated / bound -> pod names
        self.unattributed = 0  # events of objects tied to no gang (no owner, no label)
        self._lock = threading.Lock()

    def mark(self, gang: str, name: str, at: float | None = None) -> None:
        """Record ``name`` for ``gang`` at ``at`` (now by default), unless it was recorded before."""
        now = self.clock() if at is None else at
        with self._lock:
            self._gangs.setdefault(gang, {}).setdefault(name, now)

    def on_job(self, event: str, job: JSON) -> None:
        """A Volcano Job or batch Job event: Kueue's unsuspension."""
        if event == "DELETED" or self.scheduler != "kueue":
            return
        if (job.get("spec") or {}).get("suspend") is False:
            self.mark(_name(job), "unsuspended")

    def on_group(self, event: str, obj: JSON) -> None:
        """A PodGroup (Volcano) or Workload (Kueue) event."""
        if event == "DELETED":
            return
        now = self.clock()
        kind, name = str(obj.get("kind") or ("PodGroup" if self.scheduler == "volcano" else "Workload")), _name(obj)
        status = obj.get("status") or {}
        seen = ["podgroup" if kind == "PodGroup" else "workload"]
        if kind == "PodGroup" and status.get("phase") in _ENQUEUED:
            seen.append("inqueue")
        if kind == "Workload":
            seen += [mark for mark, condition in (("quota_reserved", "QuotaReserved"), ("admitted", "Admitted"))
                     if _condition(obj, condition)]
            if any(c.get("state") == "Ready" for c in status.get("admissionChecks") or []):
                seen.append("check_ready")
        owner = _job_owner(obj)
        with self._lock:
            if owner is not None:
                self._owner[(kind, name)] = owner
            else:
                self.unattributed += 1
            self._seen((kind, name), seen, now)

    def on_claim(self, event: str, claim: JSON) -> None:
        """An STBandwidthClaim event: created, then decided (its status names nodes)."""
        if event == "DELETED":
            return
        now = self.clock()
        ref = (claim.get("spec") or {}).get("gangRef") or {}
        key = (str(ref.get("kind") or ""), str(ref.get("name") or ""))
        seen = ["claim"] + (["claim_decided"] if (claim.get("status") or {}).get("nodes") else [])
        with self._lock:
            self._claims[_name(claim)] = key
            self._seen(("claim", _name(claim)), seen, now)

    def _seen(self, key: tuple[str, str], seen: list[str], now: float) -> None:
        """Record ``seen`` marks of an object not yet tied to its gang, each at its first sighting (under the lock)."""
        marks = self._objects.setdefault(key, {})
        for mark in seen:
            marks.setdefault(mark, now)

    def on_pod(self, event: str, pod: JSON) -> None:
        """A pod event: first/last of the gang created, the last ungated, the last bound."""
        if event == "DELETED":
            return
        now = self.clock()
        meta = pod.get("metadata") or {}
        gang = (meta.get("labels") or {}).get(self.gang_label)
        if gang is None:
            with self._lock:
                self.unattributed += 1
            return
        spec = pod.get("spec") or {}
        states = ["created"] + ([] if spec.get("schedulingGates") else ["ungated"]) + (
            ["bound"] if spec.get("nodeName") else [])
        with self._lock:
            pods = self._pods.setdefault(gang, {"created": set(), "ungated": set(), "bound": set()})
            marks = self._gangs.setdefault(gang, {})
            for state in states:
                pods[state].add(str(meta.get("name")))
            marks.setdefault("pods_first", now)
            for state, mark in (("created", "pods_last"), ("ungated", "ungated_last"), ("bound", "bound_last")):
                if len(pods[state]) >= self.size:
                    marks.setdefault(mark, now)

    def marks(self) -> dict[str, dict[str, float]]:
        """Every gang's marks, the PodGroup / Workload / claim marks attributed to their gang."""
        with self._lock:
            gangs = {gang: dict(marks) for gang, marks in self._gangs.items()}
            objects = {key: dict(marks) for key, marks in self._objects.items()}
            owner, claims = dict(self._owner), dict(self._claims)
        for (kind, name), marks in objects.items():
            if kind == "claim":
                ref_kind, ref_name = claims.get(name, ("", ""))
                gang = ref_name if ref_kind == "Job" else owner.get((ref_kind, ref_name))
            else:
                gang = owner.get((kind, name))
            if gang is None:
                continue  # counted in ``unattributed`` when its event came
            target = gangs.setdefault(gang, {})
            for mark, at in marks.items():
                target[mark] = min(at, target.get(mark, at))
        return gangs


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _job_owner(obj: Mapping[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("name"):
            return str(ref["name"])
    return None


# ------------------------------------------------------------------------------------------ pure
def _valid(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _time(gang: Mapping[str, Any], mark: str) -> float | None:
    value = gang.get(mark)
    return float(value) if value is not None and _valid(value) else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def stage_stats(marks: Mapping[str, Mapping[str, Any]], order: Sequence[str]) -> JSON:
    """p50/p99 of every stage (consecutive marks of ``order`` that some gang has) over the gangs.

    A gang lacking either mark of a stage counts as ``missing`` for it; a negative duration (the later
    mark seen first: two watches deliver independently) counts as ``out_of_order`` and is left out
    of the percentiles. Marks that are not finite numbers count as missing; unknown marks are ignored.
    """
    present = [m for m in order if any(_valid(gang.get(m)) for gang in marks.values())]
    stages = []
    for start, end in zip(present, present[1:]):
        durations, missing, out_of_order = [], 0, 0
        for gang in marks.values():
            a, b = _time(gang, start), _time(gang, end)
            if a is None or b is None:
                missing += 1
            elif b < a:
                out_of_order += 1
            else:
                durations.append(b - a)
        stages.append({"stage": f"{start}->{end}", "n": len(durations), "missing": missing,
                       "out_of_order": out_of_order, "p50_s": _rounded(percentile(durations, 50)),
                       "p99_s": _rounded(percentile(durations, 99))})
    ends = [(_time(g, present[0]), _time(g, present[-1])) for g in marks.values()] if present else []
    totals = [last - first for first, last in ends if first is not None and last is not None and last >= first]
    total = {"stage": f"{present[0]}->{present[-1]}" if present else "", "n": len(totals),
             "p50_s": _rounded(percentile(totals, 50)), "p99_s": _rounded(percentile(totals, 99))}
    return {"gangs": len(marks), "marks": present, "stages": stages, "total": total}


def compare(alone: Mapping[str, Mapping[str, Any]], metronome: Mapping[str, Mapping[str, Any]],
            order: Sequence[str]) -> list[JSON]:
    """Per stage over the marks both arms have: each arm's p50/p99, their ratio and the p50 difference."""
    def has(marks: Mapping[str, Mapping[str, Any]], mark: str) -> bool:
        return any(_valid(gang.get(mark)) for gang in marks.values())

    common = [m for m in order if has(alone, m) and has(metronome, m)]
    a, m = stage_stats(alone, common)["stages"], stage_stats(metronome, common)["stages"]
    rows = []
    for ours, theirs in zip(m, a):
        row: JSON = {"stage": ours["stage"]}
        for q in ("p50_s", "p99_s"):
            row[f"alone_{q}"], row[f"metronome_{q}"] = theirs[q], ours[q]
            row[f"{q[:3]}_ratio"] = (None if theirs[q] is None or ours[q] is None or theirs[q] == 0
                                     else round(ours[q] / theirs[q], 3))
        row["p50_delta_s"] = (None if theirs["p50_s"] is None or ours["p50_s"] is None
                              else round(ours["p50_s"] - theirs["p50_s"], 3))
        rows.append(row)
    return rows


def stages(scheduler: str, alone: Mapping[str, Mapping[str, Any]], metronome: Mapping[str, Mapping[str, Any]],
           unattributed: Mapping[str, int] | None = None) -> JSON:
    """The ``stages`` section of one round: both arms' stages and their comparison."""
    order = MARKS[scheduler]
    return {"resolution": RESOLUTION, "marks": {m: MEANING[m] for m in order},
            "alone": stage_stats(alone, order), "metronome": stage_stats(metronome, order),
            "compared": compare(alone, metronome, order), "unattributed_events": dict(unattributed or {})}


def table(section: Mapping[str, Any]) -> str:
    """The comparison as a few lines of text (seconds), then the metronome arm's own finer stages."""
    def cell(value: Any) -> str:
        return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)

    lines = [f"{'stage':<32} {'alone p50':>9} {'metr p50':>9} {'delta':>8} {'alone p99':>9} {'metr p99':>9} "
             f"{'p99 x':>6}"]
    for row in section.get("compared") or []:
        lines.append(f"{row['stage']:<32} {cell(row['alone_p50_s']):>9} {cell(row['metronome_p50_s']):>9} "
                     f"{cell(row['p50_delta_s']):>8} {cell(row['alone_p99_s']):>9} {cell(row['metronome_p99_s']):>9} "
                     f"{cell(row['p99_ratio']):>6}")
    lines.append("metronome arm, every mark:")
    lines += _arm_lines((section.get("metronome") or {}).get("stages") or [])
    for arm, hooks in sorted((section.get("admission_webhooks") or {}).items()):
        lines.append(f"admission webhooks, {arm} arm: " + (", ".join(
            f"{name} {h['calls']} calls, mean {h['mean_s'] * 1000:.1f} ms" for name, h in hooks.items()) or "none"))
    return "\n".join(lines)


def _arm_lines(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    return [f"  {row['stage']:<30} p50 {'-' if row['p50_s'] is None else row['p50_s']:>7} "
            f"p99 {'-' if row['p99_s'] is None else row['p99_s']:>7}  n {row['n']}"
            + (f"  missing {row['missing']}" if row["missing"] else "")
            + (f"  out of order {row['out_of_order']}" if row["out_of_order"] else "") for row in rows]
