"""The chart's MutatingWebhookConfiguration against the webhook's own admission code: every rule reaches
a handler, every handler is reached, and the pods the pod hook selects are the pods the webhook means
to gate. The admission logic is pure, so these run without a server."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.admission.builders import patched, review
from tests.helm.chart import one, template
from volcano_metronome import api
from volcano_metronome.admission import Context
from volcano_metronome.admission.review import KINDS, admit
from volcano_metronome.devtools.sources import upstream_dir

KIND_OF_RESOURCE = {"jobs": "Job", "podgroups": "PodGroup", "workloads": "Workload", "pods": "Pod", "jobsets": "JobSet",
                    "pytorchjobs": "PyTorchJob", "mpijobs": "MPIJob"}


def _webhooks() -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in one(template(), "MutatingWebhookConfiguration")["webhooks"]}


def _selects(hook: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether ``hook``'s objectSelector matches an object with ``labels`` (no selector: everything)."""
    selector = hook.get("objectSelector") or {}
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        present = expression["key"] in labels
        if expression["operator"] == "Exists" and not present:
            return False
        if expression["operator"] == "DoesNotExist" and present:
            return False
        if expression["operator"] == "In" and labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def test_every_rule_reaches_a_handler_and_every_handler_is_reached() -> None:
    reached = set()
    for hook in _webhooks().values():
        for rule in hook["rules"]:
            for group in rule["apiGroups"]:
                for version in rule["apiVersions"]:
                    for resource in rule["resources"]:
                        key = (group, version, KIND_OF_RESOURCE[resource])
                        assert key in KINDS, f"{hook['name']} sends {key}, which the webhook does not handle"
                        reached.add(key)
    assert reached == set(KINDS)


def _volcano_job() -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load((upstream_dir() / "examples" / "volcano" / "job.yaml").read_text())
    job.setdefault("metadata", {}).setdefault("annotations", {})[api.MODEL] = "resnet50"
    return job


def _kueue_batch_job() -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load((upstream_dir() / "examples" / "kueue" / "sample-job.yaml").read_text())
    job["metadata"].setdefault("annotations", {})[api.MODEL] = "resnet50"
    job["metadata"].setdefault("name", "sample-job")
    assert api.KUEUE_QUEUE_NAME in job["metadata"]["labels"]
    return job


def _pod_from(template_spec: dict[str, Any], owner: dict[str, Any] | None, annotations: dict[str, str]) -> dict[str, Any]:
    metadata = copy.deepcopy(template_spec.get("metadata") or {})
    metadata["name"] = "worker-0"
    metadata.setdefault("annotations", {}).update(annotations)
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": copy.deepcopy(template_spec["spec"])}


@pytest.mark.parametrize("kind", [pytest.param("volcano-job", marks=pytest.mark.upstream_examples("volcano")),
                                  pytest.param("kueue-batch-job", marks=pytest.mark.upstream_examples("kueue"))])
def test_pods_of_admitted_jobs_are_selected_by_the_pod_hook(kind: str) -> None:
    hooks = _webhooks()
    job = _volcano_job() if kind == "volcano-job" else _kueue_batch_job()
    admitted = patched(job, admit(review(job), Context()).review)
    if kind == "volcano-job":
        templates = [task["template"] for task in admitted["spec"]["tasks"]]
        pods = [_pod_from(t, None, {api.VOLCANO_GROUP_NAME: "test-job-1234"}) for t in templates]
    else:
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": "u1",
                 "controller": True}
        pods = [_pod_from(admitted["spec"]["template"], owner, {})]
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        assert _selects(hooks["pods.metronome.dev"], labels), f"the pod hook would not see a pod with labels {labels}"


@pytest.mark.upstream_examples("kueue")
def test_a_selected_pod_is_gated_by_the_webhook() -> None:
    """What the pod hook's selector lets through, the webhook gates (a labelled pod of a placed template)."""
    hooks = _webhooks()
    job = _kueue_batch_job()
    admitted = patched(job, admit(review(job), Context()).review)
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": "u1", "controller": True}
    pod = _pod_from(admitted["spec"]["template"], owner, {})
    pod["metadata"].setdefault("labels", {})[api.MANAGED_LABEL] = "true"
    assert _selects(hooks["pods.metronome.dev"], pod["metadata"]["labels"])
    gated = patched(pod, admit(review(pod), Context()).review)
    assert {"name": api.SCHEDULING_GATE} in gated["spec"]["schedulingGates"]


def test_the_batch_job_hook_selects_exactly_kueue_jobs() -> None:
    hook = _webhooks()["batch-jobs.metronome.dev"]
    assert _selects(hook, {api.KUEUE_QUEUE_NAME: "user-queue"})
    assert not _selects(hook, {"app": "cron"})
