"""Agent gateway: action models, validation, dispatch to the backend, observations, audit log.

Names are loaded on first use, so that importing a light module of the package (the tool schemas for
the command line, say) does not pull in the dispatcher's data and scikit-learn stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlsandbox.gateway.actions import ACTION_MODELS, ACTION_TYPES, ActionModel, action_catalog
    from mlsandbox.gateway.context import EpisodeContext
    from mlsandbox.gateway.dispatcher import Gateway, parse_action
    from mlsandbox.gateway.observations import StepResult

_EXPORTS = {
    "ACTION_MODELS": "actions",
    "ACTION_TYPES": "actions",
    "ActionModel": "actions",
    "action_catalog": "actions",
    "EpisodeContext": "context",
    "Gateway": "dispatcher",
    "parse_action": "dispatcher",
    "StepResult": "observations",
}

__all__ = [
    "ACTION_MODELS",
    "ACTION_TYPES",
    "ActionModel",
    "EpisodeContext",
    "Gateway",
    "StepResult",
    "action_catalog",
    "parse_action",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
