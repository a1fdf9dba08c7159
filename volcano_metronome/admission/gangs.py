"""Gang sizes and gang constraints of the objects the webhook admits.

The gang size written to ``metronome.dev/gang-size`` is the number of pods the gang runs together:

* Volcano Job: the sum of its tasks' ``replicas`` (every pod of the job communicates);
* Volcano PodGroup: ``spec.minMember`` (unless it inherited a gang size from its Volcano Job);
* Kueue Workload: the sum of its podSets' ``count``;
* batch/v1 Job under Kueue: ``parallelism`` (default 1), capped by ``completions``, as Kueue counts it.

Volcano Job ``minAvailable`` is checked and defaulted exactly as Volcano's own admission webhook does
(``pkg/webhooks/admission/jobs``): a task's ``minAvailable`` must lie in ``[0, replicas]``, the job's
must lie in ``[0, sum of replicas]``, and an absent or zero job ``minAvailable`` becomes the sum over
tasks of ``minAvailable`` (or ``replicas`` where a task has none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from volcano_metronome.admission.patches import Op, Path, mapping_at, set_value
from volcano_metronome.admission.settings import TierLimit
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class VolcanoJobGang:
    """A Volcano Job's gang: ``size`` pods; ``default_min_available`` is what Volcano would write, or ``None``."""

    size: int
    min_available: int
    default_min_available: int | None


def volcano_job_gang(spec: Mapping[str, Any]) -> VolcanoJobGang:
    """Check a Volcano Job's ``minAvailable`` against its tasks the way Volcano does."""
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise InvalidInput("spec.tasks", tasks, "a non-empty list of tasks (Volcano: no task specified in job spec)")
    total = 0
    task_min_sum = 0
    for i, task in enumerate(tasks):
        where = f"spec.tasks[{i}]"
        if not isinstance(task, dict):
            raise InvalidInput(where, task, "a task mapping with replicas and template")
        replicas = integer(task.get("replicas", 0), f"{where}.replicas", 0)
        task_min = task.get("minAvailable")
        if task_min is not None:
            task_min = integer(task_min, f"{where}.minAvailable", 0)
            if task_min > replicas:
                raise InvalidInput(f"{where}.minAvailable", task_min, f"at most the task's replicas ({replicas})")
        total += replicas
        task_min_sum += replicas if task_min is None else task_min
    if total < 1:
        raise InvalidInput("spec.tasks[*].replicas", total, "at least one replica in a job with a bandwidth profile")
    job_min = integer(spec.get("minAvailable", 0), "spec.minAvailable", 0)
    if job_min > total:
        raise InvalidInput("spec.minAvailable", job_min, f"at most the total replicas of the tasks ({total})")
    if job_min == 0:
        return VolcanoJobGang(size=total, min_available=task_min_sum, default_min_available=task_min_sum)
    return VolcanoJobGang(size=total, min_available=job_min, default_min_available=None)


def pod_group_size(spec: Mapping[str, Any]) -> int:
    """A Volcano PodGroup's gang size: ``spec.minMember``, which must be at least 1 for a managed gang."""
    return integer(spec.get("minMember"), "spec.minMember", 1)


def workload_size(spec: Mapping[str, Any]) -> tuple[int, list[str]]:
    """A Kueue Workload's gang size (sum of podSet counts) and warnings about partial admission."""
    pod_sets = spec.get("podSets")
    if not isinstance(pod_sets, list) or not pod_sets:
        raise InvalidInput("spec.podSets", pod_sets, "a non-empty list of podSets")
    total = 0
    partial = []
    for i, pod_set in enumerate(pod_sets):
        where = f"spec.podSets[{i}]"
        if not isinstance(pod_set, dict):
            raise InvalidInput(where, pod_set, "a podSet mapping with count and template")
        count = integer(pod_set.get("count", 1), f"{where}.count", 0)
        if pod_set.get("minCount") is not None:
            min_count = integer(pod_set["minCount"], f"{where}.minCount", 1)
            if min_count > count:
                raise InvalidInput(f"{where}.minCount", min_count, f"at most the podSet's count ({count})")
            partial.append(f"{where} may be admitted with as few as {min_count} of {count} pods (partial admission)")
        total += count
    if len(partial) > 1:
        raise InvalidInput("spec.podSets[*].minCount", len(partial), "at most one podSet using minCount (Kueue)")
    if total < 1:
        raise InvalidInput("spec.podSets[*].count", total, "at least one pod in a workload with a bandwidth profile")
    return total, [f"{text}: the gang size recorded is the full count {total}" for text in partial]


def batch_job_size(spec: Mapping[str, Any]) -> int:
    """A batch/v1 Job's pod count as Kueue takes it: ``parallelism`` (default 1), capped by ``completions``."""
    parallelism = integer(spec.get("parallelism", 1), "spec.parallelism", 0)
    completions = spec.get("completions")
    size = parallelism
    if completions is not None:
        size = min(size, integer(completions, "spec.completions", 0))
    if size < 1:
        raise InvalidInput("spec.parallelism", parallelism,
                           "at least 1 (and completions, when set, at least 1) for a job with a bandwidth profile")
    return size


def inherited_size(annotations: Mapping[str, Any], key: str) -> int | None:
    """A positive gang size recorded earlier under ``key`` (e.g. copied from a Volcano Job), else ``None``."""
    raw = annotations.get(key)
    if isinstance(raw, str) and raw.isdigit() and raw.isascii() and 0 < len(raw) <= 10 and 0 < int(raw) <= INT32_MAX:
        return int(raw)
    return None


def tier_limit_ops(doc: Mapping[str, Any], spec_path: Path, profile: Profile, size: int, limit: TierLimit) -> list[Op]:
    """Ops setting Volcano ``networkTopology.highestTierAllowed`` when the gang's burst demand is above the threshold.

    Demand is the aggregate burst rate ``peak_gbps x gang size``. An explicit ``highestTierAllowed`` or
    ``highestTierName`` already on the object is left alone (Volcano forbids setting both).
    """
    if not limit.enabled or profile.peak_gbps * size <= limit.threshold_gbps:
        return []
    topology = mapping_at(doc, (*spec_path, "networkTopology"))
    if topology is None:
        return set_value(doc, (*spec_path, "networkTopology"),
                         {"mode": "hard", "highestTierAllowed": limit.highest_tier_allowed})
    if topology.get("highestTierAllowed") is not None or topology.get("highestTierName") is not None:
        return []
    return set_value(doc, (*spec_path, "networkTopology", "highestTierAllowed"), limit.highest_tier_allowed)


def integer(value: Any, where: str, minimum: int) -> int:
    """An int32 of at least ``minimum`` (bools refused; JSON numbers like ``3.0`` refused as Kubernetes does)."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= INT32_MAX:
        raise InvalidInput(where, value, f"an integer in [{minimum}, {INT32_MAX}]")
    return value
