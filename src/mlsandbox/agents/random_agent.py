"""A random agent: uniformly random action types with plausible (and sometimes wrong) parameters; the
algorithms it trains are those of the dataset's kind (the first observation's ``deliverable.kind``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from mlsandbox.agents.kind_reference import observed_kind, quick_algorithms
from mlsandbox.gateway.actions import ACTION_TYPES

_STRATEGIES = ("drop_na", "impute_mean", "impute_median", "clip_outliers")
_ALGORITHMS = ("logistic_regression", "random_forest", "gradient_boosting")
"""Before the first observation names the kind: binary classification's."""


class RandomAgent:
    """Picks an action type uniformly; fills parameters from what it has seen, or makes them up."""

    name = "random"

    def __init__(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)
        self._datasets: list[str] = []
        self._jobs: list[str] = []
        self._runs: list[str] = []
        self._algorithms: tuple[str, ...] = _ALGORITHMS

    def reset(self, observation: dict[str, Any], seed: int | None = None) -> None:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._datasets = [d["name"] for d in (observation.get("result") or {}).get("datasets", [])]
        self._jobs, self._runs = [], []
        try:
            self._algorithms = quick_algorithms(observed_kind(observation)) or _ALGORITHMS
        except KeyError:  # a kind this installation does not know: binary classification's
            self._algorithms = _ALGORITHMS

    def _pick(self, seen: list[str], made_up: str) -> str:
        if seen and self._rng.random() < 0.8:
            return str(self._rng.choice(seen))
        return made_up

    def act(self, observation: dict[str, Any]) -> dict[str, Any]:
        self._remember(observation)
        kind = str(self._rng.choice(ACTION_TYPES))
        # Submitting ends the episode; a random policy that submits at once learns nothing: make it rarer.
        if kind == "submit" and self._rng.random() < 0.7:
            kind = "list_datasets"
        if kind == "check_data_quality":
            return {"type": kind, "dataset": self._pick(self._datasets, "raw/unknown.csv")}
        if kind == "clean_dataset":
            return {
                "type": kind,
                "dataset": self._pick(self._datasets, "raw/x.csv"),
                "strategy": str(self._rng.choice(_STRATEGIES)),
            }
        if kind == "train_model":
            return {
                "type": kind,
                "dataset": self._pick(self._datasets, "raw/missing.parquet"),
                "algorithm": str(self._rng.choice(self._algorithms)),
            }
        if kind == "get_job":
            return {"type": kind, "job_id": self._pick(self._jobs, f"job-{int(self._rng.integers(1, 9))}")}
        if kind == "register_model":
            return {
                "type": kind,
                "run_id": self._pick(self._runs, "0" * 32),
                "name": str(self._rng.choice(["churn", "model"])),
            }
        if kind == "wait":
            return {"type": kind, "seconds": float(self._rng.integers(0, 4))}
        return {"type": kind}

    def _remember(self, observation: dict[str, Any]) -> None:
        result = observation.get("result") or {}
        for key in ("dataset",):
            if (
                isinstance(result.get(key), str)
                and result[key] not in self._datasets
                and observation.get("action") == "clean_dataset"
            ):
                self._datasets.append(result[key])
        if isinstance(result.get("job_id"), str) and result["job_id"] not in self._jobs:
            self._jobs.append(result["job_id"])
        if isinstance(result.get("run_id"), str) and result["run_id"] not in self._runs:
            self._runs.append(result["run_id"])
