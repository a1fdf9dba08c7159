"""The runtime helper publishes its measurement for the node agent: identity from the environment, one
atomic JSON report per process, every ``every_s``; the report parses back and bad reports name the field."""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.profiling.test_timed import Clock, run_loop
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.profiling.fit import Refusal
from volcano_metronome.profiling.report import RuntimeReport, parse_report
from volcano_metronome.runtime import Publication, Stopwatch

ENV = {"METRONOME_MEASURED_DIR": "/run/metronome/measured", "METRONOME_NAMESPACE": "team-a",
       "METRONOME_GANG_KIND": "PodGroup", "METRONOME_GANG_NAME": "llm", "METRONOME_POD": "llm-worker-0"}


def test_the_publication_comes_from_the_environment_and_names_what_is_missing() -> None:
    where = Publication.from_env(ENV)
    assert where is not None and where.path == pathlib.Path("/run/metronome/measured/team-a.llm-worker-0.json")
    assert (where.gang_kind, where.gang_name) == ("PodGroup", "llm")
    assert Publication.from_env({k: v for k, v in ENV.items() if k != "METRONOME_MEASURED_DIR"}) is None
    with pytest.raises(InvalidInput) as caught:
        Publication.from_env({**ENV, "METRONOME_GANG_NAME": " "})
    assert caught.value.field == "METRONOME_GANG_NAME" and "gang name" in str(caught.value)
    with pytest.raises(InvalidInput, match="every_s"):
        Publication(pathlib.Path("/x"), "a", "PodGroup", "b", "c", every_s=0.0)


def test_the_stopwatch_publishes_every_interval_and_the_report_parses_back(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    where = Publication(tmp_path / "measured", "team-a", "PodGroup", "llm", "llm-worker-0", every_s=2.0)
    stopwatch = Stopwatch(clock=clock, publication=where, wall=lambda: 1_700_000_000.0)
    # 80 ms of compute then 20 ms sending 25 MB: 10 Gbps for 20 ms every 100 ms; 15 iterations = 1.5 s.
    run_loop(stopwatch, clock, 15, 80.0, 20.0, nbytes=25_000_000)
    assert not where.path.exists()  # not yet a whole interval
    run_loop(stopwatch, clock, 10, 80.0, 20.0, nbytes=25_000_000)
    report = parse_report(where.path.read_text(), str(where.path))
    assert report.gang == ("team-a", "PodGroup", "llm") and report.pod == "llm-worker-0"
    assert report.measured_at_s == 1_700_000_000.0
    assert report.measured.period_ms == pytest.approx(100.0, abs=0.1)
    (window,) = report.measured.windows
    assert (window.start_ms, window.len_ms, window.gbps) == pytest.approx((80.0, 20.0, 10.0), rel=1e-3)
    assert [p.name for p in where.directory.iterdir()] == [where.path.name]  # no partial file left behind
    assert json.loads(where.path.read_text())["source"] == "runtime"


def test_without_rates_or_iterations_nothing_is_published(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    where = Publication(tmp_path, "team-a", "PodGroup", "llm", "p0")
    stopwatch = Stopwatch(clock=clock)
    assert isinstance(stopwatch.publish(where), Refusal)  # no iterations
    run_loop(stopwatch, clock, 20, 80.0, 20.0)  # bursts timed without their bytes
    refused = stopwatch.publish(where)
    assert isinstance(refused, Refusal) and refused.reason == "no-rate"
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InvalidInput, match="publication"):
        stopwatch.publish()


def test_a_directory_that_cannot_be_written_warns_and_the_loop_goes_on(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    clock = Clock()
    stopwatch = Stopwatch(clock=clock, publication=Publication(blocker / "sub", "a", "PodGroup", "b", "c", 1.0))
    with pytest.warns(RuntimeWarning, match="cannot publish the measured profile"):
        run_loop(stopwatch, clock, 30, 80.0, 20.0, nbytes=1000)
    assert len(stopwatch.marks) == 30


@pytest.mark.parametrize(("change", "field"), [
    ({"namespace": ""}, "namespace"),
    ({"gang_kind": 3}, "gang_kind"),
    ({"period_ms": 0}, "period_ms"),
    ({"period_ms": float("nan")}, "period_ms"),
    ({"windows": []}, "windows"),
    ({"windows": [{"start_ms": 1.0, "len_ms": -1.0, "gbps": 1.0}]}, "len_ms"),
    ({"windows": [{"start_ms": 1.0, "len_ms": 1.0, "gbps": 0}]}, "gbps"),
    ({"windows": ["x"]}, "windows[0]"),
    ({"periods": 2.5}, "periods"),
    ({"periods": True}, "periods"),
    ({"measured_at_s": "now"}, "measured_at_s"),
    ({"windows": [{"start_ms": 90.0, "len_ms": 20.0, "gbps": 10.0}]}, "windows[0].len_ms"),  # past the period
])
def test_bad_reports_name_the_field(change: dict[str, object], field: str) -> None:
    good = {"namespace": "a", "gang_kind": "PodGroup", "gang_name": "b", "pod": "c", "measured_at_s": 1.0,
            "period_ms": 100.0, "windows": [{"start_ms": 80.0, "len_ms": 20.0, "gbps": 10.0}], "jitter_ms": 0.0,
            "periods": 20, "padding_ms": 0.0}
    assert isinstance(parse_report(json.dumps(good), "r.json"), RuntimeReport)
    with pytest.raises(InvalidInput) as caught:
        parse_report(json.dumps({**good, **change}), "r.json")
    assert caught.value.field.startswith("r.json") and field in caught.value.field
    with pytest.raises(InvalidInput, match="a JSON object"):
        parse_report("[1, 2", "r.json")
