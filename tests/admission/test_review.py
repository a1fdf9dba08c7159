"""The review function: parsing, dispatch, denials for people, warnings for controllers, the flow through
a Volcano Job's PodGroup and pods and a Kueue Job's Workload and pods."""

from __future__ import annotations

import copy
import json

import pytest

from tests.admission.builders import MODEL, ops_of, patched, pod_from_template, response, review, workload
from volcano_metronome import api
from volcano_metronome.admission import Context, admit, fault, parse_request, parse_settings
from volcano_metronome.admission.annotations import profile_json
from volcano_metronome.catalog import builtin
from volcano_metronome.core.errors import InvalidInput

CTX = Context()
RESNET_JSON = profile_json(builtin().get("resnet50").profile(100.0))


def volcano_job(annotations=None, **spec):
    base = {"schedulerName": "volcano", "queue": "default", "tasks": [
        {"name": "ps", "replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
        {"name": "worker", "replicas": 3, "template": {"metadata": {"labels": {"role": "w"}},
                                                       "spec": {"containers": [{"name": "c", "image": "x"}]}}}]}
    base.update(spec)
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "default", "annotations": dict(annotations or {})},
            "spec": base}


def batch_job(annotations=None, labels=None):
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "sample-job", "namespace": "default", "annotations": dict(annotations or {}),
                         "labels": {api.KUEUE_QUEUE_NAME: "user-queue", **(labels or {})}},
            "spec": {"parallelism": 3, "completions": 3, "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}


def pod_group(annotations=None, owners=None, **spec):
    metadata = {"name": "pg", "namespace": "default", "annotations": dict(annotations or {})}
    if owners:
        metadata["ownerReferences"] = owners
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": metadata,
            "spec": {"minMember": 2, "queue": "default", **spec}}


@pytest.mark.parametrize("body, field", [
    ([], "body"),
    ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}, "apiVersion/kind"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}, "request.uid"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}}, "request.kind"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
      "request": {"uid": "u", "kind": {"kind": 3}}}, "request.kind.kind"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
      "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "PATCH"}}, "request.operation"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
      "request": {"uid": "u", "kind": {"kind": "Pod", "version": "v1"}, "operation": "CREATE"}}, "request.object"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
      "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": {},
                  "dryRun": "yes"}}, "request.dryRun"),
])
def test_malformed_reviews_are_named(body, field):
    with pytest.raises(InvalidInput) as caught:
        parse_request(body)
    assert caught.value.field == field


def test_response_echoes_the_uid_and_has_no_patch_when_nothing_changes():
    out = admit(review(volcano_job(), uid="abc-123"), CTX)
    assert out.verdict == "allowed" and out.kind == "VolcanoJob"
    assert response(out.review) == {"uid": "abc-123", "allowed": True}


@pytest.mark.parametrize("kwargs", [{"operation": "UPDATE"}, {"operation": "DELETE"}, {"sub_resource": "status"},
                                    {"kind": ("apps", "v1", "Deployment")}])
def test_only_create_of_known_kinds_is_acted_on(kwargs):
    out = admit(review(volcano_job(MODEL), **kwargs), CTX)
    assert out.verdict == "allowed" and ops_of(out.review) == []


def test_pod_binding_subresource_passes():
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n"}}
    out = admit(review(binding, kind=("", "v1", "Pod"), sub_resource="binding"), CTX)
    assert out.verdict == "allowed"


def test_managed_volcano_job_gets_profile_everywhere_and_min_available():
    job = volcano_job(MODEL)
    out = patched(job, admit(review(job), CTX).review)
    for meta in (out["metadata"], *(t["template"]["metadata"] for t in out["spec"]["tasks"])):
        assert meta["annotations"][api.PROFILE] == RESNET_JSON
        assert meta["annotations"][api.PROFILE_SOURCE] == "catalog"
        assert meta["annotations"][api.GANG_SIZE] == "4"
    # The template without metadata gets labels and annotations in one add; the other keeps its labels.
    assert out["spec"]["tasks"][0]["template"]["metadata"]["labels"] == {api.MANAGED_LABEL: "true"}
    assert out["spec"]["tasks"][1]["template"]["metadata"]["labels"] == {"role": "w", api.MANAGED_LABEL: "true"}
    assert api.MANAGED_LABEL not in (out["metadata"].get("labels") or {})  # the Job itself is no pod
    assert out["spec"]["minAvailable"] == 4
    assert "networkTopology" not in out["spec"]


