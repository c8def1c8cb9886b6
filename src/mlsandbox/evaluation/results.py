"""Benchmark results: one row per episode (JSONL / CSV) and their summary with 95% confidence intervals,
pass@k and pass^k."""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mlsandbox.evaluation.reward import OBJECTIVES
from mlsandbox.evaluation.stats import Interval, k_values, mean_ci, pass_all_k, pass_at_k, wilson


class FaultWindow(BaseModel):
    """One injected fault of an episode, in steps: when it began, when the agent's observations first
    showed it (detected), when the agent made its symptom go away (mitigated) and when it ended."""

    model_config = ConfigDict(extra="forbid")

    name: str
    fault: str
    target: str
    injected_step: int
    detected_step: int | None = None
    mitigated_step: int | None = None
    recovered_step: int | None = None
    recovered_by: str | None = None
    """``expiry``, ``agent`` or ``episode_end``; None while it was still active."""


class EpisodeRow(BaseModel):
    """What a benchmark records about one episode."""

    model_config = ConfigDict(extra="forbid")

    suite: str
    family: str
    scenario: str
    difficulty: int
    split: str
    agent: str
    seed: int
    episode_id: str
    reward: float
    reward_vector: dict[str, float]
    """Per-objective sums over the episode (task, efficiency, cost, stability, ...)."""
    reward_components: dict[str, float]
    success: bool
    score: float
    steps: int
    terminated: bool
    truncated: bool
    credits_used: float
    cpu_seconds: float | None = None
    invalid_actions: int
    constraint_violation: str | None = None
    faults_injected: int = 0
    faults_detected: int = 0
    faults_mitigated: int = 0
    time_to_detect_steps: float | None = None
    time_to_detect_s: float | None = None
    time_to_mitigate_steps: float | None = None
    time_to_mitigate_s: float | None = None
    fault_windows: list[FaultWindow] = Field(default_factory=list)
    """The injected faults' windows (not a CSV column: the JSONL rows and the report's timelines)."""
    wall_s: float
    error: str | None = None
    """Why the episode could not be run (the other figures are then zero)."""
    trajectory: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


CSV_COLUMNS: tuple[str, ...] = (
    "suite",
    "family",
    "scenario",
    "difficulty",
    "split",
    "agent",
    "seed",
    "episode_id",
    "reward",
    *(f"reward_{o}" for o in OBJECTIVES),
    "success",
    "score",
    "steps",
    "terminated",
    "truncated",
    "credits_used",
    "cpu_seconds",
    "invalid_actions",
    "constraint_violation",
    "faults_injected",
    "faults_detected",
    "faults_mitigated",
    "time_to_detect_steps",
    "time_to_detect_s",
    "time_to_mitigate_steps",
    "time_to_mitigate_s",
    "wall_s",
    "error",
)


def read_rows(path: Path) -> list[EpisodeRow]:
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(EpisodeRow.model_validate_json(line))
            except ValueError as e:
                raise ValueError(f"{path}:{n}: not a benchmark row: {e}") from None
    return rows


def rows_jsonl(rows: list[EpisodeRow]) -> str:
    return "".join(r.model_dump_json() + "\n" for r in rows)


def rows_csv(rows: list[EpisodeRow]) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(CSV_COLUMNS), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        d = r.model_dump()
        for o in OBJECTIVES:
            d[f"reward_{o}"] = round(r.reward_vector.get(o, 0.0), 6)
        d["reward"] = round(r.reward, 6)
        w.writerow(d)
    return out.getvalue()


class GroupSummary(BaseModel):
    agent: str
    family: str | None
    """None: every family of the agent."""
    split: str | None = None
    """Set in the per-split summary (:func:`summarize_splits`)."""
    kind: str | None = None
    """The kind of work (the goal dataset's ``kind``), set in the per-split summary."""
    episodes: int
    success_rate: dict[str, float | int | None]
    mean_reward: dict[str, float | int | None]
    """value, low, high, n; ``low``/``high`` are None when the interval is undefined (fewer than two
    episodes for the mean's Student's t interval)."""
    mean_vector: dict[str, float]
    mean_credits: float
    mean_steps: float
    mean_time_to_detect_steps: float | None
    mean_time_to_mitigate_steps: float | None
    errors: int
    """Harness errors: episodes that could not be run (the sandbox broke, the agent raised)."""
    invalid_actions: int = 0
    """Invalid actions over the episodes that ran: the agent's rejected actions (error observations)."""
    invalid_action_rate: float | None = None
    """Invalid actions per step over the episodes that ran (None without a step)."""
    tasks: int = 0
    """Distinct tasks (scenario variants) with at least one episode that ran."""
    episodes_per_task: int = 0
    """The fewest episodes that ran on any of those tasks: the largest k of pass@k and pass^k."""
    pass_at_k: dict[str, float] = Field(default_factory=dict)
    """k -> the mean over tasks of the unbiased pass@k (at least one of k episodes succeeds)."""
    pass_all_k: dict[str, float] = Field(default_factory=dict)
    """k -> the mean over tasks of the unbiased pass^k (all k episodes succeed)."""

    def success(self) -> Interval:
        return Interval.from_dict(self.success_rate)

    def reward(self) -> Interval:
        return Interval.from_dict(self.mean_reward)


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def pass_k_table(rows: list[EpisodeRow]) -> tuple[int, int, dict[str, float], dict[str, float]]:
    """(tasks, episodes per task, pass@k, pass^k) over the episodes that ran, a task being a scenario
    variant: for each task with ``n`` episodes of which ``c`` succeeded, the unbiased estimators at every
    reported k up to the fewest episodes any task ran, averaged over tasks."""
    by_task: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        if r.error is None:
            by_task[r.scenario].append(r.success)
    if not by_task:
        return 0, 0, {}, {}
    n_min = min(len(v) for v in by_task.values())
    at: dict[str, float] = {}
    all_: dict[str, float] = {}
    for k in k_values(n_min):
        at[str(k)] = round(sum(pass_at_k(len(v), sum(v), k) for v in by_task.values()) / len(by_task), 6)
        all_[str(k)] = round(sum(pass_all_k(len(v), sum(v), k) for v in by_task.values()) / len(by_task), 6)
    return len(by_task), n_min, at, all_


