"""The local stack's pure parts: command lines, Kueue's configuration, webhook registrations, samples."""

from __future__ import annotations

import base64
import json
import pathlib
from typing import Any

import pytest
import yaml

from volcano_metronome import api
from volcano_metronome.devtools import binaries, components, devcluster, registrations
from volcano_metronome.devtools.stack import COMPONENTS, PROGRAMS, Stack

P = pathlib.Path


def test_controller_manager_runs_what_jobs_namespaces_and_nodes_need_on_loopback() -> None:
    args = components.controller_manager_args(P("/bin/kcm"), kubeconfig=P("/k"), port=1234, cert=P("/c"), key=P("/k.key"),
                                              root_ca=P("/ca"))
    flags = dict(a.split("=", 1) for a in args[1:])
    controllers = set(flags["--controllers"].split(","))
    assert {"job-controller", "garbage-collector-controller", "namespace-controller", "serviceaccount-controller",
            "node-lifecycle-controller"} <= controllers
    assert flags["--bind-address"] == "127.0.0.1" and flags["--secure-port"] == "1234"
    assert flags["--leader-elect"] == "false" and flags["--kubeconfig"] == "/k"


def test_scheduler_serves_on_loopback_without_leader_election() -> None:
    args = components.scheduler_args(P("/bin/ks"), kubeconfig=P("/k"), port=99, cert=P("/c"), key=P("/key"))
    assert args[0] == "/bin/ks"
    assert {"--bind-address=127.0.0.1", "--secure-port=99", "--leader-elect=false", "--tls-cert-file=/c"} <= set(args)


def test_kueue_configuration_is_out_of_cluster_with_given_certificates() -> None:
    config = components.kueue_configuration(namespace="kueue-system", health_port=1, webhook_port=2, cert_dir=P("/certs"))
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2" and config["kind"] == "Configuration"
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 2, "certDir": "/certs"}
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:1"
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["integrations"]["frameworks"] == ["batch/job"]
    assert config["featureGates"] == {"VisibilityOnDemand": False}
    yaml.safe_dump(config)  # what the stack writes


@pytest.mark.parametrize("as_root", [True, False])
def test_kueue_runs_in_a_private_mount_namespace(as_root: bool) -> None:
    argv, env = components.kueue_command(P("/bin/kueue"), kubeconfig=P("/k"), config=P("/c.yaml"), cert_dir=P("/certs"),
                                         overlay_dir=P("/ovl"), unshare="/usr/bin/unshare", as_root=as_root)
    assert argv[0] == "/usr/bin/unshare" and "--mount" in argv
    assert ("--map-root-user" in argv) is not as_root
    script = argv[argv.index("-c") + 1]
    # The overlay makes /etc writable inside the namespace only, then Kueue replaces the shell.
    assert "mount -t overlay" in script and script.rstrip().endswith('exec "$@"')
    assert argv[-3:] == ["/bin/kueue", "--config=/c.yaml", "--kubeconfig=/k"]
    assert env["METRONOME_KUEUE_METRICS_DIR"] == components.KUEUE_METRICS_CERT_DIR == "/etc/kueue/metrics/certs"
    assert env["METRONOME_KUEUE_CERTS"] == "/certs"


def test_python_processes_import_the_checkout_first(tmp_path: P) -> None:
    env = components.python_env(tmp_path, {"PYTHONPATH": "/elsewhere", "PATH": "/bin"})
    assert env["PYTHONPATH"].split(":") == [str(tmp_path), "/elsewhere"]
    assert env["PYTHONUNBUFFERED"] == "1" and env["PATH"] == "/bin"


def test_point_at_url_keeps_everything_but_the_client_config() -> None:
    chart: dict[str, Any] = {
        "kind": "MutatingWebhookConfiguration",
        "webhooks": [
            {"name": "a", "failurePolicy": "Fail", "clientConfig": {"service": {"name": "s", "namespace": "n", "path": "/mutate"}}},
            {"name": "b", "clientConfig": {"url": "https://elsewhere/x"}},
        ],
    }
    pointed = registrations.point_at_url(chart, "https://127.0.0.1:8443/", b"PEM")
    assert pointed["webhooks"][0]["clientConfig"] == {"url": "https://127.0.0.1:8443/mutate",
                                                      "caBundle": base64.b64encode(b"PEM").decode()}
    assert pointed["webhooks"][0]["failurePolicy"] == "Fail"
    assert pointed["webhooks"][1]["clientConfig"]["url"] == "https://elsewhere/x"
    assert "service" in chart["webhooks"][0]["clientConfig"]  # the input is not changed
    with pytest.raises(registrations.RegistrationError, match="neither a Service path nor a URL"):
        registrations.point_at_url({"webhooks": [{"name": "c", "clientConfig": {}}]}, "https://x", b"")


MANIFESTS = """\
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mjob.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
- name: mworkload.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-workload}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- name: vpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate--v1-pod}}
"""

KUSTOMIZATION = """\
resources: [manifests.yaml]
patches:
- patch: |-
    apiVersion: admissionregistration.k8s.io/v1
    kind: ValidatingWebhookConfiguration
    metadata:
      name: validating-webhook-configuration
    webhooks:
    - name: vpod.kb.io
      namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}]}
replacements:
- source:
    kind: ValidatingWebhookConfiguration
    name: validating-webhook-configuration
    fieldPath: webhooks.[name=vpod.kb.io].namespaceSelector
  targets:
  - select: {kind: MutatingWebhookConfiguration, name: mutating-webhook-configuration}
    fieldPaths: ['webhooks.[name=mjob.kb.io].namespaceSelector']
"""


