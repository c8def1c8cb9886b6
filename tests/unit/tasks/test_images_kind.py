"""The image classification kind: the generator's defects, the profile that shows them, the preparation
steps that fix them, and real fits of the pixel-feature baseline against the bar (a good pipeline clears
it, a degenerate one does not); the small CNN where PyTorch is installed."""

from __future__ import annotations

import base64
import functools

import pandas as pd
import pytest

from mlsandbox.tasks.images import KIND
from mlsandbox.tasks.images.spec import ImageClassificationDataset
from mlsandbox.tasks.kind import Generated
from mlsandbox.tasks.registry import get
from mlsandbox.workloads import image_classifier
from mlsandbox.workloads.image_models import ImageFeatures, SmallCNN, decode

SPEC = ImageClassificationDataset(
    name="parts",
    rows=400,
    holdout_rows=200,
    label_probabilities=[0.4, 0.3, 0.2, 0.1],
    unreadable_rate=0.05,
    size_mismatch_rate=0.05,
    shift="dark",
    shift_share=1.0,
)
COLUMNS = {"column": "image", "label_column": "label"}


@functools.cache
def _data() -> Generated:
    return KIND.generate(SPEC, 3)


def _prepared(frame: pd.DataFrame) -> pd.DataFrame:
    for step in ("drop_unreadable", "resize"):
        frame, _ = KIND.prepare(frame, step, "label")
    return frame


def test_the_kind_is_registered_with_its_metrics_and_steps() -> None:
    assert get("image_classification") is KIND
    assert KIND.metric().name == "accuracy" and KIND.metric("macro_f1").direction == "max"
    with pytest.raises(KeyError, match="roc_auc"):
        KIND.metric("roc_auc")
    with pytest.raises(ValueError, match="does not fit"):
        KIND.check_algorithm("gradient_boosting")


def test_the_generator_is_deterministic_and_its_manifest_names_every_defect() -> None:
    data = _data()
    frame = data.train_table.to_pandas()
    assert list(frame.columns) == ["file", "captured_at", "image", "label"]
    assert len(frame) == SPEC.rows and len(data.holdout) == SPEC.holdout_rows
    assert len(data.manifest["unreadable"]) == 20 and len(data.manifest["size_mismatches"]) == 20
    assert data.manifest["shift"]["holdout_shifted_images"] == SPEC.holdout_rows
    assert KIND.generate(SPEC, 3).train_table.equals(data.train_table)
    for name in data.manifest["unreadable"][:3]:
        with pytest.raises(OSError):
            decode(frame.loc[frame["file"] == name, "image"].iloc[0])


def test_the_profile_shows_the_defects_and_the_policy_fixes_them() -> None:
    profile = KIND.profile(_data().train_table.to_pandas(), "label")
    assert profile["unreadable_images"] == 20
    assert profile["common_size"] == "32x32" and len(profile["image_sizes"]) > 1
    assert profile["imbalance_ratio"] > 2.5
    assert profile["by_time"]["brightness_ratio"] < 0.7
    assert 0.7 < profile["by_time"]["sharpness_ratio"] < 1.4  # darker is not blurrier
    policy = KIND.policy(profile)
    assert policy.preparations == ("drop_unreadable", "resize", "augment_brightness")
    assert policy.algorithm == "logistic_regression" and policy.hyperparams == {"class_weight": "balanced"}


def test_raw_images_fail_to_train_with_the_reason() -> None:
    raw = _data().train_table.to_pandas()
    out = image_classifier.fit(raw, "logistic_regression", {}, 1, **COLUMNS)
    assert out.failure is not None and out.failure[0] == "invalid_data"
    dropped, _ = KIND.prepare(raw, "drop_unreadable", "label")
    out = image_classifier.fit(dropped, "logistic_regression", {}, 1, **COLUMNS)
    assert out.failure is not None and "same shape" in out.failure[1]


def test_a_good_pipeline_beats_the_bar_and_a_degenerate_one_does_not() -> None:
    data = _data()
    clean = _prepared(data.train_table.to_pandas())
    augmented, summary = KIND.prepare(clean, "augment_brightness", "label")
    assert summary["images_added"] == len(clean)
    baseline = KIND.baseline("accuracy", data.holdout, SPEC)
    good = image_classifier.fit(augmented, "logistic_regression", {"class_weight": "balanced"}, 1, **COLUMNS)
    assert good.failure is None
    assert KIND.score("accuracy", good.model, data.holdout, SPEC) > max(0.85, baseline + 0.3)
    weak = image_classifier.fit(clean, "logistic_regression", {"C": 1e-6}, 1, **COLUMNS)
    assert KIND.score("macro_f1", weak.model, data.holdout, SPEC) < 0.5


