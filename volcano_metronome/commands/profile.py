"""``volcano-metronome profile fit TRACE [--json]``, ``profile record --interface IF --out TRACE`` and ``profile agent``.

``record`` samples a NIC's transmit byte counter into a trace (CSV ``time_s,tx_bytes``); ``fit``
reads one and prints the periodic profile it shows, with the ``metronome.dev/*`` annotations that
declare it. A trace that is too short, too coarse, aperiodic, broken by a gap, too long or implausible is
refused with the reason (exit 2).
``agent`` is the node agent the chart's DaemonSet runs (:mod:`volcano_metronome.agent`).
See docs/profiles.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import sys
import threading

from volcano_metronome.core import fields
from volcano_metronome.core.errors import InvalidInput, MetronomeError


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
    agent = actions.add_parser("agent", help="the node agent: fit the NIC's gang and write its measured profile",
                               description="Every --interval seconds, record --seconds of the NIC's tx_bytes, fit "
                                           "it, and write the profile into the claim of the gang that alone uses "
                                           "this node (status.measuredProfile); serve Prometheus metrics.")
    agent.add_argument("--node", default=os.environ.get("NODE_NAME", ""), help="this node's name (default "
                       "$NODE_NAME)")
    agent.add_argument("--interface", required=True, metavar="IF", help="the NIC to sample, e.g. eth0")
    agent.add_argument("--hz", type=float, default=1000.0, help="samples per second (default 1000)")
    agent.add_argument("--seconds", type=float, default=30.0, help="length of each trace (default 30)")
    agent.add_argument("--interval", type=float, default=60.0, help="seconds between traces' starts (default 60)")
    agent.add_argument("--runtime-dir", default="", metavar="DIR",
                       help="directory the runtime helpers publish their measurements into (METRONOME_MEASURED_DIR "
                            "in the training pods); their own timing is preferred to the NIC fit (default: none)")
    agent.add_argument("--runtime-max-age", type=float, default=180.0, metavar="SECONDS",
                       help="a runtime measurement older than this is stale (default 180)")
    agent.add_argument("--metrics-port", type=int, default=9464, help="port of /metrics (0: none; default 9464)")
    agent.add_argument("--bind-address", default="0.0.0.0", help="address of /metrics (default 0.0.0.0)")
    agent.add_argument("--kubeconfig", default=None, help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, "
                       "in-cluster)")


def run(args: argparse.Namespace) -> int:
    """Run the chosen action."""
    if args.profile_action == "record":
        return _record(args)
    if args.profile_action == "agent":
        return _agent(args)
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
    sampler.check_rate(args.hz, args.seconds)  # before --out is opened: a refused flag must not empty the file
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
          f"{done.longest_gap_ms:.2f} ms, {done.skipped} ticks skipped -> {out}", file=sys.stderr)
    return 0


def _agent(args: argparse.Namespace) -> int:
    import logging

    from volcano_metronome import kube
    from volcano_metronome.agent.node import AgentConfig, run

    if not 0 <= args.metrics_port <= 65535:
        raise InvalidInput("--metrics-port", args.metrics_port, "a port in [0, 65535] (0: no metrics)")
    fields.ip_address(args.bind_address, "--bind-address")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = AgentConfig(args.node, args.interface, args.hz, args.seconds, args.interval, args.runtime_dir,
                      args.runtime_max_age)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    run(kube.connect(args.kubeconfig), cfg, stop, metrics_port=args.metrics_port, bind_address=args.bind_address)
    return 0
