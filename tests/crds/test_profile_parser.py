"""The CRDs' profile schema and the one profile parser (volcano_metronome.shapes.profiles) cannot drift:
whatever the parser accepts, the schema accepts; whatever the schema refuses, the parser refuses.

(The parser refuses more: the CEL rules, which jsonschema cannot evaluate, such as windows inside the
period; the integration tier checks those on a real kube-apiserver.)
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.crds.crd_schema import errors, load_crds
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.shapes.profiles import profile_from_spec

W = {"startMs": 0, "lenMs": 20, "gbps": 10}
PROFILES: list[dict[str, Any]] = [
    {"periodMs": 100, "windows": [W]},
    {"periodMs": 100, "windows": [W], "jitterMs": 5},
    {"periodMs": 100, "windows": [W, {"startMs": 50, "lenMs": 10, "gbps": 6400}]},
    {"periodMs": 3600000, "windows": [W]},
    {"periodMs": 3600001, "windows": [W]},
    {"periodMs": 0, "windows": [W]},
    {"periodMs": -1, "windows": [W]},
    {"periodMs": 100, "windows": []},
    {"periodMs": 100},
    {"windows": [W]},
    {"periodMs": "100", "windows": [W]},
    {"periodMs": 100, "windows": [{**W, "gbps": 0}]},
    {"periodMs": 100, "windows": [{**W, "gbps": 6401}]},
    {"periodMs": 100, "windows": [{**W, "lenMs": 0}]},
    {"periodMs": 100, "windows": [{**W, "startMs": -1}]},
    {"periodMs": 100, "windows": [{"startMs": 0, "lenMs": 20}]},
    {"periodMs": 100, "windows": [W], "jitterMs": -1},
    {"period_ms": 100, "windows": [W]},
    {"periodMs": 100, "windows": [{"start_ms": 0, "len_ms": 20, "gbps": 10}]},
    {"periodMs": 100, "windows": [W], "extra": 1},
    {"periodMs": 100, "windows": [W], "collective": "ring"},
    {"periodMs": 100, "windows": [W], "collective": "all-to-all"},
    {"periodMs": 100, "windows": [W], "collective": "tree"},
    {"periodMs": 100, "windows": [W], "collective": "All-To-All"},
    {"periodMs": 100, "windows": [W], "collective": 1},
]


def _claim(profile: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "metronome.dev/v1alpha1", "kind": "STBandwidthClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"profile": profile, "gangRef": {"apiVersion": "scheduling.volcano.sh/v1beta1",
                                                     "kind": "PodGroup", "name": "g"}}}


@pytest.mark.parametrize("profile", PROFILES, ids=[str(p) for p in PROFILES])
def test_parser_and_claim_schema_agree(profile: dict[str, Any]) -> None:
    schema_errors = errors(load_crds()["STBandwidthClaim"], _claim(profile))
    try:
        profile_from_spec(profile, "spec.profile")
        parsed = True
    except InvalidInput:
        parsed = False
    if parsed:
        assert not schema_errors, f"the parser accepts what the CRD refuses: {schema_errors}"
    if schema_errors:
        assert not parsed, "the CRD refuses what the parser accepts"
