"""The settings file: documented defaults, every key parsed, unknown keys and bad values named."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

from volcano_metronome.admission.settings import Settings, TierLimit, Watch, parse_settings
from volcano_metronome.catalog import builtin
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile, Window

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "webhook.md"


def test_empty_settings_are_the_defaults():
    assert parse_settings(None) == parse_settings({}) == Settings()
    defaults = Settings()
    assert defaults.line_rate_gbps == 100.0
    assert defaults.tier_limit == TierLimit(enabled=False, threshold_gbps=100.0, highest_tier_allowed=1)
    assert defaults.watch == Watch(pod_groups=True, claims=True)


def test_every_key():
    settings = parse_settings(yaml.safe_load("""
        lineRateGbps: 200
        namespaceDefaults:
          vision: {model: resnet50}
          nlp: {model: resnet50, jitterMs: 4}
        queueDefaults:
          llm: {periodMs: 1000, windows: [{startMs: 900, lenMs: 100, gbps: 150}], jitterMs: 5}
        tierLimit: {enabled: true, thresholdGbps: 400, highestTierAllowed: 2}
        watch: {podGroups: false, claims: true}
    """))
    assert settings.line_rate_gbps == 200.0
    assert settings.namespace_defaults["vision"] == builtin().get("resnet50").profile(200.0)
    assert settings.namespace_defaults["nlp"].jitter_ms == 4.0
    assert settings.queue_defaults["llm"] == Profile(1000.0, (Window(900.0, 100.0, 150.0),), 5.0)
    assert settings.tier_limit == TierLimit(True, 400.0, 2)
    assert settings.watch == Watch(pod_groups=False, claims=True)


@pytest.mark.parametrize("data, field", [
    ({"lineRate": 100}, "lineRate"),
    ({"tierLimit": {"enable": True}}, "tierLimit.enable"),
    ({"watch": {"pods": True}}, "watch.pods"),
    ({"namespaceDefaults": {"a": {"periodMs": 100, "windows": [{"startMs": 0, "lenMs": 1, "gbps": 1}], "x": 1}}},
     "namespaceDefaults.a.x"),
    ({"namespaceDefaults": {"a": {"periodMs": 100, "windows": [{"start_ms": 0, "lenMs": 1, "gbps": 1}]}}},
     "namespaceDefaults.a.windows[0].start_ms"),
    ({"lineRateGbps": 0}, "lineRateGbps"),
    ({"lineRateGbps": "100"}, "lineRateGbps"),
    ({"lineRateGbps": 10**400}, "lineRateGbps"),
    ({"namespaceDefaults": {"a": {"model": "nope"}}}, "namespaceDefaults.a.model"),
    # resnet50 at 1 kbps lasts 40 minutes: the error named profile.period_ms, neither the default nor the key.
    ({"lineRateGbps": 1e-6, "namespaceDefaults": {"a": {"model": "resnet50"}}}, "namespaceDefaults.a.model"),
    ({"namespaceDefaults": {"a": {"periodMs": 100, "windows": [{"startMs": 0, "lenMs": 200, "gbps": 1}]}}},
     "namespaceDefaults.a.windows[0].lenMs"),
    ({"queueDefaults": {"q": {"periodMs": 100, "windows": [{"startMs": 0, "lenMs": 10, "gbps": 1}], "jitterMs": 100}}},
     "queueDefaults.q.jitterMs"),
    ({"queueDefaults": {"q": {"periodMs": -1, "windows": [{"startMs": 0, "lenMs": 10, "gbps": 1}]}}},
     "queueDefaults.q.periodMs"),
    ({"queueDefaults": {"q": {"periodMs": 100, "windows": []}}}, "queueDefaults.q.windows"),
    ({"queueDefaults": {1: {"model": "resnet50"}}}, "queueDefaults"),
    ({"queueDefaults": []}, "queueDefaults"),
    ({"tierLimit": {"enabled": "yes"}}, "tierLimit.enabled"),
    ({"tierLimit": {"highestTierAllowed": -1}}, "tierLimit.highestTierAllowed"),
    ({"tierLimit": {"thresholdGbps": -5}}, "tierLimit.thresholdGbps"),
    ("text", "settings"),
])
def test_bad_settings_name_the_key(data, field):
    with pytest.raises(InvalidInput) as caught:
        parse_settings(data)
    assert caught.value.field == field


def test_every_key_and_default_is_documented():
    text = DOC.read_text()
    for key, default in (("lineRateGbps", "100"), ("namespaceDefaults", "{}"), ("queueDefaults", "{}"),
                         ("tierLimit.enabled", "false"), ("tierLimit.thresholdGbps", "100"),
                         ("tierLimit.highestTierAllowed", "1"), ("watch.podGroups", "true"), ("watch.claims", "true")):
        assert re.search(rf"\| `{re.escape(key)}` \|[^|]*\| `{re.escape(default)}` \|", text), key
