"""The fault suite: real servers under the faults of issue 13. Every test here is ``integration`` (it
starts a real webhook, or a real etcd + kube-apiserver through the integration tier's fixtures)."""

from __future__ import annotations

import pathlib
from typing import Iterator

import pytest

from tests.controller.cluster import Cluster, ControllerProcess, ensure_crds
from tests.integration import conftest as integration
from volcano_metronome.devtools.controlplane import ControlPlane

# The integration tier's fixtures (session-scoped: this package gets a control plane of its own).
control_plane_binaries = integration.control_plane_binaries
control_plane = integration.control_plane

_HERE = pathlib.Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def kubeconfig(control_plane: ControlPlane) -> pathlib.Path:
    ensure_crds(control_plane.kubeconfig_path)
    return control_plane.kubeconfig_path


@pytest.fixture
def cluster(kubeconfig: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(kubeconfig)
    yield c
    c.close()


@pytest.fixture
def controllers() -> Iterator[list[ControllerProcess]]:
    started: list[ControllerProcess] = []
    yield started
    for ctl in started:
        ctl.stop()
