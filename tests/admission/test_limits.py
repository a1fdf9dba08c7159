"""The webhook admits only what the controller could place (core.limits), and numbers are ASCII."""

from __future__ import annotations

import pytest

from tests.admission.builders import response, review
from tests.admission.test_review import pod_group, volcano_job
from volcano_metronome import api
from volcano_metronome.admission import Context, admit, parse_settings
from volcano_metronome.controller.settings import Settings as ControllerSettings
from volcano_metronome.core import limits
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.grid import SlotGrid
from volcano_metronome.core.profile import Profile

LONG = {api.PERIOD_MS: "30000", api.DUTY_CYCLE: "0.1", api.GBPS: "10"}


def test_one_source_for_the_cap() -> None:
    assert ControllerSettings().max_hyperperiod_ms == limits.DEFAULT_MAX_HYPERPERIOD_MS
    assert parse_settings({}).max_hyperperiod_ms == limits.DEFAULT_MAX_HYPERPERIOD_MS
    assert SlotGrid().max_hyperperiod_ms == limits.DEFAULT_MAX_HYPERPERIOD_MS


@pytest.mark.parametrize("period, placeable", [(25200.0, True), (25199.0, True), (25200.5, False), (30000.0, False)])
def test_what_the_webhook_admits_is_what_the_grid_snaps(period: float, placeable: bool) -> None:
    profile = Profile.from_duty_cycle(period, 0.1, 10.0)
    grid = SlotGrid()
    try:
        limits.check_placeable(profile, grid.max_hyperperiod_ms)
        admitted = True
    except InvalidInput:
        admitted = False
    try:
        grid.snap(period)
        snaps = True
    except InvalidInput:
        snaps = False
    assert admitted == snaps == placeable


def test_a_user_object_beyond_the_cap_is_denied_naming_field_value_and_limit() -> None:
    out = response(admit(review(volcano_job(LONG)), Context()).review)
    assert out["allowed"] is False
    message = out["status"]["message"]
    assert api.PERIOD_MS in message and "30000" in message and "25200 ms" in message


def test_the_cap_comes_from_settings() -> None:
    ctx = Context(settings=parse_settings({"maxHyperperiodMs": 60000}))
    assert response(admit(review(volcano_job(LONG)), ctx).review)["allowed"] is True
    short = Context(settings=parse_settings({"maxHyperperiodMs": 1000}))
    out = response(admit(review(volcano_job({api.MODEL: "resnet50"})), short).review)
    assert out["allowed"] is True  # resnet50 iterates in 200 ms
    out = response(admit(review(volcano_job({api.PERIOD_MS: "2000", api.DUTY_CYCLE: "0.1", api.GBPS: "1"})),
                         short).review)
    assert out["allowed"] is False and "1000 ms" in out["status"]["message"]


def test_a_controller_object_beyond_the_cap_is_allowed_and_marked() -> None:
    owner = [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "j", "uid": "u", "controller": True}]
    text = '{"period_ms":30000,"windows":[{"start_ms":0,"len_ms":10,"gbps":1}]}'
    out = response(admit(review(pod_group({api.PROFILE: text}, owners=owner)), Context()).review)
    assert out["allowed"] is True
    assert any(api.PROFILE_ERROR in w and "25200 ms" in w for w in out["warnings"])


def test_defaults_beyond_the_cap_fail_at_startup() -> None:
    with pytest.raises(InvalidInput, match="namespaceDefaults.team.periodMs"):
        parse_settings({"namespaceDefaults": {"team": {"periodMs": 30000, "windows": [
            {"startMs": 0, "lenMs": 10, "gbps": 1}]}}})
    with pytest.raises(InvalidInput, match="maxHyperperiodMs"):
        parse_settings({"maxHyperperiodMs": 0})


@pytest.mark.parametrize("text", ["２００", "٢٠٠", "1e２", "²"])
def test_only_ascii_digits_are_numbers(text: str) -> None:
    out = response(admit(review(volcano_job({api.PERIOD_MS: text, api.DUTY_CYCLE: "0.1", api.GBPS: "1"})),
                         Context()).review)
    assert out["allowed"] is False and api.PERIOD_MS in out["status"]["message"]


def test_a_gated_pod_has_a_bounded_number_of_containers() -> None:
    from tests.faults.big import review as big_review
    from volcano_metronome.admission.pods import MAX_CONTAINERS

    fits = response(admit(big_review(MAX_CONTAINERS), Context()).review)
    assert fits["allowed"] is True and "patch" in fits
    out = response(admit(big_review(MAX_CONTAINERS + 1), Context()).review)
    assert out["allowed"] is False
    assert f"got {MAX_CONTAINERS + 1}" in out["status"]["message"] and str(MAX_CONTAINERS) in out["status"]["message"]
