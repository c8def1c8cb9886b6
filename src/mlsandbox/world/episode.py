"""Episode state: everything the world knows about one episode, including the hidden ground truth.

The gateway mutates it through its actions; the evaluator and the fault engine read it. Nothing in here is
shown to the agent as is: observations are built from it by the gateway, and ``ground_truth`` is never
part of an observation.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from mlsandbox.backends.protocols import EnvironmentInfo
from mlsandbox.backends.protocols.runtime import random_episode_id
from mlsandbox.data.formats import Format
from mlsandbox.scenario.models import Scenario


def new_episode_id(seed: int) -> str:
    """A random episode id (what :meth:`~mlsandbox.backends.protocols.Runtime.new_episode_id` gives on
    backends shared by several processes)."""
    return random_episode_id(seed)


@dataclass
class DatasetRecord:
    """A dataset (object) the agent can use, and where it came from."""

    key: str
    fmt: Format
    size: int
    target: str | None
    origin: str  # "scenario" or "clean_dataset"
    parent: str | None = None

    def frame(self, data: bytes) -> Any:
        """The dataset's bytes as a frame; an ``unreadable_data`` error when they are not of its format."""
        from mlsandbox.data.formats import from_bytes
        from mlsandbox.errors import ActionError

        try:
            return from_bytes(data, self.fmt)
        except Exception as e:
            raise ActionError(
                "unreadable_data", f"dataset {self.key!r} cannot be read as {self.fmt}: {e}"
            ) from None


@dataclass
class JobRecord:
    """An agent-visible job (``job-N``) and the backend job behind it."""

    job_id: str
    backend_id: str
    dataset: str
    algorithm: str
    submitted_step: int
    state: str = "queued"
    cpu_seconds: float = 0.0
    run_id: str | None = None


@dataclass
class GroundTruth:
    """Hidden from the agent: what the scenario generated and injected."""

    manifests: dict[str, dict[str, Any]] = field(default_factory=dict)
    holdouts: dict[str, pd.DataFrame] = field(default_factory=dict)
    production_holdouts: dict[str, pd.DataFrame] = field(default_factory=dict)
    """Dataset name -> the holdout of its production traffic's latest drift phase (scenarios whose serving
    has traffic; the serving pack draws it, a ``holdout: production`` goal is graded on it)."""
    faults: list[Any] = field(default_factory=list)
    """What the perturbation engine injected (``mlsandbox.faults.engine.FaultRecord``), in order."""


@dataclass
class ServingRecord:
    """What the episode's serving did, as its grade and reward read it: the serving pack and its monitor
    write it, :mod:`mlsandbox.evaluation` reads it."""

    served_version: str | None = None
    """The version of the goal's model its deployment serves with at least one replica up (None: none)."""
    risky_deployments: int = 0
    """Deployments of a version whose run had no passing validation metric."""
    slo_violation_s: float = 0.0
    """Seconds of production traffic with the SLO violated."""
    observed_s: float = 0.0
    """Seconds of production traffic observed in all."""


@dataclass
class Charges:
    """What the episode was charged besides its jobs' CPU seconds, by kind (each amount of credits is in
    :attr:`EpisodeState.extra_credits` too)."""

    idle_reserved_credits: float = 0.0
    """Credits of reserved machines while no job ran on them (the compute pool's charge)."""
    flow_cpu_seconds: float = 0.0
    """CPU seconds of the episode's flow runs (the flows pack's charge)."""
    flow_credits: float = 0.0
    """Credits of those CPU seconds."""


@dataclass(frozen=True)
class DeliveredFile:
    """A file the agent delivered in its workspace, read at the episode's end for the grader (a
    ``predictions_file`` goal): its bytes, or why it could not be read."""

    data: bytes | None
    problem: str | None = None


@dataclass(frozen=True)
class ScoredModel:
    """What the goal's production scorer answered for a model version at the episode's end: the
    positive class's probability of each holdout row, or why it could not."""

    proba: list[float] | None
    problem: str | None = None


