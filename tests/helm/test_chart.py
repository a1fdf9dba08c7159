"""The Helm chart: lint, render with default and non-default values, validate every rendered object,
and check the contract each part has with the webhook, the controller, Volcano and Kueue."""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any

import jsonschema
import pytest
import yaml

from tests.crds import crd_schema
from tests.helm.chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    builtin_errors,
    builtin_model,
    by_kind,
    default_values,
    lint,
    one,
    openapi_to_draft7,
    pod_specs,
    template,
    template_error,
    values_schema,
)
from volcano_metronome import api

FULL = f"{RELEASE}-volcano-metronome"
WEBHOOK = f"{FULL}-webhook"
CONTROLLER = f"{FULL}-controller"
TLS_SECRET = f"{FULL}-webhook-tls"

SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cert-manager": {"certManager": {"enabled": True}},
    "cert-manager-cluster-issuer": {"certManager": {"enabled": True, "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}}},
    "monitoring": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
                   "grafanaDashboard": {"enabled": True}},
    "no-default-policy": {"defaultQueuePolicy": {"enabled": False}},
    "replicas": {"webhook": {"replicas": 3, "podDisruptionBudget": {"enabled": True, "minAvailable": 2}},
                 "controller": {"replicas": 1}},
    "all-pods": {"webhook": {"podSelection": "all", "failurePolicy": {"pods": "Ignore"}}},
    "no-kueue-pod-groups": {"webhook": {"kueuePodGroups": False}},
    "scheduling-knobs": {
        "imagePullSecrets": [{"name": "regcred"}],
        "image": {"repository": "registry.example/metronome", "tag": "0.1.0-rc1", "pullPolicy": "Always"},
        "webhook": {"nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
                    "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                                     "effect": "NoSchedule"}],
                    "priorityClassName": "system-cluster-critical",
                    "excludedNamespaces": ["kube-system", "cert-manager", "volcano-system", "kueue-system"],
                    "namespaceLabels": {"metronome.dev/enabled": "true"},
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}},
        "controller": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In",
                                                         "values": ["linux"]}]}]}}},
                       "podAnnotations": {"example.com/team": "scheduling"},
                       "config": {"slotMs": 10, "resyncSeconds": 60}},
        "certJob": {"tolerations": [{"operator": "Exists"}]},
    },
}
EXPECTED_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap",
                  "Service", "Deployment", "PodDisruptionBudget", "MutatingWebhookConfiguration", "Job",
                  "QueuePolicy", "Issuer", "Certificate", "ServiceMonitor", "NetworkPolicy"}
RESTRICTED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                           "projected", "secret"}


@functools.lru_cache(maxsize=None)
def _rendered(name: str) -> tuple[str, ...]:
    # Cached as YAML text so that no test can mutate another's objects.
    return tuple(yaml.safe_dump(obj) for obj in template(SCENARIOS[name]))


def render(name: str) -> list[dict[str, Any]]:
    """The objects of scenario ``name`` (rendered once per session)."""
    return [yaml.safe_load(text) for text in _rendered(name)]


def merged(*overrides: dict[str, Any]) -> dict[str, Any]:
    """values.yaml with ``overrides`` merged in, as Helm merges them."""
    def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(base)
        for key, value in extra.items():
            out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        return out

    result = default_values()
    for extra in overrides:
        result = merge(result, extra)
    return result


# ----------------------------------------------------------------------------- every scenario

@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_helm_lint_strict(scenario: str) -> None:
    completed = lint(SCENARIOS[scenario])
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "0 chart(s) failed" in completed.stdout


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_object_validates_against_its_schema(scenario: str) -> None:
    crds = crd_schema.load_crds()
    problems: list[str] = []
    for obj in render(scenario):
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        assert obj["kind"] in EXPECTED_KINDS, f"unexpected kind {where}"
        if obj["apiVersion"] == api.API_VERSION:
            problems += [f"{where}: {e}" for e in crd_schema.errors(crds[obj["kind"]], obj)]
        elif builtin_model(obj) is not None:
            problems += [f"{where}: {e}" for e in builtin_errors(obj)]
        else:
            problems += [f"{where}: {e}" for e in _third_party_errors(obj)]
    assert not problems, "\n".join(problems)


