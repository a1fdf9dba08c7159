"""The kube package without a server: resource paths, errors, and the Informer's list/watch state machine."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pytest

from volcano_metronome import kube
from volcano_metronome.kube import Gone, Informer, NotFound, Unavailable


def test_resource_paths() -> None:
    assert kube.PODS.path("a", "p", "status") == "/api/v1/namespaces/a/pods/p/status"
    assert kube.PODS.path() == "/api/v1/pods"
    assert kube.CLAIMS.path("ns", "c") == "/apis/metronome.dev/v1alpha1/namespaces/ns/stbandwidthclaims/c"
    assert kube.QUEUE_POLICIES.path(None, "q") == "/apis/metronome.dev/v1alpha1/queuepolicies/q"
    assert kube.WORKLOADS.api_version == "kueue.x-k8s.io/v1beta2" and kube.NODES.api_version == "v1"
    with pytest.raises(kube.KubeError, match="namespace is required"):
        kube.PODS.path(None, "p")


def test_errors_map_statuses() -> None:
    assert isinstance(kube._error(409, b'{"reason":"Conflict","message":"changed"}', "PATCH x"), kube.Conflict)
    assert isinstance(kube._error(410, b"", "w"), Gone)
    assert isinstance(kube._error(503, b"", "w"), Unavailable)
    err = kube._error(422, b'{"reason":"Invalid","message":"bad field"}', "PATCH /x")
    assert isinstance(err, kube.Invalid) and "bad field" in str(err) and err.status == 422


def test_connect_without_credentials_says_what_to_do(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(kube.KubeError, match="--kubeconfig"):
        kube.connect()
    with pytest.raises(kube.KubeError, match="no such file"):
        kube.connect(str(tmp_path / "missing"))


@pytest.mark.parametrize(("text", "message"), [
    ("a: [1\n", "not valid YAML: while parsing a flow sequence"),
    ("- 1\n- 2\n", "not a kubeconfig (expected a mapping with clusters, contexts and users)"),
    ("clusters: 5\n", "not a kubeconfig"),
    ("kind: Config\n", "Expected key current-context"),
])
def test_connect_names_a_broken_kubeconfig(tmp_path: Any, text: str, message: str) -> None:
    (tmp_path / "config").write_text(text)
    with pytest.raises(kube.KubeError) as caught:
        kube.connect(str(tmp_path / "config"))
    assert str(caught.value).startswith(f"kubeconfig {str(tmp_path / 'config')!r}: ") and message in str(caught.value)


def pod(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}


class ScriptedKube:
    """list() and watch() answer from a script; each watch call takes the next script entry."""

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.lists, self.watches = lists, watches
        self.watch_calls: list[str | None] = []
        self.done = threading.Event()

    def list(self, resource: Any, namespace: Any = None, **kw: Any) -> dict[str, Any]:
        item = self.lists.pop(0) if self.lists else {"items": [], "metadata": {"resourceVersion": "1"}}
        if isinstance(item, Exception):
            raise item
        return item

    def watch(self, resource: Any, namespace: Any = None, *, resource_version: str | None = None,
              **kw: Any) -> Iterator[dict[str, Any]]:
        self.watch_calls.append(resource_version)
        if not self.watches:
            self.done.set()
            time.sleep(0.05)
            return
        script = self.watches.pop(0)
        for event in script:
            if isinstance(event, Exception):
                raise event
            yield event


def run_informer(k: ScriptedKube, **kw: Any) -> tuple[Informer, list[tuple[str, str]]]:
    seen: list[tuple[str, str]] = []
    inf = Informer(k, kube.PODS, on_change=lambda t, o: seen.append((t, o["metadata"]["name"])),  # type: ignore[arg-type]
                   backoff_initial=0.001, backoff_max=0.002, **kw)
    inf.start()
    assert k.done.wait(5)
    inf.stop()
    return inf, seen


def test_informer_lists_then_watches_from_the_lists_version_and_follows_bookmarks() -> None:
    k = ScriptedKube(
        lists=[{"items": [pod("a", 5)], "metadata": {"resourceVersion": "10"}}],
        watches=[[{"type": "ADDED", "object": pod("b", 11)},
                  {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
                  {"type": "MODIFIED", "object": pod("a", 16)},
                  {"type": "DELETED", "object": pod("b", 17)}]])
    inf, seen = run_informer(k)
    assert k.watch_calls[:2] == ["10", "17"]
    assert [o["metadata"]["name"] for o in inf.items()] == ["a"]
    assert inf.get("ns", "a")["metadata"]["resourceVersion"] == "16"  # type: ignore[index]
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert inf.restarts == 0 and inf.wait_synced(0)


def test_informer_relists_on_410_and_reports_the_difference() -> None:
    k = ScriptedKube(
        lists=[{"items": [pod("a", 5), pod("b", 6)], "metadata": {"resourceVersion": "10"}},
               {"items": [pod("a", 30), pod("c", 31)], "metadata": {"resourceVersion": "40"}}],
        watches=[[Gone("too old", 410)]])
    inf, seen = run_informer(k)
    assert sorted(o["metadata"]["name"] for o in inf.items()) == ["a", "c"]
    assert ("MODIFIED", "a") in seen and ("ADDED", "c") in seen and ("DELETED", "b") in seen
    assert k.watch_calls[:2] == ["10", "40"] and inf.restarts == 1


def test_informer_backs_off_and_recovers_from_errors() -> None:
    k = ScriptedKube(
        lists=[Unavailable("refused"), Unavailable("refused"), {"items": [pod("a", 1)],
                                                               "metadata": {"resourceVersion": "2"}}],
        watches=[[Unavailable("reset")]])
    inf, _ = run_informer(k)
    assert inf.restarts == 3 and inf.get("ns", "a") is not None
    assert k.watch_calls[:2] == ["2", "2"]  # a failed watch resumes from where it was, without a re-list


def test_informer_of_a_missing_resource_type_is_synced_and_empty() -> None:
    k = ScriptedKube(lists=[NotFound("no such resource", 404)], watches=[])
    inf = Informer(k, kube.PODGROUPS, backoff_initial=10)  # type: ignore[arg-type]
    inf.start()
    assert inf.wait_synced(5)
    assert inf.items() == [] and not inf.installed
    inf.stop()


def test_a_404_after_a_successful_list_keeps_the_cache() -> None:
    listed = {"items": [pod("a", 1)], "metadata": {"resourceVersion": "2"}}
    k = ScriptedKube(lists=[listed, NotFound("gone", 404), NotFound("gone", 404), listed],
                     watches=[[NotFound("gone", 404)]])
    inf, seen = run_informer(k)
    assert inf.get("ns", "a") is not None and ("DELETED", "a") not in seen  # a transient 404 deletes nothing
    # Missing for longer than the grace period: the type is gone, and its objects with it.
    k = ScriptedKube(lists=[listed, NotFound("gone", 404), NotFound("gone", 404)], watches=[[NotFound("gone", 404)]])
    inf, seen = run_informer(k, missing_grace_s=0.0)
    assert inf.items() == [] and ("DELETED", "a") in seen


class _Pool:
    """Records each request's method and timeout; answers 200 {}."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def request(self, method: str, url: str, **kw: Any) -> Any:
        self.calls.append((method, kw["timeout"]))

        class Raw:
            status, data = 200, b"{}"

            def release_conn(self) -> None:
                pass

        return Raw()


def _stub_client(pool: _Pool) -> Any:
    class Configuration:
        host = "https://api"

        def auth_settings(self) -> dict[str, Any]:
            return {}

    class RestClient:
        pool_manager = pool

    class ApiClient:
        configuration, rest_client, default_headers = Configuration(), RestClient(), {}

    return ApiClient()


def test_a_fenced_client_cuts_write_timeouts_to_the_lease_and_refuses_when_it_is_spent() -> None:
    pool = _Pool()
    left = [7.5]
    k = kube.Kube(_stub_client(pool), request_timeout=30.0).fenced(lambda: left[0])
    k.patch(kube.PODS, "ns", "p", {"a": 1})
    k.get(kube.PODS, "ns", "p")
    assert [(m, t.total) for m, t in pool.calls] == [("PATCH", 7.5), ("GET", 30.0)]
    left[0] = 0.1
    with pytest.raises(kube.Fenced, match="lease"):
        k.create(kube.CLAIMS, {"metadata": {"name": "c", "namespace": "ns"}})
    k.get(kube.PODS, "ns", "p")  # reads go on (a standby's informers, the writer's refreshes)
    assert [m for m, _ in pool.calls] == ["PATCH", "GET", "GET"]
