"""Creating the member pods of a directly created PodGroup, as the tests (and users) must."""

from __future__ import annotations

from typing import Any, Callable

from tests.controller.cluster import wait_until
from volcano_metronome import api, kube
from volcano_metronome.controller import objects


def create_member(k: kube.Kube, pod: dict[str, Any], logs: Callable[[], str]) -> dict[str, Any]:
    """Create one member pod once our webhook gates it.

    The webhook learns about a PodGroup created directly (not through a Volcano Job) from its watch,
    milliseconds after the PodGroup exists; a member arriving before that would not be gated (a
    documented limitation). A dry-run create, which goes through the webhook without side effects,
    tells when it is ready.
    """
    namespace = pod["metadata"]["namespace"]

    def gated_on_dry_run() -> bool:
        answer = k.request("POST", kube.PODS.path(namespace), query=[("dryRun", "All")], body=pod)
        return api.SCHEDULING_GATE in objects.gates(answer)

    wait_until(gated_on_dry_run, 30, lambda: f"the webhook gating members of its PodGroup\n{logs()}")
    created = k.create(kube.PODS, pod, namespace)
    assert api.SCHEDULING_GATE in objects.gates(created), f"{objects.name(pod)} created ungated"
    return created