@pytest.mark.parametrize("make, templates", [
    (lambda: volcano_job(MODEL), lambda obj: [t["template"] for t in obj["spec"]["tasks"]]),
    (lambda: batch_job(MODEL), lambda obj: [obj["spec"]["template"]]),
], ids=["volcano-job", "batch-job"])
def test_pod_templates_of_managed_jobs_carry_the_pod_selection_label(make, templates):
    """The chart's pod hook selects on metronome.dev/managed=true: the templates the pods come from must carry it."""
    job = make()
    out = patched(job, admit(review(job), CTX).review)
    for template in templates(out):
        assert template["metadata"]["labels"][api.MANAGED_LABEL] == "true"
        assert template["metadata"]["annotations"][api.PROFILE] == RESNET_JSON
    assert ops_of(admit(review(out), CTX).review) == []  # already labelled: no op at all
    for template in templates(job):
        template.setdefault("metadata", {})["labels"] = {api.MANAGED_LABEL: "false", "team": "a"}
    relabelled = patched(job, admit(review(job), CTX).review)
    for template in templates(relabelled):
        assert template["metadata"]["labels"] == {api.MANAGED_LABEL: "true", "team": "a"}


def test_unmanaged_jobs_get_no_pod_selection_label():
    for job in (volcano_job(), batch_job()):
        assert ops_of(admit(review(job), CTX).review) == []


def test_unmanaged_volcano_job_is_untouched_even_when_volcano_would_reject_it():
    out = admit(review(volcano_job(minAvailable=99)), CTX)
    assert out.verdict == "allowed" and ops_of(out.review) == []


def test_person_submitted_objects_with_bad_input_are_denied_with_a_named_message():
    for obj, key in ((volcano_job({api.PERIOD_MS: "fast", api.DUTY_CYCLE: "0.1", api.GBPS: "10"}), api.PERIOD_MS),
                     (volcano_job(MODEL, minAvailable=9), "spec.minAvailable"),
                     (batch_job({api.WINDOWS: "[]"}), api.WINDOWS),
                     (pod_group({api.MODEL: "bert"}), api.MODEL),
                     (pod_group(MODEL, minMember=0), "spec.minMember")):
        out = admit(review(obj), CTX)
        resp = response(out.review)
        assert out.verdict == "denied" and resp["allowed"] is False and "patch" not in resp
        assert resp["status"]["code"] == 400 and resp["status"]["reason"] == "BadRequest"
        message = resp["status"]["message"]
        assert key in message and "got" in message and "expected" in message


def test_controller_objects_are_never_denied_but_warned_and_recorded():
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
    for obj in (pod_group({api.MODEL: "bert"}, owners=[owner]),
                workload("v1beta2", annotations={api.PERIOD_MS: "x"}),
                workload("v1beta1", template_annotations={api.MODEL: "nope"}),
                workload("v1beta2", annotations=MODEL, counts=(0,))):
        out = admit(review(obj), CTX)
        resp = response(out.review)
        assert out.verdict == "warned" and resp["allowed"] is True
        assert resp["warnings"][0].startswith("volcano-metronome: ") and api.PROFILE_ERROR in resp["warnings"][0]
        after = patched(obj, out.review)
        assert after["metadata"]["annotations"][api.PROFILE_ERROR]
        assert api.PROFILE not in after["metadata"]["annotations"]
        again = admit(review(after), CTX)
        assert again.verdict == "warned" and ops_of(again.review) == []  # the same error is recorded once


def test_controller_object_with_malformed_metadata_is_still_allowed():
    obj = workload("v1beta2")
    obj["metadata"]["annotations"] = ["not", "a", "map"]
    out = admit(review(obj), CTX)
    assert out.verdict == "warned" and ops_of(out.review) == []


def test_dry_run_gets_the_same_answer():
    job = volcano_job(MODEL)
    normal, dry = admit(review(job, uid="u"), CTX), admit(review(job, uid="u", dry_run=True), CTX)
    assert normal == dry


def test_volcano_flow_job_then_pod_group_then_pods():
    job = patched(volcano_job(MODEL), admit(review(volcano_job(MODEL)), CTX).review)
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train", "uid": "u1", "controller": True}
    # vc-controller-manager copies the job's annotations into its PodGroup, minMember = minAvailable.
    group = pod_group(job["metadata"]["annotations"], owners=[owner], minMember=job["spec"]["minAvailable"])
    out = admit(review(group), CTX)
    assert out.verdict == "allowed" and ops_of(out.review) == []  # already admitted through its Job
    for i, task in enumerate(job["spec"]["tasks"]):
        pod = pod_from_template(task["template"], name=f"train-{task['name']}-0", owner=owner,
                                annotations={api.VOLCANO_GROUP_NAME: "train-u1"})
        gated = patched(pod, admit(review(pod), CTX).review)
        assert gated["metadata"]["annotations"][api.GANG_KIND] == "PodGroup"
        assert gated["metadata"]["annotations"][api.GANG_NAME] == "train-u1"
        assert gated["spec"]["schedulingGates"] == [{"name": api.SCHEDULING_GATE}]


