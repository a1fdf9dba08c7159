"""``volcano-metronome certs`` and the up-front checks of ``volcano-metronome webhook``."""

from __future__ import annotations

import base64
import ipaddress
import pathlib
import stat

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from volcano_metronome.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_certs_writes_a_ca_and_a_serving_cert_and_prints_the_bundle(tmp_path: pathlib.Path, capsys):
    code, out, _ = run(["certs", "--service", "metronome-webhook", "--namespace", "metronome", "--out", str(tmp_path),
                        "--localhost"], capsys)
    assert code == 0
    ca_pem = (tmp_path / "ca.crt").read_bytes()
    assert base64.b64decode(out.strip()) == ca_pem
    for key in ("ca.key", "tls.key"):
        assert stat.S_IMODE((tmp_path / key).stat().st_mode) == 0o600
    leaf = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["metronome-webhook", "metronome-webhook.metronome",
                                                      "metronome-webhook.metronome.svc", "localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    store = Store([x509.load_pem_x509_certificate(ca_pem)])
    PolicyBuilder().store(store).build_server_verifier(x509.DNSName("metronome-webhook.metronome.svc")).verify(leaf, [])


def test_certs_again_rotates_the_leaf_and_keeps_the_ca(tmp_path: pathlib.Path, capsys):
    args = ["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path)]
    _, first_bundle, _ = run(args, capsys)
    first_leaf = (tmp_path / "tls.crt").read_bytes()
    _, second_bundle, _ = run(args, capsys)
    assert first_bundle == second_bundle and (tmp_path / "tls.crt").read_bytes() != first_leaf
    leaf = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    assert leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName) == ["s", "s.n", "s.n.svc"]
    _, third_bundle, _ = run([*args, "--new-ca"], capsys)
    assert third_bundle != first_bundle


def test_certs_bad_names_and_missing_credentials_are_clear_errors(tmp_path: pathlib.Path, capsys):
    code, _, err = run(["certs", "--service", "Bad_Name", "--namespace", "n", "--out", str(tmp_path)], capsys)
    assert code == 2 and "--service: got 'Bad_Name'" in err
    code, _, err = run(["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path),
                        "--patch-webhook", "w", "--kubeconfig", str(tmp_path / "missing")], capsys)
    assert code == 2 and "kubeconfig" in err


def test_webhook_refuses_bad_settings_and_certificates_before_serving(tmp_path: pathlib.Path, capsys):
    run(["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path), "--localhost"], capsys)
    config = tmp_path / "settings.yaml"
    config.write_text("tierLimit: {enabled: true, treshold: 3}\n")
    code, _, err = run(["webhook", "--cert-dir", str(tmp_path), "--config", str(config)], capsys)
    assert code == 2 and "tierLimit.treshold: got" in err and "one of the keys" in err
    config.write_text("watch: {podGroups: false, claims: false}\n")
    (tmp_path / "tls.key").write_bytes((tmp_path / "ca.key").read_bytes())  # a key that does not match
    code, _, err = run(["webhook", "--cert-dir", str(tmp_path), "--config", str(config)], capsys)
    assert code == 2 and "cannot load the serving certificate" in err
    code, _, err = run(["webhook", "--cert-dir", str(tmp_path), "--port", "0"], capsys)
    assert code == 2 and "--port" in err


@pytest.mark.parametrize(("extra", "message"), [
    (["--days", "3000000"], "--days: got 3000000, expected a number of days in [1, 3650]"),
    (["--out", ""], "--out: got '', expected a directory"),
    (["--out", "FILE"], "expected a directory to write the certificates into (this is a file)"),
])
def test_certs_refuses_out_of_range_flags_before_writing(extra: list[str], message: str, tmp_path: pathlib.Path,
                                                         capsys):
    (tmp_path / "afile").write_text("x")
    argv = ["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path)]
    argv += [str(tmp_path / "afile") if a == "FILE" else a for a in extra]
    code, _, err = run(argv, capsys)
    assert code == 2 and message in err


@pytest.mark.parametrize(("extra", "message"), [
    (["--workers", "100000"], "--workers: got 100000, expected an integer in [1, 64]"),
    (["--host", "not an addr"], "--host: got 'not an addr', expected an IP address to bind"),
    (["--access-log", "DIR"], "expected a file to append to, '-' for stdout or 'off' (this is a folder)"),
    (["--config", ""], "cannot read '': an empty path names no file"),
])
def test_webhook_refuses_bad_workers_address_log_or_config_before_gunicorn_sees_them(extra, message, tmp_path, capsys):
    run(["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path), "--localhost"], capsys)
    code, _, err = run(["webhook", "--cert-dir", str(tmp_path), *[str(tmp_path) if a == "DIR" else a for a in extra]],
                       capsys)
    assert code == 2 and message in err
