"""The task-kind seam: the registry, the DatasetSpec union (a spec without ``kind`` is tabular binary),
the metric goal's validation, the trainer's regressors and a kind's refusal of an algorithm it has not."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from mlsandbox.data.spec import TabularDataset
from mlsandbox.scenario import catalog_ids, load_builtin
from mlsandbox.scenario.models import Scenario
from mlsandbox.tasks import registry
from mlsandbox.tasks.kind import TaskKind
from mlsandbox.tasks.tabular_multiclass import MulticlassDataset
from mlsandbox.tasks.tabular_regression import RegressionDataset
from mlsandbox.world.datasets import generated_dataset

COLUMNS = [
    {"type": "numeric", "name": "a", "weight": 1.5},
    {"type": "numeric", "name": "b", "weight": -1.0},
    {"type": "categorical", "name": "c", "categories": ["x", "y", "z"], "weights": [0.0, 0.5, 1.0]},
]


def _dataset(**kw: Any) -> dict[str, Any]:
    return {"name": "t", "rows": 600, "holdout_rows": 300, "columns": COLUMNS, **kw}


def _scenario(dataset: dict[str, Any], goal: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "kinds-test",
        "title": "t",
        "task": "t",
        "datasets": [dataset],
        "goal": {"dataset": "t", **goal},
    }


def test_builtin_kinds_are_registered_with_their_specs() -> None:
    kinds = registry.kinds()
    assert list(kinds)[:3] == ["tabular", "tabular_multiclass", "tabular_regression"]
    for name, kind in kinds.items():
        assert isinstance(kind, TaskKind) and kind.name == name
        assert kind.spec.model_fields["kind"].default == name
        assert kind.metrics and kind.algorithms
    assert registry.get("tabular_regression").metric().name == "rmse"
    assert registry.get("tabular_multiclass").metric().direction == "max"


def test_a_spec_without_kind_is_tabular_binary_and_every_catalog_yaml_loads_unchanged() -> None:
    spec = TypeAdapter(registry.DatasetSpec).validate_python(_dataset())
    assert type(spec) is TabularDataset and registry.kind_of(spec).name == "tabular"
    for sid in catalog_ids():
        sc = load_builtin(sid)
        for d in sc.datasets:
            assert registry.kind_of(d).name in registry.kinds()
        if sc.goal.type == "registered_model_auc":
            assert type(sc.dataset(sc.goal.dataset)) is TabularDataset
    assert isinstance(
        TypeAdapter(registry.DatasetSpec).validate_python(_dataset(kind="tabular_regression")),
        RegressionDataset,
    )


def test_an_unknown_kind_names_the_field_and_the_known_kinds() -> None:
    with pytest.raises(ValidationError) as e:
        Scenario.model_validate(_scenario(_dataset(kind="images"), {}))
    text = str(e.value)
    assert "datasets.0" in text and "kind: unknown kind" in text
    assert "tabular, tabular_multiclass, tabular_regression" in text
    with pytest.raises(registry.UnknownKind, match="known kinds: tabular"):
        registry.get("images")


def test_a_metric_that_does_not_fit_the_kind_is_refused_naming_the_field() -> None:
    with pytest.raises(
        ValidationError, match=r"goal.metric: metric 'rmse' does not fit kind 'tabular_multiclass'"
    ):
        Scenario.model_validate(
            _scenario(
                _dataset(kind="tabular_multiclass", classes=["a", "b", "c"]),
                {"type": "registered_model_metric", "metric": "rmse", "threshold": 0.5},
            )
        )
    with pytest.raises(
        ValidationError, match=r"goal\.type registered_model_auc: metric 'roc_auc' does not fit"
    ):
        Scenario.model_validate(_scenario(_dataset(kind="tabular_regression"), {"min_auc": 0.7}))
    with pytest.raises(ValidationError, match="exactly one of threshold or baseline_ratio"):
        Scenario.model_validate(
            _scenario(_dataset(kind="tabular_regression"), {"type": "registered_model_metric"})
        )
    ok = Scenario.model_validate(
        _scenario(
            _dataset(kind="tabular_regression"), {"type": "registered_model_metric", "baseline_ratio": 0.5}
        )
    )
    assert ok.work() == ("tabular_regression", "rmse")


def test_multiclass_generation_is_deterministic_with_its_classes_and_label_noise() -> None:
    spec = MulticlassDataset.model_validate(
        _dataset(
            kind="tabular_multiclass",
            classes=["low", "mid", "high"],
            class_shares=[0.5, 0.3, 0.2],
            defects={"injections": [{"type": "label_noise", "rate": 0.1}]},
        )
    )
    manifest, holdout, payloads = generated_dataset(spec, 3)
    again = registry.kind_of(spec).generate(spec, 3)
    assert again.manifest == manifest and again.holdout.equals(holdout)
    assert set(holdout["label"]) == {"low", "mid", "high"}
    counts = manifest["target"]["class_counts_train"]
    assert counts["low"] > counts["mid"] > counts["high"]
    noise = [d for d in manifest["defects"] if d["type"] == "label_noise"]
    assert noise and 0.05 < len(noise[0]["rows"]) / spec.rows < 0.15
    assert set(payloads) == {"csv"}


def test_graders_score_against_the_kinds_baselines() -> None:
    spec = RegressionDataset.model_validate(_dataset(kind="tabular_regression", noise_std=0.2))
    kind = registry.kind_of(spec)
    data = kind.generate(spec, 1)
    y = data.holdout["label"].to_numpy()

    class Perfect:
        def predict(self, x: Any) -> Any:
            return y

    assert kind.score("rmse", Perfect(), data.holdout, spec) == 0.0
    assert kind.baseline("rmse", data.holdout, spec) == pytest.approx(float(np.std(y)))
    mc = registry.get("tabular_multiclass")
    mspec = MulticlassDataset.model_validate(_dataset(kind="tabular_multiclass", classes=["a", "b", "c"]))
    mdata = mc.generate(mspec, 1)
    labels = mdata.holdout["label"].to_numpy()

    class Right:
        def predict(self, x: Any) -> Any:
            return labels

    assert mc.score("macro_f1", Right(), mdata.holdout, mspec) == 1.0
    assert mc.baseline("macro_f1", mdata.holdout, mspec) < 0.25


def test_a_kind_refuses_an_algorithm_it_has_not_and_unknown_hyperparameters() -> None:
    reg = registry.get("tabular_regression")
    reg.check_algorithm("ridge", {"alpha": 2.0})
    with pytest.raises(ValueError, match="algorithm 'logistic_regression' does not fit this dataset's kind"):
        reg.check_algorithm("logistic_regression")
    with pytest.raises(ValueError, match="unknown hyperparameter"):
        reg.check_algorithm("random_forest", {"class_weight": "balanced"})
    with pytest.raises(ValueError, match="does not fit"):
        registry.get("tabular").check_algorithm("ridge")


def test_regression_parameters_are_the_regressors_own() -> None:
    from mlsandbox.workloads.trainer import REGRESSION_PARAMETERS, make_estimator

    for algorithm, names in REGRESSION_PARAMETERS.items():
        assert set(make_estimator(algorithm, {}, 0, "regression").get_params()) == names, algorithm


def test_an_algorithm_that_does_not_fit_the_kind_is_an_error_observation_that_changes_nothing() -> None:
    from mlsandbox.env import MLSandboxEnv, decode_observation

    env = MLSandboxEnv("regression-delivery-times", backend="sim", sandbox="sim-kinds-unit")
    try:
        obs, _ = env.reset(seed=0)
        first = decode_observation(obs)
        assert first["result"]["deliverable"] == {
            "register_model_as": "eta",
            "kind": "tabular_regression",
            "metric": "rmse",
        }
        obs, *_ = env.step(
            {"type": "train_model", "dataset": "raw/orders.parquet", "algorithm": "logistic_regression"}
        )
        seen = decode_observation(obs)
        assert not seen["ok"] and seen["error"]["code"] == "invalid_parameters"
        assert "does not fit this dataset's kind 'tabular_regression'" in seen["error"]["message"]
        assert env.gateway.state.jobs == {}
    finally:
        env.close()


def test_every_builtin_kinds_algorithm_can_be_asked_for() -> None:
    """train_model's algorithm field names every algorithm a built-in kind trains, so none is unreachable."""
    from typing import get_args

    from mlsandbox.gateway.packs.core.actions import Algorithm
    from mlsandbox.tasks.registry import BUILTIN, get

    offered = set(get_args(Algorithm))
    for name in BUILTIN:
        missing = set(get(name).algorithms) - offered
        assert not missing, (name, sorted(missing))