@dataclass
class EpisodeState:
    episode_id: str
    scenario: Scenario
    seed: int
    sandbox: str
    started_at: float = field(default_factory=time.time)
    step: int = 0
    done: bool = False
    submitted: bool = False
    invalid_actions: int = 0
    wrong_mitigations: list[str] = field(default_factory=list)
    """The scenario's wrong mitigations the agent carried out (what each was), in order."""
    datasets: dict[str, DatasetRecord] = field(default_factory=dict)
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    registered: list[tuple[str, str]] = field(default_factory=list)
    """(agent-visible name, version) in registration order."""
    registered_at: dict[tuple[str, str], float] = field(default_factory=dict)
    """When each of them was registered (the runtime clock's time: virtual on sim)."""
    clock_start: float | None = None
    """The clock's time of the first observation (what deadlines and the compute window count from)."""
    deadline_at: float | None = None
    """The clock's time by which the goal's model must be registered (``budget.deadline_s`` after the
    first observation; None without a deadline)."""
    credit_samples: list[tuple[float, float]] = field(default_factory=list)
    """(clock time, credits used) at each look at the budget: what the rolling compute window reads."""
    experiment_id: str = ""
    ground_truth: GroundTruth = field(default_factory=GroundTruth)
    serving: ServingRecord = field(default_factory=ServingRecord)
    """What the episode's serving did (for the ``deployment_slo`` grade and the reward)."""
    charges: Charges = field(default_factory=Charges)
    """What the episode was charged besides its jobs, by kind."""
    extra_credits: float = 0.0
    """Credits charged besides the jobs' CPU-seconds (reserved machines, deployments), added by packs."""
    scored: dict[tuple[str, str], ScoredModel] = field(default_factory=dict)
    """(name, version) -> what the goal's production scorer answered (``goal.scorer_environment``), read
    at the episode's end for the grader."""
    delivered: dict[str, DeliveredFile] = field(default_factory=dict)
    """Workspace files the goal grades (path -> what was read at the episode's end, before grading)."""
    environments: dict[str, EnvironmentInfo] = field(default_factory=dict)
    """The episode's named Python environments (the agent's name -> the runtime's environment); jobs,
    flow runs and deployments name one (``default``, the sandbox's own, is not in here)."""

    def note_registered(self, name: str, version: str, at: float) -> None:
        """A model version the agent registered (through an action, a flow or its own script) at ``at``."""
        self.registered.append((name, version))
        self.registered_at[(name, version)] = at

    def deadline_for(self, own_s: float | None = None) -> float | None:
        """The clock's time by which a model must be registered: the budget's deadline, or the model's
        own (``own_s`` seconds after the first observation) when it comes first."""
        own = self.clock_start + own_s if own_s is not None and self.clock_start is not None else None
        if own is None or self.deadline_at is None:
            return own if self.deadline_at is None else self.deadline_at
        return min(own, self.deadline_at)

    def graded_versions(self, name: str, own_deadline_s: float | None = None) -> tuple[list[str], list[str]]:
        """The versions of ``name`` the grader may score (registered by the deadline, when there is one),
        and those registered after it, each in registration order."""
        versions = [v for (n, v) in self.registered if n == name]
        deadline = self.deadline_for(own_deadline_s)
        if deadline is None:
            return versions, []
        on_time = [v for v in versions if self.registered_at.get((name, v), deadline) <= deadline]
        return on_time, [v for v in versions if v not in on_time]

    def late_reason(self, name: str, late: list[str], own_deadline_s: float | None = None) -> str:
        """Why a goal whose model was registered only after the deadline earns nothing."""
        at = self.registered_at.get((name, late[0]), 0.0)
        deadline = self.deadline_for(own_deadline_s) or at
        start = self.clock_start if self.clock_start is not None else deadline
        return (
            f"model {name!r} was registered {at - deadline:.1f} s after its deadline ({deadline - start:g} s): "
            "a model registered late does not count"
        )

    def window_used(self, now: float, seconds: float) -> float:
        """Credits used in the last ``seconds`` before ``now``: what is used now less what had been used
        at the last look at the budget ``seconds`` ago (none before the episode)."""
        if not self.credit_samples or self.credits_used > self.credit_samples[-1][1]:
            self.credit_samples.append((now, self.credits_used))  # a plateau keeps its first look
        before = 0.0
        for t, used in self.credit_samples:
            if t > now - seconds:
                break
            before = used
        return max(0.0, self.credits_used - before)

    def window_frees_at(self, now: float, seconds: float, limit: float) -> float:
        """The clock's time at which the window's use falls under ``limit`` (no new use assumed)."""
        used = self.credits_used
        for t, then in self.credit_samples:
            if used - then < limit:
                return max(now, t + seconds)
        return now + seconds

    def tallies(self) -> dict[str, float]:
        """The episode's named tallies for a benchmark row (``metrics.counters``): those not 0."""
        sv, ch = self.serving, self.charges
        named = {
            "serving_version": float(sv.served_version) if sv.served_version else 0.0,
            "risky_deployments": float(sv.risky_deployments),
            "slo_violation_s": sv.slo_violation_s,
            "serving_observed_s": sv.observed_s,
            "idle_reserved_credits": ch.idle_reserved_credits,
            "flow_cpu_seconds": ch.flow_cpu_seconds,
            "flow_credits": ch.flow_credits,
            "wrong_mitigations": float(len(self.wrong_mitigations)),
        }
        return {k: v for k, v in named.items() if v}

    # -- resource names on the backend: one bucket, one experiment, one model-name prefix per episode --
    @property
    def bucket(self) -> str:
        return "ep-" + re.sub(r"[^a-z0-9-]", "-", self.episode_id.lower())

    @property
    def experiment_name(self) -> str:
        return f"mlsandbox/{self.sandbox}/{self.episode_id}"

    @property
    def model_prefix(self) -> str:
        return f"ep-{self.episode_id}."

    def registry_name(self, name: str) -> str:
        return self.model_prefix + name

    @property
    def job_label(self) -> tuple[str, str]:
        return ("mlsandbox.world.episode", self.episode_id)

    @property
    def cpu_seconds(self) -> float:
        return sum(j.cpu_seconds for j in self.jobs.values())

    @property
    def credits_used(self) -> float:
        return self.cpu_seconds * self.scenario.budget.credits_per_cpu_second + self.extra_credits

    @property
    def credits_left(self) -> float:
        return max(0.0, self.scenario.budget.credits - self.credits_used)
