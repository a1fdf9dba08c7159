"""JobSet, PyTorchJob and MPIJob through the webhook: the profile reaches the gang whichever way it is ganged
(the Kueue Workload of the job, or the Volcano PodGroup its operator makes), the pods find their gang, and bad
gang shapes are refused naming the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.admission.builders import (
    MODEL,
    ops_of,
    patched,
    pod_from_template,
    response,
    review,
    schema_errors,
    trainer_jobsets,
    upstream,
    with_annotations,
)
from volcano_metronome import api
from volcano_metronome.admission import Context, Settings, admit
from volcano_metronome.admission.settings import parse_settings

CTX = Context()
pytestmark = pytest.mark.upstream_examples("training-operator", "mpi-operator", "trainer", "kueue")


def example(project: str, file: str) -> dict[str, Any]:
    """The first document of an upstream example."""
    docs = [d for d in yaml.safe_load_all((upstream() / "examples" / project / file).read_text()) if d]
    return copy.deepcopy(docs[0])


def two_job_jobset(queue: str | None = "user-queue") -> dict[str, Any]:
    """Trainer's torch runtime as a JobSet of two replicated jobs: 1 x 1 "leader" pod and 2 Jobs x 2 "node" pods."""
    _, jobset = next(c for c in trainer_jobsets(queue) if "torch" in c[0])
    node = jobset["spec"]["replicatedJobs"][0]
    node["replicas"] = 2
    node["template"]["spec"].update({"parallelism": 2, "completions": 2})
    leader = copy.deepcopy(node)
    leader.update({"name": "leader", "replicas": 1})
    leader["template"]["spec"].update({"parallelism": 1, "completions": 1})
    jobset["spec"]["replicatedJobs"] = [leader, node]
    return jobset


def admitted(obj: dict[str, Any], ctx: Context = CTX) -> dict[str, Any]:
    out = admit(review(obj), ctx)
    assert out.verdict in ("patched", "warned"), out.review
    after = patched(obj, out.review)
    assert schema_errors(after) == []
    again = admit(review(after), ctx)
    assert ops_of(again.review) == [], "admitting an admitted object changes nothing"
    return after


def denial(obj: dict[str, Any]) -> str:
    out = admit(review(obj), CTX)
    resp = response(out.review)
    assert out.verdict == "denied" and resp["status"]["code"] == 400, out.review
    return str(resp["status"]["message"])


# ------------------------------------------------------------------------------------------------- JobSet
def test_a_jobset_for_kueue_carries_the_profile_to_every_pod_template():
    after = admitted(with_annotations(two_job_jobset(), MODEL))
    annotations = after["metadata"]["annotations"]
    assert annotations[api.GANG_SIZE] == "5"  # 1 x 1 leader + 2 jobs x 2 nodes, as Kueue counts the podSets
    assert annotations[api.PROFILE_SOURCE] == "catalog"
    for job in after["spec"]["replicatedJobs"]:
        meta = job["template"]["spec"]["template"]["metadata"]
        assert meta["labels"][api.MANAGED_LABEL] == "true"
        assert meta["annotations"][api.PROFILE] == annotations[api.PROFILE]
        assert meta["annotations"][api.GANG_KIND] == "JobSet"
        assert meta["annotations"][api.GANG_SIZE] == "5"


def test_a_profile_on_one_pod_template_is_the_jobsets_profile():
    jobset = two_job_jobset()
    jobset["spec"]["replicatedJobs"][1]["template"]["spec"]["template"].setdefault("metadata", {})["annotations"] = \
        dict(MODEL)
    after = admitted(jobset)
    assert api.PROFILE in after["metadata"]["annotations"]
    leader = after["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"]
    assert leader[api.PROFILE] == after["metadata"]["annotations"][api.PROFILE]


def test_a_jobset_not_submitted_to_kueue_is_left_alone():
    out = admit(review(with_annotations(two_job_jobset(queue=None), MODEL)), CTX)
    assert out.verdict == "allowed" and ops_of(out.review) == []


