"""A PodGroup created directly with pods that ask for the default scheduler: kube-scheduler binds them.

The path of users who run kube-scheduler beside Volcano's PodGroups (the real Volcano path is
tests/e2e/test_volcano.py). Real: the upstream ``examples/volcano/podgroup.yaml`` (with profile
annotations) through our webhook, pods carrying ``scheduling.k8s.io/group-name`` gated at creation,
our controller's placement, kube-scheduler honouring the node affinity our controller wrote, kwok.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from tests.e2e import manifests
from tests.e2e.checks import assert_bound_as_decided, bound, decided, running
from tests.controller.cluster import wait_until
from tests.e2e.members import create_member
from volcano_metronome import api, kube
from volcano_metronome.admission.pods import slot_mount, slot_volume
from volcano_metronome.controller import objects
from volcano_metronome.devtools.stack import Stack

pytestmark = pytest.mark.upstream_examples("volcano")  # reads examples/volcano (tests/e2e/manifests.py)


def test_volcano_podgroup_is_gated_placed_and_bound_by_kube_scheduler_standing_in_for_volcano(
        stack: Stack, k: kube.Kube, upstream: pathlib.Path, namespace: str) -> None:
    def logs() -> str:
        return "\n".join(stack.logs(name) for name in ("controller", "webhook", "kube-scheduler"))

    group = manifests.podgroup(upstream, namespace=namespace, members=2, annotations={api.MODEL: "resnet50"})
    created = k.create(kube.PODGROUPS, group, namespace)
    annotations = objects.annotations_of(created)
    assert annotations[api.GANG_SIZE] == "2" and annotations[api.PROFILE_SOURCE] == "catalog"
    profile = json.loads(annotations[api.PROFILE])
    name = objects.name(created)
    assert name == "test-pg"

    members = [create_member(k, pod, logs) for pod in manifests.volcano_pods(created, gpus_per_pod=8)]
    for pod in members:
        assert pod["spec"]["schedulerName"] == "default-scheduler"
        assert objects.annotations_of(pod)[api.GANG_NAME] == name
        assert objects.labels(pod)[api.MANAGED_LABEL] == "true"

    def current() -> list[dict[str, Any]]:
        return list(k.list(kube.PODS, namespace)["items"])

    wait_until(lambda: bound(current()) and running(current()), 90,
               lambda: f"the members bound and running\n{logs()}")
    claim = k.get(kube.CLAIMS, namespace, f"podgroup-{name}")
    assert claim is not None and decided(claim)
    assert claim["status"]["periodMs"] == profile["period_ms"]
    assert len(claim["status"]["nodes"]) == 2  # 8 GPUs each: one member per node
    assert_bound_as_decided(current(), claim)
    assert claim["status"]["locked"] is False  # alone on its links: it runs free, its pods carry no offset
    for pod in current():
        env = {e["name"]: e for e in pod["spec"]["containers"][0].get("env") or []}
        # The training process reads its timing through the downward API from these annotations: env
        # vars at container start, and files the kubelet keeps up to date as the controller changes them.
        assert env[api.ENV_OFFSET_MS]["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.annotations['{api.OFFSET_MS}']"
        assert slot_volume() in pod["spec"]["volumes"]
        assert slot_mount() in pod["spec"]["containers"][0]["volumeMounts"]
