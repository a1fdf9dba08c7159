"""The chart's certificate hook Jobs, executed: each Job's own command line runs the real ``certs`` command
against the in-memory API server (tests/webhook/fake_kube.py), in Helm's hook order, and every request
it makes must be allowed by the hook's rendered RBAC, and every permission granted must be used.

Install: pre-install Job creates the Secret, Helm creates the MutatingWebhookConfiguration, the
post-install Job patches its caBundle. Upgrade: both Jobs again, which must change nothing (the CA and
the serving certificate are kept). Upgrade 340 days later: the serving certificate is renewed under
the same CA, so the caBundle never changes.
"""

from __future__ import annotations

import base64
import datetime
import pathlib
from typing import Any

import pytest

from tests.helm.chart import NAMESPACE, RELEASE, by_kind, one, pod_specs, template
from tests.webhook.fake_kube import Call, FakeKube
from volcano_metronome import kube
from volcano_metronome.cli import main
from volcano_metronome.commands import certs

FULL = f"{RELEASE}-volcano-metronome"
SA = f"{FULL}-certs"
SECRET = f"{FULL}-webhook-tls"
MWC_GROUP, MWC_RESOURCE = "admissionregistration.k8s.io", "mutatingwebhookconfigurations"


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return template()


def _allowed(objects: list[dict[str, Any]], call: Call) -> bool:
    """Whether the certs ServiceAccount may make ``call`` (RBAC: bindings to it, then their roles' rules)."""
    subject = {"kind": "ServiceAccount", "name": SA, "namespace": NAMESPACE}
    roles: list[dict[str, Any]] = []
    for binding in by_kind(objects, "RoleBinding") + by_kind(objects, "ClusterRoleBinding"):
        if subject not in binding["subjects"]:
            continue
        if binding["kind"] == "RoleBinding" and call.namespace != binding["metadata"]["namespace"]:
            continue
        roles.append(one(objects, binding["roleRef"]["kind"], binding["roleRef"]["name"]))
    for role in roles:
        for rule in role["rules"]:
            names = rule.get("resourceNames")
            if (call.group in rule["apiGroups"] and call.resource in rule["resources"] and call.verb in rule["verbs"]
                    and (not names or (call.name is not None and call.name in names))):
                return True
    return False


def _granted(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """``(verb, resource)`` of every rule of the certs roles."""
    return {(verb, resource) for kind in ("Role", "ClusterRole") for rule in one(objects, kind, SA)["rules"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def _run_job(objects: list[dict[str, Any]], phase: str, fake: FakeKube, tmp: pathlib.Path,
             capsys: pytest.CaptureFixture[str]) -> str:
    """Run the hook Job ``phase`` as its pod would; returns the caBundle it printed."""
    job = one(objects, "Job", f"{FULL}-certs-{phase}")
    (_, pod), = pod_specs([job])
    (container,) = pod["containers"]
    assert pod["serviceAccountName"] == SA and container["command"] == ["volcano-metronome"]
    args = list(container["args"])
    out = args[args.index("--out") + 1]
    mounts = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    assert any(out.startswith(m.rstrip("/") + "/") for m in mounts), f"--out {out} is on the read-only root filesystem"
    args[args.index("--out") + 1] = str(tmp / phase)
    fake.calls.clear()
    code = main(args)
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    denied = [c for c in fake.calls if not _allowed(objects, c)]
    assert not denied, f"the {phase} Job's RBAC does not allow {denied}"
    return stdout.strip()


def test_install_upgrade_and_renewal_run_on_exactly_the_granted_rbac(
        objects: list[dict[str, Any]], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeKube()
    monkeypatch.setattr(kube, "connect", lambda *args, **kwargs: fake)
    used: set[Call] = set()

    bundle = _run_job(objects, "create", fake, tmp_path, capsys)  # pre-install
    used |= set(fake.calls)
    secret = fake.stored("", "secrets", NAMESPACE, SECRET)
    assert secret is not None and secret["type"] == "kubernetes.io/tls"
    assert base64.b64decode(secret["data"]["ca.crt"]) == base64.b64decode(bundle)
    deployment = one(objects, "Deployment", f"{FULL}-webhook")
    (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v.get("secret")]
    assert volume["secret"]["secretName"] == SECRET
    assert {item["key"] for item in volume["secret"]["items"]} <= set(secret["data"])

    configuration = one(objects, "MutatingWebhookConfiguration")  # Helm creates the release's objects
    fake.put(MWC_GROUP, MWC_RESOURCE, None, configuration)
    assert _run_job(objects, "patch", fake, tmp_path, capsys) == bundle  # post-install
    used |= set(fake.calls)
    patched = fake.stored(MWC_GROUP, MWC_RESOURCE, None, configuration["metadata"]["name"])
    assert patched is not None and {h["clientConfig"]["caBundle"] for h in patched["webhooks"]} == {bundle}

    for phase in ("create", "patch"):  # helm upgrade: nothing rotates
        assert _run_job(objects, phase, fake, tmp_path, capsys) == bundle
        used |= set(fake.calls)
    assert fake.stored("", "secrets", NAMESPACE, SECRET) == secret

    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=340)
    monkeypatch.setattr(certs, "_now", lambda: later)  # helm upgrade when 25 days are left
    assert _run_job(objects, "create", fake, tmp_path, capsys) == bundle
    used |= set(fake.calls)
    renewed = fake.stored("", "secrets", NAMESPACE, SECRET)
    assert renewed is not None and renewed["data"]["ca.crt"] == secret["data"]["ca.crt"]
    assert renewed["data"]["tls.crt"] != secret["data"]["tls.crt"]

    assert {(c.verb, c.resource) for c in used} == _granted(objects), "granted and used permissions differ"
