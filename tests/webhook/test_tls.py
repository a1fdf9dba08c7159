"""ReloadingContext: loads, reloads on change, keeps serving through a bad or half-written pair."""

from __future__ import annotations

import os
import pathlib
import ssl

import pytest

from volcano_metronome.certs import pki
from webhooks.tls import ReloadingContext, build_context


def _serial(context: ssl.SSLContext, ca: pki.CertKey) -> int:
    """The serial of the certificate ``context`` serves, via an in-memory handshake."""
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    server_in, server_out, client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = context.wrap_bio(server_in, server_out, server_side=True)
    peer = client.wrap_bio(client_in, client_out, server_hostname="localhost")
    for _ in range(10):
        for side in (peer, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    der = peer.getpeercert(binary_form=True)
    assert der is not None
    from cryptography import x509

    return int(x509.load_der_x509_certificate(der).serial_number)


@pytest.fixture()
def pair(tmp_path: pathlib.Path):
    ca = pki.make_ca("t")
    return ca, tmp_path / "tls.crt", tmp_path / "tls.key"


def _write(ca: pki.CertKey, cert: pathlib.Path, key: pathlib.Path) -> pki.CertKey:
    serving = pki.make_serving_cert(ca, dns_names=["localhost"])
    serving.write(cert, key)
    return serving


def test_context_is_tls12_minimum(pair):
    ca, cert, key = pair
    _write(ca, cert, key)
    context = build_context(str(cert), str(key))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.options & ssl.OP_NO_COMPRESSION


def test_reload_on_change_and_keep_previous_on_mismatch(pair):
    ca, cert, key = pair
    first = _write(ca, cert, key)
    events: list[tuple[bool, str]] = []
    reloading = ReloadingContext(str(cert), str(key), on_reload=lambda ok, detail: events.append((ok, detail)))
    context = reloading.context()
    assert reloading.context() is context  # unchanged files: the same context
    assert _serial(context, ca) == first.certificate().serial_number

    second = pki.make_serving_cert(ca, dns_names=["localhost"])
    pki.write_pem(cert, second.cert_pem)  # new certificate, old key: must not be used
    assert reloading.context() is context
    assert events[-1][0] is False and "kept the previous certificate" in events[-1][1]
    assert reloading.context() is context  # the failed pair is not retried until a file changes again

    pki.write_pem(key, second.key_pem, private=True)
    fresh = reloading.context()
    assert fresh is not context and events[-1][0] is True
    assert _serial(fresh, ca) == second.certificate().serial_number


def test_missing_files_keep_the_current_context(pair):
    ca, cert, key = pair
    _write(ca, cert, key)
    reloading = ReloadingContext(str(cert), str(key))
    context = reloading.context()
    os.remove(cert)
    assert reloading.context() is context


def test_nothing_loadable_at_start_is_an_error(pair):
    _, cert, key = pair
    cert.write_text("not a certificate")
    key.write_text("not a key")
    with pytest.raises(ssl.SSLError):
        ReloadingContext(str(cert), str(key)).context()
