"""The end-to-end tier: the whole local stack for the tier's tests (``volcano_metronome.devtools.stack``).

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok with a leaf-spine fabric of fake
GPU nodes (2 racks x 4 nodes x 8 ``nvidia.com/gpu``, one zone), the Kueue manager, our webhook and
our controller, all as local processes. Every test here is marked ``e2e`` and deselected unless
METRONOME_E2E=1 (tests/conftest.py). A program that is not built skips the tier locally and fails
it under CI=true.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
import uuid
from typing import Callable, Iterator

import pytest

from tests.e2e.history import History
from tests.e2e.manifests import LAYOUT
from volcano_metronome import kube
from volcano_metronome.devtools import binaries, sources
from volcano_metronome.devtools.stack import COMPONENTS, Stack


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The whole stack, started once and stopped after the tier's last test: a dozen programs left running
    load the CPU and loopback for the rest of the session, and a later test fitting real traffic on ``lo``
    (tests/profiling/test_collective.py) then found it aperiodic. Its logs are in the session's temporary
    directory, or in ``$METRONOME_E2E_DIR/<start time>`` (kept after the run, for reading the components' logs)."""
    chosen = os.environ.get("METRONOME_E2E_DIR")
    directory = (pathlib.Path(chosen) / time.strftime("%Y%m%d-%H%M%S")) if chosen else tmp_path_factory.mktemp("e2e-stack")
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[stack {time.monotonic() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    local = Stack(directory, layout=LAYOUT, required=COMPONENTS)
    try:
        local.start(progress)
    except binaries.MissingBinary as exc:
        message = f"{exc}; build them with `METRONOME_E2E=1 volcano-metronome tools build`"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and a program of the e2e tier is missing: {message}", pytrace=False)
        pytest.skip(message)
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="package")
def k(stack: Stack) -> Iterator[kube.Kube]:
    """A client of the stack's API server (admin)."""
    client = kube.connect(str(stack.kubeconfig_path))
    yield client
    client.close()


@pytest.fixture(scope="session")
def upstream() -> pathlib.Path:
    """``shared/upstream``: the example manifests are read from there, never copied."""
    return sources.upstream_dir()


@pytest.fixture
def namespace(k: kube.Kube) -> Iterator[str]:
    """A fresh namespace, deleted afterwards (the namespace controller runs here) until it is gone."""
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    k.create(kube.NAMESPACES, {"metadata": {"name": name}})
    yield name
    delete_namespace(k, name)


@pytest.fixture
def history(k: kube.Kube) -> Iterator[Callable[..., History]]:
    """``history(resource, namespace)``: every version of those objects from now on, in order."""
    started: list[History] = []

    def watch(resource: kube.Resource, namespace: str | None = None) -> History:
        recorder = History(k, resource, namespace).start()
        started.append(recorder)
        return recorder

    yield watch
    for recorder in started:
        recorder.stop()


def delete_namespace(k: kube.Kube, name: str, timeout: float = 90.0) -> None:
    """Delete ``name`` and wait until the namespace controller has finished with it."""
    k.delete(kube.NAMESPACES, None, name)
    deadline = time.monotonic() + timeout
    while k.get(kube.NAMESPACES, None, name) is not None:
        assert time.monotonic() < deadline, f"namespace {name} still terminating after {timeout:.0f}s"
        time.sleep(0.5)
