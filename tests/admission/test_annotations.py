"""Profile annotations: every accepted form, and errors that name the key, the value and the expected form."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from volcano_metronome import api
from volcano_metronome.admission.annotations import ClaimRef, Explicit, profile_json, read_request, read_resolved
from volcano_metronome.catalog import builtin
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile, Window

CATALOG = builtin()


def read(annotations, line_rate=100.0, where=""):
    return read_request(annotations, CATALOG, line_rate, where)


def test_no_profile_keys_means_no_request():
    assert read({}) is None
    assert read({"app": "x", api.PROFILE: "{}"}) is None  # the resolved profile is not a user key


def test_model_resolves_at_the_line_rate():
    request = read({api.MODEL: "ResNet50"}, line_rate=200.0)
    assert isinstance(request, Explicit) and request.source == "catalog"
    assert request.profile == CATALOG.get("resnet50").profile(200.0)
    assert request.profile.peak_gbps == pytest.approx(160.0)


def test_model_with_jitter_override():
    request = read({api.MODEL: "resnet50", api.JITTER_MS: "5"})
    assert isinstance(request, Explicit) and request.profile.jitter_ms == 5.0


@pytest.mark.parametrize("model", ["moe-gpt", "dlrm-a2a"])
def test_an_all_to_all_model_keeps_its_collective_through_the_jitter_override_and_the_resolved_annotation(model):
    request = read({api.MODEL: model, api.JITTER_MS: "1"}, line_rate=200.0)
    assert isinstance(request, Explicit) and request.profile.collective == "all-to-all"
    assert request.profile.jitter_ms == 1.0
    assert request.profile.windows == CATALOG.get(model).profile(200.0).windows
    # What the webhook writes to metronome.dev/profile (and the controller reads) says so too.
    assert read_resolved({api.PROFILE: profile_json(request.profile)}) == Explicit(request.profile, "annotation")


def test_period_and_windows():
    request = read({api.PERIOD_MS: "100", api.WINDOWS: '[{"start_ms": 60, "len_ms": 40, "gbps": 50}]',
                    api.JITTER_MS: "1.5"})
    assert request == Explicit(Profile(100.0, (Window(60.0, 40.0, 50.0),), 1.5), "annotation")


def test_duty_cycle_shorthand_puts_the_window_at_the_end():
    request = read({api.PERIOD_MS: "200", api.DUTY_CYCLE: "0.25", api.GBPS: "40"})
    assert request == Explicit(Profile(200.0, (Window(150.0, 50.0, 40.0),)), "annotation")


@pytest.mark.parametrize("form", [{api.WINDOWS: '[{"start_ms": 60, "len_ms": 40, "gbps": 50}]'},
                                  {api.DUTY_CYCLE: "0.4", api.GBPS: "50"}])
def test_collective_annotation_with_period_forms(form):
    """``metronome.dev/collective`` marks an all-to-all gang (MoE, DLRM) in the forms a user writes by hand."""
    request = read({api.PERIOD_MS: "100", **form, api.COLLECTIVE: "all-to-all"})
    assert request == Explicit(Profile(100.0, (Window(60.0, 40.0, 50.0),), collective="all-to-all"), "annotation")
    assert read({api.PERIOD_MS: "100", **form, api.COLLECTIVE: "ring"}).profile.collective == "ring"
    # ... and it survives the resolved annotation the controller reads.
    assert read_resolved({api.PROFILE: profile_json(request.profile)}) == request


def test_claim_alone():
    assert read({api.CLAIM: "resnet50-imagenet"}) == ClaimRef("resnet50-imagenet")


@pytest.mark.parametrize("annotations, key, expected_part", [
    ({api.PERIOD_MS: "abc", api.DUTY_CYCLE: "0.1", api.GBPS: "1"}, api.PERIOD_MS, "milliseconds"),
    ({api.PERIOD_MS: "0", api.DUTY_CYCLE: "0.1", api.GBPS: "1"}, api.PERIOD_MS, "(0, 3600000]"),
    ({api.PERIOD_MS: "nan", api.DUTY_CYCLE: "0.1", api.GBPS: "1"}, api.PERIOD_MS, "milliseconds"),
    ({api.PERIOD_MS: "1e999", api.DUTY_CYCLE: "0.1", api.GBPS: "1"}, api.PERIOD_MS, "milliseconds"),
    ({api.PERIOD_MS: "100", api.DUTY_CYCLE: "1.5", api.GBPS: "1"}, api.DUTY_CYCLE, "(0, 1]"),
    ({api.PERIOD_MS: "100", api.DUTY_CYCLE: "0.5", api.GBPS: "7000"}, api.GBPS, "(0, 6400]"),
    ({api.PERIOD_MS: "100", api.DUTY_CYCLE: "0.5"}, api.GBPS, "Gbps"),
    ({api.PERIOD_MS: "100", api.GBPS: "5"}, api.GBPS, api.DUTY_CYCLE),
    ({api.PERIOD_MS: "100"}, api.PERIOD_MS, api.WINDOWS),
    ({api.WINDOWS: "[]"}, api.WINDOWS, api.PERIOD_MS),
    ({api.JITTER_MS: "1"}, api.JITTER_MS, api.PERIOD_MS),
    ({api.PERIOD_MS: "100", api.WINDOWS: "not json"}, api.WINDOWS, '"start_ms"'),
    ({api.PERIOD_MS: "100", api.WINDOWS: '{"start_ms": 1}'}, api.WINDOWS, '"start_ms"'),
    ({api.PERIOD_MS: "100", api.WINDOWS: "[]"}, api.WINDOWS, "1 to 32 windows"),
    ({api.PERIOD_MS: "3300", api.WINDOWS: json.dumps([{"start_ms": 100 * i, "len_ms": 10, "gbps": 1}
                                                      for i in range(33)])}, api.WINDOWS, "1 to 32 windows"),
    ({api.PERIOD_MS: "100", api.WINDOWS: '[{"start_ms": 0, "len_ms": 200, "gbps": 1}]'}, api.WINDOWS + "[0].len_ms",
     "period_ms=100"),
    ({api.PERIOD_MS: "100", api.WINDOWS: '[{"start_ms": 0, "len_ms": 10, "gbps": 1, "x": 1}]'}, api.WINDOWS + "[0].x",
     "start_ms"),
    ({api.PERIOD_MS: "100", api.WINDOWS: '[{"start_ms": 0, "len_ms": 1, "gbps": NaN}]'}, api.WINDOWS, '"start_ms"'),
    # A window of 2e-15 ms vanished against the period and the error blamed gbps.
    ({api.PERIOD_MS: "200", api.DUTY_CYCLE: "1e-17", api.GBPS: "80"}, api.DUTY_CYCLE, "lasts 1 us or more"),
    # JSON keeps the last of a key given twice: the first start_ms would be dropped without a word.
    ({api.PERIOD_MS: "100", api.WINDOWS: '[{"start_ms": 0, "start_ms": 60, "len_ms": 10, "gbps": 1}]'}, api.WINDOWS,
     "'start_ms' is given twice"),
    ({api.PERIOD_MS: "100", api.WINDOWS: '[{"start_ms":0,"len_ms":50,"gbps":1},{"start_ms":40,"len_ms":5,"gbps":1}]'},
     api.WINDOWS + "[1].start_ms", "overlap"),
    ({api.PERIOD_MS: "100", api.DUTY_CYCLE: "0.5", api.GBPS: "1", api.JITTER_MS: "100"}, api.JITTER_MS, "[0, period_ms"),
    ({api.MODEL: "gpt-17"}, api.MODEL, "resnet50"),
    ({api.MODEL: "resnet50", api.PERIOD_MS: "100"}, api.PERIOD_MS, api.MODEL),
    ({api.CLAIM: "c", api.MODEL: "resnet50"}, api.MODEL, "alone"),
    ({api.CLAIM: "Not_A_Name"}, api.CLAIM, "DNS-1123"),
    ({api.PERIOD_MS: "100", api.WINDOWS: "[]", api.DUTY_CYCLE: "0.1"}, api.DUTY_CYCLE, api.WINDOWS),
    ({api.MODEL: 7}, api.MODEL, "string"),
    ({api.PERIOD_MS: "100", api.DUTY_CYCLE: "0.5", api.GBPS: "1", api.COLLECTIVE: "allreduce"}, api.COLLECTIVE,
     "ring, all-to-all"),
    ({api.MODEL: "resnet50", api.COLLECTIVE: "all-to-all"}, api.COLLECTIVE, api.MODEL),
    ({api.COLLECTIVE: "ring"}, api.COLLECTIVE, api.PERIOD_MS),
])
def test_errors_name_key_value_and_expected_form(annotations, key, expected_part):
    with pytest.raises(InvalidInput) as caught:
        read(annotations)
    error = caught.value
    assert error.field == key
    assert expected_part in error.expected
    assert str(error).startswith(f"{key}: got ")


def test_number_errors_show_the_value_as_written():
    with pytest.raises(InvalidInput) as caught:
        read({api.PERIOD_MS: "-5", api.DUTY_CYCLE: "0.1", api.GBPS: "1"})
    assert caught.value.value == "-5"


def test_where_prefixes_the_key():
    with pytest.raises(InvalidInput) as caught:
        read({api.MODEL: "nope"}, where="spec.tasks[1].template")
    assert caught.value.field == f"spec.tasks[1].template: {api.MODEL}"


def test_huge_and_deep_json_is_an_error_not_a_crash():
    for windows in ("[" * 100_000, '[{"start_ms": ' + "9" * 5000 + ', "len_ms": 1, "gbps": 1}]'):
        with pytest.raises(InvalidInput) as caught:
            read({api.PERIOD_MS: "100", api.WINDOWS: windows})
        assert caught.value.field.startswith(api.WINDOWS)
        assert len(str(caught.value)) < 400


def test_resolved_profile_round_trips():
    profile = Profile(100.0, (Window(0.0, 12.5, 25.0),), 1.0)
    text = profile_json(profile)
    assert " " not in text and json.loads(text) == profile.to_dict()
    assert read_resolved({api.PROFILE: text, api.PROFILE_SOURCE: "claim"}) == Explicit(profile, "claim")
    assert read_resolved({api.PROFILE: text, api.PROFILE_SOURCE: "bogus"}) == Explicit(profile, "annotation")
    assert read_resolved({}) is None
    with pytest.raises(InvalidInput) as caught:
        read_resolved({api.PROFILE: '{"period_ms": -1, "windows": []}'})
    assert caught.value.field.startswith(api.PROFILE)


_keys = st.sampled_from(api.USER_PROFILE_KEYS)
_values = st.one_of(st.text(max_size=30), st.sampled_from(["0", "1", "-1", "100", "0.5", "1e309", "nan", "[]", "{}",
                                                           "resnet50", '[{"start_ms":0,"len_ms":1,"gbps":1}]']))


@settings(suppress_health_check=[HealthCheck.too_slow])  # the first text() builds Hypothesis' charmap
@given(st.dictionaries(_keys, _values, max_size=5))
def test_any_annotation_values_give_a_profile_or_a_named_error(annotations):
    try:
        result = read(annotations)
    except InvalidInput as exc:
        assert exc.field.split("[")[0].split(".len")[0] in api.USER_PROFILE_KEYS
        assert "expected" in str(exc)
    else:
        assert result is None or isinstance(result, (Explicit, ClaimRef))
