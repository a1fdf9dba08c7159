"""Which certificates are kept and which are made again (servingcerts, pure: an explicit ``now``)."""

from __future__ import annotations

import base64
import datetime

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from volcano_metronome.certs import pki
from volcano_metronome.certs import serving as servingcerts
from volcano_metronome.certs.serving import Existing, Wanted, ensure, wanted_for

NOW = datetime.datetime.now(datetime.timezone.utc)
WANTED = wanted_for("hook", "ns")


@pytest.fixture(scope="module")
def good() -> servingcerts.Material:
    return ensure(Existing(), WANTED, NOW)


def _verifies(material: servingcerts.Material, name: str, at: datetime.datetime = NOW) -> None:
    """A TLS client at ``at`` (the ``now`` the material was made for) accepts the serving cert for ``name``."""
    store = Store([x509.load_pem_x509_certificate(material.ca.cert_pem)])
    leaf = x509.load_pem_x509_certificate(material.serving.cert_pem)
    PolicyBuilder().store(store).time(at).build_server_verifier(x509.DNSName(name)).verify(leaf, [])


def test_wanted_names_are_the_service_names_kube_apiserver_dials() -> None:
    assert WANTED.dns_names == ("hook", "hook.ns", "hook.ns.svc") and WANTED.ip_addresses == ()
    local = wanted_for("hook", "ns", days=9, localhost=True)
    assert local.dns_names[-1] == "localhost" and local.ip_addresses == ("127.0.0.1",) and local.days == 9


def test_nothing_there_makes_both(good: servingcerts.Material) -> None:
    assert not good.ca_kept and not good.serving_kept
    _verifies(good, "hook.ns.svc")
    assert set(good.secret_data()) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}


def test_good_material_is_kept_as_it_is(good: servingcerts.Material) -> None:
    again = ensure(Existing(ca=good.ca, serving=good.serving), WANTED, NOW)
    assert again == servingcerts.Material(good.ca, good.serving, ca_kept=True, serving_kept=True)


@pytest.mark.parametrize("change", ["expiring", "names", "other-ca", "other-key", "missing"])
def test_a_serving_cert_that_no_longer_does_is_made_again_under_the_same_ca(good: servingcerts.Material,
                                                                               change: str) -> None:
    serving: pki.CertKey | None = good.serving
    wanted, now = WANTED, NOW
    if change == "expiring":
        now = NOW + datetime.timedelta(days=365 - 29)  # 29 days left: inside the 30-day renewal margin
    elif change == "names":
        wanted = wanted_for("hook", "ns", localhost=True)
    elif change == "other-ca":
        serving = pki.make_serving_cert(pki.make_ca(), dns_names=WANTED.dns_names)
    elif change == "other-key":
        other = pki.make_serving_cert(good.ca, dns_names=WANTED.dns_names)
        serving = pki.CertKey(cert_pem=good.serving.cert_pem, key_pem=other.key_pem)
    else:
        serving = None
    after = ensure(Existing(ca=good.ca, serving=serving), wanted, now)
    assert after.ca_kept and after.ca == good.ca
    assert not after.serving_kept and after.serving != good.serving
    _verifies(after, "localhost" if change == "names" else "hook.ns", now)


def test_thirty_one_days_left_is_still_good(good: servingcerts.Material) -> None:
    later = NOW + datetime.timedelta(days=365 - 31)
    assert ensure(Existing(ca=good.ca, serving=good.serving), WANTED, later).serving_kept


@pytest.mark.parametrize("change", ["expiring", "not-a-ca", "garbage", "other-key", "asked"])
def test_the_ca_is_replaced_only_when_it_cannot_go_on(good: servingcerts.Material, change: str) -> None:
    ca, now, new_ca = good.ca, NOW, False
    if change == "expiring":
        now = NOW + datetime.timedelta(days=3650 - 20)
    elif change == "not-a-ca":
        ca = good.serving
    elif change == "garbage":
        ca = pki.CertKey(cert_pem=b"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n", key_pem=b"x")
    elif change == "other-key":
        ca = pki.CertKey(cert_pem=good.ca.cert_pem, key_pem=pki.make_ca().key_pem)
    else:
        new_ca = True
    after = ensure(Existing(ca=ca, serving=good.serving), WANTED, now, new_ca=new_ca)
    assert not after.ca_kept and not after.serving_kept and after.ca.cert_pem != good.ca.cert_pem
    _verifies(after, "hook.ns.svc", now)


def test_keep_serving_false_reissues_under_the_kept_ca(good: servingcerts.Material) -> None:
    after = ensure(Existing(ca=good.ca, serving=good.serving), WANTED, NOW, keep_serving=False)
    assert after.ca_kept and not after.serving_kept and after.serving != good.serving


def test_a_new_ca_outlives_a_long_serving_cert() -> None:
    made = ensure(Existing(), Wanted(dns_names=("x",), days=5000), NOW)
    ca_end = x509.load_pem_x509_certificate(made.ca.cert_pem).not_valid_after_utc
    assert ca_end - NOW >= datetime.timedelta(days=4999)


def test_secret_data_round_trips_and_bad_entries_count_as_missing(good: servingcerts.Material) -> None:
    data = {k: base64.b64encode(v).decode() for k, v in good.secret_data().items()}
    assert servingcerts.decode_secret_data(data) == Existing(ca=good.ca, serving=good.serving)
    assert servingcerts.decode_secret_data(None) == Existing()
    assert servingcerts.decode_secret_data({**data, "ca.key": "not base64!"}) == Existing(serving=good.serving)
    assert servingcerts.decode_secret_data({**data, "tls.key": 7}) == Existing(ca=good.ca)
    without_ca_key = {k: v for k, v in data.items() if k != "ca.key"}  # e.g. a Secret cert-manager wrote
    assert servingcerts.decode_secret_data(without_ca_key).ca is None
