"""The webhook's CA and serving certificate: keep what is still good, make only what is not.

Pure decisions over PEM values (``pki.CertKey``) and an explicit ``now``; where the material is kept
(a directory, a ``kubernetes.io/tls`` Secret) is the caller's business. The rule that matters: the
CA is reused whenever it can be, because its certificate is the caBundle the API server trusts, and
replacing it under running webhook pods breaks admission until the bundle is patched again.

- The CA is reused while it parses, is a CA, matches its key and stays valid for more than
  :data:`RENEW_BEFORE`; otherwise (or with ``new_ca``) a new one is made.
- The serving certificate is reused (only when the caller asks, ``keep_serving``) while it matches
  its key, was issued by that CA, names exactly the requested DNS names and IP addresses, and stays
  valid for more than :data:`RENEW_BEFORE`.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from volcano_metronome.certs import pki

RENEW_BEFORE = datetime.timedelta(days=30)
CA_DAYS = 3650  # at least; a longer serving validity asked for gets a CA that outlives it
SECRET_TYPE = "kubernetes.io/tls"
TLS_CRT, TLS_KEY, CA_CRT, CA_KEY = "tls.crt", "tls.key", "ca.crt", "ca.key"
SECRET_KEYS = (TLS_CRT, TLS_KEY, CA_CRT, CA_KEY)


@dataclass(frozen=True)
class Wanted:
    """What the serving certificate must be valid for, and for how long a new one is made."""

    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...] = ()
    days: int = pki.DEFAULT_DAYS
    ca_name: str = "volcano-metronome-ca"


@dataclass(frozen=True)
class Existing:
    """Material found where it is kept; any part may be missing."""

    ca: pki.CertKey | None = None
    serving: pki.CertKey | None = None


@dataclass(frozen=True)
class Material:
    """The CA and serving pair to use from now on, and which of them were kept rather than made."""

    ca: pki.CertKey
    serving: pki.CertKey
    ca_kept: bool
    serving_kept: bool

    def secret_data(self) -> dict[str, bytes]:
        """The four entries of the ``kubernetes.io/tls`` Secret (raw PEM; the API's base64 is the writer's)."""
        return {TLS_CRT: self.serving.cert_pem, TLS_KEY: self.serving.key_pem,
                CA_CRT: self.ca.cert_pem, CA_KEY: self.ca.key_pem}


def ensure(existing: Existing, wanted: Wanted, now: datetime.datetime, *, new_ca: bool = False,
           keep_serving: bool = True) -> Material:
    """The material to use: what ``existing`` holds where it is still good, new certificates elsewhere."""
    ca = existing.ca if existing.ca is not None and not new_ca and ca_usable(existing.ca, now) else None
    ca_kept = ca is not None
    if ca is None:
        ca = pki.make_ca(wanted.ca_name, days=max(wanted.days, CA_DAYS), now=now)
    serving = existing.serving if ca_kept and keep_serving else None
    if serving is not None and serving_usable(serving, ca, wanted, now):
        return Material(ca, serving, ca_kept=True, serving_kept=True)
    serving = pki.make_serving_cert(ca, dns_names=wanted.dns_names, ip_addresses=wanted.ip_addresses,
                                    days=wanted.days, now=now)
    return Material(ca, serving, ca_kept=ca_kept, serving_kept=False)


def ca_usable(ca: pki.CertKey, now: datetime.datetime) -> bool:
    """Whether ``ca`` can go on signing: a CA certificate, matching its key, valid beyond :data:`RENEW_BEFORE`."""
    parsed = _parse(ca)
    if parsed is None:
        return False
    cert, _ = parsed
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return False
    return constraints.ca and _valid_beyond(cert, now)


def serving_usable(serving: pki.CertKey, ca: pki.CertKey, wanted: Wanted, now: datetime.datetime) -> bool:
    """Whether ``serving`` still does: its key, issued by ``ca``, exactly the wanted names, valid long enough."""
    parsed, ca_cert = _parse(serving), _parse(ca)
    if parsed is None or ca_cert is None:
        return False
    cert, _ = parsed
    try:
        cert.verify_directly_issued_by(ca_cert[0])
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        return False
    names = set(sans.get_values_for_type(x509.DNSName))
    addresses = set(sans.get_values_for_type(x509.IPAddress))
    try:
        wanted_addresses = {ipaddress.ip_address(a) for a in wanted.ip_addresses}
    except ValueError:
        return False  # the new certificate will say what is wrong with it
    return names == set(wanted.dns_names) and addresses == wanted_addresses and _valid_beyond(cert, now)


def decode_secret_data(data: Mapping[str, object] | None) -> Existing:
    """The CA and serving pairs in a Secret's ``data`` (base64 values); a pair missing or undecodable is None."""
    entries: dict[str, bytes] = {}
    for key, value in (data or {}).items():
        if key in SECRET_KEYS and isinstance(value, str):
            try:
                entries[key] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                continue
    return Existing(ca=_pair(entries, CA_CRT, CA_KEY), serving=_pair(entries, TLS_CRT, TLS_KEY))


def _pair(entries: Mapping[str, bytes], cert: str, key: str) -> pki.CertKey | None:
    if entries.get(cert) and entries.get(key):
        return pki.CertKey(cert_pem=entries[cert], key_pem=entries[key])
    return None


def _parse(pair: pki.CertKey) -> tuple[x509.Certificate, object] | None:
    """The certificate and its private key, None unless both parse and the key is the certificate's."""
    try:
        cert = x509.load_pem_x509_certificate(pair.cert_pem)
        key = serialization.load_pem_private_key(pair.key_pem, password=None)
    except (ValueError, TypeError):
        return None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    try:
        same = (key.public_key().public_bytes(serialization.Encoding.DER, public)
                == cert.public_key().public_bytes(serialization.Encoding.DER, public))
    except (AttributeError, ValueError, TypeError):
        return None
    return (cert, key) if same else None


def _valid_beyond(cert: x509.Certificate, now: datetime.datetime) -> bool:
    return cert.not_valid_before_utc <= now and cert.not_valid_after_utc - now > RENEW_BEFORE


def wanted_for(service: str, namespace: str, *, days: int = pki.DEFAULT_DAYS, localhost: bool = False) -> Wanted:
    """What the webhook Service ``service`` in ``namespace`` needs (plus ``localhost`` and ``127.0.0.1``)."""
    names = (service, f"{service}.{namespace}", f"{service}.{namespace}.svc") + (("localhost",) if localhost else ())
    return Wanted(dns_names=names, ip_addresses=("127.0.0.1",) if localhost else (), days=days,
                  ca_name=f"{service}.{namespace}-ca")
