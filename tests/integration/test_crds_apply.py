"""Our CRDs and the rendered chart on a real kube-apiserver: the server's own validation is the judge.

- the CRDs install (structural schemas, CEL rules within the server's cost budget) and become
  Established; their short names collide with nothing the server serves;
- every example under crds/examples/ is accepted, with the schema defaults filled in, and the
  placed claim's status is accepted through the status subresource;
- every case in tests/crds/invalid_cases.yaml is refused, naming the field and the rule;
- gangRef cannot change; printer columns show the decision;
- every object `helm template` renders is accepted by a server-side dry run, and every pod template
  passes the API server's PodSecurity admission at level "restricted";
- `helm install`, `helm upgrade` (the controller's pods roll) and `helm uninstall` work for real.
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
import ssl
import subprocess
import urllib.request
import uuid
from typing import Any, Iterator

import pytest
import yaml

from tests.helm.chart import CHART, run_helm, template
from volcano_metronome import api
from volcano_metronome.devtools.apply import FIELD_MANAGER, ApiClient, ApiError, load_manifests
from volcano_metronome.devtools.controlplane import ControlPlane
from volcano_metronome.devtools.sources import our_crd_files, upstream_crd_files
from volcano_metronome.shapes.profiles import profile_from_spec

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "crds" / "examples").glob("*.yaml"))
CASES: list[dict[str, Any]] = yaml.safe_load((REPO / "tests" / "crds" / "invalid_cases.yaml").read_text())


@pytest.fixture(scope="module")
def client(control_plane: ControlPlane) -> ApiClient:
    applier = ApiClient.from_kubeconfig(control_plane.kubeconfig_path)
    names = applier.install_crds(our_crd_files(), timeout=120)
    assert sorted(names) == sorted(f"{plural}.{api.GROUP}" for plural in (api.CLAIMS, api.CAPACITIES, api.QUEUE_POLICIES))
    return applier


@pytest.fixture(scope="module")
def namespace(client: ApiClient) -> str:
    name = f"crds-{uuid.uuid4().hex[:8]}"
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def _unique(obj: dict[str, Any], namespace: str, suffix: str) -> dict[str, Any]:
    """A copy placed in ``namespace`` (namespaced kinds) or renamed with ``suffix`` (cluster-scoped ones),
    so that nothing collides with what other tests of the session create."""
    obj = copy.deepcopy(obj)
    if obj["kind"] == "STBandwidthClaim":
        obj["metadata"]["namespace"] = namespace
    else:
        obj["metadata"]["name"] = f"{obj['metadata']['name']}-{suffix}"
    return obj


def _delete(client: ApiClient, obj: dict[str, Any]) -> None:
    resource = client.resource(obj["apiVersion"], obj["kind"])
    try:
        client.request("DELETE", resource.path(obj["metadata"].get("namespace"), obj["metadata"]["name"]))
    except ApiError as exc:
        if exc.status != 404:
            raise


@pytest.fixture()
def created(client: ApiClient) -> Iterator[list[dict[str, Any]]]:
    """Objects a test creates, deleted afterwards (custom resources have no finalizers)."""
    objects: list[dict[str, Any]] = []
    yield objects
    for obj in objects:
        _delete(client, obj)


def _short_name_owners(client: ApiClient) -> dict[str, set[str]]:
    owners: dict[str, set[str]] = {}
    group_versions = ["v1"] + [v["groupVersion"] for g in client.request("GET", "/apis")["groups"] for v in g["versions"]]
    for group_version in group_versions:
        path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        for resource in client.request("GET", path).get("resources", []):
            group = group_version.rsplit("/", 1)[0] if "/" in group_version else ""
            for short in resource.get("shortNames", []):
                owners.setdefault(short, set()).add(f"{resource['name']}.{group}".rstrip("."))
    return owners


def test_short_names_are_ours_alone(client: ApiClient, upstream_dir: pathlib.Path) -> None:
    """Against everything the server serves: built-in kinds, and Volcano's and Kueue's real CRDs."""
    client.install_crds(upstream_crd_files(upstream_dir), timeout=120)
    owners = _short_name_owners(client)
    assert "podgroups.scheduling.volcano.sh" in owners["pg"] and "deployments.apps" in owners["deploy"]
    for crd_file in our_crd_files():
        crd = yaml.safe_load(crd_file.read_text())
        for short in crd["spec"]["names"]["shortNames"]:
            assert owners[short] == {crd["metadata"]["name"]}, f"{short} is served by {owners[short]}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_accepted_and_defaulted(client: ApiClient, namespace: str, path: pathlib.Path,
                                             created: list[dict[str, Any]]) -> None:
    suffix = uuid.uuid4().hex[:6]
    for example in load_manifests(path):
        obj = _unique(example, namespace, suffix)
        status = obj.pop("status", None)
        stored = client.apply(obj)
        created.append(obj)
        assert _contains(stored["spec"], obj["spec"])
        if obj["kind"] == "STBandwidthClaim":
            assert "jitterMs" in stored["spec"]["profile"] and "priority" in stored["spec"]
            # The server defaults collective to ring and keeps all-to-all; the one parser reads either back.
            collective = obj["spec"]["profile"].get("collective", "ring")
            assert stored["spec"]["profile"]["collective"] == collective
            assert profile_from_spec(stored["spec"]["profile"], "spec.profile").collective == collective
        if obj["kind"] == "QueuePolicy":
            assert stored["spec"]["ordering"] in ("StrictPriority", "FIFO", "PriorityWithAging")
            assert {"reoptimization", "maxCandidates", "overflowTolerance", "maxHoldSeconds"} <= set(stored["spec"])
        if obj["kind"] == "STBandwidthCapacity":
            assert stored["spec"]["direction"] in ("Both", "Up", "Down")
        if status is not None:
            with_status = {**obj, "status": status}
            written = client.apply(with_status, subresource="status")
            assert written["status"] == status


def _contains(stored: Any, given: Any) -> bool:
    """``given`` is part of ``stored`` (the server only adds defaults)."""
    if isinstance(given, dict):
        return isinstance(stored, dict) and all(k in stored and _contains(stored[k], v) for k, v in given.items())
    if isinstance(given, list):
        return isinstance(stored, list) and len(stored) == len(given) and all(map(_contains, stored, given))
    return bool(stored == given)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_invalid_case_is_refused(client: ApiClient, namespace: str, case: dict[str, Any],
                                 created: list[dict[str, Any]]) -> None:
    obj = _unique(case["object"], namespace, uuid.uuid4().hex[:6])
    status = obj.pop("status", None) if case.get("subresource") == "status" else None
    if status is not None:
        client.apply(obj)  # the spec alone is valid
        created.append(obj)
        obj = {**obj, "status": status}
    with pytest.raises(ApiError) as refused:
        if status is not None:
            client.apply(obj, subresource="status")
        else:
            _create(client, obj)
        created.append(obj)
    message = str(refused.value)
    assert refused.value.status in (400, 422), message
    assert case["field"] in message and case["error"] in message, message


def _create(client: ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    """POST with strict field validation, as `kubectl create` does. (Server-side apply answers a
    type mismatch with a 500 from its typed-patch step instead of the validation error.)"""
    resource = client.resource(obj["apiVersion"], obj["kind"])
    return client.request("POST", resource.path(obj["metadata"].get("namespace")), body=json.dumps(obj).encode(),
                          query={"fieldManager": FIELD_MANAGER, "fieldValidation": "Strict"})


def test_windows_that_end_at_the_period_or_the_next_window_in_decimals_are_accepted(
        client: ApiClient, namespace: str, created: list[dict[str, Any]]) -> None:
    """250.3 + 20.1 is past 270.4 in binary (and 0.1 + 0.2 past 0.3): the CEL rules allow 1e-9 ms, as the core
    does. The node agent's fits end their last window at the period, and an exact rule refused about one in ten
    of them (seen in CI: HTTP 422, "every window must lie inside the period")."""
    assert 250.3 + 20.1 > 270.4 and 0.1 + 0.2 > 0.3
    profile = {"periodMs": 270.4, "windows": [{"startMs": 0.1, "lenMs": 0.2, "gbps": 40},
                                              {"startMs": 0.3, "lenMs": 10, "gbps": 40},
                                              {"startMs": 250.3, "lenMs": 20.1, "gbps": 80}], "jitterMs": 0}
    profile_from_spec(profile, "spec.profile")  # the core accepts it
    claim = _unique(load_manifests(REPO / "crds" / "examples" / "stbandwidthclaim-resnet50.yaml")[0], namespace, "")
    claim["metadata"]["name"] = f"decimals-{uuid.uuid4().hex[:6]}"
    claim["spec"]["profile"] = profile
    _create(client, claim)
    created.append(claim)
    # ... and a measured one through the status subresource, as the node agent writes it.
    measured = {**profile, "source": "node-agent", "node": "n0", "confidence": 0.9, "periods": 20,
                "measuredAt": "2026-11-29T20:00:00Z"}
    client.apply({**claim, "status": {"measuredProfile": measured}}, subresource="status")
    # A real overrun is still refused.
    late = copy.deepcopy(claim)
    late["metadata"]["name"] = f"decimals-late-{uuid.uuid4().hex[:6]}"
    late["spec"]["profile"] = {**profile, "periodMs": 270.3}
    with pytest.raises(ApiError) as refused:
        _create(client, late)
        created.append(late)
    assert "every window must lie inside the period" in str(refused.value)


def test_gang_ref_is_immutable(client: ApiClient, namespace: str, created: list[dict[str, Any]]) -> None:
    claim = _unique(load_manifests(REPO / "crds" / "examples" / "stbandwidthclaim-resnet50.yaml")[0], namespace, "")
    claim["metadata"]["name"] = f"immutable-{uuid.uuid4().hex[:6]}"
    client.apply(claim)
    created.append(claim)
    moved = copy.deepcopy(claim)
    moved["spec"]["gangRef"]["name"] = "another-job"
    with pytest.raises(ApiError, match="gangRef is immutable"):
        client.apply(moved)
    changed = copy.deepcopy(claim)
    changed["spec"]["priority"] = 7  # everything else may change
    assert client.apply(changed)["spec"]["priority"] == 7


def _ssl_context(plane: ControlPlane) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(plane.ca_path))
    context.load_cert_chain(plane.admin_cert_path, plane.admin_key_path)
    return context


def _table_cells(client: ApiClient, control_plane: ControlPlane, namespace: str, created: list[dict[str, Any]],
                 example: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create the example claim with its status; the cells of its row as the API server prints it."""
    claim = _unique(load_manifests(REPO / "crds" / "examples" / example)[0], namespace, "")
    status = claim.pop("status")
    client.apply(claim)
    created.append(claim)
    client.apply({**claim, "status": status}, subresource="status")
    resource = client.resource(api.API_VERSION, "STBandwidthClaim")
    request = urllib.request.Request(
        control_plane.server_url + resource.path(namespace, claim["metadata"]["name"]),
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    with urllib.request.urlopen(request, context=_ssl_context(control_plane), timeout=30) as response:
        table = json.loads(response.read())
    columns = [c["name"] for c in table["columnDefinitions"]]
    return claim, dict(zip(columns, table["rows"][0]["cells"]))


def test_printer_columns_show_the_decision(client: ApiClient, control_plane: ControlPlane, namespace: str,
                                           created: list[dict[str, Any]]) -> None:
    placed, cells = _table_cells(client, control_plane, namespace, created, "stbandwidthclaim-placed.yaml")
    assert cells["Gang"] == placed["spec"]["gangRef"]["name"]
    assert cells["Placed"] == "True" and cells["Reason"] == "Placed"
    assert cells["Offset"] == 35 and cells["Period"] == 450
    assert "gpu-a-01" in str(cells["Nodes"])
    assert cells["Held"] is None  # never held


def test_printer_columns_say_why_a_gang_waits(client: ApiClient, control_plane: ControlPlane, namespace: str,
                                              created: list[dict[str, Any]]) -> None:
    _, cells = _table_cells(client, control_plane, namespace, created, "stbandwidthclaim-held.yaml")
    assert cells["Placed"] == "False" and cells["Reason"] == "HeldForContention"
    # A date column: the server prints the age of status.heldSince (2026-01-01), "332d" on 2026-11-29.
    assert re.fullmatch(r"\d+[dy]\w*", str(cells["Held"])), cells["Held"]


# ----------------------------------------------------------------------------- the rendered chart

def _render(namespace: str, *values: str) -> list[dict[str, Any]]:
    return template(namespace=namespace, extra=tuple(arg for value in values for arg in ("--set", value)))


def _dry_run(client: ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    resource = client.resource(obj["apiVersion"], obj["kind"])
    return client.request(
        "PATCH", resource.path(obj["metadata"].get("namespace"), obj["metadata"]["name"]),
        body=json.dumps(obj).encode(), content_type="application/apply-patch+yaml",
        query={"fieldManager": FIELD_MANAGER, "force": "true", "dryRun": "All", "fieldValidation": "Strict"})


@pytest.fixture(scope="module")
def restricted_namespace(client: ApiClient) -> str:
    name = f"chart-{uuid.uuid4().hex[:8]}"
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest"}}})
    return name


@pytest.mark.parametrize("values", [(), ("webhook.podSelection=all", "controller.replicas=3")], ids=["defaults", "variant"])
def test_rendered_chart_passes_a_server_side_dry_run(client: ApiClient, restricted_namespace: str,
                                                     values: tuple[str, ...]) -> None:
    objects = _render(restricted_namespace, *values)
    kinds = set()
    for obj in objects:
        stored = _dry_run(client, obj)
        assert stored["kind"] == obj["kind"] and stored["metadata"]["name"] == obj["metadata"]["name"]
        kinds.add(obj["kind"])
    assert {"Deployment", "Job", "MutatingWebhookConfiguration", "QueuePolicy", "ClusterRole", "Role",
            "PodDisruptionBudget", "Service", "ConfigMap"} <= kinds


def test_every_pod_template_is_admitted_as_restricted(client: ApiClient, restricted_namespace: str) -> None:
    templates = [(o["metadata"]["name"], o["spec"]["template"]) for o in _render(restricted_namespace)
                 if o["kind"] in ("Deployment", "Job")]
    assert len(templates) == 4  # webhook, controller, the two certificate Jobs
    for name, pod_template in templates:
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"{name}-probe", "namespace": restricted_namespace,
                            "labels": pod_template["metadata"].get("labels", {})},
               "spec": pod_template["spec"]}
        _dry_run(client, pod)
    # The namespace really enforces "restricted": a pod without the security settings is refused.
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": restricted_namespace},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    with pytest.raises(ApiError, match="violates PodSecurity"):
        _dry_run(client, bare)


