"""The fault suite: real servers under the faults of issue 13. Every test here is ``integration`` (it
starts a real webhook, or a real etcd + kube-apiserver through the integration tier's fixtures)."""

from __future__ import annotations

import pathlib
import pytest

from tests.integration import conftest as integration

# The integration tier's fixtures (session-scoped: this package gets a control plane of its own).
control_plane_binaries = integration.control_plane_binaries
control_plane = integration.control_plane
kubeconfig = integration.kubeconfig
cluster = integration.cluster
controllers = integration.controllers

_HERE = pathlib.Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


