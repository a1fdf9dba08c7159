"""Four concurrent maximum-size AdmissionReviews: every worker's peak memory stays well inside the
chart's 512Mi limit, and each review is answered."""

from __future__ import annotations

import json
import pathlib
import threading

from tests.faults.big import max_size_body
from tests.webhook.conftest import make_certs, start_server
from volcano_metronome.admission.pods import MAX_CONTAINERS

CHART_LIMIT_MIB = 512


def _status_mib(pid: int, key: str) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {key} for {pid}")


def _workers(pid: int) -> list[int]:
    return [int(p) for p in pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_four_concurrent_max_size_reviews_stay_inside_the_memory_limit(tmp_path: pathlib.Path) -> None:
    body = max_size_body()
    assert len(body) > 3 * 1024 * 1024 - 64
    server = start_server(tmp_path, make_certs(tmp_path / "certs"))
    try:
        workers = _workers(server.process.pid)
        assert len(workers) == 2
        answers: dict[int, tuple[int, bytes]] = {}

        def post(i: int) -> None:
            conn = server.connection()
            conn.timeout = 60
            status, _, data = server.request("POST", "/mutate", body, conn)
            answers[i] = (status, data)
            conn.close()

        threads = [threading.Thread(target=post, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert sorted(answers) == [0, 1, 2, 3]
        for status, data in answers.values():
            assert status == 200
            response = json.loads(data)["response"]
            assert response["allowed"] is False and f"at most {MAX_CONTAINERS} containers" in response["status"]["message"]
            assert len(data) < 4096  # no amplification: a denial, not an 80 MB patch
        peaks = {pid: _status_mib(pid, "VmHWM") for pid in [server.process.pid, *workers]}
        print(f"FAULT-BENCH memory: 4 concurrent {len(body)}-byte reviews; peak RSS arbiter "
              f"{peaks[server.process.pid]:.0f} MiB, workers {', '.join(f'{peaks[w]:.0f}' for w in workers)} MiB; "
              f"answers {max(len(d) for _, d in answers.values())} bytes")
        assert sum(peaks.values()) < CHART_LIMIT_MIB / 2, peaks
    finally:
        assert server.stop() == 0, server.stderr.read_text()