def _helm_cli(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return run_helm(*args, kubeconfig=plane.kubeconfig_path, timeout=180)


def test_helm_install_upgrade_uninstall(client: ApiClient, control_plane: ControlPlane) -> None:
    """The real Helm path: CRDs from the chart's crds/ (already present: skipped), every template applied,
    an upgrade that rolls the controller, an uninstall that removes it all. Hooks are off because no
    controller-manager runs the Jobs; the webhook configuration is aimed at a namespace label nobody
    carries, so that it cannot interfere with other tests while it exists."""
    release, namespace = f"m{uuid.uuid4().hex[:6]}", f"helm-{uuid.uuid4().hex[:6]}"
    policy = f"zz-{release}"  # sorts after any other default policy a test may have made
    values = ["--set", "webhook.namespaceLabels.metronome-test=never", "--set", f"defaultQueuePolicy.name={policy}"]
    installed = _helm_cli(control_plane, "install", release, str(CHART), "-n", namespace, "--create-namespace",
                          "--no-hooks", *values)
    assert installed.returncode == 0, installed.stderr
    assert "NOTES:" in installed.stdout
    try:
        full = f"{release}-volcano-metronome"
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": f"{full}-controller", "namespace": namespace}}
        before = client.get(deployment)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        configuration = client.get({"apiVersion": "admissionregistration.k8s.io/v1",
                                    "kind": "MutatingWebhookConfiguration", "metadata": {"name": full}})
        # Volcano Jobs, PodGroups, batch Jobs, training jobs (JobSet, PyTorchJob, MPIJob), pods, Kueue's pods
        # and Workloads: templates/mutatingwebhookconfiguration.yaml
        assert len(configuration["webhooks"]) == 7
        assert client.get({"apiVersion": api.API_VERSION, "kind": "QueuePolicy", "metadata": {"name": policy}})
        upgraded = _helm_cli(control_plane, "upgrade", release, str(CHART), "-n", namespace, "--no-hooks", *values,
                             "--set", "controller.config.slotMs=10")
        assert upgraded.returncode == 0, upgraded.stderr
        after = client.get(deployment)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        assert after != before
    finally:
        removed = _helm_cli(control_plane, "uninstall", release, "-n", namespace, "--no-hooks")
    assert removed.returncode == 0, removed.stderr
    with pytest.raises(ApiError) as gone:
        client.get({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                    "metadata": {"name": f"{release}-volcano-metronome"}})
    assert gone.value.status == 404
