"""Trajectories: an episode as JSONL, usable as an offline-RL or fine-tuning dataset, and its replay.

One file per episode, one JSON object per line:

- ``{"kind": "episode", "format": 1, "scenario", "seed", "agent", "episode_id", "observation", "info"}``
  -- the first observation (after reset) and the reset info;
- ``{"kind": "step", "step", "observation", "action", "reward", "reward_components", "reward_vector",
  "next_observation", "terminated", "truncated", "info"}`` -- one per step: the observation the action was
  chosen on, the action, the scalar reward, its named components and per-objective vector, what followed;
- ``{"kind": "end", "total_reward", "success", "grade", "metrics", "steps", "wall_s"}``.

Observations are the structured observations the agent saw (never hidden ground truth); ``info`` is the
gateway's step info, which at the last step includes the grade (hidden ground truth: keep it out of what
an agent is trained to read as input). :func:`replay_lines` re-renders an episode step by step with the
text renderer the LLM adapter uses, the files an agent wrote in its workspace in full below the action
that wrote them, and at the end the workspace's files and the scripts run (with their final state).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlsandbox.agents.runner import EpisodeResult
from mlsandbox.evaluation.reward import objective_vector
from mlsandbox.gateway.packs.workspace.activity import WorkspaceActivity
from mlsandbox.gateway.render import render_observation

FORMAT_VERSION = 1


def _dump(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=False, default=str, separators=(",", ":"))


def trajectory_records(res: EpisodeResult) -> Iterator[dict[str, Any]]:
    yield {
        "kind": "episode",
        "format": FORMAT_VERSION,
        "scenario": res.scenario,
        "seed": res.seed,
        "agent": res.agent,
        "episode_id": res.episode_id,
        "observation": res.first_observation,
        "info": res.reset_info,
    }
    for s in res.steps:
        yield {
            "kind": "step",
            "step": s.step,
            "observation": s.previous,
            "action": s.action,
            "reward": s.reward,
            "reward_components": s.components,
            "reward_vector": s.info.get("reward_vector") or objective_vector(s.components),
            "next_observation": s.observation,
            "terminated": s.terminated,
            "truncated": s.truncated,
            "info": s.info,
        }
    yield {
        "kind": "end",
        "total_reward": res.total_reward,
        "success": res.success,
        "grade": res.grade,
        "metrics": res.final_info.get("metrics"),
        "steps": len(res.steps),
        "wall_s": round(res.wall_s, 3),
    }


def write_trajectory(res: EpisodeResult, path: Path) -> Path:
    """Write an episode to ``path`` (JSONL); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for rec in trajectory_records(res):
            f.write(_dump(rec) + "\n")
    return path


def read_trajectory(path: Path) -> list[dict[str, Any]]:
    """The records of a trajectory file; ValueError naming the line when it is not one."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such trajectory file") from None
    return parse_trajectory(text, str(path))


def parse_trajectory(text: str, source: str = "<trajectory>") -> list[dict[str, Any]]:
    """The records of a trajectory's text; ValueError naming ``source`` and the line when it is not one."""
    records: list[dict[str, Any]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{source}:{n}: not JSON: {e.msg}") from None
        if not isinstance(rec, dict) or rec.get("kind") not in ("episode", "step", "end"):
            raise ValueError(f"{source}:{n}: not a trajectory record (no kind episode/step/end)")
        records.append(rec)
    if not records or records[0]["kind"] != "episode":
        raise ValueError(f"{source}: a trajectory starts with an 'episode' record")
    return records


_FILE_ACTIONS = {"write_file": "content", "run_python": "code"}


def _action_text(action: Any, max_chars: int = 2000) -> str:
    """The action on one line; a file's text (``write_file``'s content, ``run_python``'s code) below it,
    indented, at most ``max_chars`` characters of it."""
    key = _FILE_ACTIONS.get(str(action.get("type"))) if isinstance(action, dict) else None
    if isinstance(action, dict) and key is not None and isinstance(action.get(key), str):
        text = action[key]
        head = _action_text({k: v for k, v in action.items() if k != key}, max_chars)
        body = text[:max_chars] + (
            f"\n... ({len(text) - max_chars} more characters)" if len(text) > max_chars else ""
        )
        return f"{head} ({len(text.encode())} bytes of {key}):\n" + "\n".join(
            f"    | {line}" for line in body.splitlines()
        )
    if isinstance(action, dict):
        params = {k: v for k, v in action.items() if k != "type"}
        return (
            f"{action.get('type')} {json.dumps(params, separators=(',', ':'))}"
            if params
            else str(action.get("type"))
        )
    return str(action)


def replay_lines(
    records: list[dict[str, Any]], *, max_chars: int = 2000, only_step: int | None = None
) -> Iterator[str]:
    """The episode as text blocks, one per step (first the reset, last the outcome). With ``only_step``,
    the reset and that step alone; its ``total`` is still the running total over every step up to it."""
    head = records[0]
    yield (
        f"== episode {head.get('episode_id')} · scenario {head.get('scenario')} · agent {head.get('agent')}"
        f" · seed {head.get('seed')}\n"
        + render_observation(head.get("observation") or {}, max_chars=max_chars)
    )
    total = 0.0
    workspace = WorkspaceActivity()
    for rec in records[1:]:
        if rec["kind"] == "step":
            total += float(rec.get("reward") or 0.0)
            workspace.add(rec.get("action"), rec.get("next_observation") or {})
            if only_step is not None and rec.get("step") != only_step:
                continue
            comps = {k: v for k, v in (rec.get("reward_components") or {}).items() if v}
            reward = " ".join(f"{k}={v:+.3f}" for k, v in comps.items())
            yield (
                f"-- step {rec.get('step')} · action {_action_text(rec.get('action'), max_chars)}\n"
                + render_observation(rec.get("next_observation") or {}, max_chars=max_chars)
                + f"\nreward {float(rec.get('reward') or 0):+.3f} ({reward or 'no components'}) · total {total:+.3f}"
            )
        elif rec["kind"] == "end" and only_step is None:
            grade = rec.get("grade") or {}
            yield "\n".join(
                [
                    f"== end: {'success' if rec.get('success') else 'not solved'} · {grade.get('reason', '-')}"
                    f" · {rec.get('steps')} steps · total reward {float(rec.get('total_reward') or 0):+.3f}",
                    *workspace.summary_lines(),
                ]
            )
