"""The object shapes admission and the controller share: one profile parser, one selector rule."""

from __future__ import annotations

from typing import Any

import pytest

from volcano_metronome.admission.resolve import claim_profile
from volcano_metronome.admission.settings import parse_settings
from volcano_metronome.catalog import builtin
from volcano_metronome.controller import queuepolicy
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.grid import SlotGrid
from volcano_metronome.shapes.selectors import label_selector_matches, requirement_matches, term_matches
from volcano_metronome.shapes.profiles import profile_from_spec, profile_to_spec

WINDOW = {"startMs": 0, "lenMs": 20, "gbps": 10}
BAD_PROFILES: list[tuple[dict[str, Any], str, Any]] = [
    # (profile, the field the message must name after the caller's prefix, the value it must show)
    ({"periodMs": 0, "windows": [WINDOW]}, ".periodMs", 0.0),
    ({"periodMs": 100, "windows": []}, ".windows", []),
    ({"periodMs": 100, "windows": [{**WINDOW, "gbps": "fast"}]}, ".windows[0].gbps", "fast"),
    ({"periodMs": 100, "windows": [{**WINDOW, "startMs": 90}]}, ".windows[0].lenMs", 20.0),
    ({"periodMs": 100, "windows": [WINDOW], "jitterMs": 100}, ".jitterMs", 100.0),
    ({"model": "no-such-model"}, ".model", "no-such-model"),
    ({"period_ms": 100, "windows": [WINDOW]}, ".period_ms", None),  # snake_case: named as an unknown key
    ({"periodMs": 100, "windows": [{"start_ms": 0, "lenMs": 20, "gbps": 10}]}, ".windows[0].start_ms", None),
    ({"periodMs": 100, "windows": [WINDOW], "collective": "tree"}, ".collective", "tree"),
    ({"periodMs": 100, "windows": [WINDOW], "collective": "All-To-All"}, ".collective", "All-To-All"),
]


def _message(exc: InvalidInput, prefix: str) -> tuple[str, str, str]:
    assert exc.field.startswith(prefix), (exc.field, prefix)
    return exc.field[len(prefix):], repr(exc.value), exc.expected


def _webhook_settings(profile: dict[str, Any]) -> tuple[str, str, str]:
    with pytest.raises(InvalidInput) as caught:
        parse_settings({"namespaceDefaults": {"team": profile}})
    return _message(caught.value, "namespaceDefaults.team")


def _controller_policy(profile: dict[str, Any]) -> tuple[str, str, str]:
    view = queuepolicy.parse({"metadata": {"name": "p"}, "spec": {"defaultProfile": profile}}, SlotGrid(), 100.0)
    assert view.error, "the controller accepted a profile the webhook refuses"
    with pytest.raises(InvalidInput) as caught:  # the view keeps the text; the exception gives its parts
        queuepolicy.default_profile(profile, "QueuePolicy p: spec.defaultProfile", 100.0, builtin())
    assert view.error == str(caught.value)
    return _message(caught.value, "QueuePolicy p: spec.defaultProfile")


@pytest.mark.parametrize("profile,field,value", BAD_PROFILES)
def test_a_bad_default_profile_reads_the_same_in_the_webhook_and_the_controller(profile: dict[str, Any],
                                                                                 field: str, value: Any) -> None:
    webhook, controller = _webhook_settings(profile), _controller_policy(profile)
    assert webhook == controller
    assert webhook[0] == field
    if value is not None:
        assert webhook[1] == repr(value)


@pytest.mark.parametrize("profile,field,value", BAD_PROFILES)
def test_a_bad_claim_profile_reads_the_same_in_the_webhook_and_the_controller(profile: dict[str, Any],
                                                                               field: str, value: Any) -> None:
    claim = {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"profile": profile}}
    with pytest.raises(InvalidInput) as webhook:
        claim_profile("c", "ns", lambda ns, name: claim, "annotation metronome.dev/claim")
    with pytest.raises(InvalidInput) as controller:  # what controller.observe.claim_view reads a claim with
        profile_from_spec(profile, "STBandwidthClaim ns/c spec.profile")
    assert str(webhook.value) == str(controller.value)
    assert _message(webhook.value, "STBandwidthClaim ns/c spec.profile")[0] == field


