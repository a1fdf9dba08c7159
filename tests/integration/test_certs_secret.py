"""``volcano-metronome certs --secret`` against a real kube-apiserver, as the chart's hook Jobs run it.

The command runs with the hook Jobs' own arguments (rendered by ``helm template``) as a user that
holds only the hook's rendered Role and ClusterRole, so the API server's RBAC authorizer judges
whether the chart grants what the command does. The MutatingWebhookConfiguration is a real one with
the chart's name whose webhooks select nothing (failurePolicy Ignore): the session's other tests
never call it.
"""

from __future__ import annotations

import base64
import pathlib
import time
import uuid
from typing import Any, Iterator

import pytest
import yaml

from tests.helm.chart import one, template
from volcano_metronome import kube
from volcano_metronome.certs import pki
from volcano_metronome.cli import main
from volcano_metronome.devtools.controlplane import ControlPlane

RBAC = "rbac.authorization.k8s.io"
ROLES = kube.Resource(RBAC, "v1", "roles", True, "Role")
ROLE_BINDINGS = kube.Resource(RBAC, "v1", "rolebindings", True, "RoleBinding")
CLUSTER_ROLES = kube.Resource(RBAC, "v1", "clusterroles", False, "ClusterRole")
CLUSTER_ROLE_BINDINGS = kube.Resource(RBAC, "v1", "clusterrolebindings", False, "ClusterRoleBinding")
ACCESS_REVIEWS = kube.Resource("authorization.k8s.io", "v1", "subjectaccessreviews", False, "SubjectAccessReview")


