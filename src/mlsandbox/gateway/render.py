"""Observations as text for language models and people: concise, stable, bounded.

:func:`render_observation` turns the gateway's structured observation into a few lines of plain text:

```
[step 3] check_data_quality: ok
budget: credits used 0.42 of 100 | steps left 17
result:
  dataset: raw/customers.csv
  runs (2):
    run_id   status    metrics
    ...
```

- Concise: lists of records become aligned tables, scalars ``key: value``, floats with 6 significant digits.
- Stable: the same observation always gives the same text (keys in the order the gateway emits them, which
  JSON round trips over HTTP or MCP preserve); only printable ASCII and newlines are used.
- Bounded: long tables keep their first rows (``... N more rows``) and the whole text stops at ``max_chars``
  with a marker naming what was cut; :func:`estimate_tokens` gives its approximate size in tokens.

:class:`TextObservation` is a Gymnasium observation wrapper exposing the rendered text as the observation.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium import spaces

DEFAULT_MAX_CHARS = 6000
DEFAULT_MAX_ROWS = 40
TEXT_CHARSET = "\n" + "".join(chr(c) for c in range(32, 127))
"""Every character :func:`render_observation` can produce."""

_INDENT = "  "
_MAX_CELL = 60


@dataclass(frozen=True)
class RenderedObservation:
    text: str
    truncated: bool
    chars: int
    tokens: int


def estimate_tokens(text: str) -> int:
    """Approximate token count for common BPE tokenizers (about 4 characters per token on this text)."""
    return math.ceil(len(text) / 4)


def render_observation(
    observation: dict[str, Any],
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> str:
    """The observation as concise text of at most ``max_chars`` characters."""
    return render(observation, max_chars=max_chars, max_rows=max_rows).text


def render(
    observation: dict[str, Any],
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> RenderedObservation:
    """The observation as text, with whether it was truncated and its token estimate."""
    if max_chars < 80:
        raise ValueError("max_chars must be at least 80")
    lines = _observation_lines(observation, max_rows)
    text = "\n".join(lines)
    truncated = False
    if len(text) > max_chars:
        text, truncated = _truncate(lines, max_chars), True
    return RenderedObservation(text=text, truncated=truncated, chars=len(text), tokens=estimate_tokens(text))


# ------------------------------------------------------------------------------------------ layout


def _observation_lines(obs: dict[str, Any], max_rows: int) -> list[str]:
    step = obs.get("step")
    action = obs.get("action") or ("reset" if step == 0 else "action")
    lines: list[str] = []
    if obs.get("ok"):
        lines.append(f"[step {step}] {action}: ok")
    else:
        err = obs.get("error") or {}
        lines.append(f"[step {step}] {action}: ERROR {_text(err.get('code'))}: {_text(err.get('message'))}")
        details = err.get("details")
        if isinstance(details, list):
            for d in details[:max_rows]:
                if isinstance(d, dict) and "field" in d:
                    lines.append(f"{_INDENT}- {_text(d.get('field'))}: {_text(d.get('message'))}")
                else:
                    lines.append(f"{_INDENT}- {_scalar(d)}")
        elif details is not None:
            lines.append(f"{_INDENT}details: {_scalar(details)}")
    budget = obs.get("budget")
    if isinstance(budget, dict):
        lines.append(
            f"budget: credits used {_num(budget.get('credits_used', 0))} of {_num(budget.get('credits', 0))}"
            f" | steps left {budget.get('steps_left')}"
            + (f" | seconds left {_num(budget['seconds_left'])}" if "seconds_left" in budget else "")
        )
    result = obs.get("result")
    if isinstance(result, dict) and result:
        lines.append("result:")
        lines.extend(_mapping(result, 1, max_rows))
    elif result not in (None, {}):
        lines.append(f"result: {_scalar(result)}")
    return lines


def _mapping(d: dict[str, Any], depth: int, max_rows: int) -> list[str]:
    pad = _INDENT * depth
    out: list[str] = []
    for key, value in d.items():
        k = _text(key)
        if isinstance(value, dict):
            if not value:
                out.append(f"{pad}{k}: {{}}")
            elif all(not isinstance(v, dict | list) for v in value.values()) and len(value) <= 6:
                out.append(
                    f"{pad}{k}: " + ", ".join(f"{_text(kk)}={_scalar(vv)}" for kk, vv in value.items())
                )
            elif _is_record_map(value):
                rows = [{"name": name, **rec} for name, rec in value.items()]
                out.extend(_sequence(k, rows, depth, max_rows))
            else:
                out.append(f"{pad}{k}:")
                out.extend(_mapping(value, depth + 1, max_rows))
        elif isinstance(value, list):
            out.extend(_sequence(k, value, depth, max_rows))
        elif isinstance(value, str) and "\n" in value:
            out.append(f"{pad}{k}: |")
            out.extend(f"{pad}{_INDENT}{_text(line)}" for line in value.strip("\n").split("\n"))
        else:
            out.append(f"{pad}{k}: {_scalar(value)}")
    return out


def _is_record_map(d: dict[str, Any]) -> bool:
    """A map of names to flat records (e.g. per-column profiles): shown as one table, a row per name."""
    return (
        len(d) >= 2
        and all(isinstance(v, dict) and v for v in d.values())
        and all(not isinstance(x, dict) for v in d.values() for x in v.values())
        and "name" not in {key for v in d.values() for key in v}
    )


def _sequence(key: str, items: list[Any], depth: int, max_rows: int) -> list[str]:
    pad = _INDENT * depth
    if not items:
        return [f"{pad}{key}: (none)"]
    if all(not isinstance(x, dict | list) for x in items):
        shown = ", ".join(_scalar(x) for x in items[:max_rows])
        more = f", ... {len(items) - max_rows} more" if len(items) > max_rows else ""
        return [f"{pad}{key}: [{shown}{more}]"]
    out = [f"{pad}{key} ({len(items)}):"]
    if all(isinstance(x, dict) for x in items):
        out.extend(_table(items[:max_rows], depth + 1))
    else:
        for x in items[:max_rows]:
            out.append(f"{pad}{_INDENT}- {_scalar(x)}")
    if len(items) > max_rows:
        out.append(f"{pad}{_INDENT}... {len(items) - max_rows} more rows")
    return out


def _table(rows: list[dict[str, Any]], depth: int) -> list[str]:
    pad = _INDENT * depth
    columns: list[str] = []
    for row in rows:
        for col in row:
            if col not in columns:
                columns.append(col)
    cells = [[_cell(row.get(col)) for col in columns] for row in rows]
    header = [_text(c) for c in columns]
    widths = [max(len(header[i]), *(len(r[i]) for r in cells)) for i in range(len(columns))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [pad + fmt.format(*header).rstrip()]
    out.extend(pad + fmt.format(*r).rstrip() for r in cells)
    return out


# ------------------------------------------------------------------------------------------ values


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        text = ", ".join(f"{_text(k)}={_scalar(v)}" for k, v in value.items()) or "{}"
    elif isinstance(value, list):
        text = "[" + ", ".join(_inline(x) for x in value) + "]"
    else:
        text = _scalar(value)
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 3] + "..."


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(_scalar(v) for v in value.values())
    return _scalar(value)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _num(value)
    if isinstance(value, str):
        return _text(value)
    return _text(json.dumps(value, sort_keys=True, default=str, separators=(",", ":")))


def _num(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _text(str(value))
    if isinstance(value, int) or (math.isfinite(value) and value == int(value) and abs(value) < 1e15):
        return str(int(value))
    return f"{value:.6g}"


def _text(value: Any) -> str:
    """Printable ASCII on one line: other characters escaped, newlines and tabs shown as \\n and \\t."""
    s = str(value)
    if s.isascii() and s.isprintable():
        return s
    s = s.replace("\n", "\\n").replace("\t", "\\t")
    s = s.encode("ascii", "backslashreplace").decode("ascii")
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in s)


def _truncate(lines: list[str], max_chars: int) -> str:
    total = sum(len(line) + 1 for line in lines) - 1
    kept: list[str] = []
    used = 0
    marker_room = 64
    for line in lines:
        cost = len(line) + (1 if kept else 0)
        if used + cost > max_chars - marker_room:
            break
        kept.append(line)
        used += cost
    if not kept:  # a single enormous first line: cut inside it
        kept = [lines[0][: max_chars - marker_room]]
        used = len(kept[0])
    marker = f"... [truncated: {len(lines) - len(kept)} more lines, {total - used} more chars]"
    return "\n".join([*kept, marker])[:max_chars]


# ------------------------------------------------------------------------------------------ gymnasium


class TextObservation(gym.ObservationWrapper[str, Any, Any]):
    """Exposes the rendered text of each observation (from ``obs["text"]``, the env's JSON) as the observation.

    Works on ``MLSandboxEnv`` and ``RemoteMLSandboxEnv`` alike. The full structured observation stays
    available through the wrapped env; the token estimate of each rendering is added to ``info`` as
    ``observation_tokens`` (``observation_truncated`` when it was cut).
    """

    def __init__(
        self, env: gym.Env[Any, Any], *, max_chars: int = DEFAULT_MAX_CHARS, max_rows: int = DEFAULT_MAX_ROWS
    ) -> None:
        super().__init__(env)
        self.max_chars = max_chars
        self.max_rows = max_rows
        self.observation_space = spaces.Text(max_length=max_chars, min_length=1, charset=TEXT_CHARSET)
        self._last: RenderedObservation | None = None

    def observation(self, observation: Any) -> str:
        structured = _structured(observation)
        self._last = render(structured, max_chars=self.max_chars, max_rows=self.max_rows)
        return self._last.text

    def reset(self, **kwargs: Any) -> tuple[str, dict[str, Any]]:
        obs, info = super().reset(**kwargs)
        return obs, self._annotate(info)

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, float(reward), terminated, truncated, self._annotate(info)

    def _annotate(self, info: dict[str, Any]) -> dict[str, Any]:
        if self._last is None:
            return info
        info = dict(info)
        info["observation_tokens"] = self._last.tokens
        if self._last.truncated:
            info["observation_truncated"] = True
        return info


def _structured(observation: Any) -> dict[str, Any]:
    if isinstance(observation, dict) and "text" in observation:
        return json.loads(observation["text"])
    if isinstance(observation, str):
        return json.loads(observation)
    if isinstance(observation, dict):
        return observation
    raise TypeError(f"cannot render an observation of type {type(observation).__name__}")


__all__ = [
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_ROWS",
    "TEXT_CHARSET",
    "RenderedObservation",
    "TextObservation",
    "estimate_tokens",
    "render",
    "render_observation",
]
