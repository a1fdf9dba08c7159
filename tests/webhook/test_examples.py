"""Every upstream example the webhook handles, wrapped in an AdmissionReview and sent to the real server
over HTTPS, with and without profile annotations; each patched object is validated against the upstream
CRD schema (built-in kinds: the structure we write), and sending it again changes nothing."""

from __future__ import annotations

import pytest

from tests.admission.builders import (
    EXPLICIT,
    MODEL,
    gvk,
    ops_of,
    patched,
    response,
    review,
    schema_errors,
    as_params,
    upstream_examples,
    with_annotations,
    workload,
)
from tests.webhook.conftest import Server
from volcano_metronome import api

CASES = list(upstream_examples()) + [(f"synthesized Workload {v}", workload(v)) for v in ("v1beta2", "v1beta1")]


@pytest.mark.parametrize("name, obj", as_params(CASES))
def test_example_over_https(server: Server, name: str, obj: dict):
    conn = server.connection()
    try:
        for extra in (None, MODEL, EXPLICIT):
            sent = with_annotations(obj, extra) if extra else obj
            out = server.mutate(review(sent), conn)
            assert response(out)["allowed"] is True, out
            after = patched(sent, out)
            assert schema_errors(after) == [], (name, extra)
            assert ops_of(server.mutate(review(after), conn)) == [], (name, extra)
            plain_pod = gvk(obj) == ("", "v1", "Pod") and api.KUEUE_POD_GROUP_NAME not in obj["metadata"].get("labels", {})
            if extra and not plain_pod:
                assert api.PROFILE in after["metadata"]["annotations"]
            if extra and gvk(obj) == ("", "v1", "Pod") and not plain_pod:
                assert {"name": api.SCHEDULING_GATE} in after["spec"]["schedulingGates"]
            if not extra:
                assert ops_of(out) == []
    finally:
        conn.close()
