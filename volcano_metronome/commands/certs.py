"""``volcano-metronome certs --service S --namespace N (--out DIR | --secret NAME)``: the webhook's CA and certificate.

With ``--out DIR`` it writes ``ca.crt``, ``ca.key``, ``tls.crt`` and ``tls.key`` into DIR (keys mode
0600); an existing ``ca.crt``/``ca.key`` pair there is reused, so re-running rotates the serving
certificate without changing the caBundle.

With ``--secret NAME`` it keeps the same four entries in the ``kubernetes.io/tls`` Secret NAME in
namespace N (what the chart's hook Jobs do): the CA is reused from the Secret while it is valid for
more than 30 days, and so is the serving certificate while it was issued by that CA for exactly the
requested names and is valid for more than 30 days; the Secret is written only when something
changed. So re-running it on every ``helm upgrade`` never rotates the CA under running pods.

Either way it prints the caBundle (base64 of ``ca.crt``) on stdout; ``--patch-webhook NAME`` also
writes it into that MutatingWebhookConfiguration.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import pathlib
import sys
from typing import TYPE_CHECKING

from volcano_metronome.core import fields
from volcano_metronome.core.errors import InvalidInput, MetronomeError

if TYPE_CHECKING:
    from volcano_metronome import kube as kube_module
    from volcano_metronome.certs import serving as servingcerts

#: Longest validity of the serving certificate: ten years (a longer one overflows the certificate's dates).
MAX_DAYS = 3650
WRITE_ATTEMPTS = 5  # reads and writes of the Secret before a run of conflicts is reported


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``certs``."""
    parser.add_argument("--service", required=True, help="name of the webhook's Service")
    parser.add_argument("--namespace", required=True, help="namespace of the Service (and of --secret)")
    parser.add_argument("--out", help="directory to write ca.crt, ca.key, tls.crt, tls.key into "
                                      "(required unless --secret is given)")
    parser.add_argument("--secret", metavar="NAME",
                        help="create or update the kubernetes.io/tls Secret NAME in --namespace with tls.crt, "
                             "tls.key, ca.crt, ca.key, reusing its CA (and its serving certificate while still "
                             "good); needs get, create and update on that Secret")
    parser.add_argument("--localhost", action="store_true", help="also valid for localhost and 127.0.0.1")
    parser.add_argument("--days", type=int, default=365, help="validity of the serving certificate (default 365)")
    parser.add_argument("--new-ca", action="store_true", help="make a new CA even if DIR or the Secret holds one")
    parser.add_argument("--patch-webhook", metavar="NAME",
                        help="write the caBundle into this MutatingWebhookConfiguration (needs cluster credentials)")
    parser.add_argument("--kubeconfig", help="kubeconfig for --secret and --patch-webhook "
                                             "(default: $KUBECONFIG, ~/.kube/config outside a pod, else in-cluster)")


def run(args: argparse.Namespace) -> int:
    """Make (or reuse) the CA and serving certificate, store them, print the caBundle."""
    from volcano_metronome.certs import serving as servingcerts

    _check(args)
    wanted = servingcerts.wanted_for(args.service, args.namespace, days=args.days, localhost=args.localhost)
    out = pathlib.Path(args.out) if args.out else None
    from_dir = _read_dir(out) if out is not None else servingcerts.Existing()
    client = None
    if args.secret or args.patch_webhook:
        from volcano_metronome import kube

        client = kube.connect(args.kubeconfig)
    if args.secret:
        assert client is not None
        material = _sync_secret(client, args.namespace, args.secret, wanted, from_dir, new_ca=args.new_ca)
    else:
        # Only the CA is kept: a directory is re-issued on every run (the server reloads the new files).
        material = servingcerts.ensure(servingcerts.Existing(ca=from_dir.ca), wanted, _now(), new_ca=args.new_ca,
                                       keep_serving=False)
        _note_replaced_ca(from_dir, material, str(out), new_ca=args.new_ca)
    if out is not None:
        material.ca.write(out / servingcerts.CA_CRT, out / servingcerts.CA_KEY)
        material.serving.write(out / servingcerts.TLS_CRT, out / servingcerts.TLS_KEY)
    if args.patch_webhook:
        from volcano_metronome import kube

        assert client is not None
        kube.patch_webhook_ca_bundle(client, args.patch_webhook, material.ca.cert_pem)
        print(f"caBundle written to MutatingWebhookConfiguration {args.patch_webhook}", file=sys.stderr)
    print(base64.b64encode(material.ca.cert_pem).decode("ascii"))
    return 0


