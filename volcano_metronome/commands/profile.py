"""``volcano-metronome profile fit TRACE [--json]`` and ``profile record --interface IF --out TRACE``.

``record`` samples a NIC's transmit byte counter into a trace (CSV ``time_s,tx_bytes``); ``fit``
reads one and prints the periodic profile it shows, with the ``metronome.dev/*`` annotations that
declare it. A trace that is too short, too coarse or aperiodic is refused with the reason (exit 2).
See docs/profiles.md.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from volcano_metronome.core.errors import MetronomeError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Sub-commands ``fit`` and ``record``."""
    actions = parser.add_subparsers(dest="profile_action", metavar="ACTION", required=True)
    fit = actions.add_parser("fit", help="fit a profile to a byte-counter trace",
                             description="Fit a periodic profile (period, windows, jitter) to a trace "
                                         "'time_s,tx_bytes' and print it with the annotations that declare it.")
    fit.add_argument("trace", metavar="TRACE", help="CSV file with header time_s,tx_bytes ('-' for stdin)")
    fit.add_argument("--json", action="store_true", help="print the fitted profile and its figures as JSON")
    record = actions.add_parser("record", help="sample a NIC's tx_bytes counter into a trace",
                                description="Sample /sys/class/net/IF/statistics/tx_bytes into a trace "
                                            "'time_s,tx_bytes' and report the rate really achieved.")
    record.add_argument("--interface", required=True, metavar="IF", help="network interface, e.g. eth0")
    record.add_argument("--hz", type=float, default=1000.0, help="samples per second (default 1000)")
    record.add_argument("--seconds", type=float, required=True, metavar="S", help="how long to record")
    record.add_argument("--out", required=True, metavar="TRACE", help="CSV file to write")


def run(args: argparse.Namespace) -> int:
    """Run the chosen action."""
    if args.profile_action == "record":
        return _record(args)
    return _fit(args)


def _fit(args: argparse.Namespace) -> int:
    from volcano_metronome.profiling.fit import Refusal, fit
    from volcano_metronome.profiling.trace import parse

    source = "stdin" if args.trace == "-" else args.trace
    try:
        text = sys.stdin.read() if args.trace == "-" else pathlib.Path(args.trace).read_text(encoding="utf-8")
    except OSError as exc:
        raise MetronomeError(f"cannot read {source}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise MetronomeError(f"cannot read {source}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    result = fit(parse(text, source))
    if isinstance(result, Refusal):
        if args.json:
            print(json.dumps({"refused": result.reason, "detail": result.detail}))
        print(f"volcano-metronome profile fit: refused ({result.reason}): {result.detail}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    profile = result.profile
    print(f"period {profile.period_ms:g} ms over {result.periods} periods (trace {result.span_s:.4g} s, sampled every "
          f"{result.sample_interval_ms:.4g} ms, longest gap {result.longest_gap_ms:.4g} ms); "
          f"confidence {result.confidence:.2f}")
    print(f"{'window':<8}{'start_ms':>10}{'len_ms':>10}{'gbps':>12}")
    for i, w in enumerate(profile.windows):
        print(f"{i:<8}{w.start_ms:>10g}{w.len_ms:>10g}{w.gbps:>12g}")
    print(f"jitter {profile.jitter_ms:g} ms; duty cycle {profile.duty_cycle:.3f}; rate between windows "
          f"{result.baseline_gbps:.4g} Gbps")
    print()
    print("annotations:")
    for key, value in result.annotations().items():
        print(f"  {key}: '{value}'")
    return 0


def _record(args: argparse.Namespace) -> int:
    from volcano_metronome import sampler

    path = sampler.counter_path(args.interface)
    out = pathlib.Path(args.out)
    try:
        stream = out.open("w", encoding="utf-8")
    except OSError as exc:
        raise MetronomeError(f"cannot write {out}: {exc.strerror}") from None
    with stream:
        try:
            done = sampler.record(path, args.hz, args.seconds, stream, interface=args.interface)
        except OSError as exc:
            raise MetronomeError(f"cannot read {exc.filename or path}: {exc.strerror}") from None
    print(f"recorded {done.samples} samples of {done.interface} tx_bytes over {done.seconds:.3f} s: "
          f"{done.achieved_hz:.1f} Hz achieved ({done.asked_hz:g} Hz asked), longest gap "
          f"{done.longest_gap_ms:.2f} ms -> {out}", file=sys.stderr)
    return 0
