"""Baseline agents: random and rule-based. ``make_agent(name)`` builds one by name."""

from __future__ import annotations

from mlsandbox.agents.base import Agent
from mlsandbox.agents.random_agent import RandomAgent
from mlsandbox.agents.rule_agent import RuleAgent

AGENTS = {"rule": RuleAgent, "random": RandomAgent}


def make_agent(name: str, seed: int | None = None) -> Agent:
    try:
        return AGENTS[name](seed=seed)
    except KeyError:
        raise ValueError(f"unknown agent {name!r}; available: {', '.join(AGENTS)}") from None


__all__ = ["AGENTS", "Agent", "RandomAgent", "RuleAgent", "make_agent"]