def _check(args: argparse.Namespace) -> None:
    fields.dns_label(args.service, "--service", "a Service name")
    fields.dns_label(args.namespace, "--namespace", "a namespace")
    if args.secret is not None:
        fields.dns_subdomain(args.secret, "--secret", "a Secret name")
    if args.patch_webhook is not None:
        fields.dns_subdomain(args.patch_webhook, "--patch-webhook", "a MutatingWebhookConfiguration name")
    if not args.out and not args.secret:
        raise InvalidInput("--out", args.out, "a directory to write the certificates into, or --secret NAME")
    if args.out and pathlib.Path(args.out).exists() and not pathlib.Path(args.out).is_dir():
        raise InvalidInput("--out", args.out, "a directory to write the certificates into (this is a file)")
    if not 1 <= args.days <= MAX_DAYS:
        raise InvalidInput("--days", args.days, f"a number of days in [1, {MAX_DAYS}] (ten years)")


def _read_dir(out: pathlib.Path) -> servingcerts.Existing:
    from volcano_metronome.certs import pki
    from volcano_metronome.certs import serving as servingcerts

    ca_cert, ca_key = out / servingcerts.CA_CRT, out / servingcerts.CA_KEY
    if ca_cert.is_file() and ca_key.is_file():
        return servingcerts.Existing(ca=pki.read_cert_key(ca_cert, ca_key))
    return servingcerts.Existing()


def _sync_secret(client: kube_module.Kube, namespace: str, name: str, wanted: servingcerts.Wanted,
                 fallback: servingcerts.Existing, *, new_ca: bool) -> servingcerts.Material:
    """Bring the Secret to good material: read, decide, write only a change, and start over on a conflict."""
    from volcano_metronome import kube
    from volcano_metronome.certs import serving as servingcerts

    where = f"Secret {namespace}/{name}"
    for attempt in range(WRITE_ATTEMPTS):
        current = kube.read_secret(client, namespace, name)
        if current is not None and current.get("type") != servingcerts.SECRET_TYPE:
            raise MetronomeError(f"{where} has type {current.get('type')!r}, expected {servingcerts.SECRET_TYPE!r} "
                                 "(a Secret's type cannot change: delete it or name another with --secret)")
        existing = servingcerts.decode_secret_data(current.get("data")) if current is not None else fallback
        material = servingcerts.ensure(existing, wanted, _now(), new_ca=new_ca)
        _note_replaced_ca(existing, material, where if current is not None else "--out", new_ca=new_ca)
        if current is not None and material.ca_kept and material.serving_kept:
            print(f"{where} unchanged: CA and serving certificate still good", file=sys.stderr)
            return material
        try:
            kube.write_secret(client, namespace, name, material.secret_data(), type_=servingcerts.SECRET_TYPE,
                              current=current)
        except kube.Conflict:
            if attempt == WRITE_ATTEMPTS - 1:
                raise
            continue  # someone else wrote it meanwhile: their CA is the one to keep
        what = "created" if current is None else "updated"
        ca = "CA kept" if material.ca_kept else "new CA"
        print(f"{where} {what}: {ca}, new serving certificate", file=sys.stderr)
        return material
    raise AssertionError("unreachable: the last attempt returns or raises")


def _note_replaced_ca(existing: servingcerts.Existing, material: servingcerts.Material, where: str, *,
                      new_ca: bool) -> None:
    if existing.ca is not None and not material.ca_kept and not new_ca:
        print(f"the CA in {where} was not reused (expired or expiring within 30 days, not a CA, or not matching its "
              "key): a new CA was made and the caBundle changes", file=sys.stderr)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)
