"""The service benchmarks bill a server's CPU with its workers' (the /proc walk over a process tree) and their own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from volcano_metronome.bench import cputime

#: A parent that starts a child burning CPU, then sleeps: the parent's own time is nearly nothing.
_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time\\nend = time.process_time() + 0.6\\nwhile time.process_time() < end: pass\\ntime.sleep(30)"])
print(child.pid, flush=True)
time.sleep(30)
"""


def test_a_process_tree_counts_its_children_s_cpu():
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 20
        while cputime.process_tree(child) < 0.6 and time.monotonic() < deadline:
            time.sleep(0.1)
        alone, tree = cputime.process_tree(child), cputime.process_tree(parent.pid)
        assert alone >= 0.6
        assert tree >= alone  # the parent's tree holds the child's burn
    finally:
        if child is not None:
            os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait()


def test_a_process_that_is_gone_counts_nothing():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert cputime.process_tree(gone.pid) == 0.0


def test_own_counts_the_time_this_process_burns() -> None:
    before = cputime.own()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    assert cputime.own() - before >= 0.25
