"""The benchmark runner: agents x suite scenarios x episodes on one sandbox, a row per episode.

Every agent plays the same episodes (the same scenario variants and seeds), so their results pair up.
Episode ``k`` of a scenario uses the seed ``scenario.seed + base_seed + k``. An episode that cannot run
(the sandbox broke, the agent raised) becomes a row with ``error`` set and the run goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import EpisodeResult, StepRecord, run_episode
from mlsandbox.agents.trajectory import write_trajectory
from mlsandbox.env.gym_env import MLSandboxEnv
from mlsandbox.evaluation.results import EpisodeRow
from mlsandbox.evaluation.reward import objective_vector
from mlsandbox.scenario.suites import SuiteEntry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodeTask:
    """One episode to run: which scenario, which agent, which seed."""

    entry: SuiteEntry
    agent: str
    seed: int
    suite: str


def plan_episodes(
    entries: list[SuiteEntry], agents: list[str], *, episodes: int, base_seed: int | None, suite: str
) -> list[EpisodeTask]:
    """Every (scenario, episode, agent), scenario-major so agents alternate on the same episode. Episode
    ``k`` of a scenario uses the seed ``base_seed + k`` (absolute, as ``mlsandbox run --seed``), or the
    scenario's own seed + ``k`` when ``base_seed`` is None."""
    return [
        EpisodeTask(e, a, (e.scenario.seed if base_seed is None else base_seed) + k, suite)
        for e in entries
        for k in range(episodes)
        for a in agents
    ]


def _task_fields(task: EpisodeTask) -> dict[str, Any]:
    """The row fields that say which episode it was (the same for a result and an error)."""
    e = task.entry
    return {
        "suite": task.suite,
        "family": e.family,
        "scenario": e.id,
        "difficulty": e.difficulty,
        "split": e.split,
        "agent": task.agent,
        "seed": task.seed,
    }


def row_from_result(task: EpisodeTask, res: EpisodeResult, trajectory: Path | None) -> EpisodeRow:
    info = res.final_info
    metrics = info.get("metrics") or {}
    grade = res.grade or {}
    violation = info.get("constraint_violation") or {}
    return EpisodeRow(
        **_task_fields(task),
        episode_id=res.episode_id,
        reward=round(res.total_reward, 6),
        reward_vector={k: round(v, 6) for k, v in objective_vector(res.components).items()},
        reward_components={k: round(v, 6) for k, v in res.components.items()},
        success=res.success,
        score=float(grade.get("score") or 0.0),
        steps=len(res.steps),
        terminated=res.terminated,
        truncated=res.truncated,
        credits_used=float(metrics.get("credits_used", info.get("credits_used", 0.0))),
        cpu_seconds=metrics.get("cpu_seconds"),
        invalid_actions=res.invalid_actions,
        constraint_violation=violation.get("kind"),
        faults_injected=int(metrics.get("faults_injected") or 0),
        faults_detected=int(metrics.get("faults_detected") or 0),
        faults_mitigated=int(metrics.get("faults_mitigated") or 0),
        time_to_detect_steps=metrics.get("time_to_detect_steps"),
        time_to_detect_s=metrics.get("time_to_detect_s"),
        time_to_mitigate_steps=metrics.get("time_to_mitigate_steps"),
        time_to_mitigate_s=metrics.get("time_to_mitigate_s"),
        fault_windows=metrics.get("fault_windows") or [],
        wall_s=round(res.wall_s, 3),
        trajectory=str(trajectory) if trajectory else None,
    )


def error_row(task: EpisodeTask, err: BaseException, wall_s: float) -> EpisodeRow:
    return EpisodeRow(
        **_task_fields(task),
        episode_id="",
        reward=0.0,
        reward_vector={},
        reward_components={},
        success=False,
        score=0.0,
        steps=0,
        terminated=False,
        truncated=False,
        credits_used=0.0,
        invalid_actions=0,
        wall_s=round(wall_s, 3),
        error=f"{type(err).__name__}: {err}",
    )


def run_task(
    env: MLSandboxEnv,
    task: EpisodeTask,
    *,
    trajectories: Path | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
    agent: Any | None = None,
) -> tuple[EpisodeRow, EpisodeResult | None]:
    """Run one episode; its row (and the full result, None when it failed)."""
    t0 = time.perf_counter()
    try:
        # ``reference``: the scenario's own reference solution (serving scenarios name theirs).
        name = task.entry.scenario.reference_agent if task.agent == "reference" else task.agent
        player = agent if agent is not None else make_agent(name, seed=task.seed)
        res = run_episode(env, player, seed=task.seed, scenario=task.entry.scenario, on_step=on_step)
    except Exception as e:  # one broken episode does not stop a benchmark
        log.warning("episode %s/%s/%s failed: %s", task.entry.id, task.agent, task.seed, e)
        return error_row(task, e, time.perf_counter() - t0), None
    path = None
    if trajectories is not None:
        path = write_trajectory(res, trajectories / f"{task.entry.id}__{task.agent}__{task.seed}.jsonl")
    row = row_from_result(task, res, path)
    usage = getattr(player, "usage", None)  # an LLM agent counts its tokens and their cost
    if usage is not None and hasattr(usage, "prompt_tokens"):
        row.extra["usage"] = {
            "prompt_tokens": int(usage.prompt_tokens),
            "completion_tokens": int(usage.completion_tokens),
            "cost_usd": round(float(getattr(usage, "cost_usd", 0.0)), 6),
        }
    return row, res


def run_bench(
    env: MLSandboxEnv,
    tasks: list[EpisodeTask],
    *,
    trajectories: Path | None = None,
    on_step: Callable[[EpisodeTask, StepRecord], None] | None = None,
) -> Iterator[EpisodeRow]:
    """Run the tasks in order, yielding each episode's row as soon as it is done."""
    for task in tasks:
        hook = (lambda rec, task=task: on_step(task, rec)) if on_step else None
        row, _ = run_task(env, task, trajectories=trajectories, on_step=hook)
        yield row
