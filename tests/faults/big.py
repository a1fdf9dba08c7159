"""Maximum-size AdmissionReviews: a gated pod with as many containers as fit in the body limit."""

from __future__ import annotations

import json
from typing import Any

from volcano_metronome import api
from webhooks.app import MAX_BODY_BYTES

PROFILE = '{"period_ms":200,"windows":[{"start_ms":176,"len_ms":24,"gbps":80}],"jitter_ms":0}'


def review(containers: int, uid: str = "big") -> dict[str, Any]:
    """A CREATE review of a pod of a managed Volcano gang with ``containers`` tiny containers."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "big", "namespace": "default",
                        "annotations": {api.VOLCANO_GROUP_NAME: "pg", api.PROFILE: PROFILE,
                                        api.PROFILE_SOURCE: "annotation"}},
           "spec": {"containers": [{"name": f"c{i}", "image": "x"} for i in range(containers)]}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "operation": "CREATE", "namespace": "default", "object": pod}}


def max_size_body(limit: int = MAX_BODY_BYTES) -> bytes:
    """The largest such review that fits within ``limit`` bytes."""
    def size(n: int) -> int:
        return len(json.dumps(review(n), separators=(",", ":")))

    # The size grows by one container's text per container (longer names past 10,000 on): estimate, then step.
    per = size(20000) - size(19999)
    n = 10000 + (limit - size(10000)) // per
    while size(n) > limit:
        n -= 1 + (size(n) - limit) // per
    while size(n + 1) <= limit:
        n += 1
    body = json.dumps(review(n), separators=(",", ":")).encode()
    assert len(body) <= limit
    return body
