"""Ranks in ring order: which pod of a gang is which rank. PURE (shared by admission and the controller).

The traffic model assumes a ring whose ranks are consecutive per node, then per rack. A pod's rank
comes from the first of these sources that every pod of the gang carries (then the pod name breaks
ties, numerically):

1. ``env-rank``: a literal ``RANK`` environment variable of its containers (Volcano's pytorch plugin,
   the training-operator's PyTorchJob: master 0, workers 1..n);
2. ``jobset``: JobSet labels, ``jobset.sigs.k8s.io/job-global-index`` or
   (``replicatedjob-name``, ``job-index``), then the Job's completion index;
3. ``kubeflow``: ``training.kubeflow.org/replica-type`` (else ``job-role``, as mpi-operator labels its pods;
   a coordinator type first) and ``replica-index`` (a coordinator without one, the MPI launcher, is 0);
4. ``volcano``: ``volcano.sh/task-spec`` (a coordinator task first, then by name: the pod does not
   say where its task sits in the Job's task list) and ``volcano.sh/task-index``;
5. ``completion-index``: ``batch.kubernetes.io/job-completion-index`` (an Indexed Job);
6. the pod name in natural order (``w-2`` before ``w-10``).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence, TypeVar

# Upstream keys we read (never write).
VOLCANO_TASK_SPEC = "volcano.sh/task-spec"
VOLCANO_TASK_INDEX = "volcano.sh/task-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
KUBEFLOW_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KUBEFLOW_JOB_ROLE = "training.kubeflow.org/job-role"
SOURCES = ("env-rank", "jobset", "kubeflow", "volcano", "completion-index")

# Roles that hold rank 0 by convention (PyTorch master, TF chief, MPI launcher, ...).
_COORDINATOR = re.compile(r"master|chief|launcher|leader|driver", re.IGNORECASE)
_DIGITS = re.compile(r"([0-9]+)")
#: An index as the controllers write it: ASCII digits, of a length ``int`` takes at once ("²".isdigit() is true,
#: and Python refuses to convert more than 4,300 digits).
_INDEX = re.compile(r"[0-9]{1,18}")

Key = tuple[tuple[int, int, str], ...]
P = TypeVar("P")


def natural(text: str) -> Key:
    """A sort key ordering embedded numbers by value: ``w-2`` < ``w-10`` (a run of digits too long to be a
    number is ordered as text)."""
    return tuple((1, int(part), "") if _INDEX.fullmatch(part) else (0, 0, part) for part in _DIGITS.split(text) if part)


def _int(value: Any) -> int | None:
    text = str(value).strip() if value is not None else ""
    return int(text) if _INDEX.fullmatch(text) else None


def _role(name: str) -> Key:
    return ((0 if _COORDINATOR.search(name) else 1, 0, ""), *natural(name))


def _meta(pod: Mapping[str, Any], key: str) -> str | None:
    """A label, else an annotation (the controllers that set these keys put them in either or both)."""
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(key)
    if value is None:
        value = (meta.get("annotations") or {}).get(key)
    return str(value) if value is not None else None


def _env_rank(pod: Mapping[str, Any]) -> int | None:
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    for container in containers if isinstance(containers, list) else []:
        envs = container.get("env") if isinstance(container, Mapping) else None
        for env in envs if isinstance(envs, list) else []:
            if isinstance(env, Mapping) and env.get("name") == "RANK" and "value" in env:
                return _int(env.get("value"))
    return None


def volcano_role(pod: Mapping[str, Any]) -> str:
    """The pod's Volcano task role as Volcano's scheduler reads it (annotation, else label; "" for none)."""
    meta = pod.get("metadata") or {}
    return str((meta.get("annotations") or {}).get(VOLCANO_TASK_SPEC) or (meta.get("labels") or {}).get(
        VOLCANO_TASK_SPEC) or "")


def rank_keys(pod: Mapping[str, Any]) -> dict[str, Key]:
    """The rank sort keys this pod carries, by source (see the module docstring)."""
    out: dict[str, Key] = {}
    env = _env_rank(pod)
    if env is not None:
        out["env-rank"] = ((1, env, ""),)
    completion = _int(_meta(pod, COMPLETION_INDEX))
    global_index, job_index = _int(_meta(pod, JOBSET_GLOBAL_INDEX)), _int(_meta(pod, JOBSET_JOB_INDEX))
    replicated = _meta(pod, JOBSET_REPLICATED_JOB)
    if global_index is not None:
        out["jobset"] = ((1, global_index, ""), (1, completion or 0, ""))
    elif replicated and job_index is not None:
        out["jobset"] = (*natural(replicated), (1, job_index, ""), (1, completion or 0, ""))
    # mpi-operator labels its pods with the job role only (launcher, worker) and gives the launcher no index.
    replica_type = _meta(pod, KUBEFLOW_REPLICA_TYPE) or _meta(pod, KUBEFLOW_JOB_ROLE)
    replica_index = _int(_meta(pod, KUBEFLOW_REPLICA_INDEX))
    if replica_index is None and replica_type and _COORDINATOR.search(replica_type):
        replica_index = 0
    if replica_type and replica_index is not None:
        out["kubeflow"] = (*_role(replica_type), (1, replica_index, ""))
    task, task_index = volcano_role(pod), _int(_meta(pod, VOLCANO_TASK_INDEX))
    if task and task_index is not None:
        out["volcano"] = (*_role(task), (1, task_index, ""))
    if completion is not None:
        out["completion-index"] = ((1, completion, ""),)
    return out


def rank_source(keys: Sequence[Mapping[str, Key]]) -> str:
    """The first source every pod carries ("name" when none does)."""
    for source in SOURCES:
        if keys and all(source in k for k in keys):
            return source
    return "name"


def ring_order(pods: Sequence[P], keys: Sequence[Mapping[str, Key]], names: Sequence[str]) -> list[P]:
    """``pods`` by rank: the first source all carry, then the name in natural order."""
    source = rank_source(keys)
    order = sorted(range(len(pods)), key=lambda i: (keys[i].get(source, ()), natural(names[i]), names[i]))
    return [pods[i] for i in order]
