"""mlsandbox as an OpenEnv environment (``pip install 'mlsandbox[openenv]'``).

- :func:`create_openenv_app` / :func:`serve`: the server, built on ``openenv-core``'s own app (HTTP routes,
  WebSocket sessions with a concurrency limit, MCP), see :mod:`.server`;
- :class:`MLSandboxEnvironment`: the ``Environment`` each session holds, see :mod:`.environment`;
- :class:`MLSandboxAction`, :class:`MLSandboxObservation`, :class:`MLSandboxState`: the wire types;
- :class:`MLSandboxClient`: the typed ``EnvClient``.

Names load on first use, so ``import mlsandbox.integrations.openenv`` is quick and only touching one of
them needs the extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlsandbox.integrations.openenv.client import MLSandboxClient
    from mlsandbox.integrations.openenv.environment import MLSandboxEnvironment
    from mlsandbox.integrations.openenv.models import MLSandboxAction, MLSandboxObservation, MLSandboxState
    from mlsandbox.integrations.openenv.server import create_openenv_app, serve

_EXPORTS = {
    "MLSandboxAction": "models",
    "MLSandboxObservation": "models",
    "MLSandboxState": "models",
    "MLSandboxEnvironment": "environment",
    "MLSandboxClient": "client",
    "create_openenv_app": "server",
    "serve": "server",
}

__all__ = [
    "MLSandboxAction",
    "MLSandboxClient",
    "MLSandboxEnvironment",
    "MLSandboxObservation",
    "MLSandboxState",
    "create_openenv_app",
    "serve",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
