"""``POST /mutate`` without Flask's machinery keeps every answer it gave, and a response leaves in one write."""

from __future__ import annotations

import json

from tests.admission.builders import MODEL, review, with_annotations
from volcano_metronome.admission import Context
from webhooks.app import MAX_BODY_BYTES, create_app
from webhooks.worker import Coalesced

JOB = with_annotations({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"},
                        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": {"spec": {"containers": []}}}]}},
                       MODEL)


def client():
    return create_app(lambda: Context()).test_client()


def test_a_review_is_answered_with_its_patch_and_a_length():
    reply = client().post("/mutate", data=json.dumps(review(JOB, uid="u1")), content_type="application/json")
    assert reply.status_code == 200 and reply.content_type == "application/json"
    assert int(reply.headers["Content-Length"]) == len(reply.data)
    answer = json.loads(reply.data)["response"]
    assert answer["uid"] == "u1" and answer["allowed"] and answer["patchType"] == "JSONPatch"


def test_bad_bodies_get_json_errors_naming_the_problem():
    c = client()
    reply = c.post("/mutate", data=b"{not json", content_type="application/json")
    assert reply.status_code == 400 and "not an admission.k8s.io/v1 AdmissionReview" in reply.get_json()["error"]
    reply = c.post("/mutate", data=b"x" * (MAX_BODY_BYTES + 1), content_type="application/json")
    assert reply.status_code == 413 and str(MAX_BODY_BYTES) in reply.get_json()["error"]
    reply = c.get("/mutate")
    assert reply.status_code == 405 and reply.headers["Allow"] == "POST" and "POST" in reply.get_json()["error"]


def test_other_paths_still_go_to_flask():
    c = client()
    assert c.get("/healthz").data == b"ok\n"
    assert c.get("/nowhere").status_code == 404


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def sendall(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True


def test_headers_and_body_leave_in_one_write():
    sock = Recorder()
    out = Coalesced(sock)  # type: ignore[arg-type]
    out.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
    out.sendall(memoryview(b"{}"))
    assert sock.writes == []
    out.flush()
    out.flush()  # nothing more to send
    assert sock.writes == [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"]


def test_a_large_response_is_sent_as_it_grows_and_other_calls_send_first():
    sock = Recorder()
    out = Coalesced(sock)  # type: ignore[arg-type]
    out.sendall(b"x" * Coalesced.FLUSH_BYTES)
    assert len(sock.writes) == 1
    out.sendall(b"tail")
    out.close()  # delegated, after what was kept is sent
    assert sock.writes[-1] == b"tail" and sock.closed
