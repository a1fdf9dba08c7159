"""Reading traces: every refusal names the line, the column, the value and what was expected."""

from __future__ import annotations

import numpy as np
import pytest

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.profiling.trace import HEADER, parse, row


def test_rows_read_back_as_written():
    text = HEADER + "\n" + row(0.0, 5) + row(0.001, 5) + "\n" + row(0.0025, 1205)
    trace = parse(text, "t.csv")
    assert trace.samples == 3
    assert list(trace.time_s) == [0.0, 0.001, 0.0025]
    assert list(trace.tx_bytes) == [0, 0, 1200]
    assert trace.interval_s == pytest.approx(0.00125)
    assert trace.longest_gap_s == pytest.approx(0.0015)


def test_crlf_and_a_byte_order_mark_are_fine():
    trace = parse("\ufefftime_s,tx_bytes\r\n0,1\r\n0.5,2\r\n")
    assert trace.samples == 2


@pytest.mark.parametrize("text, field, value, expected", [
    ("", "t.csv: line 1", "", "the header 'time_s,tx_bytes'"),
    ("time,bytes\n0,1\n", "t.csv: line 1", "time,bytes", "the header 'time_s,tx_bytes'"),
    (HEADER + "\n0,1\n0.1\n", "t.csv: line 3", "0.1", "two comma-separated columns"),
    (HEADER + "\n0,1\n0.1,2,3\n", "t.csv: line 3", "0.1,2,3", "two comma-separated columns"),
    (HEADER + "\n0,1\nabc,2\n", "t.csv: line 3, column time_s", "abc", "a number of seconds"),
    (HEADER + "\n0,1\nnan,2\n", "t.csv: line 3, column time_s", "nan", "a number of seconds such as 0.001"),
    (HEADER + "\n0,1\n0.1,2.5\n", "t.csv: line 3, column tx_bytes", "2.5", "a whole number of bytes >= 0"),
    (HEADER + "\n0,1\n0.1,-4\n", "t.csv: line 3, column tx_bytes", "-4", "a whole number of bytes >= 0"),
    (HEADER + "\n0,1\n0.1,\n", "t.csv: line 3, column tx_bytes", "", "a whole number of bytes >= 0"),
    (HEADER + "\n0,1\n0.1,2\n0.1,3\n", "t.csv: line 4, column time_s", "0.1", "a time after the previous row's 0.1 s"),
    (HEADER + "\n0,1\n0.2,2\n0.1,3\n", "t.csv: line 4, column time_s", "0.1", "rows in time order"),
    (HEADER + "\n0,100\n0.1,200\n0.2,50\n", "t.csv: line 4, column tx_bytes", 50, "at least the previous row's 200"),
    (HEADER + "\n0,1\n", "t.csv: rows", 1, "at least two samples"),
])
def test_malformed_traces_name_line_column_value_and_form(text, field, value, expected):
    with pytest.raises(InvalidInput) as caught:
        parse(text, "t.csv")
    assert caught.value.field == field
    assert caught.value.value == value
    assert expected in caught.value.expected


def test_a_counter_that_goes_back_is_called_a_reset_or_wrap():
    with pytest.raises(InvalidInput, match="reset or a 32-bit counter wrapped"):
        parse(HEADER + "\n0,4294967000\n0.001,200\n")


def test_large_counters_stay_exact():
    big = 2**63 + 1
    trace = parse(HEADER + f"\n0,{big}\n1,{big + 1}\n")
    assert np.diff(trace.tx_bytes)[0] == 1
