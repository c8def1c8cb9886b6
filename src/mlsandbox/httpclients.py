"""HTTP clients that are cheap to create.

A new ``httpx.Client`` builds a TLS context and loads the CA bundle (about 25-30 ms of CPU each time), even
when it only ever speaks plain HTTP to a local service. Probes that want a fresh connection per call (a
health check must see a restarted or killed server as a client would) therefore share one TLS context per
process: :func:`client` is a new client with new connections, minus the CA reload.
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

import httpx

_lock = threading.Lock()
_context: ssl.SSLContext | None = None


def tls_context() -> ssl.SSLContext:
    """The process's default-verifying TLS context, created on first use."""
    global _context
    if _context is None:
        with _lock:
            if _context is None:
                _context = ssl.create_default_context()
    return _context


def client(timeout: float | httpx.Timeout = 5.0, **kwargs: Any) -> httpx.Client:
    """A new client (its own connection pool) that ignores proxy variables and reuses the TLS context."""
    kwargs.setdefault("trust_env", False)
    kwargs.setdefault("verify", tls_context())
    return httpx.Client(timeout=timeout, **kwargs)
