"""Two gangs that cannot avoid sharing a NIC communicate at interleaved phase offsets.

The fabric has 8 nodes of 8 GPUs. Gang A has 9 members and gang B 7, each member using 4 GPUs:
together they take all 64 GPUs, at most two members per node, and A's odd member count leaves half
of one node that only B can fill. Whatever the placement, some node hosts members of both gangs,
so both load its NIC. Each bursts 60 ms of every 200 ms at 60 Gbps on 100 Gbps NICs: at the same
phase the shared NIC would carry 120 Gbps; the controller must give them offsets whose windows do
not overlap. Members are Volcano-shaped pods bound by kube-scheduler (the Volcano scheduler cannot
be built here; see test_volcano_shaped.py).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from tests.e2e import manifests
from tests.e2e.manifests import LAYOUT
from tests.e2e.checks import assert_bound_as_decided, bound, decided, gpus_in_use, held_claims, running
from tests.controller.cluster import wait_until
from tests.e2e.members import create_member
from volcano_metronome import api, kube
from volcano_metronome.devtools.stack import Stack

pytestmark = pytest.mark.upstream_examples("volcano")  # reads examples/volcano (tests/e2e/manifests.py)

PERIOD_MS = 200
WINDOW = {"start_ms": 0, "len_ms": 60, "gbps": 60}
PROFILE = {api.PERIOD_MS: str(PERIOD_MS), api.WINDOWS: json.dumps([WINDOW])}
GANGS = {"gang-a": 9, "gang-b": 7}
GPUS_PER_MEMBER = 4


def phase(claim: dict[str, Any]) -> float:
    """Where the gang's window starts inside its period, on the common time axis (epochs are all
    multiples of the hyperperiod, which every period divides)."""
    status = claim["status"]
    return float((status["epoch"] + status["offsetMs"]) % status["periodMs"])


def test_two_gangs_sharing_a_nic_get_interleaved_offsets(
        stack: Stack, k: kube.Kube, upstream: pathlib.Path, namespace: str) -> None:
    def logs() -> str:
        return "\n".join(stack.logs(name) for name in ("controller", "kube-scheduler"))

    assert sum(GANGS.values()) * GPUS_PER_MEMBER == LAYOUT.nodes * LAYOUT.gpus_per_node
    # Earlier tests' gangs must be gone for the arithmetic above to force sharing.
    wait_until(lambda: gpus_in_use(k) == 0 and not held_claims(k), 90,
               lambda: f"a free fabric (held: {held_claims(k)}, GPUs in use: {gpus_in_use(k)})")

    for name, members in GANGS.items():
        group = manifests.podgroup(upstream, namespace=namespace, name=name, members=members, annotations=PROFILE)
        created = k.create(kube.PODGROUPS, group, namespace)
        for pod in manifests.volcano_pods(created, gpus_per_pod=GPUS_PER_MEMBER):
            create_member(k, pod, logs)

    def pods_of(gang: str) -> list[dict[str, Any]]:
        return list(k.list(kube.PODS, namespace, label_selector=f"{manifests.VOLCANO_JOB_NAME}={gang}")["items"])

    wait_until(lambda: all(bound(pods_of(g)) and running(pods_of(g)) for g in GANGS), 120,
               lambda: f"both gangs bound and running\n{logs()}")
    claims = {gang: k.get(kube.CLAIMS, namespace, f"podgroup-{gang}") for gang in GANGS}
    for gang, claim in claims.items():
        assert claim is not None and decided(claim), gang
        assert claim["status"]["feasible"] is True, claim["status"]
        assert claim["status"]["predictedOverflowGbpsMs"] == 0, claim["status"]
        assert_bound_as_decided(pods_of(gang), claim)
    a, b = claims["gang-a"], claims["gang-b"]
    assert a is not None and b is not None

    shared = {p["spec"]["nodeName"] for p in pods_of("gang-a")} & {p["spec"]["nodeName"] for p in pods_of("gang-b")}
    assert shared, "the gangs share no node: the fabric arithmetic above is wrong"
    for node in shared:  # the controller knew: both decisions list that node's NIC among their links
        for claim in (a, b):
            assert any(link.startswith(f"nic:{node}:") for link in claim["status"]["links"]), (node, claim["status"])
    # Sharing a NIC, both align their bursts (whichever was placed first was locked by the other).
    assert a["status"]["locked"] is True and b["status"]["locked"] is True
    assert a["status"]["offsetMs"] != b["status"]["offsetMs"]
    gap = (phase(b) - phase(a)) % PERIOD_MS
    # Windows of 60 ms in a 200 ms period interleave when each starts at least 60 ms after the other.
    assert WINDOW["len_ms"] <= gap <= PERIOD_MS - WINDOW["len_ms"], (
        f"windows overlap on the NICs of {sorted(shared)}: phases {phase(a)} and {phase(b)} ms")
