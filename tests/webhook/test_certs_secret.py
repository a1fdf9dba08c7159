"""``volcano-metronome certs --secret NAME`` against the in-memory API server (tests/webhook/fake_kube.py).

The same flows run against a real kube-apiserver in tests/integration/test_certs_secret.py.
"""

from __future__ import annotations

import base64
import pathlib
from typing import Any

import pytest
from cryptography import x509

from tests.webhook.fake_kube import Call, FakeKube
from volcano_metronome import kube
from volcano_metronome.certs import pki
from volcano_metronome.cli import main

NS, SECRET, MWC = "metronome", "hook-tls", "hook-config"
Capsys = pytest.CaptureFixture[str]
ARGS = ["certs", "--service", "hook", "--namespace", NS, "--secret", SECRET]


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    server = FakeKube()
    monkeypatch.setattr(kube, "connect", lambda *args, **kwargs: server)
    return server


def run(argv: list[str], capsys: Capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def secret(fake: FakeKube) -> dict[str, Any]:
    stored = fake.stored("", "secrets", NS, SECRET)
    assert stored is not None
    return stored


def pem(obj: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(obj["data"][key])


def test_first_run_creates_the_secret_second_run_changes_nothing(fake: FakeKube, capsys: Capsys,
                                                                 tmp_path: pathlib.Path) -> None:
    code, bundle, err = run([*ARGS, "--out", str(tmp_path)], capsys)
    assert code == 0 and "created" in err
    first = secret(fake)
    assert first["type"] == "kubernetes.io/tls" and set(first["data"]) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    assert base64.b64decode(bundle.strip()) == pem(first, "ca.crt")
    assert (tmp_path / "tls.crt").read_bytes() == pem(first, "tls.crt")  # --out gets the same material
    leaf = x509.load_pem_x509_certificate(pem(first, "tls.crt"))
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(pem(first, "ca.crt")))
    assert fake.calls == [Call("get", "", "secrets", NS, SECRET), Call("create", "", "secrets", NS, None)]

    fake.calls.clear()
    code, again, err = run(ARGS, capsys)
    assert code == 0 and again == bundle and "unchanged" in err
    assert secret(fake) == first  # not even rewritten: same resourceVersion
    assert fake.calls == [Call("get", "", "secrets", NS, SECRET)]


def test_an_expiring_serving_cert_is_replaced_under_the_same_ca_keeping_the_rest(fake: FakeKube,
                                                                                 capsys: Capsys) -> None:
    ca = pki.make_ca("hook.metronome-ca", days=3650)
    short = pki.make_serving_cert(ca, dns_names=["hook", f"hook.{NS}", f"hook.{NS}.svc"], days=20)
    data = {"tls.crt": short.cert_pem, "tls.key": short.key_pem, "ca.crt": ca.cert_pem, "ca.key": ca.key_pem,
            "extra": b"kept"}
    fake.put("", "secrets", NS, {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                                 "metadata": {"name": SECRET, "namespace": NS, "labels": {"team": "a"}},
                                 "data": {k: base64.b64encode(v).decode() for k, v in data.items()}})
    code, bundle, err = run(ARGS, capsys)
    assert code == 0 and "updated: CA kept" in err
    after = secret(fake)
    assert pem(after, "ca.crt") == ca.cert_pem and base64.b64decode(bundle.strip()) == ca.cert_pem
    assert pem(after, "tls.crt") != short.cert_pem and pem(after, "extra") == b"kept"
    assert after["metadata"]["labels"] == {"team": "a"}
    assert [c.verb for c in fake.calls] == ["get", "update"]


def test_a_concurrent_writer_wins_and_its_ca_is_kept(fake: FakeKube, capsys: Capsys) -> None:
    theirs = pki.make_ca("theirs")
    serving = pki.make_serving_cert(theirs, dns_names=["hook", f"hook.{NS}", f"hook.{NS}.svc"])
    raced: list[str] = []

    def race(method: str, path: str) -> None:
        if method == "POST" and not raced:  # between our read (absent) and our create, someone creates it
            raced.append(path)
            fake.put("", "secrets", NS, {"kind": "Secret", "type": "kubernetes.io/tls",
                                         "metadata": {"name": SECRET, "namespace": NS},
                                         "data": {"tls.crt": base64.b64encode(serving.cert_pem).decode(),
                                                  "tls.key": base64.b64encode(serving.key_pem).decode(),
                                                  "ca.crt": base64.b64encode(theirs.cert_pem).decode(),
                                                  "ca.key": base64.b64encode(theirs.key_pem).decode()}})

    fake.before = race
    code, bundle, err = run(ARGS, capsys)
    assert code == 0 and raced and "unchanged" in err
    assert base64.b64decode(bundle.strip()) == theirs.cert_pem
    assert [c.verb for c in fake.calls] == ["get", "create", "get"]


def test_conflicts_that_never_end_are_reported(fake: FakeKube, capsys: Capsys) -> None:
    fake.put("", "secrets", NS, {"kind": "Secret", "type": "kubernetes.io/tls",
                                 "metadata": {"name": SECRET, "namespace": NS},
                                 "data": {"tls.crt": "", "tls.key": ""}})

    def bump(method: str, path: str) -> None:
        if method == "PUT":
            fake.put("", "secrets", NS, secret(fake))  # a new resourceVersion before every write of ours

    fake.before = bump
    code, _, err = run(ARGS, capsys)
    assert code == 2 and "409" in err
    assert [c.verb for c in fake.calls].count("update") == 5


def test_a_secret_of_another_type_is_a_clear_error(fake: FakeKube, capsys: Capsys) -> None:
    fake.put("", "secrets", NS, {"kind": "Secret", "type": "Opaque", "metadata": {"name": SECRET, "namespace": NS},
                                 "data": {}})
    code, _, err = run(ARGS, capsys)
    assert code == 2 and f"Secret {NS}/{SECRET} has type 'Opaque', expected 'kubernetes.io/tls'" in err
    assert secret(fake)["type"] == "Opaque"


def test_patch_webhook_writes_the_secret_ca_into_every_webhook(fake: FakeKube, capsys: Capsys) -> None:
    hooks = [{"name": f"{n}.metronome.dev", "clientConfig": {"service": {"name": "hook", "namespace": NS}}}
             for n in ("pods", "jobs")]
    fake.put("admissionregistration.k8s.io", "mutatingwebhookconfigurations", None,
             {"kind": "MutatingWebhookConfiguration", "metadata": {"name": MWC}, "webhooks": hooks})
    run(ARGS, capsys)
    code, bundle, _ = run([*ARGS, "--patch-webhook", MWC], capsys)
    assert code == 0
    configuration = fake.stored("admissionregistration.k8s.io", "mutatingwebhookconfigurations", None, MWC)
    assert configuration is not None
    assert [h["clientConfig"]["caBundle"] for h in configuration["webhooks"]] == [bundle.strip()] * 2
    assert base64.b64decode(bundle.strip()) == pem(secret(fake), "ca.crt")


def test_without_a_secret_the_ca_in_out_is_carried_into_it(fake: FakeKube, capsys: Capsys,
                                                           tmp_path: pathlib.Path) -> None:
    _, from_dir, _ = run(["certs", "--service", "hook", "--namespace", NS, "--out", str(tmp_path)], capsys)
    code, bundle, _ = run([*ARGS, "--out", str(tmp_path)], capsys)
    assert code == 0 and bundle == from_dir and pem(secret(fake), "ca.crt") == (tmp_path / "ca.crt").read_bytes()


@pytest.mark.parametrize("argv, message", [
    (["certs", "--service", "hook", "--namespace", NS], "--out: got None, expected a directory"),
    ([*ARGS[:-1], "Bad_Name"], "--secret: got 'Bad_Name'"),
    ([*ARGS, "--days", "0"], "--days: got 0"),
])
def test_bad_flags_are_named(fake: FakeKube, capsys: Capsys, argv: list[str], message: str) -> None:
    code, _, err = run(argv, capsys)
    assert code == 2 and message in err and not fake.calls
