"""A training loop stand-in for the runtime route: ``compute`` then a ``burst`` every iteration, timed by the
runtime helper's Stopwatch and published every second to ``$METRONOME_MEASURED_DIR`` as the helper does in
a pod (identity from the METRONOME_* variables). Sleeps stand in for the work: what is under test is the
timing's way to the claim, not a collective (tests/profiling/test_collective.py runs a real one).

    METRONOME_MEASURED_DIR=... METRONOME_NAMESPACE=... METRONOME_GANG_KIND=PodGroup METRONOME_GANG_NAME=a \\
        METRONOME_POD=a-0 python3 -m tests.agent.timed_loop --period-ms 300 --burst-ms 30 --seconds 60
"""

from __future__ import annotations

import argparse
import time

from volcano_metronome.runtime import Publication, Stopwatch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--period-ms", type=float, required=True)
    parser.add_argument("--burst-ms", type=float, required=True)
    parser.add_argument("--nbytes", type=int, default=30_000_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    stopwatch = Stopwatch(publication=Publication.from_env(every_s=1.0))
    compute_s, burst_s = (args.period_ms - args.burst_ms) / 1000.0, args.burst_ms / 1000.0
    begin = time.monotonic()
    k = 0
    while time.monotonic() - begin < args.seconds:
        # An absolute schedule, so that a late wake-up (a loaded machine) does not lengthen every later period.
        time.sleep(max(0.0, begin + k * args.period_ms / 1000.0 + compute_s - time.monotonic()))
        stopwatch.iteration()
        with stopwatch.burst(nbytes=args.nbytes):
            time.sleep(burst_s)
        k += 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