def test_the_namespace_default_reaches_a_jobset_for_kueue():
    ctx = Context(settings=parse_settings({"namespaceDefaults": {"default": {"model": "resnet50"}}}))
    after = admitted(two_job_jobset(), ctx)
    assert after["metadata"]["annotations"][api.PROFILE_SOURCE] == "default"


@pytest.mark.parametrize("change, field", [
    (lambda js: js["spec"]["replicatedJobs"][1].update(replicas="2"), "spec.replicatedJobs[1].replicas"),
    (lambda js: js["spec"]["replicatedJobs"][1].update(name="leader"), "spec.replicatedJobs[1].name"),
    (lambda js: js["spec"]["replicatedJobs"][0]["template"]["spec"].update(parallelism=-1),
     "spec.replicatedJobs[0].template.spec.parallelism"),
    (lambda js: js["spec"].update(replicatedJobs=[]), "spec.replicatedJobs"),
    (lambda js: [j.update(replicas=0) for j in js["spec"]["replicatedJobs"]], "spec.replicatedJobs[*].replicas"),
    (lambda js: js["metadata"]["annotations"].update({api.MODEL: "no-such-model"}), api.MODEL),
])
def test_a_bad_jobset_is_refused_naming_the_field(change, field):
    jobset = with_annotations(two_job_jobset(), MODEL)
    change(jobset)
    assert field in denial(jobset)


def test_a_bad_jobset_a_controller_made_is_admitted_unmanaged_with_the_reason():
    jobset = with_annotations(two_job_jobset(), MODEL)
    jobset["spec"]["replicatedJobs"][1]["replicas"] = "2"
    jobset["metadata"]["ownerReferences"] = [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                              "name": "t", "uid": "u", "controller": True}]
    out = admit(review(jobset), CTX)
    assert out.verdict == "warned"
    assert "spec.replicatedJobs[1].replicas" in patched(jobset, out.review)["metadata"]["annotations"][api.PROFILE_ERROR]


def test_the_child_job_of_a_jobset_is_no_gang_of_its_own():
    after = admitted(with_annotations(two_job_jobset(), MODEL))
    node = after["spec"]["replicatedJobs"][1]["template"]
    child = {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "torch-distributed-node-0", "namespace": "default",
                          "labels": {api.KUEUE_QUEUE_NAME: "user-queue", api.JOBSET_NAME_LABEL: "torch-distributed"},
                          "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                               "name": "torch-distributed", "uid": "u", "controller": True}]},
             "spec": copy.deepcopy(node["spec"])}
    out = admit(review(child), CTX)
    assert out.verdict == "allowed" and ops_of(out.review) == []


def test_the_pods_of_a_jobset_for_kueue_are_gated_as_the_jobsets_gang():
    after = admitted(with_annotations(two_job_jobset(), MODEL))
    template = after["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    pod = pod_from_template(template, name="torch-distributed-node-1-0-abcde",
                            owner={"apiVersion": "batch/v1", "kind": "Job", "name": "torch-distributed-node-1",
                                   "uid": "u", "controller": True},
                            labels={api.JOBSET_NAME_LABEL: "torch-distributed",
                                    "jobset.sigs.k8s.io/replicatedjob-name": "node",
                                    "jobset.sigs.k8s.io/job-index": "1", "jobset.sigs.k8s.io/job-global-index": "2",
                                    "batch.kubernetes.io/job-completion-index": "0"})
    gated = patched(pod, admit(review(pod), CTX).review)
    assert {"name": api.SCHEDULING_GATE} in gated["spec"]["schedulingGates"]
    assert gated["metadata"]["annotations"][api.GANG_KIND] == "JobSet"
    assert gated["metadata"]["annotations"][api.GANG_NAME] == "torch-distributed"
    assert gated["metadata"]["annotations"][api.GANG_SIZE] == "5"


