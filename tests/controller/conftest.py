"""Fixtures shared by the controller's in-memory tests."""

from __future__ import annotations

import pytest

from tests.controller import builders as b
from tests.controller.fake import FakeApi
from volcano_metronome import kube


@pytest.fixture
def fake() -> FakeApi:
    """An in-memory API with 8 nodes of 8 GPUs in 2 racks (modules with another cluster define their own)."""
    f = FakeApi()
    for i in range(8):
        f.put(kube.NODES, b.node(f"n{i}", gpus=8, rack=f"r{i // 4}"))
    return f
