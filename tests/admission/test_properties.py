"""Property tests: whatever arrives, the review function answers (or names why the body is not a review),
never raises anything else, always explains a denial or warning, and its patch always applies."""

from __future__ import annotations

import copy
import json

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.admission.builders import HANDLED, gvk, ops_of, response, review, schema_errors, upstream_examples, workload
from volcano_metronome import api
from volcano_metronome.admission import Context, Lookups, admit, parse_settings
from volcano_metronome.core.errors import InvalidInput

CLAIM = {"spec": {"profile": {"periodMs": 100, "windows": [{"startMs": 0, "lenMs": 10, "gbps": 10}]}}}
CTX = Context(settings=parse_settings({"namespaceDefaults": {"default": {"model": "resnet50"}},
                                       "tierLimit": {"enabled": True, "thresholdGbps": 50}}),
              lookups=Lookups(claim=lambda ns, name: CLAIM if name == "c" else None,
                              pod_group=lambda ns, name: None))
OBJECTS = [obj for _, obj in upstream_examples()] + [workload("v1beta2"), workload("v1beta1", counts=(2, 2))]
SLOW_OK = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], deadline=None)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**40), max_value=2**40) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
annotation_values = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["resnet50", "0", "-3", "100", "0.25", "1e400", "nan", "[]", "[[", '{"a":1}', "c", "missing",
                     '[{"start_ms":0,"len_ms":10,"gbps":5}]', '[{"start_ms":0,"len_ms":1000,"gbps":5}]',
                     '{"period_ms":100,"windows":[{"start_ms":0,"len_ms":10,"gbps":5}],"jitter_ms":0}']),
)
annotations = st.dictionaries(st.sampled_from([*api.USER_PROFILE_KEYS, api.PROFILE, api.PROFILE_SOURCE, api.GANG_SIZE,
                                               api.VOLCANO_GROUP_NAME, "other"]),
                              annotation_values, max_size=5)


def check(result_review, obj):
    """The invariants every answer keeps."""
    json.dumps(result_review)
    resp = response(result_review)
    assert isinstance(resp["uid"], str) and resp["uid"]
    if resp["allowed"]:
        after = jsonpatch.apply_patch(obj, ops_of(result_review)) if isinstance(obj, dict) else obj
        for warning in resp.get("warnings", []):
            assert warning.startswith("volcano-metronome: ") and warning.isprintable()
        return after
    message = resp["status"]["message"]
    assert resp["status"]["code"] == 400 and message.startswith("volcano-metronome: ") and len(message) > 30
    assert "got" in message and "expected" in message
    assert "patch" not in resp
    return None


@SLOW_OK
@given(json_values)
def test_any_json_body_is_answered_or_named(body):
    try:
        result = admit(body, CTX)
    except InvalidInput as exc:
        assert exc.field and exc.expected
    else:
        check(result.review, None)


@SLOW_OK
@given(st.sampled_from(sorted(HANDLED)), json_values, st.booleans())
def test_any_object_of_a_handled_kind_never_crashes(kind, obj, dry_run):
    if not isinstance(obj, dict):
        obj = {"metadata": obj}
    result = admit(review(obj, kind=kind, dry_run=dry_run), CTX)
    check(result.review, obj)


def _metadata_paths(obj):
    """Where annotations may sit on ``obj``: its metadata and its pod templates' metadata."""
    spec = obj.get("spec") or {}
    yield ("metadata",)
    if obj["kind"] == "Job" and "template" in spec:
        yield ("spec", "template", "metadata")
    for key in ("tasks", "podSets"):
        for i in range(len(spec.get(key) or [])):
            yield ("spec", key, i, "template", "metadata")


@SLOW_OK
@given(st.sampled_from(OBJECTS), annotations, st.data())
def test_any_annotations_on_real_objects(obj, extra, data):
    obj = copy.deepcopy(obj)
    node = obj
    for key in data.draw(st.sampled_from(list(_metadata_paths(obj)))):
        node = node[key] if isinstance(key, int) else node.setdefault(key, {})
    node.setdefault("annotations", {}).update(extra)
    result = admit(review(obj), CTX)
    after = check(result.review, obj)
    if after is not None:
        assert schema_errors(after) == []
        again = admit(review(after), CTX)
        assert ops_of(again.review) == [], "admitting an admitted object must change nothing"
    else:
        message = response(result.review)["status"]["message"]
        assert any(key in message for key in (*api.USER_PROFILE_KEYS, api.PROFILE, "spec."))


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


@SLOW_OK
@given(st.sampled_from(OBJECTS), st.data(), json_values)
def test_corrupting_any_part_of_a_real_object_never_crashes(obj, data, junk):
    obj = copy.deepcopy(obj)
    kind = gvk(obj)
    obj.setdefault("metadata", {}).setdefault("annotations", {})[api.MODEL] = "resnet50"
    path = data.draw(st.sampled_from([p for p in _paths(obj) if p]))
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = junk
    check(admit(review(obj, kind=kind), CTX).review, obj)
