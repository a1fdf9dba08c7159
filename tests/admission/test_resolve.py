"""Profile resolution order: annotations (and claims), already-resolved profile, queue default, namespace default."""

from __future__ import annotations

import pytest

from volcano_metronome import api
from volcano_metronome.admission.annotations import profile_json
from volcano_metronome.admission.resolve import Context, Lookups, Place, Resolved, resolve
from volcano_metronome.admission.settings import parse_settings
from volcano_metronome.catalog import builtin
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile, Window

RESNET = builtin().get("resnet50").profile(100.0)
CLAIMED = Profile(300.0, (Window(0.0, 30.0, 40.0),), 3.0)
CLAIMS = {("team", "mine"): {"spec": {"profile": {"periodMs": 300, "windows": [{"startMs": 0, "lenMs": 30, "gbps": 40}],
                                                  "jitterMs": 3},
                                      "gangRef": {"apiVersion": "batch/v1", "kind": "Job", "name": "j"}, "priority": 5}},
          ("team", "broken"): {"spec": {"profile": {"periodMs": 300, "windows": [{"startMs": 0, "lenMs": 400, "gbps": 4}]}}}}
SETTINGS = parse_settings({
    "namespaceDefaults": {"team": {"periodMs": 50, "windows": [{"startMs": 0, "lenMs": 5, "gbps": 10}]}},
    "queueDefaults": {"fast": {"model": "resnet50"}},
})
CTX = Context(settings=SETTINGS, lookups=Lookups(claim=lambda ns, name: CLAIMS.get((ns, name))))


def run(*places, queue=None, namespace="team", ctx=CTX, defaults=True):
    return resolve([Place(w, a) for w, a in places], namespace=namespace, queue=queue, ctx=ctx, defaults=defaults)


def test_annotations_win_over_everything():
    resolved = run(("", {api.MODEL: "resnet50", api.PROFILE: profile_json(CLAIMED)}), queue="fast")
    assert resolved == Resolved(RESNET, "catalog")


def test_claim_comes_from_the_cache():
    assert run(("", {api.CLAIM: "mine"})) == Resolved(CLAIMED, "claim")


def test_missing_claim_and_unwatched_claims_are_errors_naming_the_annotation():
    with pytest.raises(InvalidInput) as caught:
        run(("", {api.CLAIM: "absent"}))
    assert caught.value.field == api.CLAIM and "create the claim first" in caught.value.expected
    with pytest.raises(InvalidInput) as caught:
        run(("", {api.CLAIM: "mine"}), ctx=Context(settings=SETTINGS))
    assert "watch.claims" in caught.value.expected


def test_a_bad_claim_is_named():
    with pytest.raises(InvalidInput) as caught:
        run(("", {api.CLAIM: "broken"}))
    assert caught.value.field == "STBandwidthClaim team/broken spec.profile.windows[0].lenMs"


def test_resolved_profile_is_kept_with_its_source():
    assert run(("", {api.PROFILE: profile_json(CLAIMED), api.PROFILE_SOURCE: "claim"}), queue="fast") == \
        Resolved(CLAIMED, "claim")


def test_templates_are_read_after_the_object():
    assert run(("", {}), ("spec.template", {api.MODEL: "resnet50"})) == Resolved(RESNET, "catalog")
    assert run(("", {}), ("spec.template", {api.PROFILE: profile_json(CLAIMED)})) == Resolved(CLAIMED, "annotation")


def test_templates_must_agree_with_the_object():
    with pytest.raises(InvalidInput) as caught:
        run(("", {api.MODEL: "resnet50"}), ("spec.tasks[1].template", {api.CLAIM: "mine"}))
    assert caught.value.field == "spec.tasks[1].template: profile annotations"
    assert "one gang, one profile" in caught.value.expected
    assert run(("", {api.MODEL: "resnet50"}), ("spec.tasks[1].template", {api.MODEL: "RESNET50"})) == \
        Resolved(RESNET, "catalog")


def test_queue_default_before_namespace_default():
    assert run(("", {}), queue="fast") == Resolved(RESNET, "default")
    assert run(("", {}), queue="slow") == Resolved(SETTINGS.namespace_defaults["team"], "default")
    assert run(("", {}), queue=None, namespace="other") is None
    assert run(("", {}), queue="fast", defaults=False) is None
