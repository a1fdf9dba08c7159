"""Property tests against the real server: arbitrary bytes, arbitrary JSON, arbitrary annotations on real
objects. Never a 5xx, never a dropped connection, always a message."""

from __future__ import annotations

import copy
import http.client
import json
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.admission.builders import HANDLED, response, review, upstream_examples, workload
from tests.admission.test_properties import annotations, json_values
from tests.webhook.conftest import Server
from volcano_metronome import api

OBJECTS = [obj for _, obj in upstream_examples()] + [workload("v1beta2")]
SERVER_SETTINGS = settings(max_examples=60, deadline=None,
                           suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                  HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def conn(server: Server) -> Iterator[http.client.HTTPSConnection]:
    connection = server.connection()
    yield connection
    connection.close()


def post(server: Server, conn: http.client.HTTPSConnection, body: bytes) -> tuple[int, bytes]:
    status, _, content = server.request("POST", "/mutate", body, conn)
    assert status < 500, content
    return status, content


def check_answer(status: int, content: bytes) -> None:
    document = json.loads(content)
    if status != 200:
        assert status in (400, 413) and document["error"]
        return
    resp = response(document)
    if not resp["allowed"]:
        assert resp["status"]["message"].startswith("volcano-metronome: ")
    for warning in resp.get("warnings", []):
        assert warning.startswith("volcano-metronome: ")


@SERVER_SETTINGS
@given(st.binary(max_size=300))
def test_any_bytes(server: Server, conn: http.client.HTTPSConnection, body: bytes):
    check_answer(*post(server, conn, body))


@SERVER_SETTINGS
@given(json_values)
def test_any_json(server: Server, conn: http.client.HTTPSConnection, body: object):
    check_answer(*post(server, conn, json.dumps(body).encode()))


@SERVER_SETTINGS
@given(st.sampled_from(sorted(HANDLED)), json_values)
def test_any_object_in_a_valid_envelope(server: Server, conn: http.client.HTTPSConnection, kind, obj):
    status, content = post(server, conn, json.dumps(review(obj if isinstance(obj, dict) else {"x": obj},
                                                           kind=kind)).encode())
    assert status == 200
    check_answer(status, content)


@SERVER_SETTINGS
@given(st.sampled_from(OBJECTS), annotations)
def test_any_annotations_on_real_objects(server: Server, conn: http.client.HTTPSConnection, obj, extra):
    obj = copy.deepcopy(obj)
    obj.setdefault("metadata", {}).setdefault("annotations", {}).update(extra)
    status, content = post(server, conn, json.dumps(review(obj)).encode())
    assert status == 200
    check_answer(status, content)
    resp = response(json.loads(content))
    if not resp["allowed"]:
        assert any(key in resp["status"]["message"] for key in (*api.USER_PROFILE_KEYS, api.PROFILE, "spec."))
