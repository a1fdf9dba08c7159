"""Small certificate helpers: a CA, serving and client certificates, service-account keys, PEM files.

Used by the local control plane (``devtools.controlplane``) and by the webhook's ``certs`` command.
Everything is a value (PEM bytes in frozen dataclasses) so callers decide where files go; keys are
written with mode 0600.

TLS keys are ECDSA P-256: generating them takes microseconds where RSA takes tens of milliseconds,
and every TLS stack we talk to (Go, OpenSSL, Python's ssl) accepts them. Service-account signing keys
are RSA because kube-apiserver's default JWT algorithm is RS256.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import pathlib
from dataclasses import dataclass
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from volcano_metronome.core.errors import MetronomeError

DEFAULT_DAYS = 365
# Certificates are back-dated a little so that a peer whose clock lags ours still accepts them.
_CLOCK_SKEW = datetime.timedelta(minutes=5)


class PkiError(MetronomeError):
    """A certificate or key could not be made, read or written."""


@dataclass(frozen=True)
class CertKey:
    """A certificate and its private key, both PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes

    def certificate(self) -> x509.Certificate:
        """The parsed certificate."""
        return x509.load_pem_x509_certificate(self.cert_pem)

    def write(self, cert_path: pathlib.Path, key_path: pathlib.Path) -> None:
        """Write the certificate (0644) and the key (0600)."""
        write_pem(cert_path, self.cert_pem)
        write_pem(key_path, self.key_pem, private=True)


@dataclass(frozen=True)
class KeyPair:
    """An RSA key pair, PEM-encoded (PKCS#8 private key, SubjectPublicKeyInfo public key)."""

    private_key_pem: bytes
    public_key_pem: bytes

    def write(self, private_path: pathlib.Path, public_path: pathlib.Path) -> None:
        """Write the private key (0600) and the public key (0644)."""
        write_pem(private_path, self.private_key_pem, private=True)
        write_pem(public_path, self.public_key_pem)


def make_ca(common_name: str = "volcano-metronome-ca", *, days: int = DEFAULT_DAYS,
            now: datetime.datetime | None = None) -> CertKey:
    """A self-signed certificate authority that may sign leaf certificates only (path length 0), valid from
    ``now`` (the current time unless given) less a clock-skew allowance."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = now or _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + datetime.timedelta(days=_positive_days(days)))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    cert = builder.sign(key, hashes.SHA256())
    return CertKey(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_private_pem(key))


def make_serving_cert(
    ca: CertKey,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    common_name: str | None = None,
    days: int = DEFAULT_DAYS,
    now: datetime.datetime | None = None,
) -> CertKey:
    """A TLS server certificate signed by ``ca`` for the given DNS names and IP addresses (valid from ``now``
    as for :func:`make_ca`).

    At least one name or address is required: clients check the subject alternative names, never
    the common name, so a certificate without them is useless.
    """
    if not dns_names and not ip_addresses:
        raise PkiError("a serving certificate needs at least one DNS name or IP address")
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    for address in ip_addresses:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError as exc:
            raise PkiError(f"ip_addresses: got {address!r}, expected an IPv4 or IPv6 address") from exc
    cn = common_name or (dns_names[0] if dns_names else ip_addresses[0])
    return _leaf(
        ca,
        subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=sans,
        days=days,
        now=now,
    )


def make_client_cert(
    ca: CertKey, common_name: str, *, groups: Sequence[str] = (), days: int = DEFAULT_DAYS
) -> CertKey:
    """A TLS client certificate: Kubernetes reads the user from CN and its groups from O."""
    if not common_name:
        raise PkiError("a client certificate needs a non-empty common name (the user name)")
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return _leaf(
        ca,
        subject=x509.Name(attributes),
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        sans=[],
        days=days,
    )


def make_rsa_key_pair(bits: int = 2048) -> KeyPair:
    """An RSA key pair, e.g. for signing service-account tokens."""
    if bits < 2048:
        raise PkiError(f"bits: got {bits}, expected at least 2048")
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(private_key_pem=_private_pem(key), public_key_pem=public)


def write_pem(path: pathlib.Path, data: bytes, *, private: bool = False) -> None:
    """Write PEM data atomically; private material gets mode 0600 from the moment it exists."""
    path = pathlib.Path(path)
    mode = 0o600 if private else 0o644
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # os.open with an explicit mode: a key must never be readable by others, not even briefly.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PkiError(f"cannot write {path}: {exc}") from exc


def read_cert_key(cert_path: pathlib.Path, key_path: pathlib.Path) -> CertKey:
    """Read back a certificate and key written by :meth:`CertKey.write`."""
    try:
        return CertKey(cert_pem=pathlib.Path(cert_path).read_bytes(), key_pem=pathlib.Path(key_path).read_bytes())
    except OSError as exc:
        raise PkiError(f"cannot read certificate/key: {exc}") from exc


def _leaf(
    ca: CertKey,
    *,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName],
    days: int,
    now: datetime.datetime | None = None,
) -> CertKey:
    ca_cert = ca.certificate()
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise PkiError(f"unsupported CA key type {type(ca_key).__name__}")
    key = ec.generate_private_key(ec.SECP256R1())
    now = now or _now()
    not_after = min(now + datetime.timedelta(days=_positive_days(days)), ca_cert.not_valid_after_utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return CertKey(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_private_pem(key))


def _private_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _positive_days(days: int) -> int:
    if days < 1:
        raise PkiError(f"days: got {days}, expected a positive number of days")
    return days


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)
