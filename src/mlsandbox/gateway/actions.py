"""The agent's actions: pydantic models, one per action type, discriminated by ``type``, grouped in packs.

:class:`ActionModel` is the base of every action model (a plug-in pack's too). The catalog of this
process (built-in packs, then installed plug-ins) is built on first use: :func:`action_catalog`, and the
``ACTION_MODELS`` / ``ACTION_TYPES`` / ``ACTION_ADAPTER`` attributes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class ActionModel(BaseModel):
    """Base of every action model; its docstring is what the agent reads about the action."""

    model_config = ConfigDict(extra="forbid")


def action_catalog() -> list[dict[str, Any]]:
    """Every action of the catalog (all packs) with its description and the JSON Schema of its parameters."""
    from mlsandbox.gateway.registry import get_catalog

    return get_catalog().describe()


def __getattr__(name: str) -> Any:
    # The catalog depends on the installed packs: computed on first use, not at import.
    from mlsandbox.gateway.registry import get_catalog

    if name == "ACTION_MODELS":
        return get_catalog().models
    if name == "ACTION_TYPES":
        return get_catalog().types
    if name == "ACTION_ADAPTER":
        return get_catalog().adapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
