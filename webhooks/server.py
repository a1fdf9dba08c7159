"""gunicorn serving the webhook app over TLS.

* ``gthread`` workers: idle keep-alive connections wait in the worker's poller, not in a thread, so
  the API server's connection pool costs nothing between requests;
* keep-alive 120 s, above the API server's 90 s idle timeout, so the client (not us) closes idle
  connections and never sends on one we are closing;
* request bodies over 3 MiB get 413 (Flask's ``MAX_CONTENT_LENGTH``; gunicorn has no body limit);
* JSON access and error logs on stdout/stderr;
* graceful shutdown on SIGTERM: requests in flight finish (up to ``graceful_timeout``), kept-alive
  connections are closed;
* TLS 1.2+ (1.3 preferred) from :mod:`webhooks.tls`, certificates reloaded from disk on change;
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
from typing import Any, Callable

from flask import Flask
from gunicorn.app.base import BaseApplication

from volcano_metronome.admission import Context, Settings
from webhooks.tls import ReloadingContext

KEEPALIVE_SECONDS = 120
GRACEFUL_TIMEOUT_SECONDS = 25  # below Kubernetes' default 30 s termination grace period
# A worker's threads take turns on the GIL. With Python's default 5 ms turn, a request that released
# the GIL for a TLS read or write can wait up to 5 ms to get it back while another thread computes:
# that alone would be the whole latency budget. 0.5 ms turns bound that wait.
GIL_SWITCH_INTERVAL_SECONDS = 0.0005

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
    threads: int = 4
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
        "worker_class": "gthread",
        "threads": config.threads,
        "worker_connections": 1000,
        "keepalive": KEEPALIVE_SECONDS,
        "timeout": 30,
        "graceful_timeout": GRACEFUL_TIMEOUT_SECONDS,
        "certfile": config.cert_file,
        "keyfile": config.key_file,
        "ssl_context": ssl_context,
        "post_worker_init": post_worker_init,
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


def ssl_context(conf: Any, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    """gunicorn hook, called for every new connection: the current (possibly reloaded) context."""
    global _tls
    if _tls is None or (_tls.cert_file, _tls.key_file) != (conf.certfile, conf.keyfile):
        _tls = ReloadingContext(conf.certfile, conf.keyfile, on_reload=_reloaded)
    return _tls.context()


def post_worker_init(worker: Any) -> None:
    """gunicorn hook in each worker after it started: shorter GIL turns (see GIL_SWITCH_INTERVAL_SECONDS)."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_SECONDS)


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
    WebhookApplication(config).run()
