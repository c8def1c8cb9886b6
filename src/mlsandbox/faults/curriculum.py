"""Curricula: named levels that compose perturbation plans from simple (one fault) to combined.

A level is a plan (a list of :class:`~mlsandbox.scenario.perturbations.Perturbation`) plus an optional
budget factor; :func:`apply_level` returns a scenario with the level's plan added (validated like any
scenario, so a level that does not fit the scenario — a column it does not have — fails precisely).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mlsandbox.scenario.models import Scenario
from mlsandbox.scenario.perturbations import Perturbation


class Level(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    difficulty: int = Field(ge=0, le=4)
    description: str
    plan: list[Perturbation] = Field(default_factory=list)
    budget_factor: float = Field(default=1.0, gt=0, le=1)
    """Credits of the scenario multiplied by this (a tight budget is part of the difficulty)."""


def _p(**kw: Any) -> Perturbation:
    return Perturbation.model_validate(kw)


LEVELS: tuple[Level, ...] = (
    Level(name="calm", difficulty=0, description="No fault: the scenario as written."),
    Level(
        name="slow-lake",
        difficulty=1,
        description="The data lake answers slowly for a few steps (latency through its proxy).",
        plan=[
            _p(
                name="lake-latency",
                when={"at_step": 2},
                target="endpoint:minio",
                fault={"type": "latency", "latency_ms": 400, "jitter_ms": 100},
                duration={"steps": 4},
            )
        ],
    ),
    Level(
        name="tracker-down",
        difficulty=2,
        description="The experiment tracker is killed once a job runs; the agent has to notice and restart it.",
        plan=[
            _p(
                name="tracker-kill",
                when={"condition": "job_running"},
                target="service:mlflow",
                fault={"type": "kill_service"},
                recovery="manual",
            )
        ],
    ),
    Level(
        name="starved-jobs",
        difficulty=2,
        description="Jobs get a memory limit far below their need for a while: they are OOM-killed.",
        plan=[
            _p(
                name="tight-memory",
                when={"at_step": 1},
                fault={"type": "memory_limit", "memory_mb": 64},
                duration={"steps": 6},
            )
        ],
    ),
    Level(
        name="stale-credentials",
        difficulty=2,
        description="The config store the jobs read holds rotated (stale) object-store credentials: jobs "
        "fail to authenticate until the agent fixes the config.",
        plan=[
            _p(
                name="stale-secret",
                when={"at_step": 1},
                fault={"type": "rotated_credentials"},
                recovery="manual",
            )
        ],
    ),
    Level(
        name="flaky-platform",
        difficulty=3,
        description="Random trouble: a slow tracker now and then, a frozen orchestrator, throttled jobs.",
        plan=[
            _p(
                name="tracker-latency",
                when={"probability": 0.2, "max_times": 2},
                target="endpoint:mlflow",
                fault={"type": "latency", "latency_ms": 800},
                duration={"steps": 2},
            ),
            _p(
                name="orchestrator-freeze",
                when={"at_step": 3},
                target="service:prefect-server",
                fault={"type": "freeze_service"},
                duration={"steps": 3},
            ),
            _p(
                name="cpu-cut",
                when={"condition": "job_running"},
                fault={"type": "cpu_throttle", "cpus": 0.1},
                duration={"steps": 3},
            ),
        ],
    ),
    Level(
        name="perfect-storm",
        difficulty=4,
        description="Combined: the lake fills up, the tracker crash-loops, jobs are starved, on a tight budget.",
        budget_factor=0.6,
        plan=[
            _p(name="lake-full", when={"at_step": 4}, fault={"type": "disk_full"}, duration={"steps": 3}),
            _p(
                name="tracker-crash-loop",
                when={"condition": "job_succeeded"},
                target="service:mlflow",
                fault={"type": "crash_loop"},
                duration={"steps": 3},
            ),
            _p(
                name="tight-memory",
                when={"probability": 0.3},
                fault={"type": "memory_limit", "memory_mb": 96},
                duration={"steps": 2},
            ),
            _p(
                name="lake-resets",
                when={"every": 7, "start": 2, "max_times": 2},
                target="endpoint:minio",
                fault={"type": "reset_peer", "timeout_ms": 200},
                duration={"steps": 1},
            ),
        ],
    ),
)


def level(name: str) -> Level:
    for lv in LEVELS:
        if lv.name == name:
            return lv
    raise KeyError(f"unknown curriculum level {name!r}; levels: {', '.join(lv.name for lv in LEVELS)}")


def apply_level(scenario: Scenario, name: str) -> Scenario:
    """The scenario with the level's plan appended and its budget scaled (validated again)."""
    lv = level(name)
    data = scenario.model_dump()
    data["perturbations"] = [*data.get("perturbations", []), *(p.model_dump() for p in lv.plan)]
    data["budget"]["credits"] = scenario.budget.credits * lv.budget_factor
    data["difficulty"] = max(scenario.difficulty, min(4, max(1, lv.difficulty)))
    return Scenario.model_validate(data)
