"""The ``predictions_file`` grader: the predictions file the agent's script wrote in its workspace (read
at the episode's end, :attr:`EpisodeState.delivered`), joined on ``id`` against the hidden holdout and
scored by the dataset's kind (:meth:`mlsandbox.tasks.kind.TaskKind.score`, through a predictor that
answers from the file) against the goal's bar (see :mod:`mlsandbox.scenario.predictions_goal`).

A file that cannot be read as one prediction per holdout row earns nothing, with a grade message saying
what is wrong with it.
"""

from __future__ import annotations

import io
import logging
import math
from typing import Any

import numpy as np
import pandas as pd

from mlsandbox.backends.protocols import Tracking
from mlsandbox.evaluation.reward import Grade
from mlsandbox.scenario.predictions_goal import ID_COLUMN, PREDICTION_COLUMN, PROBABILITY_COLUMN
from mlsandbox.tasks.registry import kind_of
from mlsandbox.world.episode import EpisodeState

log = logging.getLogger(__name__)


class MalformedPredictions(ValueError):
    """The predictions file is not one prediction per holdout id (the message says why)."""


class FilePredictions:
    """A predictor answering from a predictions file: ``predict`` and ``predict_proba`` look the rows of
    a frame up by its index (the holdout's ids)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame = frame

    @classmethod
    def parse(cls, data: bytes, ids: pd.Index) -> FilePredictions:
        """Parse the CSV and check it has exactly one row for each of ``ids``."""
        try:
            frame = pd.read_csv(io.BytesIO(data))
        except Exception as e:
            raise MalformedPredictions(f"not a CSV file ({type(e).__name__}: {e})") from None
        if ID_COLUMN not in frame.columns or (
            PREDICTION_COLUMN not in frame.columns and PROBABILITY_COLUMN not in frame.columns
        ):
            raise MalformedPredictions(
                f"needs the columns {ID_COLUMN!r} and {PREDICTION_COLUMN!r} (or {PROBABILITY_COLUMN!r}); "
                f"it has {', '.join(map(repr, frame.columns)) or 'none'}"
            )
        try:
            row_ids = pd.to_numeric(frame[ID_COLUMN], errors="raise").astype("int64")
        except (ValueError, TypeError):
            raise MalformedPredictions(f"column {ID_COLUMN!r} holds values that are not integers") from None
        dup = row_ids[row_ids.duplicated()]
        if len(dup):
            raise MalformedPredictions(f"{len(dup)} duplicate id(s), e.g. {int(dup.iloc[0])}")
        frame = frame.assign(**{ID_COLUMN: row_ids}).set_index(ID_COLUMN)
        missing, unknown = ids.difference(frame.index), frame.index.difference(ids)
        if len(missing) or len(unknown):
            parts = []
            if len(missing):
                parts.append(f"{len(missing)} of the {len(ids)} ids have no prediction (e.g. {missing[0]})")
            if len(unknown):
                parts.append(f"{len(unknown)} id(s) are not in the features file (e.g. {unknown[0]})")
            raise MalformedPredictions("; ".join(parts))
        for column in (PREDICTION_COLUMN, PROBABILITY_COLUMN):
            if column in frame.columns and frame[column].isna().any():
                n = int(frame[column].isna().sum())
                raise MalformedPredictions(f"{n} row(s) have no {column!r}")
        if PROBABILITY_COLUMN in frame.columns:
            p = pd.to_numeric(frame[PROBABILITY_COLUMN], errors="coerce")
            if p.isna().any() or ((p < 0) | (p > 1)).any():
                raise MalformedPredictions(f"column {PROBABILITY_COLUMN!r} must hold numbers from 0 to 1")
            frame[PROBABILITY_COLUMN] = p
        return cls(frame.loc[ids])

    def predict(self, x: pd.DataFrame) -> np.ndarray[Any, Any]:
        if PREDICTION_COLUMN not in self._frame.columns:
            raise MalformedPredictions(
                f"the metric needs a {PREDICTION_COLUMN!r} column (the predicted value)"
            )
        return self._frame.loc[x.index, PREDICTION_COLUMN].to_numpy()

    def predict_proba(self, x: pd.DataFrame) -> np.ndarray[Any, Any]:
        if PROBABILITY_COLUMN not in self._frame.columns:
            raise MalformedPredictions(
                f"the metric needs a {PROBABILITY_COLUMN!r} column (the positive class's probability)"
            )
        p = self._frame.loc[x.index, PROBABILITY_COLUMN].to_numpy(dtype=float)
        return np.column_stack([1.0 - p, p])


def holdout_with_ids(holdout: pd.DataFrame) -> pd.DataFrame:
    """The holdout indexed by the ids its features file carries (0 to n-1, in its order)."""
    return holdout.reset_index(drop=True)


def grade_predictions_file(state: EpisodeState, tracking: Tracking) -> Grade:
    goal = state.scenario.goal
    spec = state.scenario.dataset(goal.dataset)
    kind = kind_of(spec)
    metric = kind.metric(getattr(goal, "metric", None))
    holdout = holdout_with_ids(state.ground_truth.holdouts[goal.dataset])
    baseline = kind.baseline(metric.name, holdout, spec)
    ratio = getattr(goal, "baseline_ratio", None)
    bar = float(baseline * ratio) if ratio is not None else float(getattr(goal, "threshold", 0.0))
    path = str(getattr(goal, "path", ""))
    details: dict[str, Any] = {
        "kind": kind.name,
        "metric": metric.name,
        "holdout_metric": None,
        "baseline": round(baseline, 6),
        "bar": round(bar, 6),
        "predictions_file": path,
    }

    def fail(reason: str) -> Grade:
        return Grade(None, None, None, 0.0, False, reason, details)

    delivered = state.delivered.get(path)
    if delivered is None or delivered.data is None:
        why = delivered.problem if delivered is not None and delivered.problem else "it does not exist"
        return fail(f"no predictions file {path!r} in the workspace: {why}")
    try:
        predictor = FilePredictions.parse(delivered.data, holdout.index)
        value = kind.score(metric.name, predictor, holdout, spec)
    except MalformedPredictions as e:
        return fail(f"predictions file {path!r} refused: {e}")
    except Exception as e:  # predictions the kind's metric cannot take (e.g. labels of another type)
        log.info("grading the predictions file failed: %s", e)
        return fail(f"predictions file {path!r} could not be scored: {type(e).__name__}: {e}")
    if not math.isfinite(value):
        return fail(f"holdout {metric.name} of the predictions is not finite")
    span = bar - baseline
    progress = (value - baseline) / span if span != 0 else float(metric.better(value, bar))
    score = min(1.0, max(0.0, progress))
    success = metric.better(value, bar)
    relation = (">=" if success else "<") if metric.direction == "max" else ("<=" if success else ">")
    reason = f"predictions' holdout {metric.name} {value:.4f} {relation} {bar:.4f} (baseline {baseline:.4f})"
    details["holdout_metric"] = round(value, 6)
    auc = value if metric.name == "roc_auc" else None
    return Grade(None, None, auc, score, success, reason, details)


__all__ = ["FilePredictions", "MalformedPredictions", "grade_predictions_file", "holdout_with_ids"]
