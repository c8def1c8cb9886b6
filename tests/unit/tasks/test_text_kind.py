"""The text classification kind: its generator's defects, profile, preparation and real fits."""

from __future__ import annotations

import pandas as pd
import pytest

from mlsandbox.tasks.registry import get
from mlsandbox.tasks.text import KIND
from mlsandbox.tasks.text.generate import generate_text_classification
from mlsandbox.tasks.text.quality import prepare, profile
from mlsandbox.tasks.text.spec import TextClassificationDataset
from mlsandbox.workloads import text_classifier

SPEC = TextClassificationDataset(
    name="tickets",
    domain="support_tickets",
    rows=1500,
    holdout_rows=600,
    label_noise=0.1,
    duplicate_rate=0.05,
    empty_rate=0.03,
    truncated_rate=0.08,
    drift=0.7,
    ambiguity=0.08,
)
COLUMNS = {"text_column": "text", "label_column": "label"}


def _prepared(frame: pd.DataFrame) -> pd.DataFrame:
    for step in KIND.policy(profile(frame, "text", "label", "created_at")).preparations:
        frame, _ = prepare(frame, step, **COLUMNS)  # type: ignore[arg-type]
    return frame


def test_spec_refuses_what_does_not_fit() -> None:
    with pytest.raises(ValueError, match="not labels of"):
        TextClassificationDataset(name="t", domain="clinical_notes", labels=["billing", "normal"])
    with pytest.raises(ValueError, match="extra"):
        TextClassificationDataset.model_validate({"name": "t", "domain": "support_tickets", "x": 1})


def test_generator_manifest_and_profile_show_every_defect() -> None:
    data = generate_text_classification(SPEC, 2)
    m = data.manifest
    assert m["duplicates"] == 75 and m["empty_documents"] == 45 and m["truncated_documents"] == 120
    assert m["drift"]["holdout_drifted_documents"] > 300 and m["label_noise_rows"]
    found = profile(data.train, "text", "label", "created_at")
    assert found["empty_documents"] == 45 and found["duplicate_rows"] >= 75
    assert found["short_documents"] >= 100
    assert {"laggy", "profile", "parcel", "fault"} & set(found["vocabulary_drift"]["rising_terms"])
    assert KIND.policy(found).preparations == ("drop_empty", "dedupe", "drop_short")
    clean = _prepared(data.train)
    after = profile(clean, "text", "label", "created_at")
    assert after["empty_documents"] == 0 and after["duplicate_rows"] == 0


def test_hyperparameters_are_checked_against_the_estimators() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import ComplementNB
    from sklearn.svm import LinearSVC

    params = text_classifier.ESTIMATOR_PARAMETERS
    assert params["logistic_regression"] == set(LogisticRegression().get_params())
    assert params["linear_svc"] == set(LinearSVC().get_params())
    assert params["naive_bayes"] == set(ComplementNB().get_params())
    assert text_classifier.hyperparameter_problems("linear_svc", {"C": 2, "tfidf__min_df": 3}) == []
    assert text_classifier.hyperparameter_problems("naive_bayes", {"C": 2})
    assert text_classifier.hyperparameter_problems("naive_bayes", {"tfidf__tokenizer": "x"})
    with pytest.raises(ValueError, match="does not fit"):
        get("text_classification").check_algorithm("gradient_boosting")


def test_empty_documents_fail_as_real_code_fails() -> None:
    data = generate_text_classification(SPEC, 1)
    out = text_classifier.fit(data.train, "logistic_regression", {}, 1, **COLUMNS)
    assert out.failure is not None and "invalid document" in out.failure[1]


def test_a_sensible_pipeline_beats_the_bar_and_degenerate_ones_fail_it() -> None:
    data = KIND.generate(SPEC, 1)
    clean = _prepared(data.train_table.to_pandas())
    bar = 0.8
    assert KIND.baseline("macro_f1", data.holdout, SPEC) < 0.2

    def holdout_f1(algorithm: str, hyperparams: dict[str, object]) -> float:
        out = text_classifier.fit(clean, algorithm, hyperparams, 1, **COLUMNS)
        assert out.failure is None, out.failure
        return KIND.score("macro_f1", out.model, data.holdout, SPEC)

    assert holdout_f1("logistic_regression", {}) >= bar
    assert holdout_f1("linear_svc", {"tfidf__ngram_range": [1, 1]}) >= bar
    assert holdout_f1("logistic_regression", {"tfidf__max_features": 2}) < bar
    assert holdout_f1("logistic_regression", {"C": 1e-4}) < bar


def test_predictions_are_a_label_per_document() -> None:
    data = KIND.generate(SPEC, 1)
    clean = _prepared(data.train_table.to_pandas())
    model = text_classifier.fit(clean, "naive_bayes", {}, 1, **COLUMNS).model
    out = KIND.predictions(model, pd.DataFrame({"text": ["I was charged twice for plan Pro", ""]}))
    assert out[0] == {"label": "billing"} and len(out) == 2


def test_the_trainer_offers_the_kinds_algorithms() -> None:
    from mlsandbox.workloads import forecasting, trainer

    offered = {*trainer.ALGORITHMS, *trainer.REGRESSION_PARAMETERS, *trainer.OWN_ALGORITHMS}
    assert {*forecasting.ALGORITHMS, *text_classifier.ALGORITHMS} <= offered


def test_the_drift_is_learnt_from_the_newest_rows_only() -> None:
    data = KIND.generate(SPEC, 1)
    clean = _prepared(data.train_table.to_pandas())
    older = clean.sort_values("created_at").iloc[: int(len(clean) * (1 - SPEC.recent_share))]

    def holdout_f1(frame: pd.DataFrame) -> float:
        out = text_classifier.fit(frame, "logistic_regression", {}, 1, **COLUMNS)
        return KIND.score("macro_f1", out.model, data.holdout, SPEC)

    assert holdout_f1(older) < 0.85 < holdout_f1(clean)


def test_a_deployment_of_the_model_answers_a_label_per_row() -> None:
    from mlsandbox.workloads.model_server import LoadedModel

    data = KIND.generate(SPEC, 1)
    model = text_classifier.fit(_prepared(data.train_table.to_pandas()), "linear_svc", {}, 1, **COLUMNS).model
    served = LoadedModel(model, "router", "1", [("text", "string")], classes=list(model.classes_))
    labels, _ = served.predict(pd.DataFrame({"text": ["my parcel with plan Pro is still missing"]}))
    assert labels == ["shipping"]
