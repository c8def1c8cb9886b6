"""Benchmark runs (``mlsandbox bench`` output directories) and trajectory files, as the console shows them.

A run directory holds ``results.jsonl`` (one row per episode, written as episodes finish), and once the
run is over ``summary.json`` (per agent and per family: success rate with its Wilson interval, mean
reward with its Student-t interval, and pass@k where the summary has it), ``report.html`` and
``trajectories/*.jsonl``. The console looks for run directories under the roots it was given (a root is
a run directory or holds some). A run still in progress has no summary yet: it is computed from the
rows written so far.

Trajectories (:mod:`mlsandbox.agents.trajectory`) are replayed as the agent saw them: each step's
observation structured and as the text the LLM adapter renders (the same blocks as ``mlsandbox replay``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlsandbox.agents.trajectory import parse_trajectory, replay_lines
from mlsandbox.evaluation.results import EpisodeRow, summary_json

RESULTS = "results.jsonl"
SUMMARY = "summary.json"
TRAJECTORIES = "trajectories"
REPLAY_MAX_CHARS = 4000
_PASS_KEY = re.compile(r"^pass(?:@|_at_|_)(\d+)$")
TRAJECTORY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.jsonl$")


@dataclass(frozen=True)
class BenchRun:
    id: str
    path: Path

    @property
    def name(self) -> str:
        return self.path.name


def _bench_id(path: Path) -> str:
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]


def discover(roots: list[Path]) -> list[BenchRun]:
    """Every run directory under ``roots`` (a root itself, or its direct subdirectories), newest first."""
    found: dict[str, BenchRun] = {}
    for root in roots:
        candidates = [root] + (sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else [])
        for d in candidates:
            if (d / RESULTS).is_file():
                run = BenchRun(_bench_id(d), d.resolve())
                found[run.id] = run
    return sorted(found.values(), key=lambda r: (r.path / RESULTS).stat().st_mtime, reverse=True)


def read_rows_lenient(path: Path) -> tuple[list[EpisodeRow], list[str]]:
    """The rows of ``results.jsonl`` and a message per line that is not a row (a run in progress may
    have a partly written last line)."""
    rows: list[EpisodeRow] = []
    problems: list[str] = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return rows, [f"{path.name}: missing"]
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(EpisodeRow.model_validate_json(line))
        except ValueError as e:
            problems.append(f"{path.name}:{n}: not a benchmark row ({str(e).splitlines()[0]})")
    return rows, problems


def clean_json(value: Any) -> Any:
    """``value`` with NaN and infinities as None (summaries of empty groups hold NaN)."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {k: clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_json(v) for v in value]
    return value


def pass_at_k(group: dict[str, Any]) -> list[dict[str, Any]]:
    """pass@k of a summary group, sorted by k: ``[{k, value, low?, high?}]`` (empty when absent).

    Read from keys ``pass@K`` / ``pass_at_K`` (a number or an interval ``{value, low, high}``) or from a
    mapping under ``pass_at_k`` / ``pass@k`` whose keys are K (or ``pass@K``).
    """
    found: dict[int, Any] = {}
    for key, value in group.items():
        m = _PASS_KEY.match(str(key))
        if m:
            found[int(m.group(1))] = value
        elif key in ("pass_at_k", "pass@k") and isinstance(value, dict):
            for k, v in value.items():
                mk = _PASS_KEY.match(str(k))
                if mk:
                    found[int(mk.group(1))] = v
                elif str(k).isdigit():
                    found[int(k)] = v
    out = []
    for k in sorted(found):
        v = found[k]
        if isinstance(v, dict):
            value = v.get("value", v.get("estimate"))
            entry = {"k": k, "value": value, "low": v.get("low"), "high": v.get("high")}
        else:
            entry = {"k": k, "value": v, "low": None, "high": None}
        value = entry["value"]
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out.append(clean_json(entry))
    return out


def _trajectory_file(run: BenchRun, row: EpisodeRow) -> str | None:
    """The name of the row's trajectory file inside the run's ``trajectories/`` (None when absent)."""
    if not row.trajectory:
        return None
    name = Path(row.trajectory).name
    return name if (run.path / TRAJECTORIES / name).is_file() else None


