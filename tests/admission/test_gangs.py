"""Gang sizes and constraints: Volcano's own minAvailable rules, PodGroup, Workload, batch Job, tier limit."""

from __future__ import annotations

import jsonpatch
import pytest

from volcano_metronome.admission.gangs import (
    VolcanoJobGang,
    batch_job_size,
    pod_group_size,
    tier_limit_ops,
    volcano_job_gang,
    workload_size,
)
from volcano_metronome.admission.settings import TierLimit
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile, Window


def tasks(*specs):
    return [dict(name=f"t{i}", **spec) for i, spec in enumerate(specs)]


# The table of Volcano's design doc "min available members and min resource" (docs/design/
# min-avaiable-member-resource.md): master 2 replicas, work 2 replicas.
@pytest.mark.parametrize("job_min, master_min, work_min, expected_min, default", [
    (None, None, 1, 3, 3),   # sum(task min) with master defaulting to its replicas
    (0, 1, 1, 2, 2),
    (None, None, None, 4, 4),
    (2, None, 1, 2, None),   # an explicit job minAvailable is kept
    (4, 2, 2, 4, None),
])
def test_volcano_min_available_defaults_as_volcano_does(job_min, master_min, work_min, expected_min, default):
    master = {"replicas": 2} if master_min is None else {"replicas": 2, "minAvailable": master_min}
    work = {"replicas": 2} if work_min is None else {"replicas": 2, "minAvailable": work_min}
    spec = {"tasks": tasks(master, work)}
    if job_min is not None:
        spec["minAvailable"] = job_min
    assert volcano_job_gang(spec) == VolcanoJobGang(size=4, min_available=expected_min, default_min_available=default)


@pytest.mark.parametrize("spec, field", [
    ({"tasks": []}, "spec.tasks"),
    ({}, "spec.tasks"),
    ({"tasks": "x"}, "spec.tasks"),
    ({"tasks": ["x"]}, "spec.tasks[0]"),
    ({"minAvailable": 7, "tasks": tasks({"replicas": 3}, {"replicas": 3})}, "spec.minAvailable"),
    ({"minAvailable": -1, "tasks": tasks({"replicas": 3})}, "spec.minAvailable"),
    ({"tasks": tasks({"replicas": 3, "minAvailable": 4})}, "spec.tasks[0].minAvailable"),
    ({"tasks": tasks({"replicas": 3, "minAvailable": -1})}, "spec.tasks[0].minAvailable"),
    ({"tasks": tasks({"replicas": -1})}, "spec.tasks[0].replicas"),
    ({"tasks": tasks({"replicas": "3"})}, "spec.tasks[0].replicas"),
    ({"tasks": tasks({"replicas": 3.0})}, "spec.tasks[0].replicas"),
    ({"tasks": tasks({"replicas": True})}, "spec.tasks[0].replicas"),
    ({"tasks": tasks({"replicas": 0})}, "spec.tasks[*].replicas"),
    ({"tasks": tasks({"replicas": 2**31})}, "spec.tasks[0].replicas"),
])
def test_volcano_job_errors_name_the_field(spec, field):
    with pytest.raises(InvalidInput) as caught:
        volcano_job_gang(spec)
    assert caught.value.field == field


def test_pod_group_size_is_min_member():
    assert pod_group_size({"minMember": 4}) == 4
    for bad in ({}, {"minMember": 0}, {"minMember": "4"}):
        with pytest.raises(InvalidInput) as caught:
            pod_group_size(bad)
        assert caught.value.field == "spec.minMember"


def test_workload_size_sums_counts_and_warns_about_partial_admission():
    assert workload_size({"podSets": [{"count": 2}, {"count": 3}]}) == (5, [])
    assert workload_size({"podSets": [{"name": "main"}]}) == (1, [])  # count defaults to 1 as in the CRD
    size, warnings = workload_size({"podSets": [{"count": 8, "minCount": 4}]})
    assert size == 8 and "as few as 4 of 8" in warnings[0]


@pytest.mark.parametrize("spec, field", [
    ({"podSets": []}, "spec.podSets"),
    ({"podSets": [{"count": 2, "minCount": 3}]}, "spec.podSets[0].minCount"),
    ({"podSets": [{"count": 2, "minCount": 0}]}, "spec.podSets[0].minCount"),
    ({"podSets": [{"count": 2, "minCount": 1}, {"count": 2, "minCount": 1}]}, "spec.podSets[*].minCount"),
    ({"podSets": [{"count": 0}]}, "spec.podSets[*].count"),
    ({"podSets": [{"count": -1}]}, "spec.podSets[0].count"),
])
def test_workload_errors_name_the_field(spec, field):
    with pytest.raises(InvalidInput) as caught:
        workload_size(spec)
    assert caught.value.field == field


def test_batch_job_size_is_what_kueue_counts():
    assert batch_job_size({}) == 1
    assert batch_job_size({"parallelism": 3, "completions": 3}) == 3
    assert batch_job_size({"parallelism": 5, "completions": 2}) == 2
    assert batch_job_size({"parallelism": 2, "completions": 10}) == 2
    for bad in ({"parallelism": 0}, {"parallelism": 2, "completions": 0}, {"parallelism": "2"}):
        with pytest.raises(InvalidInput):
            batch_job_size(bad)


PROFILE = Profile(100.0, (Window(0.0, 10.0, 80.0),))  # 80 Gbps bursts per worker
ON = TierLimit(enabled=True, threshold_gbps=200.0, highest_tier_allowed=2)


def test_tier_limit_only_above_the_threshold():
    doc = {"spec": {"tasks": []}}
    assert tier_limit_ops(doc, ("spec",), PROFILE, 2, ON) == []  # 160 Gbps
    ops = tier_limit_ops(doc, ("spec",), PROFILE, 3, ON)  # 240 Gbps
    assert jsonpatch.apply_patch(doc, ops)["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}
    assert tier_limit_ops(doc, ("spec",), PROFILE, 3, TierLimit()) == []  # disabled by default


def test_tier_limit_respects_what_the_user_set():
    for topology in ({"mode": "soft", "highestTierAllowed": 3}, {"highestTierName": "rack"}):
        assert tier_limit_ops({"spec": {"networkTopology": topology}}, ("spec",), PROFILE, 10, ON) == []
    doc = {"spec": {"networkTopology": {"mode": "soft"}}}
    out = jsonpatch.apply_patch(doc, tier_limit_ops(doc, ("spec",), PROFILE, 10, ON))
    assert out["spec"]["networkTopology"] == {"mode": "soft", "highestTierAllowed": 2}
