"""gunicorn serving the webhook app over TLS.

* gevent workers (:mod:`webhooks.worker`): every connection is a greenlet, so idle keep-alive
  connections and slow or silent clients cost no thread, and the handshake, the headers, the body
  and every write have deadlines;
* keep-alive 120 s, above the API server's 90 s idle timeout, so the client (not us) closes idle
  connections and never sends on one we are closing;
* request bodies over 3 MiB get 413 (``app.MAX_BODY_BYTES``, read by the app's own body reader on
  ``/mutate``; Flask's ``MAX_CONTENT_LENGTH`` elsewhere; gunicorn has no body limit), then a lingering
  close (``worker._linger``) so that the client reads it;
* JSON access and error logs on stdout/stderr;
* graceful shutdown on SIGTERM: requests in flight finish (up to ``graceful_timeout``), kept-alive
  connections are closed;
* TLS 1.2+ (1.3 preferred) from :mod:`webhooks.tls`, done by the worker per connection, so
  certificates reloaded from disk on change are served at once;
* prometheus multiprocess mode (see :mod:`webhooks.metrics`).

The app is built in each worker after the fork (no preload): informer threads and metric files
belong to one process.
"""

from __future__ import annotations

import logging
import os
import ssl
import sys
from dataclasses import dataclass
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from volcano_metronome.admission import Context, Settings
from webhooks.tls import ReloadingContext

KEEPALIVE_SECONDS = 120
GRACEFUL_TIMEOUT_SECONDS = 25  # below Kubernetes' default 30 s termination grace period
WORKER_CONNECTIONS = 1000  # greenlets (connections) per worker

_tls: ReloadingContext | None = None


@dataclass(frozen=True)
class ServerConfig:
    """How to serve: address, process model, certificate files, admission settings."""

    cert_file: str
    key_file: str
    settings: Settings = Settings()
    host: str = "0.0.0.0"
    port: int = 8443
    workers: int = 2
    kubeconfig: str | None = None
    access_log: str | None = "-"  # a path, "-" for stdout, None for none

    @property
    def bind(self) -> str:
        """The gunicorn bind address (IPv6 hosts bracketed)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def gunicorn_options(config: ServerConfig) -> dict[str, Any]:
    """The gunicorn settings the server runs with."""
    from webhooks.access_log import JsonLogger

    options: dict[str, Any] = {
        "bind": [config.bind],
        "workers": config.workers,
        "worker_class": "webhooks.worker.WebhookWorker",
        "worker_connections": WORKER_CONNECTIONS,
        "keepalive": KEEPALIVE_SECONDS,
        "timeout": 30,
        "graceful_timeout": GRACEFUL_TIMEOUT_SECONDS,
        # No certfile/keyfile: the worker does TLS itself, with the current context per connection.
        "child_exit": child_exit,
        "logger_class": JsonLogger,
        "accesslog": config.access_log,
        "errorlog": "-",
        "loglevel": "info",
        "proc_name": "volcano-metronome-webhook",
        "control_socket_disable": True,  # no socket file in $HOME: the root filesystem is read-only in the chart
        "preload_app": False,
    }
    if os.path.isdir("/dev/shm"):
        options["worker_tmp_dir"] = "/dev/shm"  # heartbeat files off the (read-only) root filesystem
    return options


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """The context of a new connection: the current (possibly reloaded) one for these files."""
    global _tls
    if _tls is None or (_tls.cert_file, _tls.key_file) != (cert_file, key_file):
        _tls = ReloadingContext(cert_file, key_file, on_reload=_reloaded)
    return _tls.context()


def child_exit(server: Any, worker: Any) -> None:
    """gunicorn hook in the arbiter: metrics bookkeeping for a worker that ended."""
    from webhooks.metrics import worker_exited

    worker_exited(worker.pid)


def _reloaded(ok: bool, detail: str) -> None:
    from webhooks.metrics import CERT_RELOADS

    CERT_RELOADS.labels("loaded" if ok else "kept_previous").inc()
    logging.getLogger("volcano_metronome.webhook").log(logging.INFO if ok else logging.WARNING,
                                                       "serving certificate: %s", detail)


def worker_app(config: ServerConfig) -> Flask:
    """The app of one worker: its caches started, its logging set up."""
    from volcano_metronome.catalog import builtin
    from webhooks.access_log import JsonFormatter
    from webhooks.app import create_app
    from webhooks.cache import Caches

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("volcano_metronome")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    caches = Caches.connect(config.settings, config.kubeconfig)
    caches.start()
    context = Context(settings=config.settings, catalog=builtin(), lookups=caches.lookups())
    return create_app(lambda: context, caches.synced)


class WebhookApplication(BaseApplication):  # type: ignore[misc]  # gunicorn ships no type hints
    """gunicorn configured from a :class:`ServerConfig` instead of a command line."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        super().__init__()

    def load_config(self) -> None:
        for key, value in gunicorn_options(self.config).items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return worker_app(self.config)


def serve(config: ServerConfig) -> None:
    """Run gunicorn in this process until it is stopped (SIGTERM / SIGINT)."""
    from webhooks.worker import WebhookWorker

    # Class attributes set before the fork: every worker serves these files.
    WebhookWorker.context_source = staticmethod(tls_context)
    WebhookWorker.cert_file, WebhookWorker.key_file = config.cert_file, config.key_file
    WebhookApplication(config).run()
