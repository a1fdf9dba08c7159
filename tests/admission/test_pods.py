"""Pods of managed gangs are gated, labelled, named and wired; every other pod is left alone."""

from __future__ import annotations

import copy

import kubernetes.client
import pytest

from tests.admission.builders import ops_of, patched, review, schema_errors
from volcano_metronome import api
from volcano_metronome.admission import Context, Lookups, admit, parse_settings
from volcano_metronome.admission.annotations import profile_json
from volcano_metronome.admission.pods import GangRef, env_vars, gang_of, slot_mount, slot_volume
from volcano_metronome.api import SLOT_DIR, SLOT_FILES, SLOT_VOLUME
from volcano_metronome.catalog import builtin

RESNET = builtin().get("resnet50").profile(100.0)
RESOLVED = {api.PROFILE: profile_json(RESNET), api.PROFILE_SOURCE: "catalog", api.GANG_SIZE: "4"}
JOB_OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": True}


def pod(annotations=None, labels=None, owners=None, init=False, env=None):
    container = {"name": "main", "image": "busybox"}
    if env is not None:
        container["env"] = env
    spec = {"containers": [container, {"name": "side", "image": "busybox"}]}
    if init:
        spec["initContainers"] = [{"name": "setup", "image": "busybox"}]
    metadata = {"name": "p", "namespace": "default"}
    if annotations is not None:
        metadata["annotations"] = annotations
    if labels is not None:
        metadata["labels"] = labels
    if owners is not None:
        metadata["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def admit_pod(obj, ctx=Context()):
    out = admit(review(obj), ctx)
    return out, patched(obj, out.review)


def assert_gated(obj, kind, name):
    assert obj["metadata"]["labels"][api.MANAGED_LABEL] == "true"
    annotations = obj["metadata"]["annotations"]
    assert annotations[api.GANG_KIND] == kind and annotations[api.GANG_NAME] == name
    assert annotations[api.PROFILE] == profile_json(RESNET)
    assert {"name": api.SCHEDULING_GATE} in obj["spec"]["schedulingGates"]
    for container in obj["spec"]["containers"] + obj["spec"].get("initContainers", []):
        names = [var["name"] for var in container["env"]]
        assert {api.ENV_PERIOD_MS, api.ENV_OFFSET_MS, api.ENV_EPOCH, api.ENV_TRAFFIC_CLASS,
                api.ENV_TRAFFIC_CLASS_ENV} <= set(names)
        assert slot_mount() in container["volumeMounts"]
    assert slot_volume() in obj["spec"]["volumes"]
    assert not schema_errors(obj)
    kubernetes.client.V1Pod.model_validate(obj)  # the client's models: no unknown field, no wrong type


def test_gang_identity():
    assert gang_of(pod({api.VOLCANO_GROUP_NAME: "pg-1"})) == GangRef("PodGroup", "pg-1")
    assert gang_of(pod(owners=[JOB_OWNER])) == GangRef("Job", "train")
    assert gang_of(pod(owners=[dict(JOB_OWNER, controller=False)])) is None
    assert gang_of(pod(owners=[dict(JOB_OWNER, apiVersion="batch.volcano.sh/v1alpha1")])) is None
    assert gang_of(pod(labels={api.KUEUE_POD_GROUP_NAME: "grp"})) == GangRef("Workload", "grp")
    assert gang_of(pod()) is None


def test_env_vars_read_the_controllers_annotations():
    fields = {var["name"]: var["valueFrom"]["fieldRef"]["fieldPath"] for var in env_vars()}
    assert fields == {api.ENV_PERIOD_MS: f"metadata.annotations['{api.PERIOD_MS}']",
                      api.ENV_OFFSET_MS: f"metadata.annotations['{api.OFFSET_MS}']",
                      api.ENV_EPOCH: f"metadata.annotations['{api.EPOCH}']",
                      api.ENV_TRAFFIC_CLASS: f"metadata.annotations['{api.TRAFFIC_CLASS}']",
                      api.ENV_TRAFFIC_CLASS_ENV: f"metadata.annotations['{api.TRAFFIC_CLASS_ENV}']"}
    assert fields[api.ENV_TRAFFIC_CLASS] == "metadata.annotations['metronome.dev/traffic-class']"
    assert fields[api.ENV_TRAFFIC_CLASS_ENV] == "metadata.annotations['metronome.dev/traffic-class-env']"


def test_the_timing_files_are_the_controllers_annotations_mounted_read_only():
    volume = slot_volume()
    items = {item["path"]: item["fieldRef"]["fieldPath"] for item in volume["downwardAPI"]["items"]}
    assert items == {"period-ms": f"metadata.annotations['{api.PERIOD_MS}']",
                     "offset-ms": f"metadata.annotations['{api.OFFSET_MS}']",
                     "epoch": f"metadata.annotations['{api.EPOCH}']"}
    assert [path for path, _ in SLOT_FILES] == list(items)
    assert volume["name"] == SLOT_VOLUME == slot_mount()["name"] and volume["downwardAPI"]["defaultMode"] == 0o644
    assert slot_mount() == {"name": "metronome-slot", "mountPath": "/etc/metronome", "readOnly": True}


def test_the_runtime_reads_where_the_webhook_mounts():
    from volcano_metronome import runtime

    assert runtime.DEFAULT_DIR == SLOT_DIR
    assert runtime.SLOT_FILES == tuple(path for path, _ in SLOT_FILES)


def test_volcano_pod_with_inherited_profile_is_gated():
    result, out = admit_pod(pod(dict(RESOLVED, **{api.VOLCANO_GROUP_NAME: "job-abc"}), init=True,
                                owners=[{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "job",
                                         "uid": "u", "controller": True}]))
    assert result.verdict == "patched"
    assert_gated(out, "PodGroup", "job-abc")
    assert out["metadata"]["annotations"][api.GANG_SIZE] == "4"


def test_kueue_batch_job_pod_is_gated_beside_kueues_gate():
    obj = pod(dict(RESOLVED), owners=[JOB_OWNER])
    obj["spec"]["schedulingGates"] = [{"name": api.KUEUE_TOPOLOGY_GATE}]
    _, out = admit_pod(obj)
    assert_gated(out, "Job", "train")
    assert out["spec"]["schedulingGates"] == [{"name": api.KUEUE_TOPOLOGY_GATE}, {"name": api.SCHEDULING_GATE}]


def test_user_env_entry_with_our_name_is_replaced_others_kept():
    _, out = admit_pod(pod(dict(RESOLVED), owners=[JOB_OWNER],
                           env=[{"name": "KEEP", "value": "1"}, {"name": api.ENV_OFFSET_MS, "value": "7"}]))
    env = out["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "KEEP", "value": "1"}
    assert [v["name"] for v in env].count(api.ENV_OFFSET_MS) == 1
    assert "value" not in next(v for v in env if v["name"] == api.ENV_OFFSET_MS)


def test_pod_of_a_directly_created_pod_group_takes_its_profile_from_the_cache():
    group = {"metadata": {"name": "pg", "namespace": "default",
                          "annotations": {api.PROFILE: profile_json(RESNET), api.PROFILE_SOURCE: "annotation",
                                          api.GANG_SIZE: "6"}}, "spec": {"minMember": 6}}
    ctx = Context(lookups=Lookups(pod_group=lambda ns, name: group if (ns, name) == ("default", "pg") else None))
    _, out = admit_pod(pod({api.VOLCANO_GROUP_NAME: "pg"}), ctx)
    assert_gated(out, "PodGroup", "pg")
    assert out["metadata"]["annotations"][api.PROFILE_SOURCE] == "annotation"
    assert out["metadata"]["annotations"][api.GANG_SIZE] == "6"
    result, _ = admit_pod(pod({api.VOLCANO_GROUP_NAME: "other"}), ctx)
    assert result.verdict == "allowed"


def test_kueue_plain_pod_group_uses_own_annotations_or_the_queue_default():
    labels = {api.KUEUE_POD_GROUP_NAME: "grp", api.KUEUE_QUEUE_NAME: "user-queue"}
    group_count = {"kueue.x-k8s.io/pod-group-total-count": "2"}
    _, out = admit_pod(pod(dict(group_count, **{api.MODEL: "resnet50"}), labels=dict(labels)))
    assert_gated(out, "Workload", "grp")
    assert out["metadata"]["annotations"][api.GANG_SIZE] == "2"
    ctx = Context(settings=parse_settings({"queueDefaults": {"user-queue": {"model": "resnet50"}}}))
    _, out = admit_pod(pod(dict(group_count), labels=dict(labels)), ctx)
    assert_gated(out, "Workload", "grp")
    assert out["metadata"]["annotations"][api.PROFILE_SOURCE] == "default"


def test_defaults_never_gate_pods_of_volcano_or_batch_jobs():
    ctx = Context(settings=parse_settings({"namespaceDefaults": {"default": {"model": "resnet50"}}}))
    for obj in (pod({api.VOLCANO_GROUP_NAME: "pg"}), pod(owners=[JOB_OWNER]), pod()):
        result, _ = admit_pod(obj, ctx)
        assert result.verdict == "allowed" and ops_of(result.review) == []


def test_profile_on_a_pod_outside_any_gang_is_reported_not_gated():
    result, out = admit_pod(pod({api.MODEL: "resnet50"}))
    assert result.verdict == "warned" and ops_of(result.review) == []
    assert "not gated" in result.review["response"]["warnings"][0]
    result, _ = admit_pod(pod({api.MODEL: "resnet50"}, owners=[JOB_OWNER]))
    assert result.verdict == "warned" and "only Jobs labelled" in result.review["response"]["warnings"][0]


def test_bad_profile_on_a_plain_pod_is_denied_on_a_controllers_pod_recorded():
    labels = {api.KUEUE_POD_GROUP_NAME: "grp"}
    result, _ = admit_pod(pod({api.MODEL: "nope"}, labels=labels))
    assert result.verdict == "denied"
    assert api.MODEL in result.review["response"]["status"]["message"]
    broken = {api.PROFILE: "{not json", api.VOLCANO_GROUP_NAME: "pg"}
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
    result, out = admit_pod(pod(broken, owners=[owner]))
    assert result.verdict == "warned"
    assert api.PROFILE in out["metadata"]["annotations"][api.PROFILE_ERROR]
    assert "schedulingGates" not in out["spec"]


def test_user_volumes_and_mounts_are_kept_beside_ours():
    obj = pod(dict(RESOLVED), owners=[JOB_OWNER], init=True)
    obj["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/etc"}]  # ours nests inside
    result, out = admit_pod(obj)
    assert result.verdict == "patched"
    assert out["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}, slot_volume()]
    assert out["spec"]["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/etc"}, slot_mount()]
    assert_gated(out, "Job", "train")


def test_a_user_volume_with_our_name_is_left_alone_with_a_warning():
    obj = pod(dict(RESOLVED), owners=[JOB_OWNER])
    obj["spec"]["volumes"] = [{"name": SLOT_VOLUME, "emptyDir": {}}]
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": SLOT_VOLUME, "mountPath": "/scratch"}]
    result, out = admit_pod(obj)
    assert result.verdict == "warned"
    assert f"already has a volume named {SLOT_VOLUME}" in result.review["response"]["warnings"][0]
    assert out["spec"]["volumes"] == [{"name": SLOT_VOLUME, "emptyDir": {}}]
    assert out["spec"]["containers"][0]["volumeMounts"] == [{"name": SLOT_VOLUME, "mountPath": "/scratch"}]
    assert "volumeMounts" not in out["spec"]["containers"][1]
    assert {"name": api.SCHEDULING_GATE} in out["spec"]["schedulingGates"]  # gated and wired all the same
    assert not schema_errors(out)


def test_a_container_mounting_something_else_at_our_path_is_skipped_with_a_warning():
    obj = pod(dict(RESOLVED), owners=[JOB_OWNER])
    obj["spec"]["volumes"] = [{"name": "cfg", "configMap": {"name": "c"}}]
    obj["spec"]["containers"][1]["volumeMounts"] = [{"name": "cfg", "mountPath": SLOT_DIR + "/"}]
    result, out = admit_pod(obj)
    assert result.verdict == "warned"
    warning = result.review["response"]["warnings"][0]
    assert "spec.containers[1] (side)" in warning and "'cfg'" in warning
    assert out["spec"]["containers"][0]["volumeMounts"] == [slot_mount()]
    assert out["spec"]["containers"][1]["volumeMounts"] == [{"name": "cfg", "mountPath": SLOT_DIR + "/"}]
    assert out["spec"]["volumes"] == [{"name": "cfg", "configMap": {"name": "c"}}, slot_volume()]
    assert not schema_errors(out)
    # When no container can mount it, the volume is not added either.
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "cfg", "mountPath": SLOT_DIR}]
    result, out = admit_pod(obj)
    assert len(result.review["response"]["warnings"]) == 2
    assert out["spec"]["volumes"] == [{"name": "cfg", "configMap": {"name": "c"}}]


@pytest.mark.parametrize("obj", [
    pod(dict(RESOLVED), owners=[JOB_OWNER], init=True),
    pod({api.MODEL: "resnet50"}, labels={api.KUEUE_POD_GROUP_NAME: "grp"}),
])
def test_gating_is_idempotent(obj):
    _, once = admit_pod(copy.deepcopy(obj))
    result, twice = admit_pod(copy.deepcopy(once))
    assert result.verdict == "allowed" and twice == once
