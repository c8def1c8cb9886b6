"""The goal for several models of different priorities (``registered_models``).

A team asks for more than one model at once and says which matters most::

    goal:
      type: registered_models
      models:
        - {dataset: customers, model_name: churn, min_auc: 0.75, priority: high, deadline_s: 90}
        - {dataset: accounts, model_name: upsell, min_auc: 0.7}

Each model is graded as a ``registered_model_auc`` goal's is (the latest version registered under its
name, on its dataset's hidden holdout), by its own deadline when it has one (seconds of the episode's
clock from the first observation) and by the budget's ``deadline_s``. The episode succeeds when every
``high`` model reaches its bar; the task score is the models' scores weighted by priority
(:data:`PRIORITY_WEIGHTS`), so a ``normal`` model adds to the reward but is not needed for success.
The first ``high`` model is the goal's primary (``dataset``, ``model_name``, ``min_auc``): what the
first observation names as ``register_model_as`` and what the kind-level views of the goal read.

Only the binary tabular kind is graded this way (ROC AUC); a model of another kind is refused, naming
its dataset.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PRIORITY_WEIGHTS: dict[str, float] = {"high": 2.0, "normal": 1.0}
"""How much each priority weighs in the task score."""


class ModelTarget(BaseModel):
    """One model the goal asks for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str
    """The dataset whose hidden holdout grades the model."""
    model_name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
    min_auc: float = Field(default=0.75, gt=0.5, le=1.0)
    priority: Literal["high", "normal"] = "normal"
    deadline_s: float | None = Field(default=None, gt=0)
    """Seconds of the episode's clock, from the first observation, by which this model must be
    registered (a version registered later is not graded)."""


class RegisteredModelsGoal(BaseModel):
    """Several registered models, each graded on its dataset's holdout (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["registered_models"] = "registered_models"
    models: list[ModelTarget] = Field(min_length=2, max_length=8)

    @model_validator(mode="after")
    def _one_high_and_distinct_names(self) -> RegisteredModelsGoal:
        names = [m.model_name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"goal.models: each model needs its own model_name, got {names}")
        if not any(m.priority == "high" for m in self.models):
            raise ValueError("goal.models: at least one model must have priority high (what success needs)")
        return self

    @property
    def primary(self) -> ModelTarget:
        return next(m for m in self.models if m.priority == "high")

    @property
    def dataset(self) -> str:
        return self.primary.dataset

    @property
    def model_name(self) -> str:
        return self.primary.model_name

    @property
    def min_auc(self) -> float:
        return self.primary.min_auc


def check_models_goal(goal: RegisteredModelsGoal, datasets: dict[str, object], binary_kind: str) -> None:
    """A :class:`ValueError` naming the model whose dataset is unknown or not of the binary kind."""
    for i, m in enumerate(goal.models):
        spec = datasets.get(m.dataset)
        if spec is None:
            raise ValueError(
                f"goal.models[{i}].dataset {m.dataset!r} is not one of the datasets {sorted(datasets)}"
            )
        kind = str(getattr(spec, "kind", binary_kind))
        if kind != binary_kind:
            raise ValueError(
                f"goal.models[{i}]: dataset {m.dataset!r} is of kind {kind!r}; a registered_models goal "
                f"grades binary classification ({binary_kind!r}) by ROC AUC only"
            )


__all__ = ["PRIORITY_WEIGHTS", "ModelTarget", "RegisteredModelsGoal", "check_models_goal"]
