"""The dev cluster's pure parts: the fake fabric, where things are found, manifest loading."""

from __future__ import annotations

import pathlib

import pytest

from volcano_metronome.core.errors import MetronomeError
from volcano_metronome.devtools import devcluster, fabric, sources
from volcano_metronome.devtools.apply import Resource, load_manifests


def test_fake_nodes_form_racks_and_zones_with_gpus() -> None:
    nodes = fabric.fake_nodes(fabric.Layout(racks=4, nodes_per_rack=3, gpus_per_node=4))
    assert len(nodes) == 12
    assert len({n["metadata"]["name"] for n in nodes}) == 12
    racks: dict[str, set[str]] = {}
    for node in nodes:
        labels = node["metadata"]["labels"]
        racks.setdefault(labels[fabric.RACK_LABEL], set()).add(labels[fabric.ZONE_LABEL])
        assert node["metadata"]["annotations"][fabric.KWOK_ANNOTATION] == "fake"
        assert node["status"]["allocatable"][fabric.GPU_RESOURCE] == "4"
        assert labels["kubernetes.io/hostname"] == node["metadata"]["name"]
    # Four racks, each wholly inside one zone, two racks per zone.
    assert {rack: zones.pop() for rack, zones in racks.items()} == {
        "rack-0": "zone-0",
        "rack-1": "zone-0",
        "rack-2": "zone-1",
        "rack-3": "zone-1",
    }


def test_state_dir_default_and_override(tmp_path: pathlib.Path) -> None:
    assert devcluster.state_dir({"METRONOME_DEV_CLUSTER_DIR": str(tmp_path)}) == tmp_path
    assert devcluster.state_dir({}) == pathlib.Path.home() / ".cache" / "volcano-metronome" / "dev-cluster"


def test_our_crds_are_top_level_yaml_only(tmp_path: pathlib.Path) -> None:
    (tmp_path / "crds" / "examples").mkdir(parents=True)
    (tmp_path / "crds" / "x.yaml").write_text("")
    (tmp_path / "crds" / "examples" / "e.yaml").write_text("")
    assert [p.name for p in sources.our_crd_files(tmp_path)] == ["x.yaml"]


def test_load_manifests_expands_lists_and_skips_empty_documents(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"
        "---\n"
        "---\n"
        "apiVersion: v1\nkind: List\nitems:\n"
        "- {apiVersion: v1, kind: ConfigMap, metadata: {name: b, namespace: keep}}\n"
    )
    objects = load_manifests(path, namespace="ns")
    assert [(o["metadata"]["name"], o["metadata"]["namespace"]) for o in objects] == [("a", "ns"), ("b", "keep")]
    with pytest.raises(MetronomeError, match="cannot read manifests"):
        load_manifests(tmp_path / "missing.yaml")


def test_resource_paths() -> None:
    pods = Resource("v1", "pods", namespaced=True)
    assert pods.path("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    crds = Resource("apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False)
    assert crds.path(None, "x.y") == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x.y"
    with pytest.raises(MetronomeError, match="namespaced"):
        pods.path(None, "p")
