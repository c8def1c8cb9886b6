"""Run the same agents with the same seeds on two backends (``local`` and ``sim`` by default) and compare.

Each (scenario, seed, agent) is played once on each backend, through the Gymnasium env and the agents'
episode runner, as ``mlsandbox bench`` plays it; ``reference`` means the scenario's own reference
solution. Episode ``k`` of a scenario uses the seed ``scenario.seed + base_seed + k``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import EpisodeResult, StepRecord, run_episode
from mlsandbox.env.gym_env import MLSandboxEnv
from mlsandbox.fidelity.compare import (
    EpisodeTrace,
    JobTrace,
    StepTrace,
    TripleComparison,
    comparable,
    compare,
)
from mlsandbox.scenario import Scenario, load_scenario

log = logging.getLogger(__name__)

AGENTS: tuple[str, ...] = ("rule", "reference", "random")


def _probe_agents() -> tuple[str, ...]:
    from mlsandbox.agents.probes import PROBES

    return ("rule", "random", *(f"probe:{name}" for name in PROBES))


PROBE_AGENTS: tuple[str, ...] = _probe_agents()
"""The agents of ``mlsandbox fidelity --probe``: rule and random, then every off-path probe."""


def model_families() -> list[str]:
    """The built-in scenarios whose goal is a registered model graded on hidden holdout, of any kind (the
    families the probes apply to)."""
    from mlsandbox.scenario.loader import catalog_ids

    goals = ("registered_model_auc", "registered_model_metric")
    return [sid for sid in catalog_ids() if load_scenario(sid).goal.type in goals]


_TERMINAL = ("succeeded", "failed", "cancelled")
_RESULT_CHARS = 4000


def agent_ref(agent: str, scenario: Scenario) -> str:
    """The agent to make: ``reference`` is the scenario's own reference solution."""
    return scenario.reference_agent if agent == "reference" else agent


def _cut(observation: dict[str, Any]) -> dict[str, Any]:
    import json

    text = json.dumps(observation.get("result"), default=str)
    if len(text) <= _RESULT_CHARS:
        return observation
    return {**observation, "result": text[:_RESULT_CHARS] + " ..."}


@dataclass
class _JobWatch:
    """Job durations read from the backend while the episode runs (before it is closed)."""

    env: MLSandboxEnv
    jobs: dict[str, JobTrace]

    def __call__(self, _: StepRecord) -> None:
        if not self.env.episode_running:
            return
        for job in self.env.episode.jobs.values():
            if job.job_id in self.jobs and self.jobs[job.job_id].state in _TERMINAL:
                continue
            try:
                status = self.env.job_status(job.job_id)
            except Exception:
                continue
            duration = None
            if status.started_at is not None and status.finished_at is not None:
                duration = max(0.0, status.finished_at - status.started_at)
            self.jobs[job.job_id] = JobTrace(
                job_id=job.job_id,
                algorithm=job.algorithm,
                state=status.state,
                duration_s=duration,
                cpu_seconds=float(status.cpu_seconds),
            )


def trace_of(
    res: EpisodeResult,
    backend: str,
    agent: str,
    jobs: dict[str, JobTrace],
    work: tuple[str, str] = ("tabular", "roc_auc"),
) -> EpisodeTrace:
    """The trace of an episode; ``work``: the scenario's kind and goal metric (``Scenario.work``)."""
    grade = res.grade or {}
    info = res.final_info
    kind = str(grade.get("kind") or work[0])
    metric = str(grade.get("metric") or work[1].removesuffix("+slo"))
    steps = [
        StepTrace(
            step=s.step,
            action=s.action,
            ok=bool(s.observation.get("ok")),
            error_code=(s.observation.get("error") or {}).get("code"),
            view=comparable(s.observation),
            observation=_cut(s.observation),
        )
        for s in res.steps
    ]
    return EpisodeTrace(
        backend=backend,
        scenario=res.scenario,
        agent=agent,
        seed=res.seed,
        success=res.success,
        score=float(grade.get("score") or 0.0),
        holdout_auc=grade.get("holdout_auc"),
        kind=kind,
        metric=metric,
        holdout_metric=grade.get("holdout_metric", grade.get("holdout_auc")),
        grade_reason=grade.get("reason"),
        reward=round(res.total_reward, 6),
        components={k: round(v, 6) for k, v in res.components.items()},
        steps=steps,
        jobs=[j for j in jobs.values() if j.state in _TERMINAL],
        credits_used=float(info.get("credits_used") or 0.0),
        wall_s=round(res.wall_s, 3),
    )


def play(env: MLSandboxEnv, scenario: Scenario, agent: str, seed: int, backend: str) -> EpisodeTrace:
    """One episode; a trace with ``error`` set when it cannot run."""
    t0 = time.perf_counter()
    jobs: dict[str, JobTrace] = {}
    try:
        player = make_agent(agent_ref(agent, scenario), seed=seed)
        res = run_episode(env, player, seed=seed, scenario=scenario, on_step=_JobWatch(env, jobs))
    except Exception as e:  # one broken episode does not stop the comparison
        log.warning("%s: episode %s/%s/%s failed: %s", backend, scenario.id, agent, seed, e)
        return EpisodeTrace(
            backend=backend, scenario=scenario.id, agent=agent, seed=seed, kind=scenario.work()[0],
            wall_s=round(time.perf_counter() - t0, 3), error=f"{type(e).__name__}: {e}",
        )  # fmt: skip
    return trace_of(res, backend, agent, jobs, scenario.work())


@dataclass
class Backends:
    """The two envs (each keeps its sandbox for every episode: one real sandbox, one simulated)."""

    local: MLSandboxEnv
    sim: MLSandboxEnv

    @classmethod
    def open(cls, local: str = "local", sim: str = "sim", sandbox: str = "fidelity") -> Backends:
        return cls(MLSandboxEnv(backend=local, sandbox=sandbox), MLSandboxEnv(backend=sim, sandbox=sandbox))

    def close(self) -> None:
        for env in (self.local, self.sim):
            try:
                env.close()
            except Exception as e:
                log.warning("closing the %s env: %s", env.backend.kind, e)


def run_triples(
    backends: Backends,
    scenario: Scenario | str,
    *,
    seeds: int,
    agents: tuple[str, ...] = AGENTS,
    base_seed: int = 0,
    on_triple: Callable[[TripleComparison], None] | None = None,
) -> list[TripleComparison]:
    """Every (seed, agent) of one scenario on both backends, compared."""
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    out = []
    for k in range(seeds):
        seed = sc.seed + base_seed + k
        for agent in agents:
            local = play(backends.local, sc, agent, seed, backends.local.backend.kind)
            sim = play(backends.sim, sc, agent, seed, backends.sim.backend.kind)
            triple = compare(local, sim)
            out.append(triple)
            if on_triple is not None:
                on_triple(triple)
    return out


__all__ = [
    "AGENTS",
    "PROBE_AGENTS",
    "Backends",
    "agent_ref",
    "model_families",
    "play",
    "run_triples",
    "trace_of",
]