def _third_party_errors(obj: dict[str, Any]) -> list[str]:
    """cert-manager and Prometheus Operator kinds: no schema offline, so the fields we rely on."""
    spec = obj.get("spec", {})
    expected: dict[tuple[str, str], set[str]] = {
        ("cert-manager.io/v1", "Issuer"): {"selfSigned"},
        ("cert-manager.io/v1", "Certificate"): {"secretName", "dnsNames", "issuerRef"},
        ("monitoring.coreos.com/v1", "ServiceMonitor"): {"selector", "endpoints"},
        ("monitoring.coreos.com/v1", "PodMonitor"): {"selector", "podMetricsEndpoints"},
    }
    key = (obj["apiVersion"], obj["kind"])
    if key not in expected:
        return [f"no schema for {key}"]
    return [f"missing spec.{field}" for field in sorted(expected[key] - set(spec))]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_pod_security_standard_restricted(scenario: str) -> None:
    specs = pod_specs(render(scenario))
    assert len(specs) >= 2
    for where, pod in specs:
        security = pod["securityContext"]
        assert security["runAsNonRoot"] is True, where
        assert security["runAsUser"] != 0 and security["runAsGroup"] != 0, where
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}, where
        for host in ("hostNetwork", "hostPID", "hostIPC", "hostUsers"):
            assert not pod.get(host), f"{where}: {host}"
        for volume in pod.get("volumes", []):
            kinds = set(volume) - {"name"}
            assert kinds <= RESTRICTED_VOLUME_TYPES, f"{where}: volume {volume}"
        containers = pod["containers"] + pod.get("initContainers", [])
        for container in containers:
            ctx = container["securityContext"]
            name = f"{where}/{container['name']}"
            assert ctx["allowPrivilegeEscalation"] is False, name
            assert ctx["readOnlyRootFilesystem"] is True, name
            assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] != 0, name
            assert ctx["capabilities"] == {"drop": ["ALL"]}, name
            assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}, name
            assert not ctx.get("privileged"), name
            assert all("hostPort" not in port for port in container.get("ports", [])), name
            # A read-only root still needs a writable /tmp (gunicorn's worker heartbeat, temp files).
            tmp = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert tmp and any(v["name"] == tmp[0]["name"] and "emptyDir" in v for v in pod["volumes"]), name
            assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"], name
            assert container["command"] == ["volcano-metronome"], name


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_rbac_has_no_wildcards(scenario: str) -> None:
    for obj in render(scenario):
        if obj["kind"] in ("ClusterRole", "Role"):
            assert "aggregationRule" not in obj
            for rule in obj["rules"]:
                for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                    assert not any("*" in item for item in rule.get(key, [])), f"{obj['metadata']['name']}: {rule}"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_names_namespaces_and_labels(scenario: str) -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "QueuePolicy"}
    seen = set()
    for obj in render(scenario):
        meta = obj["metadata"]
        assert len(meta["name"]) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", meta["name"]), meta["name"]
        assert (obj["kind"], meta["name"]) not in seen
        seen.add((obj["kind"], meta["name"]))
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in meta, meta["name"]
        else:
            assert meta["namespace"] == NAMESPACE, meta["name"]
        labels = meta["labels"]
        assert labels["app.kubernetes.io/instance"] == RELEASE and labels["app.kubernetes.io/part-of"] == "volcano-metronome"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_selectors_select_the_pods(scenario: str) -> None:
    objects = render(scenario)
    deployments = {d["metadata"]["name"]: d for d in by_kind(objects, "Deployment")}
    pod_labels = {name: d["spec"]["template"]["metadata"]["labels"] for name, d in deployments.items()}

    def selects(selector: dict[str, str]) -> list[str]:
        return [name for name, labels in pod_labels.items() if selector.items() <= labels.items()]

    for name, deployment in deployments.items():
        assert selects(deployment["spec"]["selector"]["matchLabels"]) == [name]
    assert selects(one(objects, "Service", WEBHOOK)["spec"]["selector"]) == [WEBHOOK]
    assert selects(one(objects, "Service", f"{CONTROLLER}-metrics")["spec"]["selector"]) == [CONTROLLER]
    for pdb in by_kind(objects, "PodDisruptionBudget"):
        assert len(selects(pdb["spec"]["selector"]["matchLabels"])) == 1
    for monitor in by_kind(objects, "ServiceMonitor"):
        services = [s for s in by_kind(objects, "Service")
                    if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
        assert len(services) == 1
        ports = {p["name"] for p in services[0]["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports


# ----------------------------------------------------------------------------- webhook

def _webhooks(scenario: str = "defaults") -> dict[str, dict[str, Any]]:
    configuration = one(render(scenario), "MutatingWebhookConfiguration")
    return {w["name"]: w for w in configuration["webhooks"]}


def test_webhook_configuration_has_one_entry_per_kind() -> None:
    hooks = _webhooks()
    assert {name: (w["rules"][0]["apiGroups"], w["rules"][0]["apiVersions"], w["rules"][0]["resources"],
                   w["failurePolicy"]) for name, w in hooks.items()} == {
        "volcano-jobs.metronome.dev": (["batch.volcano.sh"], ["v1alpha1"], ["jobs"], "Fail"),
        "volcano-podgroups.metronome.dev": (["scheduling.volcano.sh"], ["v1beta1"], ["podgroups"], "Fail"),
        "batch-jobs.metronome.dev": (["batch"], ["v1"], ["jobs"], "Fail"),
        "training-jobs.metronome.dev": (["jobset.x-k8s.io"], ["v1alpha2"], ["jobsets"], "Fail"),
        "pods.metronome.dev": ([""], ["v1"], ["pods"], "Fail"),
        "kueue-pods.metronome.dev": ([""], ["v1"], ["pods"], "Fail"),
        "kueue-workloads.metronome.dev": (["kueue.x-k8s.io"], ["v1beta2", "v1beta1"], ["workloads"], "Ignore"),
    }


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_webhook_is_create_only_and_explicit(scenario: str) -> None:
    expected_excluded = {"kube-system", NAMESPACE, *merged(SCENARIOS[scenario])["webhook"]["excludedNamespaces"]}
    for name, hook in _webhooks(scenario).items():
        assert all(rule["operations"] == ["CREATE"] and rule["scope"] == "Namespaced" for rule in hook["rules"]), name
        assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"], name
        assert hook["timeoutSeconds"] == 5, name
        assert hook["clientConfig"]["service"] == {"name": WEBHOOK, "namespace": NAMESPACE, "path": "/mutate", "port": 443}
        assert hook["reinvocationPolicy"] == ("IfNeeded" if "pods" in name else "Never"), name
        (expression,) = hook["namespaceSelector"]["matchExpressions"]
        assert expression["key"] == "kubernetes.io/metadata.name" and expression["operator"] == "NotIn", name
        assert sorted(expression["values"]) == sorted(expected_excluded), name


def test_pod_webhooks_select_managed_pods_only_by_default() -> None:
    hooks = _webhooks()
    assert hooks["pods.metronome.dev"]["objectSelector"] == {"matchLabels": {api.MANAGED_LABEL: "true"}}
    assert hooks["kueue-pods.metronome.dev"]["objectSelector"] == {
        "matchExpressions": [{"key": api.KUEUE_POD_GROUP_NAME, "operator": "Exists"}]}
    assert hooks["batch-jobs.metronome.dev"]["objectSelector"] == {
        "matchExpressions": [{"key": api.KUEUE_QUEUE_NAME, "operator": "Exists"}]}
    everything = _webhooks("all-pods")
    assert "objectSelector" not in everything["pods.metronome.dev"]
    assert everything["pods.metronome.dev"]["failurePolicy"] == "Ignore"
    assert "kueue-pods.metronome.dev" not in everything  # "all" already sees them
    assert "kueue-pods.metronome.dev" not in _webhooks("no-kueue-pod-groups")


def test_namespace_labels_narrow_the_webhook() -> None:
    for hook in _webhooks("scheduling-knobs").values():
        assert hook["namespaceSelector"]["matchLabels"] == {"metronome.dev/enabled": "true"}


def _upstream_crd(group: str, plural: str) -> dict[str, Any]:
    (crd,) = [c for c in crd_schema.upstream_crds() if c["spec"]["group"] == group and c["spec"]["names"]["plural"] == plural]
    return crd


@pytest.mark.parametrize("hook_name", ["volcano-jobs.metronome.dev", "volcano-podgroups.metronome.dev",
                                       "kueue-workloads.metronome.dev", "training-jobs.metronome.dev"])
def test_webhook_rules_match_the_upstream_crds(hook_name: str) -> None:
    for rule in _webhooks()[hook_name]["rules"]:
        crd = _upstream_crd(rule["apiGroups"][0], rule["resources"][0])
        served = {v["name"] for v in crd["spec"]["versions"] if v["served"]}
        assert set(rule["apiVersions"]) <= served, f"{hook_name} names versions {rule['apiVersions']}, upstream serves {served}"


def test_the_training_jobs_hook_covers_every_training_kind_the_webhook_admits() -> None:
    from volcano_metronome.admission.review import KINDS

    rules = {(g, v) for rule in _webhooks()["training-jobs.metronome.dev"]["rules"] for g in rule["apiGroups"]
             for v in rule["apiVersions"]}
    assert rules == {(g, v) for (g, v, kind) in KINDS if kind in api.OWNER_GANG_KINDS}


def test_webhook_deployment() -> None:
    objects = render("defaults")
    deployment = one(objects, "Deployment", WEBHOOK)
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] + container["args"] == [
        "volcano-metronome", "webhook", "--cert-dir", "/certs", "--port", "8443",
        "--config", "/etc/volcano-metronome/webhook.yaml"]
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "https", "scheme": "HTTPS"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/certs"]]["secret"] == {
        "secretName": TLS_SECRET, "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}
    assert volumes[mounts["/etc/volcano-metronome"]]["configMap"]["name"] == WEBHOOK
    assert pod["serviceAccountName"] == WEBHOOK
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    service = one(objects, "Service", WEBHOOK)
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]
    pdb = one(objects, "PodDisruptionBudget", WEBHOOK)
    assert pdb["spec"]["minAvailable"] == 1


def test_webhook_shutdown_drains_before_the_grace_period_ends() -> None:
    """preStop sleep (endpoints drop the pod), then gunicorn's graceful timeout, all inside the grace period."""
    from webhooks.server import GRACEFUL_TIMEOUT_SECONDS

    pod = one(render("defaults"), "Deployment", WEBHOOK)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert set(container["lifecycle"]) == {"preStop"}
    sleep = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert 3 <= sleep <= 10
    assert pod["terminationGracePeriodSeconds"] > sleep + GRACEFUL_TIMEOUT_SECONDS
    # The sleep action (KEP-3960) is beta and on by default from Kubernetes 1.30: the chart may not claim less.
    kube_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    floor = re.fullmatch(r">=\s*(\d+)\.(\d+)\.\d+(-0)?", kube_version)
    assert floor is not None and (int(floor[1]), int(floor[2])) >= (1, 30)


def _settings(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    webhook = yaml.safe_load(one(objects, "ConfigMap", WEBHOOK)["data"]["webhook.yaml"])
    controller = yaml.safe_load(one(objects, "ConfigMap", CONTROLLER)["data"]["controller.yaml"])
    return webhook, controller


def test_configmaps_pass_settings_through() -> None:
    webhook, controller = _settings(render("defaults"))
    # maxHyperperiodMs: the controller's, so the webhook refuses exactly what the controller cannot place
    assert webhook == {"lineRateGbps": 100, "maxHyperperiodMs": 25200, "namespaceDefaults": {}, "queueDefaults": {},
                       "tierLimit": {"enabled": False, "thresholdGbps": 100, "highestTierAllowed": 1},
                       "watch": {"podGroups": True, "claims": True}}
    assert controller == {"slotMs": 5, "maxHyperperiodMs": 25200, "gpuResource": "nvidia.com/gpu",
                          "rackLabel": "metronome.dev/rack", "zoneLabel": "topology.kubernetes.io/zone",
                          "defaultCapacities": {"nicGbps": 100, "tierGbps": {"1": 400, "2": 800}},
                          "resyncSeconds": 30, "podsTimeoutSeconds": 300,
                          # owned by the chart, so that the Lease RBAC, probes and Service agree with it
                          "namespace": NAMESPACE, "healthPort": 8080,
                          "leaderElection": {"leaseName": f"{FULL}-controller"}}
    _, changed = _settings(render("scheduling-knobs"))
    assert changed["slotMs"] == 10 and changed["resyncSeconds"] == 60 and changed["gpuResource"] == "nvidia.com/gpu"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_programs_accept_the_rendered_settings(scenario: str) -> None:
    """The settings files parse with the webhook's and the controller's own (strict) parsers."""
    from volcano_metronome.admission import parse_settings
    from volcano_metronome.controller.settings import parse as parse_controller_settings

    objects = render(scenario)
    webhook, controller = _settings(objects)
    parse_settings(webhook)
    settings = parse_controller_settings(controller)
    deployment = one(objects, "Deployment", CONTROLLER)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert settings.health_port == container["ports"][0]["containerPort"]
    assert settings.lease_namespace == NAMESPACE
    lease_rule = one(objects, "Role", f"{FULL}-leader-election")["rules"][1]
    assert lease_rule["resourceNames"] == [settings.leader_election.lease_name]
    assert settings.leader_election.enabled


def test_the_schema_takes_the_bounds_the_programs_take() -> None:
    """Empty rack and zone labels (ignore them), tier 0 and a 0 Gbps threshold: valid to the programs and to
    Volcano's CRDs (``highestTierAllowed`` minimum 0), so the schema must not refuse them; below those, both refuse."""
    from volcano_metronome.admission import parse_settings
    from volcano_metronome.controller.settings import parse as parse_controller_settings

    values = {"webhook": {"config": {"tierLimit": {"enabled": True, "thresholdGbps": 0, "highestTierAllowed": 0}}},
              "controller": {"config": {"rackLabel": "", "zoneLabel": ""}}}
    webhook, controller = _settings(template(values))
    assert parse_settings(webhook).tier_limit.highest_tier_allowed == 0
    assert parse_controller_settings(controller).rack_label == ""
    assert "minimum" in template_error({"webhook": {"config": {"tierLimit": {"highestTierAllowed": -1}}}})
    assert "minimum" in template_error({"webhook": {"config": {"tierLimit": {"thresholdGbps": -1}}}})


def test_chart_owned_controller_settings_cannot_be_overridden() -> None:
    for bad in ({"namespace": "elsewhere"}, {"healthPort": 9000}, {"leaderElection": {"leaseName": "mine"}}):
        assert "'not' failed" in template_error({"controller": {"config": bad}})
    tuned = template({"controller": {"config": {"leaderElection": {"leaseDurationSeconds": 20}}}})
    _, controller = _settings(tuned)
    assert controller["leaderElection"] == {"leaseDurationSeconds": 20, "leaseName": f"{FULL}-controller"}


def test_the_webhook_gets_the_controllers_hyperperiod_cap() -> None:
    webhook, controller = _settings(template({"controller": {"config": {"maxHyperperiodMs": 50400}}}))
    assert webhook["maxHyperperiodMs"] == controller["maxHyperperiodMs"] == 50400
    assert "'not' failed" in template_error({"webhook": {"config": {"maxHyperperiodMs": 1000}}})


def test_the_webhook_gets_the_controllers_nic_rate() -> None:
    """One source for the NIC line rate: catalog models resolve at the rate the controller plans with."""
    webhook, controller = _settings(template({"controller": {"config": {"defaultCapacities": {"nicGbps": 400}}}}))
    assert webhook["lineRateGbps"] == controller["defaultCapacities"]["nicGbps"] == 400
    assert "'not' failed" in template_error({"webhook": {"config": {"lineRateGbps": 200}}})


def test_checksums_roll_only_the_component_whose_config_changed() -> None:
    def checksums(name: str) -> dict[str, str]:
        return {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
                for d in by_kind(render(name), "Deployment")}

    before, after = checksums("defaults"), checksums("scheduling-knobs")
    assert before[CONTROLLER] != after[CONTROLLER]
    assert before[WEBHOOK] == after[WEBHOOK]


# ----------------------------------------------------------------------------- controller

def test_controller_deployment_and_leader_election() -> None:
    objects = render("defaults")
    deployment = one(objects, "Deployment", CONTROLLER)
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] + container["args"] == [
        "volcano-metronome", "controller", "--config", "/etc/volcano-metronome/controller.yaml"]
    assert container["ports"] == [{"name": "http-metrics", "containerPort": 8080, "protocol": "TCP"}]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "http-metrics"}
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    lease = _settings(objects)[1]["leaderElection"]["leaseName"]
    role = one(objects, "Role", f"{FULL}-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease],
         "verbs": ["get", "update"]}]
    binding = one(objects, "RoleBinding", f"{FULL}-leader-election")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": NAMESPACE}]
    metrics = one(objects, "Service", f"{CONTROLLER}-metrics")
    assert metrics["spec"]["ports"] == [{"name": "http-metrics", "port": 8080, "targetPort": "http-metrics",
                                         "protocol": "TCP"}]