def bench_detail(run: BenchRun) -> dict[str, Any]:
    """Everything the benchmark page draws: the summary (leaderboard and families, with pass@k when the
    summary has it), every row with its trajectory, and the run's metadata."""
    rows, problems = read_rows_lenient(run.path / RESULTS)
    summary_source = "summary.json"
    summary: dict[str, Any] | None = None
    summary_path = run.path / SUMMARY
    if summary_path.is_file():
        try:
            summary = json.loads(summary_path.read_text())
        except (json.JSONDecodeError, OSError) as e:
            problems.append(f"{SUMMARY}: unreadable ({e}); computed from the rows instead")
    if summary is None:
        summary_source = "rows"
        summary = json.loads(summary_json(rows)) if rows else {"agents": [], "families": []}
    for group in [*summary.get("agents", []), *summary.get("families", [])]:
        group["pass_at_k"] = pass_at_k(group)
    row_dicts = []
    for i, row in enumerate(rows):
        d = row.model_dump()
        d["index"] = i
        d["trajectory_file"] = _trajectory_file(run, row)
        row_dicts.append(d)
    return clean_json(
        {
            "id": run.id,
            "name": run.name,
            "path": str(run.path),
            "complete": summary_path.is_file(),
            "summary_source": summary_source,
            "report": (run.path / "report.html").is_file(),
            "summary": summary,
            "rows": row_dicts,
            "problems": problems,
        }
    )


def bench_overview(run: BenchRun) -> dict[str, Any]:
    rows, _ = read_rows_lenient(run.path / RESULTS)
    return {
        "id": run.id,
        "name": run.name,
        "path": str(run.path),
        "modified_at": (run.path / RESULTS).stat().st_mtime,
        "complete": (run.path / SUMMARY).is_file(),
        "episodes": len(rows),
        "agents": list(dict.fromkeys(r.agent for r in rows)),
        "suites": sorted({r.suite for r in rows}),
        "families": sorted({r.family for r in rows}),
        "success_rate": (sum(r.success for r in rows) / len(rows)) if rows else None,
        "trajectories": len(list((run.path / TRAJECTORIES).glob("*.jsonl")))
        if (run.path / TRAJECTORIES).is_dir()
        else 0,
    }


def trajectory_path(run: BenchRun, name: str) -> Path:
    """The trajectory file ``name`` of a run; ValueError for a name that is not one of its files."""
    if not TRAJECTORY_NAME_RE.match(name):
        raise ValueError(f"{name!r} is not a trajectory file name")
    path = run.path / TRAJECTORIES / name
    if not path.is_file():
        raise FileNotFoundError(f"{run.name} has no trajectory {name}")
    return path


def list_trajectories(run: BenchRun) -> list[str]:
    d = run.path / TRAJECTORIES
    return sorted(p.name for p in d.glob("*.jsonl")) if d.is_dir() else []


def replay_view(text: str, source: str) -> dict[str, Any]:
    """A trajectory as the replay page steps through it; ValueError (with the line) for a bad file."""
    records = parse_trajectory(text, source)
    blocks = list(replay_lines(records, max_chars=REPLAY_MAX_CHARS))
    head = records[0]
    steps = [r for r in records[1:] if r["kind"] == "step"]
    end = next((r for r in records[1:] if r["kind"] == "end"), None)
    # replay_lines yields the head, one block per step, then the end: the blocks line up with them.
    step_blocks = blocks[1 : 1 + len(steps)]
    total = 0.0
    out_steps = []
    for rec, block in zip(steps, step_blocks, strict=True):
        total += float(rec.get("reward") or 0.0)
        out_steps.append(
            {
                "step": rec.get("step"),
                "action": rec.get("action"),
                "observation": rec.get("observation"),
                "next_observation": rec.get("next_observation"),
                "reward": rec.get("reward"),
                "total_reward": round(total, 6),
                "reward_components": rec.get("reward_components") or {},
                "reward_vector": rec.get("reward_vector") or {},
                "terminated": rec.get("terminated"),
                "truncated": rec.get("truncated"),
                "info": rec.get("info") or {},
                "text": block,
            }
        )
    return clean_json(
        {
            "source": source,
            "episode": {k: head.get(k) for k in ("scenario", "seed", "agent", "episode_id", "format")},
            "initial": {"observation": head.get("observation"), "text": blocks[0]},
            "steps": out_steps,
            "end": None if end is None else {**end, "text": blocks[-1]},
        }
    )


__all__ = [
    "BenchRun",
    "bench_detail",
    "bench_overview",
    "clean_json",
    "discover",
    "list_trajectories",
    "pass_at_k",
    "read_rows_lenient",
    "replay_view",
    "trajectory_path",
]
