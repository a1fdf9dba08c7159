"""A Volcano Job's PodGroup decided before its pods, whose pods do not come in time: its claim is released.

Real kube-apiserver + etcd, our webhook (HTTPS, real certificate) and our controller as a subprocess with
``podsTimeoutSeconds: 4``. No Volcano runs, so nothing enqueues the PodGroup: as with a full queue, its pods
are not created. The claim decided for it must be released after the timeout (``Placed=False``, reason
``PodsTimeout``, a Warning Event on the PodGroup, the metric), stay released while no pod comes, and the
gang must be decided again once its pods are created: gated by the webhook, then pinned and ungated by the
controller.
"""

from __future__ import annotations

import pathlib
import time

from tests.controller.cluster import Cluster, ControllerProcess, start_controller, wait_until
from tests.integration.test_placed_pods import pods_as_volcano_creates, register_volcano, volcano_job_with_group
from volcano_metronome import kube
from volcano_metronome.controller import objects
from volcano_metronome.shapes.times import parse_time

TIMEOUT_S = 4


def test_a_podgroup_whose_pods_never_come_is_released_then_decided_again_with_its_pods(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess],
        webhook: tuple[str, bytes]) -> None:
    cluster.nodes(3, gpus=8)
    ns = cluster.namespace()
    hook = register_volcano(cluster, ns, *webhook)
    try:
        group = volcano_job_with_group(cluster, ns, replicas=4, gpus=4)
        ctl = start_controller(cluster, tmp_path, controllers, ns, extra_settings={"podsTimeoutSeconds": TIMEOUT_S})
        name = f"podgroup-{group}"
        claim = wait_until(lambda: (c := cluster.claims(ns).get(name)) and (c.get("status") or {}).get("nodes") and c,
                           60, lambda: f"the PodGroup decided without pods\n{ctl.logs()}")
        decided_at = parse_time(claim["status"]["decidedAt"])
        assert decided_at is not None and not cluster.k.list(kube.PODS, ns)["items"]

        def released() -> dict | None:
            c = cluster.claims(ns)[name]
            return c if not c["status"].get("nodes") else None

        claim = wait_until(released, 30, lambda: f"the claim released after {TIMEOUT_S} s\n{ctl.logs()}")
        seen = time.time()
        placed = objects.condition(claim, "Placed")
        assert placed is not None and placed["status"] == "False" and placed["reason"] == "PodsTimeout"
        assert f"podsTimeoutSeconds ({TIMEOUT_S} s)" in placed["message"]
        released_at = parse_time(placed["lastTransitionTime"])
        assert released_at is not None and released_at >= decided_at + TIMEOUT_S  # not before its time
        assert seen - (decided_at + TIMEOUT_S) < 10  # and soon after it, without waiting for a resync
        events = wait_until(lambda: [e for e in cluster.k.list(kube.EVENTS, ns)["items"]
                                     if e["reason"] == "PodsTimeout"], 10, "the PodsTimeout Event")
        assert len(events) == 1 and events[0]["type"] == "Warning"
        assert events[0]["regarding"]["kind"] == "PodGroup" and events[0]["regarding"]["name"] == group
        wait_until(lambda: ctl.metric("metronome_controller_pods_timeout_releases_total") == 1.0, 10,
                   "the release counted")

        # Still no pods: the gang waits for them (not decided again), however many cycles run.
        cycles = "metronome_controller_cycle_seconds_count"
        start = ctl.metric(cycles) or 0
        cluster.k.patch(kube.PODGROUPS, ns, group, {"metadata": {"labels": {"nudge": "1"}}})  # wake it
        wait_until(lambda: (ctl.metric(cycles) or 0) >= start + 2, 60, lambda: f"two more cycles\n{ctl.logs()}")
        assert objects.resource_version(cluster.claims(ns)[name]) == objects.resource_version(claim)

        # Volcano enqueues the group at last and creates the pods: gated by the webhook (the claim holds no
        # nodes), then decided again and released by the controller.
        created = [cluster.k.create(kube.PODS, p, ns) for p in pods_as_volcano_creates(ns, group, replicas=4, gpus=4)]
        assert all(objects.gated_by_us(p) for p in created), [p["spec"].get("schedulingGates") for p in created]

        def placed_again() -> dict | None:
            c = cluster.claims(ns)[name]
            return c if c["status"].get("nodes") and objects.condition(c, "Placed")["status"] == "True" else None

        claim = wait_until(placed_again, 60, lambda: f"decided again with its pods\n{ctl.logs()}")
        nodes = tuple(claim["status"]["nodes"])

        def ungated() -> bool:
            return all(not objects.gates(p) and objects.pinned_nodes(p) == nodes
                       for p in cluster.k.list(kube.PODS, ns)["items"])

        wait_until(ungated, 60, lambda: f"the pods pinned and ungated\n{ctl.logs()}")
        assert "Traceback" not in ctl.logs()
    finally:
        cluster.k.request("DELETE", kube.MUTATING_WEBHOOKS.path(None, hook))