def _rules(role: dict[str, Any]) -> set[tuple[str, str, tuple[str, ...]]]:
    return {(group, resource, tuple(sorted(rule["verbs"])))
            for rule in role["rules"] for group in rule["apiGroups"] for resource in rule["resources"]}


def test_controller_rbac_is_exactly_what_it_needs() -> None:
    """The calls the controller makes, no more (tests/integration/test_chart_rbac.py runs it with these alone)."""
    role = one(render("defaults"), "ClusterRole", CONTROLLER)
    read = ("get", "list", "watch")
    expected = {
        ("", "pods", tuple(sorted(read + ("patch", "delete")))),  # delete: stranded on a vanished node
        ("", "nodes", read),
        ("events.k8s.io", "events", ("create",)),
        ("scheduling.volcano.sh", "podgroups", read),
        ("topology.volcano.sh", "hypernodes", read),
        *{("kueue.x-k8s.io", plural, read) for plural in ("workloads", "admissionchecks", "clusterqueues",
                                                           "resourceflavors")},
        ("kueue.x-k8s.io", "workloads/status", ("patch",)),
        ("kueue.x-k8s.io", "admissionchecks/status", ("patch",)),
        (api.GROUP, api.CLAIMS, tuple(sorted(read + ("create", "delete")))),
        (api.GROUP, api.CAPACITIES, read),
        (api.GROUP, api.QUEUE_POLICIES, read),
        (api.GROUP, f"{api.CLAIMS}/status", ("patch",)),
        (api.GROUP, f"{api.QUEUE_POLICIES}/status", ("patch",)),
        (api.GROUP, f"{api.CAPACITIES}/status", ("patch",)),
    }
    assert {(g, r, tuple(sorted(v))) for g, r, v in _rules(role)} == expected