def test_a_model_default_profile_is_the_catalog_profile_at_the_line_rate_on_both_paths() -> None:
    webhook = parse_settings({"lineRateGbps": 200, "namespaceDefaults": {"team": {"model": "resnet50"}}})
    controller = queuepolicy.parse({"metadata": {"name": "p"}, "spec": {"defaultProfile": {"model": "resnet50"}}},
                                   SlotGrid(), 200.0)
    assert controller.default_profile == webhook.namespace_defaults["team"]


def test_collective_reads_the_same_on_every_path_and_round_trips_through_the_claim() -> None:
    explicit = {"periodMs": 100, "windows": [WINDOW], "collective": "all-to-all"}
    webhook = parse_settings({"namespaceDefaults": {"team": explicit}}).namespace_defaults["team"]
    controller = queuepolicy.parse({"metadata": {"name": "p"}, "spec": {"defaultProfile": explicit}}, SlotGrid(),
                                   100.0).default_profile
    claim = profile_from_spec(explicit, "spec.profile")
    assert webhook == controller == claim and claim.collective == "all-to-all"
    # What the controller writes into a claim it creates carries it, and reads back the same.
    spec = profile_to_spec(claim)
    assert spec["collective"] == "all-to-all" and profile_from_spec(spec, "spec.profile") == claim
    # Omitted means ring, as the CRDs default it; a ring profile is written as before (no key).
    ring = profile_from_spec({"periodMs": 100, "windows": [WINDOW]}, "spec.profile")
    assert ring.collective == "ring" and "collective" not in profile_to_spec(ring)
    assert profile_from_spec({**explicit, "collective": "ring"}, "spec.profile") == ring


@pytest.mark.parametrize("model", ["moe-gpt", "dlrm-a2a"])
def test_an_all_to_all_model_keeps_its_collective_with_a_jitter_override(model: str) -> None:
    webhook = parse_settings({"lineRateGbps": 200, "namespaceDefaults": {"team": {"model": model, "jitterMs": 1}}})
    controller = queuepolicy.parse({"metadata": {"name": "p"}, "spec": {"defaultProfile": {"model": model}}},
                                   SlotGrid(), 200.0).default_profile
    assert controller is not None and controller.collective == "all-to-all"
    profile = webhook.namespace_defaults["team"]
    assert profile.collective == "all-to-all" and profile.jitter_ms == 1.0


@pytest.mark.parametrize("op,values,labels,expected", [
    ("In", ["a", "b"], {"k": "a"}, True), ("In", ["a"], {}, False),
    ("NotIn", ["a"], {"k": "b"}, True), ("NotIn", ["a"], {}, True), ("NotIn", ["a"], {"k": "a"}, False),
    ("Exists", [], {"k": ""}, True), ("DoesNotExist", [], {"k": "x"}, False),
    ("Gt", ["3"], {"k": "4"}, True), ("Lt", ["3"], {"k": "4"}, False), ("Gt", ["3"], {"k": "x"}, False),
    ("Sometimes", ["a"], {"k": "a"}, False),
])
def test_one_requirement_rule_for_label_selectors_and_node_selector_terms(op: str, values: list[str],
                                                                          labels: dict[str, str],
                                                                          expected: bool) -> None:
    requirement = {"key": "k", "operator": op, "values": values}
    assert requirement_matches(requirement, labels) is expected
    assert term_matches({"matchExpressions": [requirement]}, labels, "node-1") is expected
    assert label_selector_matches({"matchExpressions": [requirement]}, labels) is expected


def test_label_selector_forms() -> None:
    assert label_selector_matches({"rack": "r1"}, {"rack": "r1", "zone": "z"})
    assert not label_selector_matches({"matchLabels": {"rack": "r1"}}, {"rack": "r2"})
    assert term_matches({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, {}, "n1")
    assert not term_matches({}, {"a": "b"}, "n1")
