"""JSONPatch building: RFC 6901 escaping, parents created when absent, nothing emitted when already right."""

from __future__ import annotations

import copy

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from volcano_metronome.admission import patches
from volcano_metronome.core.errors import InvalidInput


def apply(doc, ops):
    return jsonpatch.apply_patch(doc, ops)


def test_escape_follows_rfc6901_order():
    assert patches.escape("metronome.dev/profile") == "metronome.dev~1profile"
    assert patches.escape("a~/b") == "a~0~1b"  # ~ first, else "/" -> "~1" -> "~01"
    assert patches.pointer(("metadata", "annotations", "x/y~z")) == "/metadata/annotations/x~1y~0z"
    assert patches.pointer(("spec", "tasks", 3)) == "/spec/tasks/3"


@settings(suppress_health_check=[HealthCheck.too_slow])  # the first text() builds Hypothesis' charmap
@given(st.text(min_size=1, max_size=20), st.text(max_size=10))
def test_any_key_round_trips_through_a_real_patch(key, value):
    doc = {"metadata": {"annotations": {"keep": "me"}}}
    out = apply(doc, patches.set_entries(doc, ("metadata", "annotations"), {key: value}))
    assert out["metadata"]["annotations"][key] == value
    if key != "keep":
        assert out["metadata"]["annotations"]["keep"] == "me"


def test_absent_annotations_are_created_in_one_add():
    doc = {"metadata": {"name": "x"}}
    ops = patches.set_entries(doc, ("metadata", "annotations"), {"a/b": "1", "c": "2"})
    assert ops == [{"op": "add", "path": "/metadata/annotations", "value": {"a/b": "1", "c": "2"}}]
    assert apply(doc, ops)["metadata"] == {"name": "x", "annotations": {"a/b": "1", "c": "2"}}


def test_absent_parents_are_created_nested():
    doc = {"spec": {"tasks": [{"replicas": 1, "template": {"spec": {}}}]}}
    ops = patches.set_entries(doc, ("spec", "tasks", 0, "template", "metadata", "annotations"), {"k": "v"})
    assert ops == [{"op": "add", "path": "/spec/tasks/0/template/metadata", "value": {"annotations": {"k": "v"}}}]
    assert apply(doc, ops)["spec"]["tasks"][0]["template"]["metadata"] == {"annotations": {"k": "v"}}


@pytest.mark.parametrize("template", [{"spec": {}}, {"metadata": None, "spec": {}}])
def test_several_children_of_an_absent_parent_are_created_in_one_add(template):
    """Two set_entries would each add the parent, the second replacing the first (RFC 6902 add on a member)."""
    doc = {"spec": {"template": template}}
    children = {"labels": {"l/k": "true"}, "annotations": {"a/k": "v"}}
    ops = patches.set_children(doc, ("spec", "template", "metadata"), children)
    assert ops == [{"op": "add", "path": "/spec/template/metadata", "value": children}]
    assert apply(doc, ops)["spec"]["template"]["metadata"] == children


def test_several_children_of_a_present_parent_are_set_one_by_one():
    doc = {"metadata": {"labels": {"l/k": "true", "keep": "x"}}}
    ops = patches.set_children(doc, ("metadata",), {"labels": {"l/k": "true"}, "annotations": {"a/k": "v"}, "none": {}})
    assert ops == [{"op": "add", "path": "/metadata/annotations", "value": {"a/k": "v"}}]
    out = apply(doc, ops)
    assert out["metadata"] == {"labels": {"l/k": "true", "keep": "x"}, "annotations": {"a/k": "v"}}
    assert patches.set_children(out, ("metadata",), {"labels": {"l/k": "true"}, "annotations": {"a/k": "v"}}) == []
    assert patches.set_children(doc, ("nowhere",), {"labels": {}}) == []


def test_null_annotations_are_replaced_by_a_map():
    doc = {"metadata": {"annotations": None}}
    assert apply(doc, patches.set_entries(doc, ("metadata", "annotations"), {"k": "v"}))["metadata"] == {
        "annotations": {"k": "v"}}


def test_nothing_is_emitted_when_values_already_match():
    doc = {"metadata": {"annotations": {"k": "v", "other": "x"}}}
    assert patches.set_entries(doc, ("metadata", "annotations"), {"k": "v"}) == []
    assert patches.set_value(doc, ("metadata", "annotations", "k"), "v") == []


def test_changed_values_are_overwritten_and_others_kept():
    doc = {"metadata": {"annotations": {"k": "old", "other": "x"}}}
    out = apply(doc, patches.set_entries(doc, ("metadata", "annotations"), {"k": "new"}))
    assert out["metadata"]["annotations"] == {"k": "new", "other": "x"}


@pytest.mark.parametrize("doc, where", [
    ({"metadata": "nope"}, "metadata"),
    ({"metadata": {"annotations": ["a"]}}, "metadata.annotations"),
    ({"metadata": {"annotations": 3}}, "metadata.annotations"),
])
def test_wrong_shapes_are_named_not_overwritten(doc, where):
    with pytest.raises(InvalidInput) as caught:
        patches.set_entries(doc, ("metadata", "annotations"), {"k": "v"})
    assert caught.value.field == where


def test_list_item_added_once_and_replaced_when_different():
    same = lambda item: item.get("name") == "g"  # noqa: E731
    doc = {"spec": {}}
    ops = patches.ensure_in_list(doc, ("spec", "gates"), {"name": "g"}, same)
    assert ops == [{"op": "add", "path": "/spec/gates", "value": [{"name": "g"}]}]
    doc = apply(doc, ops)
    assert patches.ensure_in_list(doc, ("spec", "gates"), {"name": "g"}, same) == []
    doc = {"spec": {"gates": [{"name": "other"}]}}
    doc = apply(doc, patches.ensure_in_list(doc, ("spec", "gates"), {"name": "g"}, same))
    assert doc["spec"]["gates"] == [{"name": "other"}, {"name": "g"}]


def test_ensure_all_in_list_appends_missing_and_fixes_different():
    doc = {"env": [{"name": "A", "value": "user"}, {"name": "B", "value": "b"}]}
    wanted = [{"name": "A", "value": "ours"}, {"name": "C", "value": "c"}]
    before = copy.deepcopy(doc)
    out = apply(doc, patches.ensure_all_in_list(doc, ("env",), wanted, lambda v: v["name"]))
    assert doc == before  # the helpers never mutate their input
    assert out["env"] == [{"name": "A", "value": "ours"}, {"name": "B", "value": "b"}, {"name": "C", "value": "c"}]
    assert patches.ensure_all_in_list(out, ("env",), wanted, lambda v: v["name"]) == []


def test_describe_names_paths_like_fields():
    assert patches.describe(("spec", "tasks", 1, "template")) == "spec.tasks[1].template"
