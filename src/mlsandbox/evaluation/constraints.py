"""Hard constraints of a scenario: forbidden actions (patterns) and a hard budget.

A forbidden action is refused before it runs; a broken constraint of either kind ends the episode with the
``constraint_violation`` penalty (see :mod:`mlsandbox.evaluation.reward`). A wrong mitigation is not a hard
constraint: it is carried out and counted (the ``wrong_mitigation`` reward component). Patterns are shell-style globs
(:func:`fnmatch.fnmatchcase`): ``action`` on the action type, ``params`` on parameter values (a nested value
is matched as its compact JSON text), all of which must match.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from typing import Any

from mlsandbox.scenario.models import ForbiddenAction, Scenario
from mlsandbox.world.episode import EpisodeState


@dataclass(frozen=True)
class Violation:
    kind: str
    """``forbidden_action`` or ``budget``."""
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _matching(rules: list[ForbiddenAction], action: dict[str, Any]) -> tuple[ForbiddenAction, str] | None:
    """The first rule the action matches and how to name the action, or None."""
    kind = str(action.get("type", ""))
    for rule in rules:
        if not fnmatchcase(kind, rule.action):
            continue
        if all(key in action and fnmatchcase(_text(action[key]), pat) for key, pat in rule.params.items()):
            shown = ", ".join(f"{k}={_text(action[k])}" for k in rule.params)
            return rule, (f"{kind}({shown})" if shown else kind)
    return None


def check_action(scenario: Scenario, action: dict[str, Any]) -> Violation | None:
    """The violation an action would be, or None. ``action`` is the validated action as a dict."""
    found = _matching(scenario.constraints.forbidden_actions, action)
    if found is None:
        return None
    rule, what = found
    return Violation("forbidden_action", f"{what} is forbidden in this scenario: {rule.reason}")


def wrong_mitigation(scenario: Scenario, action: dict[str, Any]) -> str | None:
    """Why the action is a wrong mitigation in this scenario (``constraints.wrong_mitigations``), or None.
    Never shown to the agent: it sees only the outcome."""
    found = _matching(scenario.constraints.wrong_mitigations, action)
    return None if found is None else f"{found[1]}: {found[0].reason}"


def check_budget(state: EpisodeState) -> Violation | None:
    """A hard budget broken (only when the scenario makes the budget a hard constraint)."""
    sc = state.scenario
    if not sc.constraints.budget:
        return None
    used, limit = state.credits_used, sc.budget.credits
    if used > limit:
        return Violation("budget", f"credits used {used:.2f} exceed the hard budget of {limit:g}")
    return None
