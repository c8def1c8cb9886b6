"""Backends: where the sandbox's services run. ``local`` (child processes) is the embedded default;
``kube`` runs them on a Kubernetes cluster (``make sandbox-up``)."""

from __future__ import annotations

from mlsandbox.backends.protocols import Backend

BACKENDS = ("local", "kube")


def get_backend(kind: str, name: str) -> Backend:
    """The backend ``kind`` for the sandbox called ``name`` (nothing is started here)."""
    if kind == "local":
        from mlsandbox.backends.local.backend import LocalBackend

        return LocalBackend(name)
    if kind == "kube":
        from mlsandbox.backends.kube.backend import KubeBackend

        return KubeBackend(name)
    raise ValueError(f"unknown backend {kind!r}; available: {', '.join(BACKENDS)}")
