"""Local server processes and loopback ports: start a process in its own group, find it again, stop it.

Shared by the control plane (:mod:`.controlplane`) and the whole stack (:mod:`.stack`). A process is
kept as a :class:`ProcessRecord` (pid and start time), so that a record read back from a state file
never signals a stranger that reused the pid.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from volcano_metronome.core.errors import MetronomeError

LOOPBACK = "127.0.0.1"


class ControlPlaneError(MetronomeError):
    """The control plane could not start, become ready or stop; carries the tails of its logs."""


@dataclass(frozen=True)
class ProcessRecord:
    """A started process, identified well enough to never signal a stranger that reused its pid."""

    name: str
    pid: int
    start_ticks: int  # field 22 of /proc/<pid>/stat: when the process started, in clock ticks
    log_path: str


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that are free right now."""
    sockets: list[socket.socket] = []
    try:
        # Hold all of them open at once so the kernel hands out distinct ports.
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_free(port: int) -> bool:
    """Whether a listener could bind ``port`` on loopback now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Same option the Go servers set: a port in TIME_WAIT is free for a listener.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def wait_ports_free(ports: Sequence[int], *, timeout: float) -> None:
    """Wait until every port is free; raise :class:`ControlPlaneError` naming the busy ones after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        busy = [port for port in ports if not port_free(port)]
        if not busy:
            return
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"ports {busy} are still in use {timeout:.0f}s after stopping")
        time.sleep(0.1)


def spawn(
    name: str,
    args: Sequence[str],
    *,
    log_path: pathlib.Path,
    cwd: pathlib.Path,
    env: Mapping[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Start ``args`` in its own session and process group, output appended to ``log_path``.

    ``env`` replaces the environment (default: this process's).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(args)}\n".encode())
        log.flush()
        try:
            child = subprocess.Popen(
                list(args),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=None if env is None else dict(env),
                # Its own session and process group: terminate() kills the whole group, and a
                # detached dev cluster survives the terminal that started it.
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise ControlPlaneError(f"cannot start {name} ({args[0]}): {exc}") from exc
    return child, ProcessRecord(name=name, pid=child.pid, start_ticks=_start_ticks(child.pid), log_path=str(log_path))


def terminate(record: ProcessRecord, child: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM the process group of ``record``, SIGKILL it if it lingers, and wait until it is gone."""
    if child is None and not is_alive(record):
        return
    _signal_group(record.pid, signal.SIGTERM)
    if not _wait_gone(record, child, timeout=15.0):
        _signal_group(record.pid, signal.SIGKILL)
        if not _wait_gone(record, child, timeout=10.0):
            raise ControlPlaneError(f"{record.name} (pid {record.pid}) survived SIGKILL")
    # Helpers a server may have forked stay in its group; make sure none is left behind.
    _signal_group(record.pid, signal.SIGKILL)


def is_alive(record: ProcessRecord) -> bool:
    """Whether the process of ``record`` still runs (and is the same process, not a reused pid)."""
    try:
        stat = pathlib.Path(f"/proc/{record.pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return False
    return record.start_ticks == 0 or int(fields[19]) == record.start_ticks


def _start_ticks(pid: int) -> int:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    # The command name (field 2) may contain spaces and parentheses; fields after it are plain.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_gone(record: ProcessRecord, child: subprocess.Popen[bytes] | None, *, timeout: float) -> bool:
    if child is not None:
        try:
            child.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = time.monotonic() + timeout
    while is_alive(record):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True

