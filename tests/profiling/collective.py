"""A real data-parallel loop for the tests: compute, then an MPI all-reduce over loopback TCP, timed.

Run under ``mpiexec`` (mpi4py + the MPICH wheel from PyPI), each rank::

    MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo \\
        mpiexec -launcher fork -n 2 python3 -m tests.profiling.collective --out run.json

``MPIR_CVAR_NOLOCAL=1`` and ``UCX_TLS=tcp,self`` keep MPICH off shared memory, so the all-reduce
really crosses ``lo`` (whose ``tx_bytes`` the sampler reads). Compute is a little numpy work then a
sleep up to ``--compute-ms`` (250) (a GPU's compute leaves the CPU idle too; this machine's two cores are
shared). Each rank times itself with the runtime helper's :class:`~volcano_metronome.runtime.Stopwatch`;
with ``--slot-ms`` it also pads each burst to a slot grid, as a locked gang's helper does (on a
loaded machine a free loop's iterations wander by as much as its bursts last). Rank 0 touches
``--ready`` after the warm-up and writes ``--out``: when its bursts began, and the helper's
measured profile.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import numpy as np
from mpi4py import MPI

from volcano_metronome.profiling.fit import Refusal
from volcano_metronome.runtime import Metronome, Stopwatch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=26)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--compute-ms", type=float, default=250.0)
    parser.add_argument("--floats", type=int, default=32_000_000)
    parser.add_argument("--buckets", type=int, default=1)
    parser.add_argument("--poll-ms", type=float, default=0.0)
    parser.add_argument("--slot-ms", type=float, default=500.0, help="pad each burst to a slot grid of this "
                        "period (a locked gang), 0 to run free")
    parser.add_argument("--out", required=True)
    parser.add_argument("--ready", default="")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    # Gradients all-reduced bucket by bucket, as data-parallel trainers do: a continuous burst.
    grads = np.ones(args.floats, dtype=np.float32)
    summed = np.empty_like(grads)
    bounds = np.linspace(0, args.floats, args.buckets + 1).astype(int)
    weights = np.random.default_rng(comm.rank).standard_normal((128, 128))
    # Ring all-reduce: each rank sends 2 (n - 1) / n of the buffer.
    sends = int(2 * (comm.size - 1) * grads.nbytes / comm.size)
    stopwatch = Stopwatch(keep=args.iterations + 1)
    metronome = (Metronome(args.slot_ms, 0.0, 0.0, stopwatch=stopwatch) if args.slot_ms > 0 else None)
    walls: list[float] = []  # when each burst really began (padding included)
    for k in range(args.iterations):
        begin = time.monotonic()
        for _ in range(4):
            weights = np.tanh(weights @ weights.T / 128.0)
        time.sleep(max(0.0, begin + args.compute_ms / 1000.0 - time.monotonic()))
        if metronome is not None:
            metronome.wait()
        else:
            stopwatch.iteration()
        walls.append(time.monotonic())
        with stopwatch.burst(nbytes=sends):
            requests = [comm.Iallreduce(grads[lo:hi], summed[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]
            if args.poll_ms > 0:  # yield the CPU between progress calls (two cores shared by many processes)
                while not MPI.Request.Testall(requests):
                    time.sleep(args.poll_ms / 1000.0)
            else:
                MPI.Request.Waitall(requests)
        if k == args.warmup:  # time the steady state only: start afresh
            stopwatch = Stopwatch(keep=args.iterations + 1)
            if metronome is not None:
                metronome.stopwatch = stopwatch
            if comm.rank == 0 and args.ready:
                pathlib.Path(args.ready).touch()
    if not np.all(summed == comm.size):
        raise SystemExit(f"all-reduce summed {summed.min()} to {summed.max()}, expected {comm.size}")
    if comm.rank == 0:
        measured = stopwatch.measured()
        pathlib.Path(args.out).write_text(json.dumps({
            "ranks": comm.size, "bytes_sent_per_iteration": sends,
            "burst_starts_monotonic_s": walls,
            "measured": {"refused": str(measured)} if isinstance(measured, Refusal) else measured.to_dict()}))


if __name__ == "__main__":
    main()
