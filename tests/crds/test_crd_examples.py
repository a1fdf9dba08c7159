"""The example custom resources validate; the invalid cases fail where they should; the scheduling
core agrees with the CRDs about which profiles are valid."""

from __future__ import annotations

import copy
import pathlib
import re
from typing import Any

import pytest
import yaml

from tests.crds.crd_schema import INVALID_CASES, camel_to_snake, errors, example_objects, load_crds, version_schema
from volcano_metronome import api
from volcano_metronome.catalog import builtin
from volcano_metronome.controller.deciding import HELD_FOR_CONTENTION, no_fit_category
from volcano_metronome.core.holding import HELD
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile
from volcano_metronome.core.topology import duplex
from volcano_metronome.shapes.refs import claim_name
from volcano_metronome.shapes.times import parse_time

CRDS = load_crds()
EXAMPLES = list(example_objects())
CASES: list[dict[str, Any]] = yaml.safe_load(INVALID_CASES.read_text())


def _id(item: tuple[pathlib.Path, dict[str, Any]]) -> str:
    return f"{item[0].name}:{item[1]['metadata']['name']}"


def _dig(obj: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj[part]
    return obj


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Fill defaults the way the API server does: a missing property with a default gets it, recursively."""
    if isinstance(value, dict):
        result = dict(value)
        for name, sub in schema.get("properties", {}).items():
            if name not in result and "default" in sub:
                result[name] = copy.deepcopy(sub["default"])
            if name in result:
                result[name] = apply_defaults(sub, result[name])
        return result
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], item) for item in value]
    return value


def test_every_kind_has_examples() -> None:
    kinds = [obj["kind"] for _, obj in EXAMPLES]
    assert set(kinds) == set(CRDS)
    assert all(kinds.count(kind) >= 2 for kind in CRDS)


@pytest.mark.parametrize("item", EXAMPLES, ids=_id)
def test_example_validates(item: tuple[pathlib.Path, dict[str, Any]]) -> None:
    _, obj = item
    assert obj["apiVersion"] == api.API_VERSION
    assert errors(CRDS[obj["kind"]], obj) == []
    namespaced = CRDS[obj["kind"]]["spec"]["scope"] == "Namespaced"
    assert ("namespace" in obj["metadata"]) == namespaced


@pytest.mark.parametrize("item", [e for e in EXAMPLES if e[1]["kind"] == "STBandwidthClaim"], ids=_id)
def test_example_claim_profiles_are_accepted_by_the_core(item: tuple[pathlib.Path, dict[str, Any]]) -> None:
    profile = Profile.from_mapping(camel_to_snake(item[1]["spec"]["profile"]))
    assert profile.period_ms == item[1]["spec"]["profile"]["periodMs"]


def test_example_default_profiles_are_accepted_by_the_core() -> None:
    catalog = builtin()
    seen = set()
    for _, obj in EXAMPLES:
        default = obj.get("spec", {}).get("defaultProfile")
        if default is None:
            continue
        if "model" in default:
            assert default["model"] in catalog
            seen.add("model")
        else:
            Profile.from_mapping(camel_to_snake(default))
            seen.add("explicit")
    assert seen == {"model", "explicit"}


def test_example_queue_policies_are_accepted_by_the_controller() -> None:
    """What the API server admits the controller must take too, or the policy would govern nothing."""
    from volcano_metronome.controller.queuepolicy import parse
    from volcano_metronome.core.grid import SlotGrid

    views = [parse(obj, SlotGrid(), 100.0) for _, obj in EXAMPLES if obj["kind"] == "QueuePolicy"]
    assert [v.error for v in views] == [""] * len(views)
    assert any(v.policy.traffic_classes == 3 and v.traffic_classes[1] == (("NCCL_IB_TC", "74"),) for v in views)


def test_placed_example_status_is_consistent() -> None:
    placed = next(obj for _, obj in EXAMPLES if "nodes" in obj.get("status", {}))
    status = placed["status"]
    assert len(status["nodes"]) == len(status["members"])
    assert 0 <= status["offsetMs"] < status["periodMs"]
    # As the controller writes it (controller/reconcile.py, _place): its claim name, its link names, its conditions.
    ref = placed["spec"]["gangRef"]
    assert placed["metadata"]["name"] == claim_name(ref["kind"], ref["name"])
    assert placed["metadata"]["labels"] == {api.MANAGED_LABEL: "true"}
    assert status["links"] == [link.name for node in status["nodes"] for link in duplex(f"nic:{node}", 100.0, [node], 0)]
    assert {(c["type"], c["status"], c["reason"]) for c in status["conditions"]} == {
        ("Placed", "True", "Placed"), ("NoFit", "False", "Placed")}


def test_held_example_status_is_consistent() -> None:
    """As the controller writes a held gang's claim (controller/reconcile.py, _no_fit): no nodes, heldSince, and the
    NoFit reason the controller's category gives a hold's message."""
    held = next(obj for _, obj in EXAMPLES if "heldSince" in obj.get("status", {}))
    status = held["status"]
    assert "nodes" not in status and parse_time(status["heldSince"]) is not None
    no_fit = next(c for c in status["conditions"] if c["type"] == "NoFit")
    assert no_fit["message"].startswith(HELD) and no_fit["reason"] == no_fit_category(no_fit["message"])
    assert {(c["type"], c["status"], c["reason"]) for c in status["conditions"]} == {
        ("Placed", "False", "Pending"), ("NoFit", "True", HELD_FOR_CONTENTION)}


def test_default_queue_policy_example_spells_out_the_schema_defaults() -> None:
    example = next(obj for _, obj in EXAMPLES if obj["kind"] == "QueuePolicy" and obj["metadata"]["name"] == "default")
    spec_schema = version_schema(CRDS["QueuePolicy"])["properties"]["spec"]
    assert apply_defaults(spec_schema, {}) == example["spec"]


def test_claim_defaults() -> None:
    spec_schema = version_schema(CRDS["STBandwidthClaim"])["properties"]["spec"]
    spec = {"profile": {"periodMs": 100, "windows": [{"startMs": 0, "lenMs": 10, "gbps": 5}]},
            "gangRef": {"apiVersion": "batch/v1", "kind": "Job", "name": "j"}}
    defaulted = apply_defaults(spec_schema, spec)
    assert defaulted["priority"] == 0 and defaulted["profile"]["jitterMs"] == 0
    assert defaulted["profile"]["collective"] == "ring"


def test_invalid_cases_cover_every_kind_and_both_judges() -> None:
    names = [case["name"] for case in CASES]
    assert len(names) == len(set(names))
    assert {(case["object"]["kind"], case["rejectedBy"]) for case in CASES} == {
        (kind, judge) for kind in CRDS for judge in ("schema", "server")}


def _jsonschema_path(server_path: str) -> str:
    return re.sub(r"\[(\d+)\]", r".\1", server_path)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_invalid_case(case: dict[str, Any]) -> None:
    obj = case["object"]
    found = errors(CRDS[obj["kind"]], obj)
    if case["rejectedBy"] == "schema":
        expected = _jsonschema_path(case["field"])
        parent = expected.rsplit(".", 1)[0]
        # jsonschema reports an unknown or missing property at its parent object.
        assert any(e.startswith(f"{expected}:") or e.startswith(f"{parent}:") for e in found), found
    else:
        assert found == [], "a server-only case must pass the structural schema, or it tests nothing new"
    if "profile" in case:
        with pytest.raises(InvalidInput):
            Profile.from_mapping(camel_to_snake(_dig(obj, case["profile"])))
