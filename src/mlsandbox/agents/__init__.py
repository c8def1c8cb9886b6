"""Agents: baselines (random, rule-based), the reference solution, degenerate strategies, an LLM adapter.

``make_agent(name)`` builds one by name (see :data:`AGENTS`), an off-path probe as ``probe:NAME``
(:mod:`mlsandbox.agents.probes`) or from ``module:attribute``. Agent modules
are imported when an agent is made (the command line stays quick to start).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlsandbox.agents.base import Agent
    from mlsandbox.agents.random_agent import RandomAgent
    from mlsandbox.agents.rule_agent import RuleAgent
    from mlsandbox.agents.scripted import ReferenceAgent, ScriptedAgent

AGENTS: dict[str, str] = {
    "rule": "mlsandbox.agents.rule_agent:RuleAgent",
    "random": "mlsandbox.agents.random_agent:RandomAgent",
    "code": "mlsandbox.agents.code_agent:CodeAgent",
    "reference": "mlsandbox.agents.scripted:ReferenceAgent",
    "kind_reference": "mlsandbox.agents.kind_reference:KindReferenceAgent",
    "llm": "mlsandbox.agents.llm:from_env",
    "do-nothing": "mlsandbox.agents.degenerate:DoNothingAgent",
    "repeat-cheap": "mlsandbox.agents.degenerate:RepeatCheapAgent",
    "spam-jobs": "mlsandbox.agents.degenerate:SpamJobsAgent",
    "deploy-unevaluated": "mlsandbox.agents.degenerate:DeployUnevaluatedAgent",
}
"""Agent factories by name (``module:attribute`` called with ``seed=``); ``llm`` reads its endpoint from
``MLSANDBOX_LLM_*`` environment variables."""

_LAZY = {
    "Agent": "mlsandbox.agents.base",
    "RandomAgent": "mlsandbox.agents.random_agent",
    "RuleAgent": "mlsandbox.agents.rule_agent",
    "ReferenceAgent": "mlsandbox.agents.scripted",
    "ScriptedAgent": "mlsandbox.agents.scripted",
}


def _load(ref: str, name: str) -> Any:
    module, _, attr = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"agent {name!r} cannot be loaded from {ref!r}: {e}") from None


def make_agent(name: str, seed: int | None = None) -> Agent:
    if name.startswith("probe:"):  # an off-path probe (mlsandbox.agents.probes)
        from mlsandbox.agents.probes import make_probe

        try:
            return make_probe(name, seed=seed)
        except ValueError as e:
            raise ValueError(str(e)) from None
    if ":" in name:
        return _load(name, name)(seed=seed)
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; available: {', '.join(AGENTS)} or module:attribute")
    return _load(AGENTS[name], name)(seed=seed)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AGENTS", "Agent", "RandomAgent", "ReferenceAgent", "RuleAgent", "ScriptedAgent", "make_agent"]