def test_a_jobset_pod_without_kueue_is_not_gated_as_its_child_job():
    template = copy.deepcopy(two_job_jobset()["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    template.setdefault("metadata", {})["annotations"] = {api.PROFILE: '{"period_ms":100,"windows":[{"start_ms":90,'
                                                          '"len_ms":10,"gbps":50}],"jitter_ms":0}',
                                                          api.PROFILE_SOURCE: "annotation"}
    pod = pod_from_template(template, name="js-leader-0-0-x",
                            owner={"apiVersion": "batch/v1", "kind": "Job", "name": "js-leader-0", "uid": "u",
                                   "controller": True}, labels={api.JOBSET_NAME_LABEL: "js"})
    out = admit(review(pod), CTX)
    assert out.verdict == "warned" and ops_of(out.review) == []


# ------------------------------------------------------------------------------------------- Kubeflow jobs
@pytest.mark.parametrize("project, file, size", [
    ("training-operator", "pytorch-simple.yaml", 2),
    ("training-operator", "pytorch-cpu-demo.yaml", 2),
    ("kueue", "sample-pytorchjob.yaml", 2),
    ("mpi-operator", "pi.yaml", 3),
])
def test_kubeflow_examples_get_the_profile_on_the_job_and_every_replica_template(project, file, size):
    job = with_annotations(example(project, file), MODEL)
    after = admitted(job)
    assert after["metadata"]["annotations"][api.GANG_SIZE] == str(size)
    kueue = api.KUEUE_QUEUE_NAME in (job["metadata"].get("labels") or {})
    key = "mpiReplicaSpecs" if job["kind"] == "MPIJob" else "pytorchReplicaSpecs"
    for replica in after["spec"][key].values():
        annotations = replica["template"]["metadata"]["annotations"]
        assert annotations[api.PROFILE] == after["metadata"]["annotations"][api.PROFILE]
        # Only under Kueue do the pods belong to the job's Workload; with Volcano they name their PodGroup.
        assert annotations.get(api.GANG_KIND) == (job["kind"] if kueue else None)


def test_a_pytorchjob_for_volcano_takes_its_volcano_queues_default():
    job = example("training-operator", "pytorch-simple.yaml")
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": "research"}}
    ctx = Context(settings=parse_settings({"queueDefaults": {"research": {"model": "resnet50"}}}))
    assert admitted(job, ctx)["metadata"]["annotations"][api.PROFILE_SOURCE] == "default"
    plain = example("training-operator", "pytorch-simple.yaml")
    assert ops_of(admit(review(plain), ctx).review) == []


def test_the_podgroup_the_training_operator_makes_inherits_the_profile_and_gang_size():
    after = admitted(with_annotations(example("training-operator", "pytorch-cpu-demo.yaml"), MODEL))
    # training-operator's SyncPodGroup: name and annotations of the job, owned by it, minMember = total replicas
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": after["metadata"]["name"], "namespace": "default",
                          "annotations": dict(after["metadata"]["annotations"]),
                          "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                               "name": after["metadata"]["name"], "uid": "u", "controller": True}]},
             "spec": {"minMember": 2, "queue": "default"}}
    out = admit(review(group), CTX)
    assert ops_of(out.review) == []  # already carries the profile and gang size the job was given
    assert group["metadata"]["annotations"][api.GANG_SIZE] == "2"


def test_pytorchjob_pods_find_their_gang_by_path():
    after = admitted(with_annotations(example("kueue", "sample-pytorchjob.yaml"), MODEL))
    template = after["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "pytorch-simple", "uid": "u",
             "controller": True}
    labels = {api.KUBEFLOW_JOB_NAME_LABEL: "pytorch-simple", "training.kubeflow.org/replica-type": "worker",
              "training.kubeflow.org/replica-index": "0"}
    kueue_pod = pod_from_template(template, name="pytorch-simple-worker-0", owner=owner, labels=labels)
    gated = patched(kueue_pod, admit(review(kueue_pod), CTX).review)
    assert (gated["metadata"]["annotations"][api.GANG_KIND], gated["metadata"]["annotations"][api.GANG_NAME]) == \
        ("PyTorchJob", "pytorch-simple")
    # Volcano: the operator names the PodGroup on the pod, which wins over the job.
    volcano_pod = pod_from_template(template, name="pytorch-simple-worker-0", owner=owner, labels=labels,
                                    annotations={api.VOLCANO_GROUP_NAME: "pytorch-simple"})
    del volcano_pod["metadata"]["annotations"][api.GANG_KIND]
    gated = patched(volcano_pod, admit(review(volcano_pod), CTX).review)
    assert gated["metadata"]["annotations"][api.GANG_KIND] == "PodGroup"


