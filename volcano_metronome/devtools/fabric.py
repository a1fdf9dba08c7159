"""The fake GPU fabric of the local clusters: kwok nodes in racks behind leaf switches, racks in zones.

Labels are the ones the controller reads by default (``rackLabel`` = ``metronome.dev/rack``,
``zoneLabel`` = ``topology.kubernetes.io/zone``), and every node offers ``nvidia.com/gpu``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RACK_LABEL = "metronome.dev/rack"
ZONE_LABEL = "topology.kubernetes.io/zone"
GPU_RESOURCE = "nvidia.com/gpu"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class Layout:
    """The fake fabric: ``racks`` leaf switches with ``nodes_per_rack`` nodes each, two racks per zone."""

    racks: int = 4
    nodes_per_rack: int = 4
    gpus_per_node: int = 8
    racks_per_zone: int = 2

    @property
    def nodes(self) -> int:
        """How many nodes the fabric has."""
        return self.racks * self.nodes_per_rack


def node_name(rack: int, index: int) -> str:
    """The name of node ``index`` of rack ``rack``."""
    return f"gpu-r{rack}-n{index}"


def fake_nodes(layout: Layout = Layout()) -> list[dict[str, Any]]:
    """Node objects for kwok: rack and zone labels, GPUs, CPU and memory in allocatable."""
    nodes = []
    for rack in range(layout.racks):
        zone = f"zone-{rack // layout.racks_per_zone}"
        for index in range(layout.nodes_per_rack):
            name = node_name(rack, index)
            resources = {
                "cpu": "64",
                "memory": "512Gi",
                "pods": "110",
                GPU_RESOURCE: str(layout.gpus_per_node),
            }
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                        "labels": {
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            "type": "kwok",
                            RACK_LABEL: f"rack-{rack}",
                            ZONE_LABEL: zone,
                        },
                    },
                    "status": {"allocatable": resources, "capacity": resources},
                }
            )
    return nodes


def node_summary(layout: Layout) -> str:
    """One line describing the fake fabric."""
    return (
        f"{layout.nodes} nodes ({layout.gpus_per_node} x {GPU_RESOURCE} each) in {layout.racks} racks "
        f"({RACK_LABEL}), {layout.racks_per_zone} racks per zone ({ZONE_LABEL})"
    )


def ready_status(node: dict[str, Any], now: str) -> dict[str, Any]:
    """``node``'s status subresource reporting Ready at ``now`` (RFC 3339), for nodes no kwok keeps alive."""
    condition = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake node",
                 "lastHeartbeatTime": now, "lastTransitionTime": now}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node["metadata"]["name"]},
            "status": {**node["status"], "conditions": [condition]}}
