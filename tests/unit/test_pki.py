"""Certificates made by volcano_metronome.certs.pki verify as a TLS client would verify them."""

from __future__ import annotations

import datetime
import ipaddress
import pathlib
import socket
import ssl
import stat
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from volcano_metronome.certs import pki
from volcano_metronome.core.errors import MetronomeError


@pytest.fixture(scope="module")
def ca() -> pki.CertKey:
    return pki.make_ca("test-ca")


def _store(ca: pki.CertKey) -> Store:
    return Store([ca.certificate()])


def test_ca_is_a_ca_that_signs_only_leaves(ca: pki.CertKey) -> None:
    cert = ca.certificate()
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "test-ca"


def test_serving_cert_verifies_for_every_name_and_address(ca: pki.CertKey) -> None:
    leaf = pki.make_serving_cert(ca, dns_names=["localhost", "svc.ns.svc"], ip_addresses=["127.0.0.1", "::1"])
    cert = leaf.certificate()
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost", "svc.ns.svc"]
    assert sans.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca

    for subject in (
        x509.DNSName("localhost"),
        x509.DNSName("svc.ns.svc"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ):
        verifier = PolicyBuilder().store(_store(ca)).build_server_verifier(subject)
        chain = verifier.verify(cert, [])
        assert chain[-1] == ca.certificate()

    wrong = PolicyBuilder().store(_store(ca)).build_server_verifier(x509.DNSName("example.com"))
    with pytest.raises(VerificationError):
        wrong.verify(cert, [])


def test_serving_cert_from_another_ca_does_not_verify(ca: pki.CertKey) -> None:
    other = pki.make_ca("other")
    leaf = pki.make_serving_cert(other, dns_names=["localhost"])
    verifier = PolicyBuilder().store(_store(ca)).build_server_verifier(x509.DNSName("localhost"))
    with pytest.raises(VerificationError):
        verifier.verify(leaf.certificate(), [])


def test_client_cert_carries_user_and_groups(ca: pki.CertKey) -> None:
    leaf = pki.make_client_cert(ca, "admin", groups=["system:masters", "team-a"])
    cert = leaf.certificate()
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:masters",
        "team-a",
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    # The Web PKI profile wants a SAN on client certificates; Kubernetes reads CN and O instead.
    leaf_policy = ExtensionPolicy.webpki_defaults_ee().may_be_present(
        x509.SubjectAlternativeName, Criticality.AGNOSTIC, None
    )
    verifier = (
        PolicyBuilder()
        .store(_store(ca))
        .extension_policies(ca_policy=ExtensionPolicy.webpki_defaults_ca(), ee_policy=leaf_policy)
        .build_client_verifier()
    )
    verified = verifier.verify(cert, [])
    assert verified.chain[-1] == ca.certificate()


def test_leaf_never_outlives_its_ca() -> None:
    short_ca = pki.make_ca("short", days=2)
    leaf = pki.make_client_cert(short_ca, "u", days=400).certificate()
    assert leaf.not_valid_after_utc <= short_ca.certificate().not_valid_after_utc
    assert leaf.not_valid_before_utc < datetime.datetime.now(datetime.timezone.utc)


def test_private_key_matches_certificate(ca: pki.CertKey) -> None:
    leaf = pki.make_serving_cert(ca, ip_addresses=["127.0.0.1"])
    key = serialization.load_pem_private_key(leaf.key_pem, password=None)
    assert key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) == leaf.certificate().public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def test_rsa_key_pair_signs_and_verifies() -> None:
    pair = pki.make_rsa_key_pair()
    private = serialization.load_pem_private_key(pair.private_key_pem, password=None)
    public = serialization.load_pem_public_key(pair.public_key_pem)
    assert isinstance(private, rsa.RSAPrivateKey) and isinstance(public, rsa.RSAPublicKey)
    assert private.key_size == 2048
    signature = private.sign(b"token", padding.PKCS1v15(), hashes.SHA256())
    public.verify(signature, b"token", padding.PKCS1v15(), hashes.SHA256())


def test_write_makes_keys_private(tmp_path: pathlib.Path, ca: pki.CertKey) -> None:
    ca.write(tmp_path / "ca.crt", tmp_path / "sub" / "ca.key")
    assert stat.S_IMODE((tmp_path / "sub" / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "ca.crt").stat().st_mode) == 0o644
    assert pki.read_cert_key(tmp_path / "ca.crt", tmp_path / "sub" / "ca.key") == ca
    pair = pki.make_rsa_key_pair()
    pair.write(tmp_path / "sa.key", tmp_path / "sa.pub")
    assert stat.S_IMODE((tmp_path / "sa.key").stat().st_mode) == 0o600
    assert not list(tmp_path.glob(".*tmp*"))


def test_bad_input_is_a_metronome_error(ca: pki.CertKey) -> None:
    with pytest.raises(MetronomeError, match="at least one DNS name or IP address"):
        pki.make_serving_cert(ca)
    with pytest.raises(MetronomeError, match="ip_addresses: got 'not-an-ip'"):
        pki.make_serving_cert(ca, ip_addresses=["not-an-ip"])
    with pytest.raises(MetronomeError, match="common name"):
        pki.make_client_cert(ca, "")
    with pytest.raises(MetronomeError, match="days"):
        pki.make_ca(days=0)
    with pytest.raises(MetronomeError, match="bits"):
        pki.make_rsa_key_pair(1024)


def test_real_tls_handshake_with_mutual_auth(tmp_path: pathlib.Path, ca: pki.CertKey) -> None:
    """Python's ssl (OpenSSL) accepts the certificates for a mutually authenticated connection."""
    server = pki.make_serving_cert(ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    client = pki.make_client_cert(ca, "admin", groups=["system:masters"])
    ca.write(tmp_path / "ca.crt", tmp_path / "ca.key")
    server.write(tmp_path / "server.crt", tmp_path / "server.key")
    client.write(tmp_path / "client.crt", tmp_path / "client.key")

    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tmp_path / "ca.crt"))
    server_ctx.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    client_ctx.load_cert_chain(tmp_path / "client.crt", tmp_path / "client.key")

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: dict[str, object] = {}

    def serve() -> None:
        conn, _ = listener.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            seen["peer"] = tls.getpeercert()
            tls.sendall(b"ok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with client_ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.recv(2) == b"ok"
        thread.join(timeout=5)
    finally:
        listener.close()
    peer = seen["peer"]
    assert isinstance(peer, dict)
    assert ((("commonName", "admin"),) in peer["subject"])