def test_estimator_parameters_are_the_estimators_own() -> None:
    from sklearn.linear_model import LogisticRegression

    params = image_classifier.ESTIMATOR_PARAMETERS
    assert params["logistic_regression"] == frozenset(LogisticRegression().get_params())
    assert params["cnn"] == frozenset(SmallCNN().get_params())
    assert image_classifier.hyperparameter_problems("cnn", {"epochs": 3}) == []
    assert image_classifier.hyperparameter_problems("cnn", {"C": 1})


def test_the_trainer_offers_the_image_algorithms_and_lets_only_the_cnn_import_torch() -> None:
    from mlsandbox.workloads import trainer

    assert set(image_classifier.ALGORITHMS) <= {*trainer.ALGORITHMS, *trainer.OWN_ALGORITHMS}
    assert set(trainer.TORCH_ALGORITHMS) == image_classifier.TORCH_ALGORITHMS
    assert trainer.OWN_LEARNERS["images"] == image_classifier.__name__


def test_the_cnn_is_refused_naming_the_install_command_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import mlsandbox.tasks.images as images

    monkeypatch.setattr(images, "torch_available", lambda: False)
    with pytest.raises(ValueError, match=r"mlsandbox\[rl\]"):
        KIND.check_algorithm("cnn", {"epochs": 2})
    KIND.check_algorithm("logistic_regression", {"C": 2})


def test_the_cnn_trains_with_torch_and_predicts_without_it() -> None:
    pytest.importorskip("torch")
    clean = _prepared(_data().train_table.to_pandas())
    out = image_classifier.fit(clean, "cnn", {"epochs": 2, "channels": 8}, 1, **COLUMNS)
    assert out.failure is None, out.failure
    cnn = out.model.named_steps["model"]
    assert all(type(getattr(cnn, a)).__module__ == "numpy" for a in ("conv1_w_", "head_w_"))
    assert set(KIND.predictions(out.model, clean.head(5))[0]) == {"label"}


def test_a_deployment_answers_a_label_per_image_sent_as_base64() -> None:
    from mlsandbox.workloads.model_server import LoadedModel

    clean = _prepared(_data().train_table.to_pandas())
    model = image_classifier.fit(clean, "logistic_regression", {}, 1, **COLUMNS).model
    assert isinstance(model.named_steps["features"], ImageFeatures)
    rows = clean.head(4)
    sent = pd.DataFrame({"image": [base64.b64encode(b).decode() for b in rows["image"]]})
    served = LoadedModel(model, "sorter", "1", [("image", "string")], classes=list(model.classes_))
    labels, _ = served.predict(sent)
    assert labels == list(model.predict(rows[["image"]]))
    assert [p["label"] for p in KIND.predictions(model, sent)] == labels


def test_the_model_round_trips_through_skops_trusting_only_safe_types() -> None:
    import skops.io

    from mlsandbox.backends.common.mlflow_tracking import SAFE_TRUSTED_PREFIXES

    clean = _prepared(_data().train_table.to_pandas())
    model = image_classifier.fit(clean, "logistic_regression", {}, 1, **COLUMNS).model
    data = skops.io.dumps(model)
    trusted = skops.io.get_untrusted_types(data=data)
    assert all(t.startswith(SAFE_TRUSTED_PREFIXES) for t in trusted), trusted
    loaded = skops.io.loads(data, trusted=trusted)
    assert list(loaded.predict(clean.head(8)[["image"]])) == list(model.predict(clean.head(8)[["image"]]))


def test_an_inspection_dataset_has_the_inspection_labels_and_refuses_shapes_among_them() -> None:
    from pydantic import ValidationError

    spec = ImageClassificationDataset(
        name="inspections", rows=100, holdout_rows=50, labels=["ok", "scratch", "chip", "stain"], shift="blur"
    )
    data = KIND.generate(spec, 1)
    assert set(data.train_table.to_pandas()["label"]) == set(data.holdout["label"]) == set(spec.labels)
    assert data.manifest["labels"] == ["ok", "scratch", "chip", "stain"]
    with pytest.raises(ValidationError, match=r"labels\n.*mixes shape classes \['square'\] with inspection"):
        ImageClassificationDataset(name="parts", labels=["ok", "square", "stain"])
    with pytest.raises(ValidationError, match=r"labels\n.*entries must be distinct"):
        ImageClassificationDataset(name="parts", labels=["ok", "ok"])