def test_every_kind_declares_rl_slots_and_a_broken_declaration_is_refused() -> None:
    from mlsandbox.plugins import PluginError
    from mlsandbox.tasks.images import ImageClassification
    from mlsandbox.tasks.kind import RL_TRAIN_POSITIONS, TrainSlot
    from mlsandbox.workloads.trainer import ESTIMATOR_PARAMETERS, make_estimator

    for kind in registry.kinds().values():
        slots = kind.train_slots()
        assert 0 < len(slots) <= RL_TRAIN_POSITIONS
        assert {s.algorithm for s in slots} <= set(kind.algorithms)
        assert set(kind.preparation_slots()) <= set(kind.preparations)
    # the binary kind's positions are its algorithms with their defaults, the neural network's learning
    # rate named explicitly at its default value (so a fault that changes unset rates does not reach it)
    binary = [s.action() for s in registry.get("tabular").train_slots()]
    assert [a["algorithm"] for a in binary] == list(ESTIMATOR_PARAMETERS)
    assert [a.get("hyperparams") for a in binary[:3]] == [None, None, None]
    rate = binary[3]["hyperparams"]["learning_rate_init"]
    assert rate == make_estimator("mlp", {}, 0).get_params()["learning_rate_init"]
    images = registry.get("image_classification")
    assert images.train_position("logistic_regression", {"class_weight": "balanced"}) == 2
    assert (
        images.train_position("logistic_regression", {"C": 3.0}) == 0
    )  # no exact slot: the algorithm's first
    assert images.train_position("random_forest") is None

    def broken(**attrs: Any) -> type[ImageClassification]:
        return type("Broken", (ImageClassification,), attrs)

    too_many = tuple(
        TrainSlot("logistic_regression", (("C", float(c)),)) for c in range(RL_TRAIN_POSITIONS + 1)
    )
    with pytest.raises(PluginError, match="declares 5 train slots; the RL action space has 4"):
        registry.check_kind(broken(rl_train_slots=too_many))
    with pytest.raises(PluginError, match=r"unknown hyperparameter\(s\) for cnn: depth"):
        registry.check_kind(broken(rl_train_slots=(TrainSlot("cnn", (("depth", 3),)),)))
    with pytest.raises(PluginError, match="does not fit this dataset's kind 'image_classification'"):
        registry.check_kind(broken(rl_train_slots=(TrainSlot("ridge"),)))
    with pytest.raises(
        PluginError, match=r"preparation slot\(s\) \['drop_na'\] are not among its preparations"
    ):
        registry.check_kind(broken(rl_preparation_slots=("resize", "drop_na")))
