"""mlsandbox inside today's agent-training stacks, each behind an optional extra.

============================  ===========================  ==============================================
module                        extra                        what it gives
============================  ===========================  ==============================================
``integrations.openenv``      ``mlsandbox[openenv]``       an OpenEnv server (HTTP, WebSocket sessions,
                                                           MCP) and its typed client
``integrations.trl``          ``mlsandbox[trl]``           a class for ``GRPOTrainer(environment_factory=)``
``integrations.rllib``        ``mlsandbox[ray]``           the env under RLlib's API stack, EnvRunners on
                                                           a shared sandbox, one Sandbox each on
                                                           ``kube``, or in-process envs on ``sim``
``integrations.pettingzoo``   ``mlsandbox[pettingzoo]``    a multi-agent parallel env: roles in one episode
``integrations.team``         (none)                       the roles and how a team's actions become steps
============================  ===========================  ==============================================

Every integration builds an episode the way the Gymnasium env does, and takes ``backend=`` (``local``,
``kube``, ``sim``, or any backend :func:`mlsandbox.backends.get_backend` knows) and ``sandbox=``; every
episode is labelled with its interface in the audit log (``env``; ``openenv`` for the OpenEnv server). Importing this
package imports none of the optional libraries; a module whose extra is missing raises
:class:`MissingExtra` naming the ``pip install`` that adds it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from mlsandbox.errors import MLSandboxError


class MissingExtra(MLSandboxError, ImportError):
    """An integration's optional dependency is not installed."""


def require(module: str, extra: str) -> ModuleType:
    """``import module``, or :class:`MissingExtra` saying which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtra(
            f"{module!r} is not importable ({e}): install the {extra} extra, pip install 'mlsandbox[{extra}]'"
        ) from e


__all__ = ["MissingExtra", "require"]
