"""Backends: where the sandbox's services run. ``local`` (child processes) is the embedded default."""

from __future__ import annotations

from mlsandbox.backends.base import Backend

BACKENDS = ("local",)


def get_backend(kind: str, name: str) -> Backend:
    """The backend ``kind`` for the sandbox called ``name`` (nothing is started here)."""
    if kind == "local":
        from mlsandbox.backends.local.backend import LocalBackend

        return LocalBackend(name)
    if kind == "kube":
        raise NotImplementedError("the kube backend is not built yet; use --backend local")
    raise ValueError(f"unknown backend {kind!r}; available: {', '.join(BACKENDS)}")
