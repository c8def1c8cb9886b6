"""The spaces and the observation encoding shared by every MLSandbox env (in-process and remote).

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
