"""A rule-based baseline: inspect -> clean what the profile shows -> train -> wait -> register -> submit."""

from __future__ import annotations

from collections import deque
from typing import Any

from mlsandbox.tasks.kind import TaskKind
from mlsandbox.tasks.registry import DEFAULT_KIND, get


class RuleAgent:
    """Follows the checklist an ML engineer would, reading only what observations say."""

    name = "rule"

    def __init__(self, seed: int | None = None, algorithm: str = "gradient_boosting") -> None:
        self.algorithm = algorithm
        self._plan: deque[dict[str, Any]] = deque()
        self._phase = "inspect"
        self._dataset: str | None = None
        self._job: str | None = None
        self._model_name = "model"
        self._waits = 0
        self._kind: TaskKind = get(DEFAULT_KIND)
        self._algorithm = algorithm

    def reset(self, observation: dict[str, Any], seed: int | None = None) -> None:
        result = observation.get("result") or {}
        deliverable = result.get("deliverable") or {}
        self._model_name = deliverable.get("register_model_as", "model")
        self._kind = get(str(deliverable.get("kind") or DEFAULT_KIND))
        self._algorithm = self.algorithm
        names = [d["name"] for d in result.get("datasets", [])]
        # Prefer Parquet (typed) over CSV when both hold the same data.
        names.sort(key=lambda n: (not n.endswith(".parquet"), n))
        self._dataset = names[0] if names else None
        self._phase = "inspect"
        self._job = None
        self._waits = 0
        self._plan.clear()

    def act(self, observation: dict[str, Any]) -> dict[str, Any]:
        result = observation.get("result") or {}
        if self._dataset is None:
            return {"type": "submit"}
        if self._phase == "inspect":
            self._phase = "clean"
            return {"type": "check_data_quality", "dataset": self._dataset}
        if self._phase == "clean":
            if observation.get("action") == "check_data_quality" and observation.get("ok"):
                self._plan_cleaning(result.get("profile") or {})
            elif observation.get("action") == "clean_dataset" and observation.get("ok"):
                self._dataset = result["dataset"]
            if self._plan:
                step = self._plan.popleft()
                return {"type": "clean_dataset", "dataset": self._dataset, "strategy": step["strategy"]}
            self._phase = "train"
        if self._phase == "train":
            self._phase = "wait"
            return {
                "type": "train_model",
                "dataset": self._dataset,
                "algorithm": self._algorithm,
                "resources": {"cpus": 1, "memory_mb": 1024},
            }
        if self._phase == "wait":
            if observation.get("action") == "train_model" and observation.get("ok"):
                self._job = result["job_id"]
            state = result.get("state")
            if observation.get("action") == "get_job" and state == "succeeded":
                self._phase = "register"
                return {"type": "register_model", "run_id": result["run_id"], "name": self._model_name}
            if observation.get("action") == "get_job" and state in ("failed", "cancelled"):
                return {"type": "submit"}
            if self._job is None:
                return {"type": "submit"}
            if observation.get("action") == "wait" or self._waits > 20:
                return {"type": "get_job", "job_id": self._job}
            self._waits += 1
            return {"type": "wait", "seconds": 30}  # returns early when a job changes state
        return {"type": "submit"}

    def _plan_cleaning(self, profile: dict[str, Any]) -> None:
        """The dataset's kind decides from the profile: what to clean, and the algorithm (this agent's own
        when it fits the kind)."""
        policy = self._kind.policy(profile)
        self._plan.extend({"strategy": s} for s in policy.preparations)
        if self.algorithm not in self._kind.algorithms:
            self._algorithm = policy.algorithm
