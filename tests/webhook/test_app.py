"""The Flask app in-process: readiness follows the caches, a fault in the logic is answered in-band, never 5xx."""

from __future__ import annotations

import json

import pytest

from tests.admission.builders import MODEL, response, review, with_annotations, workload
from volcano_metronome.admission import Context, Settings
from volcano_metronome.admission.settings import Watch
from webhooks import app as app_module
from webhooks.app import create_app
from webhooks.cache import Caches

JOB = with_annotations({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"},
                        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": {"spec": {"containers": []}}}]}},
                       MODEL)


class FakeStore:
    def __init__(self, objects: dict | None = None, synced: bool = True) -> None:
        self.objects = objects or {}
        self._synced = synced
        self.started = False

    @property
    def synced(self) -> bool:
        return self._synced

    def start(self) -> "FakeStore":
        self.started = True
        return self

    def get(self, namespace, name):
        return self.objects.get((namespace, name))


def test_readyz_follows_cache_sync():
    groups, claims = FakeStore(synced=False), FakeStore()
    caches = Caches(pod_groups=groups, claims=claims)
    caches.start()
    assert groups.started and claims.started
    client = create_app(lambda: Context(lookups=caches.lookups()), caches.synced).test_client()
    assert client.get("/readyz").status_code == 503
    groups._synced = True
    assert client.get("/readyz").status_code == 200
    assert client.get("/healthz").status_code == 200


def test_caches_back_the_lookups():
    claim = {"spec": {"profile": {"periodMs": 100, "windows": [{"startMs": 0, "lenMs": 10, "gbps": 5}]}}}
    caches = Caches(claims=FakeStore({("default", "c"): claim}))
    lookups = caches.lookups()
    assert lookups.pod_group is None and lookups.claim is not None
    assert lookups.claim("default", "c") is claim and lookups.claim("default", "x") is None


def test_no_watches_no_connection():
    caches = Caches.connect(Settings(watch=Watch(pod_groups=False, claims=False)), kubeconfig="/nonexistent")
    assert caches.synced() and caches.lookups().claim is None


@pytest.mark.parametrize("obj, allowed, code", [(JOB, False, 500), (workload("v1beta2", annotations=MODEL), True, None)])
def test_a_fault_in_the_logic_is_answered_in_band(monkeypatch, obj, allowed, code):
    def explode(request, ctx):
        raise RuntimeError("boom")

    monkeypatch.setattr(app_module, "decide", explode)
    client = create_app(lambda: Context()).test_client()
    reply = client.post("/mutate", data=json.dumps(review(obj)))
    assert reply.status_code == 200
    resp = response(reply.get_json())
    assert resp["allowed"] is allowed
    if code:
        assert resp["status"]["code"] == code and "RuntimeError: boom" in resp["status"]["message"]
    else:
        assert "internal error" in resp["warnings"][0]
    metrics_text = client.get("/metrics").get_data(as_text=True)
    assert 'verdict="error"' in metrics_text