class Hook:
    """The chart's certificate hook, installed for one user in its own namespace and release."""

    def __init__(self, plane: ControlPlane, admin: kube.Kube, tmp: pathlib.Path) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.namespace, self.release, self.user = f"certs-{suffix}", f"certs{suffix}", f"certs-job-{suffix}"
        self.admin = admin
        self.objects = template(namespace=self.namespace, release=self.release)
        full = f"{self.release}-volcano-metronome"
        self.secret, self.sa = f"{full}-webhook-tls", f"{full}-certs"
        self.webhook_configuration = one(self.objects, "MutatingWebhookConfiguration")["metadata"]["name"]
        self.kubeconfig = _user_kubeconfig(plane, self.user, tmp)
        self.tmp = tmp
        self.created: list[tuple[kube.Resource, str | None, str]] = []

    def install_rbac(self) -> None:
        """The hook's Role and ClusterRole as rendered, bound to our user instead of the Job's ServiceAccount."""
        self._create(kube.NAMESPACES, {"metadata": {"name": self.namespace}})
        subject = [{"kind": "User", "name": self.user, "apiGroup": RBAC}]
        for kind, resource in (("Role", ROLES), ("ClusterRole", CLUSTER_ROLES),
                               ("RoleBinding", ROLE_BINDINGS), ("ClusterRoleBinding", CLUSTER_ROLE_BINDINGS)):
            obj = one(self.objects, kind, self.sa)
            obj["metadata"].pop("annotations", None)  # Helm's hook annotations mean nothing to the server
            if kind.endswith("Binding"):
                obj["subjects"] = subject
            self._create(resource, obj)
        for verb, group, plural, name in (("create", "", "secrets", None), ("update", "", "secrets", self.secret),
                                          ("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations",
                                           self.webhook_configuration)):
            self._wait_allowed(verb, group, plural, name)

    def install_webhook_configuration(self) -> None:
        """A real configuration with the chart's name: two webhooks that select no object."""
        hooks = [{"name": f"{n}.certs-test.metronome.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                  "failurePolicy": "Ignore", "timeoutSeconds": 1,
                  "clientConfig": {"service": {"name": "nowhere", "namespace": self.namespace, "path": "/mutate"}},
                  "objectSelector": {"matchLabels": {"metronome.dev/certs-test": "never"}},
                  "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                             "operations": ["CREATE"], "scope": "Namespaced"}]} for n in ("a", "b")]
        self._create(kube.MUTATING_WEBHOOKS, {"metadata": {"name": self.webhook_configuration}, "webhooks": hooks})

    def run(self, phase: str, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
        """Run the hook Job ``phase`` with its rendered arguments as our user; (caBundle, stderr)."""
        container = one(self.objects, "Job", f"{self.sa}-{phase}")["spec"]["template"]["spec"]["containers"][0]
        args = list(container["args"])
        args[args.index("--out") + 1] = str(self.tmp / phase)
        code = main([*args, "--kubeconfig", str(self.kubeconfig)])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out.strip(), err

    def read_secret(self) -> dict[str, Any]:
        secret = kube.read_secret(self.admin, self.namespace, self.secret)
        assert secret is not None
        return secret

    def cleanup(self) -> None:
        for resource, namespace, name in reversed(self.created):
            if not resource.namespaced:  # the namespace goes with what is in it (as far as etcd alone allows)
                self.admin.delete(resource, namespace, name)

    def _create(self, resource: kube.Resource, obj: dict[str, Any]) -> None:
        namespace = self.namespace if resource.namespaced else None
        self.admin.create(resource, obj, namespace)
        self.created.append((resource, namespace, obj["metadata"]["name"]))

    def _wait_allowed(self, verb: str, group: str, plural: str, name: str | None) -> None:
        attributes = {"verb": verb, "group": group, "resource": plural, "namespace": self.namespace,
                      **({"name": name} if name else {})}
        deadline = time.monotonic() + 15
        while True:  # the authorizer learns of new RBAC objects through its informers
            review = self.admin.create(ACCESS_REVIEWS, {"spec": {"user": self.user, "resourceAttributes": attributes}})
            if review["status"].get("allowed"):
                return
            assert time.monotonic() < deadline, f"RBAC never allowed {attributes}: {review['status']}"
            time.sleep(0.1)


def _user_kubeconfig(plane: ControlPlane, user: str, tmp: pathlib.Path) -> pathlib.Path:
    cert = pki.make_client_cert(plane.ca, user)

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    config = {"apiVersion": "v1", "kind": "Config", "current-context": "user",
              "clusters": [{"name": "plane", "cluster": {"server": plane.server_url,
                                                         "certificate-authority-data": b64(plane.ca_pem)}}],
              "users": [{"name": user, "user": {"client-certificate-data": b64(cert.cert_pem),
                                                "client-key-data": b64(cert.key_pem)}}],
              "contexts": [{"name": "user", "context": {"cluster": "plane", "user": user}}]}
    path = tmp / "user.kubeconfig"
    pki.write_pem(path, yaml.safe_dump(config).encode(), private=True)
    return path


@pytest.fixture()
def hook(control_plane: ControlPlane, tmp_path: pathlib.Path) -> Iterator[Hook]:
    admin = kube.connect(str(control_plane.kubeconfig_path))
    installed = Hook(control_plane, admin, tmp_path)
    try:
        installed.install_rbac()
        yield installed
    finally:
        installed.cleanup()
        admin.close()


def test_the_hook_jobs_create_keep_and_renew_the_secret_and_patch_the_ca(hook: Hook,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # pre-install: the Secret is created
    bundle, err = hook.run("create", capsys)
    assert "created" in err
    first = hook.read_secret()
    assert first["type"] == "kubernetes.io/tls"
    assert set(first["data"]) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    assert first["data"]["ca.crt"] == bundle

    # post-install: the caBundle of the real configuration, every webhook
    hook.install_webhook_configuration()
    assert hook.run("patch", capsys)[0] == bundle
    configuration = hook.admin.get(kube.MUTATING_WEBHOOKS, None, hook.webhook_configuration)
    assert configuration is not None
    assert [w["clientConfig"]["caBundle"] for w in configuration["webhooks"]] == [bundle, bundle]

    # helm upgrade: the CA and the serving certificate are reused, the Secret is not even written
    again, err = hook.run("create", capsys)
    assert again == bundle and "unchanged" in err
    assert hook.read_secret()["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]

    # a serving certificate with 20 days left is renewed under the same CA (an update through RBAC)
    ca = pki.CertKey(cert_pem=base64.b64decode(first["data"]["ca.crt"]),
                     key_pem=base64.b64decode(first["data"]["ca.key"]))
    service = one(hook.objects, "Service", f"{hook.release}-volcano-metronome-webhook")["metadata"]["name"]
    names = [service, f"{service}.{hook.namespace}", f"{service}.{hook.namespace}.svc"]
    short = pki.make_serving_cert(ca, dns_names=names, days=20)
    kube.write_secret(hook.admin, hook.namespace, hook.secret, {"tls.crt": short.cert_pem, "tls.key": short.key_pem},
                      type_="kubernetes.io/tls", current=first)
    renewed_bundle, err = hook.run("create", capsys)
    renewed = hook.read_secret()
    assert renewed_bundle == bundle and "updated: CA kept" in err
    assert renewed["data"]["ca.crt"] == bundle
    assert renewed["data"]["tls.crt"] not in (first["data"]["tls.crt"], base64.b64encode(short.cert_pem).decode())