def test_kueue_webhooks_apply_its_kustomization(tmp_path: P) -> None:
    (tmp_path / "manifests.yaml").write_text(MANIFESTS)
    (tmp_path / "kustomization.yaml").write_text(KUSTOMIZATION)
    mutating, validating = registrations.kueue_webhooks(tmp_path / "manifests.yaml", tmp_path / "kustomization.yaml")
    assert mutating["metadata"]["name"] == "kueue-mutating-webhook-configuration"
    assert validating["metadata"]["name"] == "kueue-validating-webhook-configuration"
    selector = validating["webhooks"][0]["namespaceSelector"]
    assert selector["matchExpressions"][0]["values"] == ["kube-system"]
    by_name = {w["name"]: w for w in mutating["webhooks"]}
    assert by_name["mjob.kb.io"]["namespaceSelector"] == selector
    assert "namespaceSelector" not in by_name["mworkload.kb.io"]  # not a target: left as generated
    assert registrations.webhook_names([mutating, validating]) == ["mjob.kb.io", "mworkload.kb.io", "vpod.kb.io"]


@pytest.mark.parametrize(
    ("kustomization", "message"),
    [
        ("namePrefix: x-\n", "unsupported kustomization keys"),
        ("patches: [{path: p.yaml}]\n", "only inline patches"),
        ("replacements:\n- source: {name: validating-webhook-configuration, fieldPath: spec.x}\n  targets: []\n",
         "unsupported fieldPath"),
        ("replacements:\n- source: {name: validating-webhook-configuration, fieldPath: 'webhooks.[name=nope].x'}\n"
         "  targets: []\n", "has no webhook 'nope'"),
    ],
)
def test_kueue_kustomization_changes_are_noticed(tmp_path: P, kustomization: str, message: str) -> None:
    (tmp_path / "manifests.yaml").write_text(MANIFESTS)
    (tmp_path / "kustomization.yaml").write_text(kustomization)
    with pytest.raises(registrations.RegistrationError, match=message):
        registrations.kueue_webhooks(tmp_path / "manifests.yaml", tmp_path / "kustomization.yaml")


def test_stack_rejects_unknown_components(tmp_path: P) -> None:
    with pytest.raises(Exception, match="unknown components"):
        Stack(tmp_path, components=["kube-proxy"])


def test_missing_programs_skip_optional_components_and_fail_required_ones(tmp_path: P,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def only_helm(name: str, **_: object) -> P:
        if name == "helm":
            return P("/bin/helm")
        raise binaries.MissingBinary(f"{name} is not built")

    monkeypatch.setattr(binaries, "binary_path", only_helm)
    stack = Stack(tmp_path)
    found = stack._resolve_programs()
    assert set(found) == {"webhook", "controller"}
    assert set(stack.skipped) == {"kube-controller-manager", "kube-scheduler", "kwok", "jobset", "training-operator",
                                  "training-operator-kueue", "kueue", "volcano-webhook", "volcano-controller-manager",
                                  "volcano-scheduler"}
    with pytest.raises(binaries.MissingBinary, match="kwok: kwok is not built"):
        Stack(tmp_path, required=["kwok"])._resolve_programs()


def test_every_component_program_is_a_known_tool() -> None:
    assert set(PROGRAMS) == set(COMPONENTS)
    for programs in PROGRAMS.values():
        for program in programs:
            binaries.tool(program)


def test_dev_cluster_samples_are_valid_manifests() -> None:
    (job,) = list(yaml.safe_load_all(devcluster.SAMPLE_VOLCANO_JOB))
    assert job["kind"] == "Job" and job["spec"]["schedulerName"] == "volcano" and job["spec"]["minAvailable"] == 2
    group, *pods = list(yaml.safe_load_all(devcluster.sample_podgroup(members=3)))
    assert group["kind"] == "PodGroup" and group["spec"]["minMember"] == 3 and len(pods) == 3
    windows = json.loads(group["metadata"]["annotations"][api.WINDOWS])
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        assert annotations[api.VOLCANO_GROUP_NAME] == group["metadata"]["name"]
        assert json.loads(annotations[api.WINDOWS]) == windows  # the same gang profile on every member
    kinds = [doc["kind"] for doc in yaml.safe_load_all(devcluster.SAMPLE_KUEUE)]
    assert kinds == ["AdmissionCheck", "ResourceFlavor", "ClusterQueue", "LocalQueue", "Job"]
    check, _, queue, _, job = yaml.safe_load_all(devcluster.SAMPLE_KUEUE)
    assert check["spec"]["controllerName"] == api.ADMISSION_CHECK_CONTROLLER
    assert queue["spec"]["admissionChecksStrategy"]["admissionChecks"] == [{"name": check["metadata"]["name"]}]
    assert job["metadata"]["labels"][api.KUEUE_QUEUE_NAME] == "user-queue"


def test_every_component_has_a_starter(tmp_path: P) -> None:
    stack = Stack(tmp_path)
    assert all(callable(stack._starter(name)) for name in COMPONENTS)
