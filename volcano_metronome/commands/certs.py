"""``volcano-metronome certs --service S --namespace N --out DIR``: a CA and a serving certificate for the webhook.

Writes ``ca.crt``, ``ca.key``, ``tls.crt`` and ``tls.key`` into DIR (keys mode 0600) and prints the
caBundle (base64 of ``ca.crt``) on stdout. An existing ``ca.crt``/``ca.key`` pair in DIR is reused,
so re-running the command rotates the serving certificate without changing the caBundle.
``--patch-webhook NAME`` also writes the caBundle into that MutatingWebhookConfiguration.
"""

from __future__ import annotations

import argparse
import base64
import pathlib
import re
import sys

from volcano_metronome.core.errors import InvalidInput

# Service and namespace names are DNS-1123 labels; they become the certificate's DNS names.
_DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``certs``."""
    parser.add_argument("--service", required=True, help="name of the webhook's Service")
    parser.add_argument("--namespace", required=True, help="namespace of the Service")
    parser.add_argument("--out", required=True, help="directory to write ca.crt, ca.key, tls.crt, tls.key into")
    parser.add_argument("--localhost", action="store_true", help="also valid for localhost and 127.0.0.1")
    parser.add_argument("--days", type=int, default=365, help="validity of the serving certificate (default 365)")
    parser.add_argument("--new-ca", action="store_true", help="make a new CA even if DIR holds one")
    parser.add_argument("--patch-webhook", metavar="NAME",
                        help="write the caBundle into this MutatingWebhookConfiguration (needs cluster credentials)")
    parser.add_argument("--kubeconfig", help="kubeconfig for --patch-webhook (default: $KUBECONFIG, else in-cluster)")


def run(args: argparse.Namespace) -> int:
    """Make (or reuse) the CA, make the serving certificate, print the caBundle."""
    from volcano_metronome import pki

    for flag, value in (("--service", args.service), ("--namespace", args.namespace)):
        if not _DNS_1123_LABEL.fullmatch(value):
            raise InvalidInput(flag, value, "a DNS-1123 label (lower-case letters, digits and '-', at most 63)")
    out = pathlib.Path(args.out)
    ca_cert, ca_key = out / "ca.crt", out / "ca.key"
    if ca_cert.is_file() and ca_key.is_file() and not args.new_ca:
        ca = pki.read_cert_key(ca_cert, ca_key)
    else:
        ca = pki.make_ca(f"{args.service}.{args.namespace}-ca", days=max(args.days, 3650))
        ca.write(ca_cert, ca_key)
    names = [args.service, f"{args.service}.{args.namespace}", f"{args.service}.{args.namespace}.svc"]
    addresses: list[str] = []
    if args.localhost:
        names.append("localhost")
        addresses.append("127.0.0.1")
    serving = pki.make_serving_cert(ca, dns_names=names, ip_addresses=addresses, days=args.days)
    serving.write(out / "tls.crt", out / "tls.key")
    if args.patch_webhook:
        from volcano_metronome import kube

        kube.patch_webhook_ca_bundle(kube.connect(args.kubeconfig), args.patch_webhook, ca.cert_pem)
        print(f"caBundle written to MutatingWebhookConfiguration {args.patch_webhook}", file=sys.stderr)
    print(base64.b64encode(ca.cert_pem).decode("ascii"))
    return 0
