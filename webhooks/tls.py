"""TLS for the webhook server: TLS 1.2 and up (1.3 negotiated whenever the client offers it), and
certificates picked up from disk without a restart.

The worker asks for a context on every new connection (``WebhookWorker._handshake``, through the server's
``tls_context``; gunicorn itself is given no TLS settings); :class:`ReloadingContext`
answers from a cached context and rebuilds it when the certificate or key file changes (size, mtime
or inode: a Kubernetes secret volume swaps a symlink, cert-manager rewrites files). A pair that does
not load (half-written, or the key of the previous certificate) is not used: the previous context
keeps serving and the pair is tried again once either file changes again, so a rotation never
drops a connection. Established connections keep the certificate they were opened with.
"""

from __future__ import annotations

import os
import ssl
import threading
from typing import Callable

# TLS 1.2 suites: forward secret AEAD only (TLS 1.3 suites are all fine and configured by OpenSSL).
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"

Signature = tuple[tuple[int, int, int], tuple[int, int, int]]


def build_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context for the certificate chain and key in these PEM files."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    context.set_alpn_protocols(["http/1.1"])
    context.load_cert_chain(certfile=cert_file, keyfile=key_file)
    return context


class ReloadingContext:
    """The current SSLContext for a certificate/key file pair, rebuilt when the files change."""

    def __init__(self, cert_file: str, key_file: str,
                 on_reload: Callable[[bool, str], None] = lambda ok, detail: None) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._on_reload = on_reload
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._loaded: Signature | None = None
        self._failed: Signature | None = None

    def context(self) -> ssl.SSLContext:
        """The context to wrap the next connection with (raises only if no pair has ever loaded)."""
        signature = self._signature()
        context = self._context
        if context is not None and (signature is None or signature in (self._loaded, self._failed)):
            return context
        with self._lock:
            if self._context is not None and (signature is None or signature in (self._loaded, self._failed)):
                return self._context
            try:
                fresh = build_context(self.cert_file, self.key_file)
            except (OSError, ssl.SSLError, ValueError) as exc:
                self._failed = signature
                if self._context is None:
                    raise
                self._on_reload(False, f"kept the previous certificate: {exc}")
                return self._context
            # Read the signature again: the files may have changed while we loaded them.
            self._loaded = signature if signature == self._signature() else None
            first = self._context is None
            self._context = fresh
            self._failed = None
            if not first:
                self._on_reload(True, f"loaded {self.cert_file}")
            return fresh

    def _signature(self) -> Signature | None:
        try:
            cert, key = os.stat(self.cert_file), os.stat(self.key_file)
        except OSError:
            return None  # mid-swap: keep serving what we have
        return (cert.st_ino, cert.st_size, cert.st_mtime_ns), (key.st_ino, key.st_size, key.st_mtime_ns)