def test_an_mpi_launcher_outside_kueue_and_volcano_is_not_gated_as_its_launcher_job():
    after = admitted(with_annotations(example("mpi-operator", "pi.yaml"), MODEL))
    template = after["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    pod = pod_from_template(template, name="pi-launcher-xyz",
                            owner={"apiVersion": "batch/v1", "kind": "Job", "name": "pi-launcher", "uid": "u",
                                   "controller": True},
                            labels={api.KUBEFLOW_JOB_NAME_LABEL: "pi", api.KUBEFLOW_OPERATOR_LABEL: "mpi-operator",
                                    "training.kubeflow.org/job-role": "launcher"})
    out = admit(review(pod), CTX)
    assert out.verdict == "warned" and ops_of(out.review) == []


@pytest.mark.parametrize("change, field", [
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2), "spec.pytorchReplicaSpecs.Master.replicas"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"].update(Chief=copy.deepcopy(j["spec"]["pytorchReplicaSpecs"]["Worker"])),
     "spec.pytorchReplicaSpecs: got 'Chief'"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=1.5), "spec.pytorchReplicaSpecs.Worker.replicas"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].pop("template"), "spec.pytorchReplicaSpecs.Worker.template"),
    (lambda j: j["spec"].update(runPolicy={"schedulingPolicy": {"minAvailable": 5}}),
     "spec.runPolicy.schedulingPolicy.minAvailable"),
    (lambda j: j["spec"].update(pytorchReplicaSpecs={}), "spec.pytorchReplicaSpecs"),
])
def test_a_bad_pytorchjob_is_refused_naming_the_field(change, field):
    job = with_annotations(example("training-operator", "pytorch-simple.yaml"), MODEL)
    change(job)
    assert field in denial(job)


def test_an_mpijob_with_two_launchers_is_refused():
    job = with_annotations(example("mpi-operator", "pi.yaml"), MODEL)
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    assert "spec.mpiReplicaSpecs.Launcher.replicas: got 2, expected at most 1" in denial(job)


def test_an_elastic_pytorchjob_is_admitted_with_a_warning_about_its_size():
    job = with_annotations(example("training-operator", "pytorch-simple.yaml"), MODEL)
    job["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3}
    out = admit(review(job), CTX)
    assert out.verdict == "warned" and "spec.elasticPolicy" in response(out.review)["warnings"][0]


def test_the_workload_kueue_makes_from_a_jobset_gets_the_whole_gang_size():
    after = admitted(with_annotations(two_job_jobset(), MODEL))
    pod_sets = [{"name": job["name"], "count": job.get("replicas", 1) * job["template"]["spec"]["parallelism"],
                 "template": copy.deepcopy(job["template"]["spec"]["template"])}
                for job in after["spec"]["replicatedJobs"]]
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": "jobset-torch-distributed-1a2b3", "namespace": "default",
                             "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                                  "name": "torch-distributed", "uid": "u", "controller": True}]},
                "spec": {"queueName": "user-queue", "podSets": pod_sets}}
    out = admitted(workload)
    assert out["metadata"]["annotations"][api.GANG_SIZE] == "5"
    assert out["metadata"]["annotations"][api.PROFILE] == after["metadata"]["annotations"][api.PROFILE]


def test_settings_type_is_what_contexts_take():
    assert isinstance(CTX.settings, Settings)


def test_the_readme_samples_are_admitted_as_documented():
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "kind: JobSet" in b)
    jobset, pytorch = (dict(d, metadata={**d["metadata"], "namespace": "default"}) for d in yaml.safe_load_all(block))
    assert schema_errors(jobset) == [] and schema_errors(pytorch) == []
    assert admitted(jobset)["metadata"]["annotations"][api.GANG_SIZE] == "4"
    after = admitted(pytorch)
    assert after["metadata"]["annotations"][api.GANG_SIZE] == "4"
    assert after["metadata"]["annotations"][api.PROFILE_SOURCE] == "annotation"
