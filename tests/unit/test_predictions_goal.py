"""The ``predictions_file`` goal off services: its model, the grader's join on ids against the hidden
holdout (and its refusals of malformed files), and the episode's side on sim (the features in the
bucket, the deliverable, the grade when the workspace was never used)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from mlsandbox.backends import get_backend
from mlsandbox.evaluation.predictions_grade import grade_predictions_file, holdout_with_ids
from mlsandbox.evaluation.reward import grade_episode
from mlsandbox.gateway import Gateway
from mlsandbox.scenario import Scenario, load_builtin
from mlsandbox.scenario.predictions_goal import features_key
from mlsandbox.world.datasets import generated_dataset
from mlsandbox.world.episode import DeliveredFile, EpisodeState


def scenario(**goal: Any) -> Scenario:
    base = load_builtin("tabular-quality-basic")
    data = base.model_dump(mode="json")
    data["goal"] = {"type": "predictions_file", "dataset": "customers", "threshold": 0.75, **goal}
    return Scenario.model_validate(data)


def state(sc: Scenario) -> tuple[EpisodeState, pd.DataFrame]:
    st = EpisodeState(episode_id="1-abc", scenario=sc, seed=1, sandbox="t")
    _, holdout, _ = generated_dataset(sc.dataset("customers"), 1000)
    st.ground_truth.holdouts["customers"] = holdout
    return st, holdout_with_ids(holdout)


def deliver(st: EpisodeState, frame: pd.DataFrame | bytes, path: str = "predictions.csv") -> None:
    data = frame if isinstance(frame, bytes) else frame.to_csv(index=False).encode()
    st.delivered[path] = DeliveredFile(data)


def test_the_goal_is_typed_and_refuses_a_path_out_a_metric_of_another_kind_and_two_bars() -> None:
    sc = scenario(metric="accuracy", path="out/p.csv")
    assert sc.goal.type == "predictions_file" and sc.work() == ("tabular", "accuracy")
    for bad, needle in (
        ({"path": "../p.csv"}, "relative"),
        ({"path": "/tmp/p.csv"}, "relative"),
        ({"metric": "rmse"}, "goal.metric"),
        ({"baseline_ratio": 1.1}, "exactly one"),
        ({"extra": 1}, "extra"),
    ):
        with pytest.raises(ValidationError, match=needle):
            scenario(**bad)


def test_right_predictions_joined_on_ids_in_any_order_succeed() -> None:
    st, holdout = state(scenario())
    y = holdout["label"].to_numpy()
    rows = pd.DataFrame({"id": holdout.index, "prediction": y, "probability": y * 0.9 + 0.05})
    deliver(st, rows.sample(frac=1.0, random_state=0))  # shuffled: the join is on id
    grade = grade_episode(st, tracking=None)  # type: ignore[arg-type]
    assert grade.success and grade.auc == 1.0, grade.reason
    assert grade.details["holdout_metric"] == 1.0 and grade.details["predictions_file"] == "predictions.csv"
    noise = np.random.default_rng(0).random(len(y))
    deliver(st, pd.DataFrame({"id": holdout.index, "probability": noise}))
    weak = grade_predictions_file(st, tracking=None)  # type: ignore[arg-type]
    assert not weak.success and "<" in weak.reason and 0.0 <= weak.score < 0.5


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "no predictions file 'predictions.csv' in the workspace"),
        (b"\x00\x01\x02 not a table", "needs the columns"),
        (b"row,prediction\n0,1\n", "needs the columns 'id' and 'prediction'"),
        ("missing", "have no prediction"),
        ("unknown", "not in the features file"),
        ("duplicate", "duplicate id"),
        ("no-probability", "needs a 'probability' column"),
        ("out-of-range", "numbers from 0 to 1"),
        ("ids-not-integers", "not integers"),
    ],
)
def test_a_malformed_file_earns_nothing_with_a_clear_message(content: Any, needle: str) -> None:
    st, holdout = state(scenario())
    ids, y = holdout.index.to_numpy(), holdout["label"].to_numpy()
    good = pd.DataFrame({"id": ids, "prediction": y, "probability": y.astype(float)})
    frames = {
        "missing": good.iloc[:-3],
        "unknown": pd.concat([good, pd.DataFrame({"id": [10**6], "prediction": [1], "probability": [1.0]})]),
        "duplicate": pd.concat([good, good.iloc[:1]]),
        "no-probability": good.drop(columns=["probability"]),
        "out-of-range": good.assign(probability=good["probability"] * 2),
        "ids-not-integers": good.assign(id=[f"x{i}" for i in ids]),
    }
    if content is not None:
        deliver(st, frames[content] if isinstance(content, str) else content)
    grade = grade_episode(st, tracking=None)  # type: ignore[arg-type]
    assert not grade.success and grade.score == 0.0
    assert needle in grade.reason, grade.reason


def test_on_sim_the_features_are_in_the_bucket_and_an_unused_workspace_is_the_grade() -> None:
    backend = get_backend("sim")
    backend.up()
    sc = scenario()
    gw = Gateway(backend.runtime(), sc, seed=3)
    first = gw.start()
    try:
        deliverable = first["result"]["deliverable"]
        assert deliverable["predictions_file"]["write_to"] == "predictions.csv"
        assert deliverable["predictions_file"]["predict_for"] == features_key("customers")
        assert "register_model_as" not in deliverable
        data = gw.runtime.object_store.get_object(gw.state.bucket, features_key("customers"))
        features = pd.read_csv(pd.io.common.BytesIO(data))
        holdout = gw.state.ground_truth.holdouts["customers"]
        assert list(features["id"]) == list(range(len(holdout))) and "label" not in features.columns
        grade = gw.step({"type": "submit"}).info["grade"]
        assert not grade["success"] and "the workspace was never used" in grade["reason"], grade
    finally:
        gw.close()
