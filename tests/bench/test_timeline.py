"""The pipeline benchmark's per-gang timeline: marks from watch events, stages and their comparison."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from volcano_metronome.bench import timeline
from volcano_metronome.bench.timeline import Recorder, compare, stage_stats

KUEUE_LABEL = "batch.kubernetes.io/job-name"
VOLCANO_LABEL = "volcano.sh/job-name"


def clock(start: float = 10.0, step: float = 1.0):
    """A fake monotonic clock advancing ``step`` per reading."""
    counter = itertools.count()
    return lambda: start + step * next(counter)


def owned(kind: str, name: str, job: str, status: dict | None = None) -> dict:
    return {"kind": kind, "metadata": {"name": name, "ownerReferences": [{"kind": "Job", "name": job}]},
            "status": status or {}}


def pod(name: str, gang: str, label: str = KUEUE_LABEL, gated: bool = False, node: str | None = None) -> dict:
    spec: dict = {"schedulingGates": [{"name": "metronome.dev/placement"}]} if gated else {}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": {label: gang}}, "spec": spec}


def condition(kind: str) -> dict:
    return {"type": kind, "status": "True"}


def test_a_kueue_gang_with_metronome_gets_every_mark_in_order():
    rec = Recorder("kueue", size=2, gang_label=KUEUE_LABEL, clock=clock())
    rec.mark("g", "submitted", 0.0)
    rec.mark("g", "created", 0.5)
    rec.on_group("ADDED", owned("Workload", "job-g-abc", "g"))                                     # 10
    rec.on_group("MODIFIED", owned("Workload", "job-g-abc", "g", {"conditions": [condition("QuotaReserved")]}))  # 11
    rec.on_claim("ADDED", {"metadata": {"name": "workload-job-g-abc"},
                           "spec": {"gangRef": {"kind": "Workload", "name": "job-g-abc"}}})        # 12
    rec.on_claim("MODIFIED", {"metadata": {"name": "workload-job-g-abc"},
                              "spec": {"gangRef": {"kind": "Workload", "name": "job-g-abc"}},
                              "status": {"nodes": ["n1"]}})                                          # 13
    rec.on_group("MODIFIED", owned("Workload", "job-g-abc", "g", {
        "conditions": [condition("QuotaReserved")], "admissionChecks": [{"name": "c", "state": "Ready"}]}))  # 14
    rec.on_group("MODIFIED", owned("Workload", "job-g-abc", "g", {
        "conditions": [condition("QuotaReserved"), condition("Admitted")],
        "admissionChecks": [{"name": "c", "state": "Ready"}]}))                                     # 15
    rec.on_job("MODIFIED", {"metadata": {"name": "g"}, "spec": {"suspend": True}})                  # not yet
    rec.on_job("MODIFIED", {"metadata": {"name": "g"}, "spec": {"suspend": False}})                 # 16
    rec.on_pod("ADDED", pod("g-0", "g"))                                                             # 17
    rec.on_pod("ADDED", pod("g-1", "g", gated=True))                                                 # 18
    rec.on_pod("MODIFIED", pod("g-0", "g", node="n1"))                                               # 19
    rec.on_pod("MODIFIED", pod("g-1", "g"))                                                          # 20
    rec.on_pod("MODIFIED", pod("g-1", "g", node="n1"))                                               # 21
    marks = rec.marks()["g"]
    assert marks == {"submitted": 0.0, "created": 0.5, "workload": 10, "quota_reserved": 11, "claim": 12,
                     "claim_decided": 13, "check_ready": 14, "admitted": 15, "unsuspended": 16, "pods_first": 17,
                     "pods_last": 18, "ungated_last": 20, "bound_last": 21}
    assert list(marks) != timeline.MARKS["kueue"]  # dict order is not relied upon
    assert rec.unattributed == 0


def test_a_volcano_gang_resolves_its_podgroup_and_a_claim_seen_before_it():
    rec = Recorder("volcano", size=1, gang_label=VOLCANO_LABEL, clock=clock())
    rec.on_claim("ADDED", {"metadata": {"name": "podgroup-j-uid"}, "spec": {"gangRef": {"kind": "PodGroup", "name": "j-uid"}},
                           "status": {"nodes": ["n"]}})                                              # 10
    rec.on_group("ADDED", owned("PodGroup", "j-uid", "j", {"phase": "Pending"}))                     # 11
    rec.on_group("MODIFIED", owned("PodGroup", "j-uid", "j", {"phase": "Inqueue"}))                  # 12
    rec.on_pod("ADDED", pod("j-worker-0", "j", label=VOLCANO_LABEL, node="n"))                       # 13
    marks = rec.marks()["j"]
    assert marks == {"claim": 10, "claim_decided": 10, "podgroup": 11, "inqueue": 12, "pods_first": 13,
                     "pods_last": 13, "ungated_last": 13, "bound_last": 13}
    # The watch saw the claim before the PodGroup: the stage is reported out of order, not negative.
    stats = stage_stats(rec.marks(), timeline.MARKS["volcano"])
    by_stage = {s["stage"]: s for s in stats["stages"]}
    assert by_stage["podgroup->claim"]["out_of_order"] == 1 and by_stage["podgroup->claim"]["p50_s"] is None


def test_events_tied_to_no_gang_are_counted_and_deletions_ignored():
    rec = Recorder("kueue", size=1, gang_label=KUEUE_LABEL, clock=clock())
    rec.on_pod("ADDED", {"metadata": {"name": "stray"}, "spec": {}})
    rec.on_group("ADDED", {"kind": "Workload", "metadata": {"name": "orphan"}})
    rec.on_pod("DELETED", pod("g-0", "g", node="n"))
    rec.on_claim("ADDED", {"metadata": {"name": "c"}, "spec": {}})  # no gangRef: never attributed
    assert rec.unattributed == 2 and rec.marks() == {}


def test_a_gang_short_of_pods_has_no_last_marks():
    rec = Recorder("kueue", size=3, gang_label=KUEUE_LABEL, clock=clock())
    for i in range(2):
        rec.on_pod("ADDED", pod(f"g-{i}", "g", node="n"))
    rec.on_pod("MODIFIED", pod("g-1", "g", node="n"))  # the same pod again is not a third
    assert set(rec.marks()["g"]) == {"pods_first"}


def test_an_unknown_scheduler_is_refused():
    with pytest.raises(ValueError, match="scheduler: got 'slurm'"):
        Recorder("slurm", 1, KUEUE_LABEL)


def test_stage_stats_percentiles_and_the_marks_no_gang_has_are_skipped():
    marks = {f"g{i}": {"submitted": 0.0, "created": 0.1 * i, "bound_last": 1.0 + i} for i in range(5)}
    stats = stage_stats(marks, ("submitted", "created", "claim", "bound_last"))
    assert stats["marks"] == ["submitted", "created", "bound_last"]
    first, second = stats["stages"]
    assert first["stage"] == "submitted->created" and first["n"] == 5
    assert first["p50_s"] == 0.2 and first["p99_s"] == pytest.approx(0.396)
    assert second["stage"] == "created->bound_last" and second["p50_s"] == pytest.approx(3.0 - 0.2)
    assert stats["total"] == {"stage": "submitted->bound_last", "n": 5, "p50_s": 3.0, "p99_s": pytest.approx(4.96)}


def test_missing_non_numeric_and_out_of_order_marks_are_reported_never_raised():
    marks = {
        "ok": {"a": 0.0, "b": 1.0, "c": 3.0},
        "no-b": {"a": 0.0, "c": 2.0},
        "nan": {"a": math.nan, "b": 1.0, "c": 2.0},
        "text": {"a": "soon", "b": 1.0, "c": 2.0},
        "bool": {"a": True, "b": 1.0, "c": 2.0},
        "reversed": {"a": 5.0, "b": 1.0, "c": 0.5},
        "empty": {},
    }
    stats = stage_stats(marks, ("a", "b", "c"))
    ab, bc = stats["stages"]
    assert (ab["n"], ab["missing"], ab["out_of_order"]) == (1, 5, 1)
    assert (bc["n"], bc["missing"], bc["out_of_order"]) == (4, 2, 1)
    assert ab["p50_s"] == 1.0
    assert stats["total"]["n"] == 2  # "ok" and "no-b"; "reversed" ends before it starts
    json.dumps(stats)  # and it is JSON as it stands
    assert stage_stats({}, ("a", "b")) == {"gangs": 0, "marks": [], "stages": [],
                                           "total": {"stage": "", "n": 0, "p50_s": None, "p99_s": None}}


def test_compare_uses_the_marks_both_arms_have_and_divides_per_stage():
    alone = {f"g{i}": {"submitted": 0.0, "admitted": 1.0, "bound_last": 2.0} for i in range(3)}
    ours = {f"g{i}": {"submitted": 0.0, "claim": 0.5, "admitted": 3.0, "bound_last": 4.0} for i in range(3)}
    rows = compare(alone, ours, ("submitted", "claim", "admitted", "bound_last"))
    assert [r["stage"] for r in rows] == ["submitted->admitted", "admitted->bound_last"]
    assert rows[0]["p50_ratio"] == 3.0 and rows[0]["p50_delta_s"] == 2.0 and rows[0]["p99_ratio"] == 3.0
    assert rows[1]["p50_ratio"] == 1.0 and rows[1]["p50_delta_s"] == 0.0
    zero = compare({"g": {"a": 0.0, "b": 0.0}}, {"g": {"a": 0.0, "b": 0.5}}, ("a", "b"))
    assert zero[0]["p50_ratio"] is None and zero[0]["p50_delta_s"] == 0.5  # no ratio to a zero, the difference stays


def test_the_stages_section_and_its_table():
    alone = {"g": {"submitted": 0.0, "created": 0.1, "bound_last": 2.0}}
    ours = {"g": {"submitted": 0.0, "created": 0.3, "claim": 0.4, "bound_last": 2.5}}
    section = timeline.stages("volcano", alone, ours, {"alone": 0, "metronome": 1})
    assert section["alone"]["marks"] == ["submitted", "created", "bound_last"]
    assert section["metronome"]["marks"] == ["submitted", "created", "claim", "bound_last"]
    assert [r["stage"] for r in section["compared"]] == ["submitted->created", "created->bound_last"]
    assert section["unattributed_events"] == {"alone": 0, "metronome": 1}
    assert set(section["marks"]) == set(timeline.MARKS["volcano"])
    text = timeline.table(section)
    assert "submitted->created" in text and "0.200" in text and "created->claim" in text
    section["admission_webhooks"] = {"alone": {}, "metronome": {"pods.metronome.dev": {"calls": 4, "mean_s": 0.0125}}}
    text = timeline.table(section)
    assert "alone arm: none" in text and "pods.metronome.dev 4 calls, mean 12.5 ms" in text
