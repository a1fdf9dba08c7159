"""Field checks shared by every parser."""

from __future__ import annotations

import pytest

from volcano_metronome.core import fields
from volcano_metronome.core.errors import InvalidInput


@pytest.mark.parametrize("value, kwargs, expected", [
    ("5", {}, "a finite number"),
    (True, {}, "a finite number"),
    (float("inf"), {}, "a finite number"),
    (10**400, {}, "a finite number"),
    (0, {"above": 0.0}, "a number > 0"),
    (-1, {"minimum": 0.0}, "a number >= 0"),
    (11, {"minimum": 1.0, "maximum": 10.0}, "a number in [1, 10]"),
])
def test_number_refusals_name_the_form(value, kwargs, expected):
    with pytest.raises(InvalidInput) as err:
        fields.number(value, "x.y", **kwargs)
    assert err.value.field == "x.y" and err.value.expected == expected


def test_number_integer_boolean_string_accept_good_values():
    assert fields.number(3, "f", minimum=3.0) == 3.0
    assert fields.integer(7, "f", 0, 7) == 7
    assert fields.boolean(False, "f") is False
    assert fields.string("", "f", allow_empty=True) == ""
    for bad, check in ((True, fields.integer), (2.0, fields.integer)):
        with pytest.raises(InvalidInput, match="an integer >= 0"):
            check(bad, "f", 0)
    with pytest.raises(InvalidInput, match="non-empty string"):
        fields.string("", "f")


def test_mapping_names_the_unknown_key_under_its_parent():
    with pytest.raises(InvalidInput) as err:
        fields.mapping({"a": 1, "zz": 2}, "top", {"a"})
    assert err.value.field == "top.zz" and "one of the keys ['a']" in str(err.value)
    with pytest.raises(InvalidInput) as err:
        fields.mapping({"zz": 2}, "", {"a"})
    assert err.value.field == "zz"
    with pytest.raises(InvalidInput) as err:
        fields.mapping([1], "", {"a"})
    assert err.value.field == "settings"


@pytest.mark.parametrize("value", ["Random", 1, None, ["FIFO"], {"FIFO": 1}])
def test_choice_refuses_anything_but_one_of_the_strings(value):
    with pytest.raises(InvalidInput) as caught:
        fields.choice(value, "policy.ordering", ["FIFO", "StrictPriority"])
    assert str(caught.value) == f"policy.ordering: got {value!r}, expected one of FIFO, StrictPriority"
    assert fields.choice("FIFO", "policy.ordering", ["FIFO", "StrictPriority"]) == "FIFO"


@pytest.mark.parametrize("text", ["1.0e12", "1e+12", "1E-3", "-1e+300"])
def test_an_exponent_yaml_read_as_text_is_explained(text):
    # YAML 1.1 (PyYAML) needs a dot and a signed exponent for a float: each of these is a string to it.
    with pytest.raises(InvalidInput, match=r"this is text to YAML: write a dot and the exponent's sign, as in 1.0e\+12"):
        fields.number(text, "x")
    assert fields.number(1.0e12, "x") == 1.0e12
    with pytest.raises(InvalidInput) as err:
        fields.number("5", "x")
    assert err.value.expected == "a finite number"
