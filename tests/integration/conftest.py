"""Fixtures of the integration tier: a real etcd + kube-apiserver for the whole session.

Every test in this directory carries the ``integration`` marker. Without the binaries the tier is
skipped on a developer machine and fails in CI (``CI=true``), where `.ci/prepare` must have built
them: a silently skipped tier would look green while testing nothing.
"""

from __future__ import annotations

import os
import pathlib
from typing import TYPE_CHECKING, Iterator

import pytest

from volcano_metronome.devtools import binaries
from volcano_metronome.devtools.controlplane import ControlPlane

if TYPE_CHECKING:
    from tests.controller.cluster import Cluster, ControllerProcess

_HERE = pathlib.Path(__file__).resolve().parent
CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark this directory's tests ``integration``.

    Those also marked ``e2e`` (they need kwok) are deselected unless METRONOME_E2E=1 by the
    suite-wide rule in tests/conftest.py.
    """
    for item in items:
        if _HERE in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


def require_binaries(*names: str) -> dict[str, pathlib.Path]:
    """Paths of the named programs; skip (locally) or fail (CI=true) when one is not built."""
    found: dict[str, pathlib.Path] = {}
    missing: list[str] = []
    for name in names:
        try:
            found[name] = binaries.binary_path(name)
        except binaries.MissingBinary as exc:
            missing.append(str(exc))
    if missing:
        message = "; ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and a binary is missing: {message}", pytrace=False)
        pytest.skip(message)
    return found


@pytest.fixture(scope="session")
def control_plane_binaries() -> dict[str, pathlib.Path]:
    """etcd and kube-apiserver, for tests that start control planes of their own."""
    return require_binaries(*CONTROL_PLANE_BINARIES)


@pytest.fixture(scope="session")
def kwok_binary() -> pathlib.Path:
    """kwok (e2e tier: built with METRONOME_E2E=1 or `volcano-metronome tools build kwok`)."""
    return require_binaries("kwok")["kwok"]


@pytest.fixture(scope="session")
def control_plane(control_plane_binaries: dict[str, pathlib.Path]) -> Iterator[ControlPlane]:
    """A started control plane shared by the session; stopped at the end."""
    plane = ControlPlane()
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def kubeconfig(control_plane: ControlPlane) -> pathlib.Path:
    """The control plane's kubeconfig, with our CRDs installed."""
    from tests.controller.cluster import ensure_crds

    ensure_crds(control_plane.kubeconfig_path)
    return control_plane.kubeconfig_path


@pytest.fixture
def cluster(kubeconfig: pathlib.Path) -> Iterator["Cluster"]:
    """A client of the control plane for one test."""
    from tests.controller.cluster import Cluster

    c = Cluster(kubeconfig)
    yield c
    c.close()


@pytest.fixture
def controllers() -> Iterator[list["ControllerProcess"]]:
    """Controller processes a test starts; each stopped when the test ends."""
    started: list[ControllerProcess] = []
    yield started
    for ctl in started:
        ctl.stop()


@pytest.fixture(scope="session")
def upstream_dir() -> pathlib.Path:
    """``shared/upstream`` (CRDs and example manifests copied byte for byte from upstream)."""
    from volcano_metronome.devtools.sources import upstream_dir as find

    return find()
