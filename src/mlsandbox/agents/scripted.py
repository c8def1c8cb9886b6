"""Scripted agents: a policy written as a generator that yields actions and receives observations.

``ScriptedAgent.script(first)`` yields an action and gets the next observation back from ``yield``; when the
script ends the agent submits. The reference solution (:class:`ReferenceAgent`) and the degenerate
strategies of the anti reward-hacking tests are scripts.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

Obs = dict[str, Any]
Script = Generator[dict[str, Any], Obs, None]

_TERMINAL = ("succeeded", "failed", "cancelled")
_SERVICES = ("mlflow", "minio")


class ScriptedAgent:
    """Runs :meth:`script` one action at a time; submits when the script is over."""

    name = "scripted"

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
        self._gen: Script | None = None
        self._started = False
        self._over = False

    def reset(self, observation: Obs, seed: int | None = None) -> None:
        self._gen = self.script(observation)
        self._started = False
        self._over = False

    def act(self, observation: Obs) -> dict[str, Any]:
        if self._gen is None or self._over:
            return {"type": "submit"}
        try:
            if not self._started:
                self._started = True
                return next(self._gen)
            return self._gen.send(observation)
        except StopIteration:
            self._over = True
            return {"type": "submit"}

    def script(self, first: Obs) -> Script:
        yield {"type": "submit"}


def deliverable(first: Obs) -> tuple[str, list[str]]:
    """The model name to register and the dataset names, Parquet first (typed), from the first observation."""
    result = first.get("result") or {}
    model = (result.get("deliverable") or {}).get("register_model_as", "model")
    names = [d["name"] for d in result.get("datasets", [])]
    names.sort(key=lambda n: (not n.endswith(".parquet"), n))
    return model, names


def cleaning_plan(profile: dict[str, Any]) -> list[str]:
    """Cleaning strategies for what a data-quality profile shows (missing values, outliers)."""
    columns = list((profile.get("column_profiles") or {}).values())
    plan = []
    if any((c.get("missing") or 0) > 0 for c in columns):
        plan.append("impute_median")
    if any((c.get("outliers") or 0) > 0 for c in columns):
        plan.append("clip_outliers")
    return plan


class ReferenceAgent(ScriptedAgent):
    """The reference solution of the built-in tabular scenarios, faults included.

    inspect -> clean -> train -> wait for the job -> register -> submit; when an action fails for a reason
    outside the agent's input (a backend error, a failed job) it reads the logs, probes the tracker and the
    data lake, restarts what is down, waits out what is transient, and tries again.
    """

    name = "reference"
    max_attempts = 4
    environment: str | None = None
    """The named environment its jobs run in (None: the sandbox's own)."""

    def __init__(self, seed: int | None = None, algorithm: str = "gradient_boosting") -> None:
        super().__init__(seed)
        self.algorithm = algorithm

    def script(self, first: Obs) -> Script:
        model, names = deliverable(first)
        if not names:
            return
        dataset = yield from self.choose_dataset(names)
        dataset = yield from self.prepare(dataset)
        run_id = yield from self.train(dataset)
        if run_id is None:
            return
        yield from self.do({"type": "register_model", "run_id": run_id, "name": model})

    def prepare(self, dataset: str) -> Generator[dict[str, Any], Obs, str]:
        """Profile the dataset and apply the cleaning its profile calls for; the dataset to train on."""
        obs = yield from self.do({"type": "check_data_quality", "dataset": dataset})
        profile = ((obs.get("result") or {}).get("profile") or {}) if obs.get("ok") else None
        for strategy in [] if profile is None else self.cleaning(profile):
            obs = yield from self.do({"type": "clean_dataset", "dataset": dataset, "strategy": strategy})
            if obs.get("ok"):
                dataset = obs["result"]["dataset"]
        return dataset

    def choose_dataset(self, names: list[str]) -> Generator[dict[str, Any], Obs, str]:
        """The dataset to work on: the one the goal names (no step)."""
        return names[0]
        yield {}  # a generator (never reached)

    def cleaning(self, profile: dict[str, Any]) -> list[str]:
        """The cleaning strategies to apply, in order, given the data profile."""
        return cleaning_plan(profile)

    # -------------------------------------------------------------------------------- building blocks

    def do(self, action: dict[str, Any]) -> Generator[dict[str, Any], Obs, Obs]:
        """Carry out an action; on a failure outside the agent's control heal the platform and retry."""
        obs: Obs = {}
        for _ in range(self.max_attempts):
            obs = yield action
            if obs.get("ok"):
                return obs
            code = (obs.get("error") or {}).get("code")
            if code not in ("backend_error", "unreadable_data", "budget_exhausted"):
                return obs
            if code == "budget_exhausted":
                return obs
            yield from self.heal()
        return obs

    def heal(self) -> Generator[dict[str, Any], Obs, None]:
        """Probe the services; restart those that do not answer; wait a little when all answer."""
        restarted = False
        for service in _SERVICES:
            obs = yield {"type": "get_service_health", "service": service}
            if obs.get("ok") and not (obs.get("result") or {}).get("healthy", True):
                yield {"type": "restart_service", "service": service}
                restarted = True
        if not restarted:
            yield {"type": "wait", "seconds": 10}

    def await_job(self, job_id: str) -> Generator[dict[str, Any], Obs, Obs]:
        obs: Obs = {}
        for _ in range(30):
            # A wait returns as soon as a job changes state: a long one costs no step when jobs are quick.
            yield {"type": "wait", "seconds": 60}
            obs = yield {"type": "get_job", "job_id": job_id}
            if obs.get("ok") and (obs.get("result") or {}).get("state") in _TERMINAL:
                return obs
        return obs

    def train(self, dataset: str) -> Generator[dict[str, Any], Obs, str | None]:
        """Train until a job succeeds (at most ``max_attempts`` jobs); the run id, or None."""
        job = yield from self.train_job(dataset)
        return None if job is None else str(job["run_id"])

    def train_job(self, dataset: str) -> Generator[dict[str, Any], Obs, dict[str, Any] | None]:
        """Train until a job succeeds (at most ``max_attempts`` jobs); its ``get_job`` result, or None."""
        job: str | None = None
        for _ in range(self.max_attempts):
            if job is None:
                action = {
                    "type": "train_model",
                    "dataset": dataset,
                    "algorithm": self.algorithm,
                    "resources": {"cpus": 1, "memory_mb": 1024},
                }
                if self.environment is not None:
                    action["environment"] = self.environment
            else:
                action = {"type": "retry_job", "job_id": job}
            obs = yield from self.do(action)
            if not obs.get("ok"):
                return None
            job = str(obs["result"]["job_id"])
            final = yield from self.await_job(job)
            result = (final.get("result") or {}) if final.get("ok") else {}
            if result.get("state") == "succeeded" and result.get("run_id"):
                return result
            yield {"type": "get_logs", "target": job, "tail": 20}
            yield from self.heal()
        return None


class LinearReferenceAgent(ReferenceAgent):
    """The reference solution of the ``churn-decisions`` family: the reference checklist with a
    logistic regression (the family's bar is reached by a linear model on imputed, clipped rows; tree
    ensembles and unclipped rows fall short of it)."""

    name = "reference-linear"

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed, algorithm="logistic_regression")
