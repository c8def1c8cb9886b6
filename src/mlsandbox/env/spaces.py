"""What every MLSandbox env shares (in-process and remote): spaces, observation encoding, reset options.

Observation: a ``Dict`` space with a few numbers for RL code (``step``, ``ok``, ``credits_left``) and
``text``, the whole structured observation as compact JSON (decode it with :func:`decode_observation`).
Action: a ``Text`` space of JSON strings (``step`` also takes a dict or an action model).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from gymnasium import spaces

MAX_TEXT = 65536
MAX_ACTION_TEXT = 8192
MAX_STEPS_BOUND = 10_000
CREDITS_BOUND = 1e9
CHARSET = "".join(chr(c) for c in range(32, 127))  # JSON with ensure_ascii is printable ASCII only
_TRUNC_KEEP = MAX_TEXT - 1024


def action_space() -> spaces.Text:
    return spaces.Text(max_length=MAX_ACTION_TEXT, min_length=1, charset=CHARSET)


def observation_space() -> spaces.Dict:
    return spaces.Dict(
        {
            "step": spaces.Box(0, MAX_STEPS_BOUND, shape=(), dtype=np.int64),
            "ok": spaces.Discrete(2),
            "credits_left": spaces.Box(0.0, CREDITS_BOUND, shape=(), dtype=np.float64),
            "text": spaces.Text(max_length=MAX_TEXT, min_length=2, charset=CHARSET),
        }
    )


def encode_text(observation: dict[str, Any]) -> str:
    """Compact, stable JSON; an oversized result is replaced by a truncated preview (marked)."""
    text = json.dumps(observation, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    if len(text) <= MAX_TEXT:
        return text
    preview = json.dumps(observation.get("result"), sort_keys=True, ensure_ascii=True)[:_TRUNC_KEEP]
    clipped = {**observation, "result": {"truncated": True, "original_chars": len(text), "preview": preview}}
    return json.dumps(clipped, sort_keys=True, ensure_ascii=True, separators=(",", ":"))


def encode_observation(obs: dict[str, Any]) -> dict[str, Any]:
    """A structured observation as a member of :func:`observation_space`."""
    budget = obs.get("budget") or {}
    left = max(0.0, float(budget.get("credits", 0.0)) - float(budget.get("credits_used", 0.0)))
    return {
        "step": np.array(min(obs["step"], MAX_STEPS_BOUND), dtype=np.int64),
        "ok": int(bool(obs["ok"])),
        "credits_left": np.array(min(left, CREDITS_BOUND), dtype=np.float64),
        "text": encode_text(obs),
    }


def decode_observation(obs: dict[str, Any] | str) -> dict[str, Any]:
    """The structured observation from an env observation (or its ``text``)."""
    text = obs["text"] if isinstance(obs, dict) else obs
    return json.loads(text)


RENDER_MODES = ("ansi",)
RESET_OPTIONS = ("scenario", "agent")
"""``agent``: a name for the agent playing the episode, recorded in its audit log (the console filters on it)."""


def check_render_mode(render_mode: str | None) -> str | None:
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode must be one of {list(RENDER_MODES)}, got {render_mode!r}")
    return render_mode


def scenario_option(options: dict[str, Any] | None) -> Any | None:
    """The ``scenario`` reset option (None when absent); ValueError for any other option."""
    options = options or {}
    unknown = set(options) - set(RESET_OPTIONS)
    if unknown:
        raise ValueError(f"unknown reset options {sorted(unknown)}; supported: {list(RESET_OPTIONS)}")
    return options.get("scenario")


def agent_option(options: dict[str, Any] | None) -> str | None:
    """The ``agent`` reset option (None when absent)."""
    agent = (options or {}).get("agent")
    return None if agent is None else str(agent)


def episode_seed(seed: int | None, rng: np.random.Generator) -> int:
    """The episode's seed: the given one, else drawn from the env's seeded generator (reproducible)."""
    return seed if seed is not None else int(rng.integers(0, 2**31 - 1))
