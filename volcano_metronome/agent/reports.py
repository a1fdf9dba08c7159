"""The runtime helpers' reports on this node: read from the directory they publish into, and matched to claims.

Each training process that publishes (:class:`volcano_metronome.runtime.Publication`) keeps one JSON file
in the directory (``--runtime-dir``, a hostPath both sides mount). A file that does not parse is reported
by name and skipped, never guessed at; a report older than the agent's ``--runtime-max-age`` is stale (the
process ended, or stopped publishing) and ignored.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any, Collection, Mapping, Sequence

from volcano_metronome import api
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.profiling.report import RuntimeReport, parse_report


@dataclass(frozen=True)
class Scan:
    """The reports read, and one line per file refused (``path: why``)."""

    reports: tuple[RuntimeReport, ...]
    problems: tuple[str, ...] = ()


def read_reports(directory: pathlib.Path) -> Scan:
    """Every ``*.json`` report in ``directory`` (none when it does not exist yet: no process published)."""
    reports: list[RuntimeReport] = []
    problems: list[str] = []
    try:
        paths = sorted(p for p in directory.glob("*.json") if not p.name.startswith("."))
    except OSError as exc:
        return Scan((), (f"{directory}: {exc}",))
    for path in paths:
        try:
            reports.append(parse_report(path.read_text(), str(path)))
        except FileNotFoundError:
            continue  # the process's file was replaced or removed between the listing and the read
        except (OSError, UnicodeDecodeError, InvalidInput) as exc:
            problems.append(f"{path}: {exc}")
    return Scan(tuple(reports), tuple(problems))


def gangs_of(claim: Mapping[str, Any]) -> frozenset[tuple[str, str, str]]:
    """``(namespace, kind, name)`` by which the gang's pods may report: the claim's ``spec.gangRef`` and, for a
    Kueue Workload, the job its pods name (the claim's ``metronome.dev/gang-kind`` / ``gang-name`` annotations)."""
    meta = claim.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    ref = (claim.get("spec") or {}).get("gangRef") or {}
    out = {(namespace, str(ref.get("kind") or ""), str(ref.get("name") or ""))}
    annotations = meta.get("annotations") or {}
    kind, name = annotations.get(api.GANG_KIND), annotations.get(api.GANG_NAME)
    if isinstance(kind, str) and kind and isinstance(name, str) and name:
        out.add((namespace, kind, name))
    return frozenset(out)


def freshest(reports: Sequence[RuntimeReport], gangs: Collection[tuple[str, str, str]], now_s: float,
             max_age_s: float) -> RuntimeReport | None:
    """The newest report of the gang known as any of ``gangs``, no older than ``max_age_s``, whose windows all
    carry a rate (ties: more iterations); None when there is none. The gang's processes on one node measure the
    same loop."""
    usable = [r for r in reports if r.gang in gangs and now_s - r.measured_at_s <= max_age_s
              and r.measured.profile() is not None]
    return max(usable, key=lambda r: (r.measured_at_s, r.measured.periods), default=None)