def test_rbac_names_resources_that_exist_upstream() -> None:
    """Every Volcano/Kueue group and plural in a role is one a real CRD serves (catches typos)."""
    crds = [*crd_schema.upstream_crds(), *crd_schema.load_crds().values()]
    served = {(crd["spec"]["group"], crd["spec"]["names"]["plural"]) for crd in crds}
    for role in by_kind(render("defaults"), "ClusterRole"):
        for group, resource, _ in _rules(role):
            if group.endswith(("volcano.sh", "x-k8s.io", api.GROUP)):
                assert (group, resource.split("/")[0]) in served, (role["metadata"]["name"], group, resource)


def test_webhook_rbac_only_reads() -> None:
    role = one(render("defaults"), "ClusterRole", WEBHOOK)
    assert _rules(role) == {("scheduling.volcano.sh", "podgroups", ("get", "list", "watch")),
                            (api.GROUP, api.CLAIMS, ("get", "list", "watch"))}
    binding = one(render("defaults"), "ClusterRoleBinding", WEBHOOK)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": WEBHOOK, "namespace": NAMESPACE}]


def test_replicas_and_disruption_budgets_follow_values() -> None:
    objects = render("replicas")
    assert one(objects, "Deployment", WEBHOOK)["spec"]["replicas"] == 3
    assert one(objects, "Deployment", CONTROLLER)["spec"]["replicas"] == 1
    assert [p["metadata"]["name"] for p in by_kind(objects, "PodDisruptionBudget")] == [WEBHOOK]
    assert one(objects, "PodDisruptionBudget", WEBHOOK)["spec"]["minAvailable"] == 2


