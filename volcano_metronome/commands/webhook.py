"""``volcano-metronome webhook --cert-dir DIR [--port P] [--workers N] [--config FILE]``: serve the admission webhook."""

from __future__ import annotations

import argparse
import glob
import os
import pathlib
import tempfile

from volcano_metronome.core import fields
from volcano_metronome.core.errors import InvalidInput, MetronomeError

#: Most worker processes: gevent workers each serve every connection they accept, so the bound is memory, not load.
MAX_WORKERS = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``webhook``."""
    parser.add_argument("--cert-dir", required=True, help="directory holding the serving certificate and key")
    parser.add_argument("--cert-file", default="tls.crt", help="certificate file name in --cert-dir (default tls.crt)")
    parser.add_argument("--key-file", default="tls.key", help="key file name in --cert-dir (default tls.key)")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=8443, help="HTTPS port (default 8443)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--threads", type=int, default=4,
                        help="ignored, kept for old command lines: gevent workers serve every connection in a "
                             "greenlet of their own")
    parser.add_argument("--config", help="settings YAML file (see docs/webhook.md); default: built-in defaults")
    parser.add_argument("--kubeconfig", help="kubeconfig for the PodGroup/claim caches (default: $KUBECONFIG, ~/.kube/config outside a pod, else the in-cluster service account)")
    parser.add_argument("--metrics-dir", help="directory for the worker processes' metric files "
                                              "(default $PROMETHEUS_MULTIPROC_DIR, else a new temporary directory)")
    parser.add_argument("--access-log", default="-", help="access log file, '-' for stdout (default), 'off' for none")


def run(args: argparse.Namespace) -> int:
    """Check everything that can be checked up front, then run gunicorn until SIGTERM."""
    from volcano_metronome.admission import parse_settings
    from volcano_metronome.commands.files import read_yaml

    if not 1 <= args.port <= 65535:
        raise InvalidInput("--port", args.port, "a port in [1, 65535]")
    if not 1 <= args.workers <= MAX_WORKERS:
        # Each worker is a process that serves thousands of connections (gevent): a few per CPU is plenty.
        raise InvalidInput("--workers", args.workers, f"an integer in [1, {MAX_WORKERS}]")
    if args.threads < 1:
        raise InvalidInput("--threads", args.threads, "a positive integer")
    fields.ip_address(args.host, "--host")
    if args.access_log not in ("-", "off") and pathlib.Path(args.access_log).is_dir():
        raise InvalidInput("--access-log", args.access_log,
                           "a file to append to, '-' for stdout or 'off' (this is a folder)")
    try:
        settings = parse_settings(read_yaml(args.config) if args.config is not None else None)
    except InvalidInput as exc:
        raise MetronomeError(f"{args.config}: {exc}") from None
    cert_file = str(pathlib.Path(args.cert_dir) / args.cert_file)
    key_file = str(pathlib.Path(args.cert_dir) / args.key_file)
    _check_certificate(cert_file, key_file)
    # The workers are gevent's: socket and ssl must be patched before the Kubernetes client (urllib3)
    # takes references to them, which the check below does here, before the workers fork (patching
    # ssl afterwards leaves urllib3 with the unpatched classes: RecursionError in every watch).
    from gevent import monkey

    monkey.patch_socket()
    monkey.patch_ssl()
    if settings.watch.pod_groups or settings.watch.claims:
        from volcano_metronome import kube

        kube.connect(args.kubeconfig)  # fail here, with the reason, rather than in every worker
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _metrics_dir(args.metrics_dir)

    from webhooks.server import ServerConfig, serve

    serve(ServerConfig(cert_file=cert_file, key_file=key_file, settings=settings, host=args.host, port=args.port,
                       workers=args.workers, kubeconfig=args.kubeconfig,
                       access_log=None if args.access_log == "off" else args.access_log))
    return 0


def _check_certificate(cert_file: str, key_file: str) -> None:
    import ssl

    from webhooks.tls import build_context

    try:
        build_context(cert_file, key_file)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise MetronomeError(f"cannot load the serving certificate {cert_file} with key {key_file}: {exc}") from None


def _metrics_dir(flag: str | None) -> str:
    """The multiprocess metrics directory, emptied of a previous run's files."""
    path = flag or os.environ.get("PROMETHEUS_MULTIPROC_DIR") or tempfile.mkdtemp(prefix="metronome-metrics-")
    try:
        os.makedirs(path, exist_ok=True)
        for stale in glob.glob(os.path.join(path, "*.db")):
            os.remove(stale)
    except OSError as exc:
        raise MetronomeError(f"metrics directory {path}: {exc.strerror}") from None
    return path
