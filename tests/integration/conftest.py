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


@pytest.fixture
def webhook(cluster: "Cluster", tmp_path: pathlib.Path) -> Iterator[tuple[str, bytes]]:
    """Our webhook on loopback (HTTPS, a real certificate): (base URL, CA PEM); stopped afterwards."""
    import ssl
    import subprocess
    import urllib.request

    from tests.controller.cluster import free_port, wait_until
    from volcano_metronome.certs import pki
    from volcano_metronome.devtools import components, sources

    certs = tmp_path / "certs"
    ca = pki.make_ca("placed-test-ca")
    ca.write(certs / "ca.crt", certs / "ca.key")
    pki.make_serving_cert(ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"]).write(certs / "tls.crt",
                                                                                          certs / "tls.key")
    port = free_port()
    args = components.webhook_args(cert_dir=certs, port=port, kubeconfig=cluster.kubeconfig,
                                   metrics_dir=tmp_path / "metrics")
    log = open(tmp_path / "webhook.log", "ab")
    proc = subprocess.Popen(args + ["--access-log", "off"], stdout=log, stderr=subprocess.STDOUT,
                            env=components.python_env(sources.repo_root()), start_new_session=True)
    log.close()
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        wait_until(ready, 60, lambda: f"webhook ready\n{(tmp_path / 'webhook.log').read_text()[-3000:]}")
        yield f"https://127.0.0.1:{port}", (certs / "ca.crt").read_bytes()
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
