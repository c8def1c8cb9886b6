"""Holdout scores remembered by the identity of the model and the holdout, and only while both live."""

from __future__ import annotations

import gc

import pandas as pd

from mlsandbox.evaluation import holdout_memo


class Model:
    def __init__(self, value: float) -> None:
        self.value = value


def test_the_same_objects_are_scored_once() -> None:
    holdout_memo.clear()
    calls: list[int] = []
    model, rows = Model(0.8), pd.DataFrame({"x": [1, 2]})

    def compute() -> float:
        calls.append(1)
        return model.value

    assert holdout_memo.score(model, rows, "auc", compute) == 0.8
    assert holdout_memo.score(model, rows, "auc", compute) == 0.8
    assert len(calls) == 1
    holdout_memo.score(model, rows, "f1", compute)  # another score is computed
    holdout_memo.score(model, rows.copy(), "auc", compute)  # equal rows, another object: computed
    holdout_memo.score(Model(0.8), rows, "auc", compute)  # another model: computed
    assert len(calls) == 4


def test_an_id_reused_by_a_new_model_is_never_matched() -> None:
    holdout_memo.clear()
    rows = pd.DataFrame({"x": [1]})
    seen = []
    for value in (0.1, 0.2, 0.3, 0.4):
        m = Model(value)
        seen.append(holdout_memo.score(m, rows, "auc", lambda m=m: m.value))
        del m
        gc.collect()
    assert seen == [0.1, 0.2, 0.3, 0.4]


def test_objects_without_weak_references_are_scored_every_time() -> None:
    holdout_memo.clear()
    calls: list[int] = []
    model = (1, 2)  # a tuple cannot be weakly referenced
    rows = pd.DataFrame({"x": [1]})
    for _ in range(3):
        holdout_memo.score(model, rows, "auc", lambda: calls.append(1) or 0.5)
    assert len(calls) == 3