def test_scheduling_knobs_reach_the_pods() -> None:
    objects = render("scheduling-knobs")
    webhook = one(objects, "Deployment", WEBHOOK)["spec"]["template"]["spec"]
    assert webhook["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert webhook["tolerations"][0]["key"] == "node-role.kubernetes.io/control-plane"
    assert webhook["priorityClassName"] == "system-cluster-critical"
    assert webhook["imagePullSecrets"] == [{"name": "regcred"}]
    assert webhook["containers"][0]["image"] == "registry.example/metronome:0.1.0-rc1"
    assert webhook["containers"][0]["imagePullPolicy"] == "Always"
    controller = one(objects, "Deployment", CONTROLLER)["spec"]["template"]
    assert controller["metadata"]["annotations"]["example.com/team"] == "scheduling"
    assert "nodeAffinity" in controller["spec"]["affinity"] and "podAntiAffinity" not in controller["spec"]["affinity"]
    for job in by_kind(objects, "Job"):
        assert job["spec"]["template"]["spec"]["tolerations"] == [{"operator": "Exists"}]
    default_image = one(render("defaults"), "Deployment", WEBHOOK)["spec"]["template"]["spec"]["containers"][0]["image"]
    chart_meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert default_image == f"volcano-metronome:{chart_meta['appVersion']}"


# ----------------------------------------------------------------------------- certificates

def test_without_cert_manager_hook_jobs_write_the_secret_then_patch_the_ca() -> None:
    objects = render("defaults")
    assert not by_kind(objects, "Certificate") and not by_kind(objects, "Issuer")
    configuration = one(objects, "MutatingWebhookConfiguration")
    assert "cert-manager.io/inject-ca-from" not in configuration["metadata"].get("annotations", {})
    jobs = {j["metadata"]["name"]: j for j in by_kind(objects, "Job")}
    assert set(jobs) == {f"{FULL}-certs-create", f"{FULL}-certs-patch"}
    base = ["volcano-metronome", "certs", "--service", WEBHOOK, "--namespace", NAMESPACE, "--out", "/tmp/certs",
            "--secret", TLS_SECRET]
    create = jobs[f"{FULL}-certs-create"]
    patch = jobs[f"{FULL}-certs-patch"]
    for job, hooks, args in ((create, "pre-install,pre-upgrade", base),
                             (patch, "post-install,post-upgrade",
                              base + ["--patch-webhook", configuration["metadata"]["name"]])):
        annotations = job["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == hooks
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        container = job["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] + container["args"] == args
        assert job["spec"]["template"]["spec"]["serviceAccountName"] == f"{FULL}-certs"


def test_cert_job_rbac_is_least_privilege_and_exists_before_the_jobs() -> None:
    objects = render("defaults")
    name = f"{FULL}-certs"
    role, cluster_role = one(objects, "Role", name), one(objects, "ClusterRole", name)
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [TLS_SECRET], "verbs": ["get", "update"]}]
    assert cluster_role["rules"] == [
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"],
         "resourceNames": [one(objects, "MutatingWebhookConfiguration")["metadata"]["name"]],
         "verbs": ["get", "patch"]}]
    for kind in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
        annotations = one(objects, kind, name)["metadata"]["annotations"]
        assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade", "post-install",
                                                                "post-upgrade"}
        assert int(annotations["helm.sh/hook-weight"]) < 0  # before the Jobs (weight 0)
    for binding_kind in ("RoleBinding", "ClusterRoleBinding"):
        assert one(objects, binding_kind, name)["subjects"] == [
            {"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]


@pytest.mark.parametrize("scenario", ["cert-manager", "cert-manager-cluster-issuer"])
def test_cert_manager_issues_and_injects(scenario: str) -> None:
    objects = render(scenario)
    assert not by_kind(objects, "Job")
    assert not [o for o in objects if o["metadata"]["name"].endswith("-certs")]
    certificate = one(objects, "Certificate")
    spec = certificate["spec"]
    assert spec["secretName"] == TLS_SECRET
    assert f"{WEBHOOK}.{NAMESPACE}.svc" in spec["dnsNames"] and f"{WEBHOOK}.{NAMESPACE}.svc.cluster.local" in spec["dnsNames"]
    configuration = one(objects, "MutatingWebhookConfiguration")
    assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{NAMESPACE}/{certificate['metadata']['name']}")
    if scenario == "cert-manager":
        issuer = one(objects, "Issuer")
        assert spec["issuerRef"] == {"name": issuer["metadata"]["name"], "kind": "Issuer", "group": "cert-manager.io"}
    else:
        assert not by_kind(objects, "Issuer")
        assert spec["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}


# ----------------------------------------------------------------------------- policy, values, monitoring

def test_default_queue_policy() -> None:
    policy = one(render("defaults"), "QueuePolicy")
    assert policy["metadata"]["name"] == "default"
    assert "volcanoQueues" not in policy["spec"] and "kueueClusterQueues" not in policy["spec"]
    example = yaml.safe_load((crd_schema.EXAMPLES_DIR / "queuepolicy-default.yaml").read_text())
    assert policy["spec"] == example["spec"]
    assert not by_kind(render("no-default-policy"), "QueuePolicy")


def test_values_schema_accepts_values_yaml() -> None:
    jsonschema.Draft7Validator.check_schema(values_schema())
    jsonschema.Draft7Validator(values_schema()).validate(default_values())
    for overrides in SCENARIOS.values():
        jsonschema.Draft7Validator(values_schema()).validate(merged(overrides))


@pytest.mark.parametrize("config", [
    {"slotMs": 0.05}, {"slotMs": 2000}, {"slotMs": 10},
    {"maxHyperperiodMs": 0.5}, {"maxHyperperiodMs": 4_000_000}, {"maxHyperperiodMs": 50400},
    {"defaultCapacities": {"nicGbps": 0.0001}}, {"defaultCapacities": {"nicGbps": 7000}},
    {"defaultCapacities": {"nicGbps": 400}},
    {"defaultCapacities": {"tierGbps": {"0": 100}}}, {"defaultCapacities": {"tierGbps": {"x": 100}}},
    {"defaultCapacities": {"tierGbps": {"1": 2e6}}}, {"defaultCapacities": {"tierGbps": {"2": 800}}},
    {"resyncSeconds": 0.5}, {"resyncSeconds": 1.5}, {"resyncSeconds": 100_000},
])
def test_the_schema_refuses_controller_settings_the_programs_refuse_and_only_those(config: dict[str, Any]) -> None:
    """A value the schema lets through but a program refuses crash-loops a pod after ``helm install`` said yes.
    The chart gives the controller's NIC rate to the webhook as its ``lineRateGbps``, so both must take it."""
    from volcano_metronome.admission import parse_settings
    from volcano_metronome.controller.settings import parse as parse_controller_settings
    from volcano_metronome.core.errors import InvalidInput

    def program_takes() -> bool:
        try:
            settings = parse_controller_settings(config)
            parse_settings({"lineRateGbps": settings.default_capacities.nic_gbps,
                            "maxHyperperiodMs": settings.max_hyperperiod_ms})
        except InvalidInput:
            return False
        return True

    schema = values_schema()["properties"]["controller"]["properties"]["config"]
    assert jsonschema.Draft7Validator(schema).is_valid(config) == program_takes()


def test_values_schema_mirrors_the_queue_policy_crd() -> None:
    crd = crd_schema.load_crds()["QueuePolicy"]
    spec = crd_schema.version_schema(crd)["properties"]["spec"]
    assert values_schema()["properties"]["defaultQueuePolicy"]["properties"]["spec"] == openapi_to_draft7(spec)


def test_values_schema_is_closed() -> None:
    """Every object in values.schema.json refuses unknown keys, except the opaque program settings."""
    open_paths = []

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        if node.get("type") == "object" and node.get("additionalProperties", True) is True:
            open_paths.append(path)
        for key, child in node.get("properties", {}).items():
            walk(child, f"{path}.{key}")
        for key in ("items", "additionalProperties"):
            walk(node.get(key), f"{path}{'[]' if key == 'items' else '{}'}")
        for alternative in node.get("oneOf", []):
            walk(alternative, path)

    walk(values_schema(), "")
    # Kubernetes' own types the API server validates: affinity terms, NetworkPolicy peers.
    allowed = re.compile(r"^\.(webhook|controller)\.config(\..*)?$|\.affinity\.(nodeAffinity|podAffinity|podAntiAffinity)$"
                         r"|^\.networkPolicy\.(webhookFrom|controllerFrom)\[\]\.(ipBlock|namespaceSelector|podSelector)$")
    assert [p for p in open_paths if not allowed.search(p)] == []


@pytest.mark.parametrize("bad, message", [
    ({"webhook": {"replica": 2}}, "additional properties 'replica' not allowed"),
    ({"webhook": {"timeoutSeconds": 31}}, "timeoutSeconds"),
    ({"webhook": {"failurePolicy": {"pods": "Deny"}}}, "failurePolicy/pods"),
    ({"webhook": {"podSelection": "annotated"}}, "podSelection"),
    ({"controller": {"replicas": 0}}, "replicas"),
    ({"defaultQueuePolicy": {"spec": {"ordering": "Random"}}}, "ordering"),
    ({"defaultQueuePolicy": {"spec": {"cushionSlots": 101}}}, "cushionSlots"),
    ({"defaultQueuePolicy": {"spec": {"overflowTolerance": 2}}}, "overflowTolerance"),
    ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    ({"certManager": {"duration": "one year"}}, "duration"),
    ({"controller": {"podDisruptionBudget": {"minAvailable": 2}}}, "must be below controller.replicas"),
])
def test_bad_values_are_refused(bad: dict[str, Any], message: str) -> None:
    assert message in template_error(bad)


def test_service_monitors_scrape_both_components() -> None:
    objects = render("monitoring")
    monitors = {m["metadata"]["name"]: m for m in by_kind(objects, "ServiceMonitor")}
    assert set(monitors) == {CONTROLLER, WEBHOOK}
    for monitor in monitors.values():
        assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitors[CONTROLLER]["spec"]["endpoints"][0]["port"] == "http-metrics"
    webhook_endpoint = monitors[WEBHOOK]["spec"]["endpoints"][0]
    assert webhook_endpoint["scheme"] == "https"
    assert webhook_endpoint["tlsConfig"]["ca"]["secret"] == {"name": TLS_SECRET, "key": "ca.crt"}
    assert webhook_endpoint["tlsConfig"]["serverName"] == f"{WEBHOOK}.{NAMESPACE}.svc"
    assert not by_kind(render("defaults"), "ServiceMonitor")


def test_grafana_dashboard() -> None:
    configmap = one(render("monitoring"), "ConfigMap", f"{FULL}-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(configmap["data"]["volcano-metronome.json"])
    assert dashboard == json.loads((CHART / "dashboards" / "volcano-metronome.json").read_text())
    assert not [c for c in by_kind(render("defaults"), "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]


def test_release_name_containing_the_chart_name_is_not_repeated() -> None:
    objects = template(release="volcano-metronome")
    assert one(objects, "Deployment", "volcano-metronome-webhook")
    long = template(release="a-rather-long-release-name-for-a-cluster-install")
    for obj in long:
        assert len(obj["metadata"]["name"]) <= 63


def _documented_metrics() -> dict[str, str]:
    """``metric -> type`` from the metrics table of docs/install.md."""
    text = (CHART.parents[1] / "docs" / "install.md").read_text()
    return dict(re.findall(r"^\| `(metronome_[a-z_]+)` \| (gauge|counter|histogram) \|", text, re.MULTILINE))


def _registered_metrics() -> dict[str, str]:
    """``metric -> type`` as the controller, the webhook and the node agent register them (names as exposed)."""
    import prometheus_client

    from volcano_metronome.agent.node import AgentMetrics
    from volcano_metronome.controller.metrics import Metrics
    from webhooks import metrics as webhook_metrics

    families = list(Metrics(watch_restarts=lambda: {"pods": 0}).registry.collect())
    families += list(AgentMetrics().registry.collect())
    families += [f for f in prometheus_client.REGISTRY.collect() if f.name.startswith("metronome_")]
    assert webhook_metrics.REQUESTS is not None
    exposed = {}
    for family in families:
        name = f"{family.name}_total" if family.type == "counter" else family.name
        exposed[name] = family.type
    return exposed


def test_documented_metrics_are_the_ones_the_programs_register() -> None:
    assert _documented_metrics() == _registered_metrics()


def test_dashboard_queries_only_documented_metrics() -> None:
    documented = _documented_metrics()
    assert len(documented) >= 10
    dashboard = json.loads((CHART / "dashboards" / "volcano-metronome.json").read_text())
    used: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"\b(metronome_[a-z_]+)", target["expr"]):
                base = re.sub(r"_(bucket|sum|count)$", "", name) if name not in documented else name
                assert base in documented, f"panel {panel['title']!r} uses undocumented {name}"
                if name != base:
                    assert documented[base] == "histogram", name
                elif documented[base] == "counter":
                    assert re.search(rf"(rate|increase)\({name}\[", target["expr"]), f"counter {name} needs rate()"
                used.add(base)
    assert used == set(documented), f"documented but not on the dashboard: {set(documented) - used}"
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for subject in ("queue depth", "decision latency", "placements", "no-fits", "webhook requests", "webhook latency"):
        assert subject in titles
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


# ------------------------------------------------------------------------------------- network policy

def test_network_policies_open_only_the_served_ports_and_never_shut_out_the_api_server() -> None:
    objects = render("defaults")
    webhook = one(objects, "NetworkPolicy", WEBHOOK)
    deployment = one(objects, "Deployment", WEBHOOK)
    assert webhook["spec"]["podSelector"]["matchLabels"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()
    assert webhook["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = webhook["spec"]["ingress"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert rule["ports"] == [{"port": container["ports"][0]["containerPort"], "protocol": "TCP"}]
    assert "from" not in rule  # any source: the API server calls from outside the pod network
    controller = one(objects, "NetworkPolicy", CONTROLLER)
    (rule,) = controller["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8080, "protocol": "TCP"}] and "from" not in rule
    narrowed = template({"networkPolicy": {"webhookFrom": [{"ipBlock": {"cidr": "10.0.0.0/24"}}]}})
    assert one(narrowed, "NetworkPolicy", WEBHOOK)["spec"]["ingress"][0]["from"] == [
        {"ipBlock": {"cidr": "10.0.0.0/24"}}]
    assert not by_kind(template({"networkPolicy": {"enabled": False}}), "NetworkPolicy")
    assert "networkPolicy" in template_error({"networkPolicy": {"enabled": True, "webhookFrom": [{"cidr": "x"}]}})


def test_an_agent_interval_shorter_than_its_sampling_is_refused_as_the_agent_refuses_it() -> None:
    error = template_error(merged({"agent": {"enabled": True, "seconds": 60, "intervalSeconds": 30}}))
    assert "agent.intervalSeconds (30) must be at least agent.seconds (60)" in error
    template(merged({"agent": {"enabled": True, "seconds": 60, "intervalSeconds": 60}}))


def test_the_node_agent_is_off_by_default_and_on_is_host_network_read_only_and_writes_only_claim_status() -> None:
    assert not [o for o in render("defaults") if o["metadata"]["name"].endswith("-agent")]
    objects = template(merged({"agent": {"enabled": True, "interface": "ens5", "hz": 500}}))
    agent = f"{FULL}-agent"
    daemonset = one(objects, "DaemonSet", agent)
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["serviceAccountName"] == agent
    (container,) = pod["containers"]
    args = container["args"]
    assert args[:2] == ["profile", "agent"] and args[args.index("--interface") + 1] == "ens5"
    assert args[args.index("--hz") + 1] == "500"
    ctx = container["securityContext"]
    assert ctx["readOnlyRootFilesystem"] is True and ctx["runAsNonRoot"] is True
    assert ctx["capabilities"] == {"drop": ["ALL"]} and ctx["allowPrivilegeEscalation"] is False
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container["env"]
    role = one(objects, "ClusterRole", agent)
    assert _rules(role) == {(api.GROUP, api.CLAIMS, ("get", "list")), (api.GROUP, f"{api.CLAIMS}/status", ("patch",))}
    binding = one(objects, "ClusterRoleBinding", agent)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": agent, "namespace": NAMESPACE}]
    assert "agent" in template_error({"agent": {"enabled": True, "hz": 0}})
    # No runtime directory unless asked: then a hostPath, mounted read-only, and passed to the agent.
    assert "--runtime-dir" not in args and [v["name"] for v in pod["volumes"]] == ["tmp"]
    runtime = one(template(merged({"agent": {"enabled": True, "runtimeDir": "/var/run/metronome/measured",
                                             "runtimeMaxAgeSeconds": 90}})), "DaemonSet", agent)
    pod = runtime["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[args.index("--runtime-dir") + 1] == "/var/run/metronome/measured"
    assert args[args.index("--runtime-max-age") + 1] == "90"
    volume = next(v for v in pod["volumes"] if v["name"] == "runtime-reports")
    assert volume["hostPath"] == {"path": "/var/run/metronome/measured", "type": "DirectoryOrCreate"}
    assert {"name": "runtime-reports", "mountPath": "/var/run/metronome/measured", "readOnly": True} \
        in container["volumeMounts"]
    assert "runtimeDir" in template_error({"agent": {"enabled": True, "runtimeDir": "relative/dir"}})
    # The chart's own flags are the agent's: the command parses them.
    from volcano_metronome.cli import build_parser
    parsed = build_parser().parse_args(args)
    assert (parsed.runtime_dir, parsed.runtime_max_age) == ("/var/run/metronome/measured", 90.0)


def test_the_node_agents_are_scraped_pod_by_pod_when_monitoring_is_on() -> None:
    objects = template(merged({**SCENARIOS["monitoring"], "agent": {"enabled": True}}))
    (monitor,) = by_kind(objects, "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    daemonset = one(objects, "DaemonSet", f"{FULL}-agent")
    pod = daemonset["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    ports = {p["name"] for c in pod["spec"]["containers"] for p in c["ports"]}
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["http-metrics"] and "http-metrics" in ports
    assert not by_kind(render("monitoring"), "PodMonitor")  # no agent, nothing to scrape
