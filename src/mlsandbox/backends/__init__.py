"""Backends: where the sandbox's services run. ``local`` (child processes) is the embedded default;
``kube`` runs them on a Kubernetes cluster (``make sandbox-up``); more are plug-ins of the
``mlsandbox.backends`` entry-point group (:mod:`mlsandbox.backends.registry`)."""

from __future__ import annotations

from mlsandbox.backends.registry import DEFAULT_BACKEND, backend_names, get_backend

__all__ = ["DEFAULT_BACKEND", "backend_names", "get_backend"]