def test_kueue_flow_job_then_workload_then_pods():
    job = batch_job(MODEL)
    job = patched(job, admit(review(job), CTX).review)
    assert job["spec"]["template"]["metadata"]["annotations"][api.PROFILE] == RESNET_JSON
    wl = workload("v1beta2", counts=(3,))
    wl["spec"]["podSets"][0]["template"] = copy.deepcopy(job["spec"]["template"])
    wl_out = patched(wl, admit(review(wl), CTX).review)
    assert wl_out["metadata"]["annotations"][api.PROFILE] == RESNET_JSON
    assert wl_out["metadata"]["annotations"][api.GANG_SIZE] == "3"
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "sample-job", "uid": "u2", "controller": True}
    pod = pod_from_template(job["spec"]["template"], name="sample-job-abcde", owner=owner)
    gated = patched(pod, admit(review(pod), CTX).review)
    assert gated["metadata"]["annotations"][api.GANG_KIND] == "Job"
    assert gated["metadata"]["annotations"][api.GANG_NAME] == "sample-job"


def test_batch_jobs_not_submitted_to_kueue_are_not_managed():
    job = batch_job(MODEL)
    del job["metadata"]["labels"][api.KUEUE_QUEUE_NAME]
    assert admit(review(job), CTX).verdict == "allowed"


def test_tier_limit_from_settings_on_volcano_jobs():
    ctx = Context(settings=parse_settings({"tierLimit": {"enabled": True, "thresholdGbps": 200, "highestTierAllowed": 2}}))
    big = patched(volcano_job(MODEL), admit(review(volcano_job(MODEL)), ctx).review)  # 4 x 80 Gbps = 320
    assert big["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}
    small = volcano_job(MODEL, tasks=[{"name": "w", "replicas": 2, "template": {"spec": {"containers": []}}}])
    assert "networkTopology" not in patched(small, admit(review(small), ctx).review)["spec"]


def test_namespace_default_and_queue_default_for_volcano():
    ctx = Context(settings=parse_settings({"queueDefaults": {"gpu": {"model": "resnet50"}}}))
    out = patched(volcano_job(queue="gpu"), admit(review(volcano_job(queue="gpu")), ctx).review)
    assert out["metadata"]["annotations"][api.PROFILE_SOURCE] == "default"
    assert admit(review(volcano_job(queue="cpu")), ctx).verdict == "allowed"


def test_fault_denies_peoples_objects_and_passes_controllers():
    person = parse_request(review(volcano_job(MODEL)))
    out = fault(person, "boom")
    assert out.verdict == "denied" and response(out.review)["status"]["code"] == 500
    controller = parse_request(review(workload("v1beta2")))
    out = fault(controller, "boom")
    assert out.verdict == "warned" and response(out.review)["allowed"] is True


def test_messages_are_printable_and_bounded():
    out = admit(review(volcano_job({api.MODEL: "x\n\x00" + "y" * 5000})), CTX)
    message = response(out.review)["status"]["message"]
    assert message.isprintable() and len(message) <= 1000
    json.dumps(out.review)  # serialisable as is


def test_node_constraints_too_large_for_an_annotation_are_left_to_the_pods_with_a_warning():
    # Enough templates with distinct selectors pass the 256 KiB Kubernetes allows all of an object's annotations,
    # and the API server would refuse the Job the webhook let through: past 64 KiB the annotation is left out.
    tasks = [{"name": f"t{i}", "replicas": 1, "template": {"spec": {
        "nodeSelector": {"pool": f"pool-{i:04d}-" + "x" * 100}, "containers": [{"name": "c", "image": "x"}]}}}
        for i in range(1100)]
    job = volcano_job(MODEL, tasks=tasks)
    result = admit(review(job), CTX)
    out = patched(job, result.review)
    assert api.POD_CONSTRAINTS not in out["metadata"]["annotations"]
    assert out["metadata"]["annotations"][api.PROFILE] == RESNET_JSON
    warning = response(result.review)["warnings"][0]
    assert f"{api.POD_CONSTRAINTS} not written: the node constraints of the 1100 task templates take 152,901" in warning
    small = volcano_job(MODEL)
    assert api.POD_CONSTRAINTS in patched(small, admit(review(small), CTX).review)["metadata"]["annotations"]


def test_a_junk_inherited_gang_size_is_named_when_min_member_cannot_stand_in():
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
    obj = pod_group({**MODEL, api.GANG_SIZE: "lots"}, owners=[owner], minMember=None)
    warning = response(admit(review(obj), CTX).review)["warnings"][0]
    assert f"{api.GANG_SIZE}: got 'lots', expected a gang size of ASCII digits" in warning
    assert "spec.minMember" in warning
    # With a minMember to stand in, the group is admitted with it, as before.
    fine = pod_group({**MODEL, api.GANG_SIZE: "lots"}, owners=[owner])
    assert patched(fine, admit(review(fine), CTX).review)["metadata"]["annotations"][api.GANG_SIZE] == "2"
