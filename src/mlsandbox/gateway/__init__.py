"""Agent gateway: action models, validation, dispatch to the backend, observations, audit log."""

from mlsandbox.gateway.actions import ACTION_MODELS, ACTION_TYPES, Action, action_catalog
from mlsandbox.gateway.dispatcher import Gateway, parse_action
from mlsandbox.gateway.observations import StepResult

__all__ = [
    "ACTION_MODELS",
    "ACTION_TYPES",
    "Action",
    "Gateway",
    "StepResult",
    "action_catalog",
    "parse_action",
]
