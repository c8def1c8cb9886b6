"""What the tabular kinds share: the generated table's payload, the profile-driven cleaning, and reading a
target out of a holdout frame."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def cleaning_plan(profile: Mapping[str, Any]) -> tuple[str, ...]:
    """Cleaning strategies for what a data-quality profile shows (missing values, outliers)."""
    columns = list((profile.get("column_profiles") or {}).values())
    plan: list[str] = []
    if any((c.get("missing") or 0) > 0 for c in columns):
        plan.append("impute_median")
    if any((c.get("outliers") or 0) > 0 for c in columns):
        plan.append("clip_outliers")
    return tuple(plan)


def features_and_target(holdout: Any, target: str) -> tuple[Any, Any]:
    """The holdout's feature frame and its target values (a numpy array)."""
    return holdout.drop(columns=[target]), holdout[target].to_numpy()


__all__ = ["cleaning_plan", "features_and_target"]