def _group(agent: str, family: str | None, rows: list[EpisodeRow]) -> GroupSummary:
    ran = [r for r in rows if r.error is None]
    tasks, per_task, at_k, all_k = pass_k_table(ran)
    steps = sum(r.steps for r in ran)
    invalid = sum(r.invalid_actions for r in ran)
    vec: dict[str, float] = {}
    for o in OBJECTIVES:
        vec[o] = round(sum(r.reward_vector.get(o, 0.0) for r in ran) / len(ran), 4) if ran else 0.0
    return GroupSummary(
        agent=agent,
        family=family,
        episodes=len(rows),
        success_rate=wilson(sum(r.success for r in ran), len(ran)).as_dict(),
        mean_reward=mean_ci([r.reward for r in ran]).as_dict(),
        mean_vector=vec,
        mean_credits=_mean([r.credits_used for r in ran]) or 0.0,
        mean_steps=_mean([float(r.steps) for r in ran]) or 0.0,
        mean_time_to_detect_steps=_mean(
            [r.time_to_detect_steps for r in ran if r.time_to_detect_steps is not None]
        ),
        mean_time_to_mitigate_steps=_mean(
            [r.time_to_mitigate_steps for r in ran if r.time_to_mitigate_steps is not None]
        ),
        errors=len(rows) - len(ran),
        invalid_actions=invalid,
        invalid_action_rate=round(invalid / steps, 4) if steps else None,
        tasks=tasks,
        episodes_per_task=per_task,
        pass_at_k=at_k,
        pass_all_k=all_k,
    )


def summarize(rows: list[EpisodeRow]) -> tuple[list[GroupSummary], list[GroupSummary]]:
    """(per agent, per agent and family), agents in first-seen order, families sorted."""
    by_agent: dict[str, list[EpisodeRow]] = defaultdict(list)
    by_family: dict[tuple[str, str], list[EpisodeRow]] = defaultdict(list)
    for r in rows:
        by_agent[r.agent].append(r)
        by_family[(r.agent, r.family)].append(r)
    agents = [_group(a, None, rs) for a, rs in by_agent.items()]
    order = {a: i for i, a in enumerate(by_agent)}
    families = [
        _group(a, f, rs)
        for (a, f), rs in sorted(by_family.items(), key=lambda kv: (order[kv[0][0]], kv[0][1]))
    ]
    return agents, families


def row_kind(row: EpisodeRow) -> str:
    """The kind of work of a row's scenario (recorded by the benchmark in ``extra``; tabular before)."""
    return str(row.extra.get("kind") or "tabular")


def summarize_splits(rows: list[EpisodeRow]) -> list[GroupSummary]:
    """Per agent, split and kind of work (pass@k within each), agents in first-seen order."""
    groups: dict[tuple[str, str, str], list[EpisodeRow]] = defaultdict(list)
    for r in rows:
        groups[(r.agent, r.split, row_kind(r))].append(r)
    order = {a: i for i, a in enumerate(dict.fromkeys(r.agent for r in rows))}
    out = []
    for (a, split, kind), rs in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], kv[0][1], kv[0][2])):
        out.append(_group(a, None, rs).model_copy(update={"split": split, "kind": kind}))
    return out


def leaderboard(agents: list[GroupSummary]) -> list[GroupSummary]:
    """Agents ranked by success rate, then mean reward."""

    def key(g: GroupSummary) -> tuple[float, float]:
        s, r = g.success().value, g.reward().value
        return (-(0.0 if math.isnan(s) else s), -(-math.inf if math.isnan(r) else r))

    return sorted(agents, key=key)


def summary_json(rows: list[EpisodeRow], provenance: dict[str, Any] | None = None) -> str:
    """The summary per agent and per family; ``provenance`` (version, commit, machine) beside them."""
    agents, families = summarize(rows)
    doc: dict[str, Any] = {
        "agents": [g.model_dump() for g in leaderboard(agents)],
        "families": [g.model_dump() for g in families],
        "splits": [g.model_dump() for g in summarize_splits(rows)],
    }
    if provenance is not None:
        doc["provenance"] = provenance
    return json.dumps(
        doc,
        indent=2,
        default=str,
    )
