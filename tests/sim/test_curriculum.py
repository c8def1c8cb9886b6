"""The automatic curriculum of ``mlsandbox train``: stages derived from the declared family, easiest first
and the family itself last; advancing on a window of successes; every env of a vector env on the same
stage; evaluation on the declared family only."""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from pathlib import Path
from typing import Any

import pytest

from mlsandbox.agents import training
from mlsandbox.agents.curriculum import (
    DEFAULT_STAGES,
    FAULT_VARIANTS,
    INSTANCE_STAGES,
    Curriculum,
    EasiestShare,
    Loosening,
    Ranked,
    declared_stages,
    instance_stages,
    loosen,
    parse_stages,
    stage_scenarios,
)
from mlsandbox.agents.transfer import transfer_env
from mlsandbox.errors import ScenarioError
from mlsandbox.instances.models import materialize
from mlsandbox.scenario import Scenario, load_builtin, parse_scenario
from mlsandbox.tasks.registry import kind_of

FAMILIES = [
    "forecast-web-visits-basic",
    "churn-clean-small",
    "churn-imbalanced-missing",
    "tabular-quality-basic",
    "multiclass-ticket-priority",
    "regression-delivery-times",
    "text-support-ticket-routing",
]


def _bar(s: Scenario) -> tuple[float, str]:
    """The goal's bar and the direction in which it is harder ("max": higher is harder)."""
    goal: Any = s.goal
    if goal.type == "registered_model_auc":
        return goal.min_auc, "max"
    direction = str(kind_of(s.dataset(goal.dataset)).metric(goal.metric).direction)
    return (goal.threshold if goal.threshold is not None else goal.baseline_ratio), direction


def _defects(s: Scenario) -> float:
    total = 0.0
    for d in s.datasets:
        defects = getattr(d, "defects", None)
        if defects is not None:
            total += defects.missing_rate + defects.outlier_rate + sum(i.rate for i in defects.injections)
        gaps = getattr(d, "gaps", None)
        total += gaps.count if gaps is not None else 0
    return total


@pytest.mark.parametrize("family", [*FAMILIES, "orders-api-brownout", "tabular-ops-tracker-outage"])
def test_each_stage_is_valid_and_easier_than_the_next_and_the_last_is_the_family(family: str) -> None:
    declared = load_builtin(family)
    stages = [variants[0] for variants in stage_scenarios([declared])]
    assert len(stages) == len(DEFAULT_STAGES) >= 2
    assert stages[-1] == declared
    for easier, harder in itertools.pairwise(stages):
        Scenario.model_validate(easier.model_dump(mode="json"))  # a valid scenario of its own
        assert easier.id == declared.id and easier.seed == declared.seed
        (bar_e, direction), (bar_h, _) = _bar(easier), _bar(harder)
        assert (bar_e < bar_h) if direction == "max" else (bar_e > bar_h), (bar_e, bar_h)
        assert easier.max_steps > harder.max_steps
        assert easier.budget.credits > harder.budget.credits
        assert _defects(easier) <= _defects(harder)
        # nothing but the bar, the budget, the defects and the faults changes; a stage is one variant, not
        # a family to draw instances from, so it has no parameter space
        assert easier.space is None
        assert len(easier.perturbations) <= len(harder.perturbations)
        keep = {"goal", "max_steps", "budget", "datasets", "space", "perturbations"}
        assert easier.model_dump(exclude=keep) == harder.model_dump(exclude=keep)


def test_fewer_defects_where_the_dataset_declares_them() -> None:
    forecast = load_builtin("forecast-web-visits-basic")
    assert forecast.datasets[0].gaps is not None
    assert loosen(forecast, Loosening(defects=0.0)).datasets[0].gaps is None
    half = loosen(forecast, Loosening(defects=0.5)).datasets[0].gaps
    assert half is not None and half.count == forecast.datasets[0].gaps.count // 2
    tabular = load_builtin("tabular-quality-basic")
    rate = tabular.datasets[0].defects.missing_rate
    assert rate > 0
    assert loosen(tabular, Loosening(defects=0.5)).datasets[0].defects.missing_rate == pytest.approx(rate / 2)
    assert loosen(tabular, Loosening()) is tabular


@pytest.mark.parametrize(
    ("family", "rates"),
    [
        ("text-ticket-triage-slow-lake", ("label_noise", "duplicate_rate", "empty_rate", "truncated_rate")),
        ("images-rare-parts", ("unreadable_rate", "size_mismatch_rate")),
    ],
)
def test_a_text_or_image_dataset_s_own_defect_rates_are_loosened(family: str, rates: tuple[str, ...]) -> None:
    declared = load_builtin(family)
    ds = declared.datasets[0]
    assert all(getattr(ds, r) > 0 for r in rates)
    half = loosen(declared, Loosening(defects=0.5)).datasets[0]
    none = loosen(declared, Loosening(defects=0.0)).datasets[0]
    for r in rates:
        assert getattr(half, r) == pytest.approx(getattr(ds, r) / 2)
        assert getattr(none, r) == 0


def test_faults_are_shortened_then_removed() -> None:
    brownout = load_builtin("orders-api-brownout")
    [outage] = brownout.perturbations
    assert outage.duration is not None and outage.duration.steps == 6
    assert loosen(brownout, Loosening(faults=0.0)).perturbations == []
    [half] = loosen(brownout, Loosening(faults=0.5)).perturbations
    assert half.duration is not None and half.duration.steps == 3
    assert half.model_dump(exclude={"duration"}) == outage.model_dump(exclude={"duration"})
    # a fault that lasts until it is mitigated is kept while any share of the faults is; one whose
    # duration rounds down to no step is dropped
    tracker = load_builtin("tabular-ops-tracker-outage")
    assert [p.duration.steps if p.duration else None for p in tracker.perturbations] == [None, 3]
    kept = loosen(tracker, Loosening(faults=0.5)).perturbations
    assert [(p.name, p.duration.steps if p.duration else None) for p in kept] == [
        ("tracker-kill", None),
        ("slow-lake", 1),
    ]
    assert [p.name for p in loosen(tracker, Loosening(faults=0.3)).perturbations] == ["tracker-kill"]
    assert loosen(tracker, Loosening(faults=0.0)).perturbations == []
    # that kill is there or not: the second default stage has it in half its episodes, the first in none
    first, second, last = stage_scenarios([tracker, brownout])
    assert len(first) == 2 and all(not s.perturbations for s in first)
    assert len(second) == 2 * FAULT_VARIANTS  # each family keeps its share of the episodes
    kills = [any(p.name == "tracker-kill" for p in s.perturbations) for s in second if s.id == tracker.id]
    assert sorted(kills) == [False, False, True, True]
    slow = [[p.duration.steps for p in s.perturbations if p.duration] for s in second if s.id == tracker.id]
    assert slow == [[1]] * FAULT_VARIANTS
    assert last == [tracker, brownout]
    with pytest.raises(ValueError, match="faults is a share"):
        Loosening(faults=1.5)
    with pytest.raises(ValueError, match="strictly harder"):
        stage_scenarios([brownout], [Loosening(faults=1.0, defects=0.5), Loosening(faults=0.5), Loosening()])


def test_late_data_and_level_shifts_are_defects_a_stage_removes() -> None:
    late_family = load_builtin("forecast-store-sales-late-data")
    late = late_family.datasets[0].late
    assert late is not None and late.unsettled_days == 3 and late.restated_share > 0
    assert loosen(late_family, Loosening(defects=0.0)).datasets[0].late is None
    half = loosen(late_family, Loosening(defects=0.5)).datasets[0].late
    assert half is not None and half.unsettled_days == 1
    assert half.restated_share == pytest.approx(late.restated_share / 2)
    assert half.settle_days == late.settle_days and half.arrived == late.arrived
    data = late_family.model_dump(mode="json")
    data["datasets"][0]["level_shifts"] = [{"at_day": 200, "factor": 1.3}, {"at_day": 400, "factor": 0.8}]
    shifted = Scenario.model_validate(data)
    assert len(loosen(shifted, Loosening(defects=0.5)).datasets[0].level_shifts) == 1
    assert loosen(shifted, Loosening(defects=0.0)).datasets[0].level_shifts == []


def test_a_curriculum_must_end_with_the_family_and_get_harder() -> None:
    s = load_builtin("churn-clean-small")
    with pytest.raises(ValueError, match="last stage"):
        stage_scenarios([s], [Loosening(bar=1.5)])
    with pytest.raises(ValueError, match="strictly harder"):
        stage_scenarios([s], [Loosening(bar=1.2), Loosening(bar=1.5), Loosening()])
    with pytest.raises(ValueError, match="strictly harder"):
        stage_scenarios([s], [Loosening(), Loosening()])
    with pytest.raises(ValueError):
        Loosening(bar=0.5)
    with pytest.raises(ValueError):
        Loosening(defects=1.5)


def test_stages_written_as_text_end_with_the_family_and_name_the_spec_at_fault() -> None:
    stages = parse_stages(["defects=0,budget=2,faults=0", "defects=0.5, budget=1.5, faults=0.5"])
    assert stages == [
        Loosening(budget=2, defects=0, faults=0),
        Loosening(budget=1.5, defects=0.5, faults=0.5),
        Loosening(),
    ]
    # the family as declared, given last, is not added again
    assert parse_stages(["bar=1.5", "bar=1,budget=1,defects=1,faults=1"]) == [Loosening(bar=1.5), Loosening()]
    over = parse_stages(["share=0.5,bar=1.5,defects=0"], generated=True)
    assert over == [EasiestShare(0.5, Loosening(bar=1.5, defects=0)), EasiestShare(1.0)]
    # the stages it gives build a curriculum: the first keeps churn-decisions' bar on clean data
    first = stage_scenarios([load_builtin("churn-decisions")], stages)[0][0]
    assert first.goal.min_auc == load_builtin("churn-decisions").goal.min_auc
    assert first.datasets[0].defects.missing_rate == 0 and first.max_steps == 28
    for specs, message in (
        (["bar=0.5"], "stage 'bar=0.5': bar and budget are factors of at least 1"),
        (["x=1"], "stage 'x=1': 'x=1' is not key=value with a key of bar, budget, defects, faults"),
        (["bar"], "'bar' is not key=value"),
        (["bar=a"], "bar='a' is not a number"),
        (["bar=1.5,bar=2"], "bar is given twice"),
        (["share=0.5"], "'share=0.5' is not key=value"),  # share is for generated instances only
        (["defects=0", "budget=2"], "stages must get strictly harder"),
        (["defects=0.5", "defects=0.5"], "stages must get strictly harder"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_stages(specs)


def test_a_family_declares_its_own_stages_and_a_broken_list_is_refused_at_load() -> None:
    family = load_builtin("churn-decisions")
    own = declared_stages([family, load_builtin("churn-clean-small")])
    assert list(own) == [family.id]  # a family that declares none plays the run's stages
    assert own[family.id] == [*family.curriculum, Loosening()] and len(own[family.id]) == 4
    assert all(st.bar == 1 for st in own[family.id])  # they keep the bar (see the family's file)
    data = family.model_dump(mode="json")
    for stages, message in (
        ([{"defects": 0.5}, {"defects": 0.1}], "curriculum: stages must get strictly harder"),
        ([{"bar": 0.5}], "curriculum[0]: Value error, bar and budget are factors of at least 1"),
        ([{"bra": 2}], "curriculum[0].bra: Unexpected keyword argument"),
        ([{"defects": "none"}], "curriculum[0].defects: Input should be a valid number"),
    ):
        with pytest.raises(ScenarioError, match=re.escape(message)):
            parse_scenario({**data, "curriculum": stages}, "family.yaml")
    # the family as declared, written last, is not added again
    given = parse_scenario({**data, "curriculum": [{"budget": 2}, {}]}, "family.yaml")
    assert declared_stages([given])[family.id] == [Loosening(budget=2), Loosening()]


def test_families_own_stages_are_aligned_on_the_declared_family() -> None:
    own, plain = load_builtin("churn-decisions"), load_builtin("churn-clean-small")
    stages = stage_scenarios([own, plain], own=declared_stages([own]))
    assert len(stages) == 4  # the longer list: three own stages and the family
    first = {s.id: s for s in stages[0]}
    assert first[own.id].goal.min_auc == own.goal.min_auc and first[own.id].max_steps == 2 * own.max_steps
    # the default list is one shorter: its first stage is played in the run's first two
    assert {s.id: s for s in stages[1]}[plain.id] == first[plain.id]
    assert first[plain.id].goal.min_auc < plain.goal.min_auc
    assert [s.datasets[0].defects.missing_rate for s in stages[2] if s.id == own.id] == [
        pytest.approx(own.datasets[0].defects.missing_rate * 0.3)
    ]
    assert stages[-1] == [own, plain]  # the last stage: every family as declared
    c = Curriculum(own=declared_stages([own]), window=1, threshold=1.0, max_share=1.0, total_steps=100)
    assert c.count == 4
    for step in (10, 20, 30):
        assert c.record(True, step) is True
    assert c.last and c.record(True, 40) is False
    summary = c.summary()
    assert [st["started_at_step"] for st in summary["stages"]] == [0, 10, 20, 30]
    assert [st["bar"] for st in summary["stages"]] == [1.5, 1.5, 1.25, 1.0]  # the run's own, aligned
    assert [st["defects"] for st in summary["families"][own.id]] == [0.0, 0.1, 0.3, 1.0]
    with pytest.raises(ValueError, match="last stage is the family as declared"):
        stage_scenarios([own], own={own.id: [Loosening(bar=2)]})


def test_the_stage_advances_when_the_window_success_rate_reaches_the_threshold() -> None:
    c = Curriculum(window=4, threshold=0.75, max_share=1.0, total_steps=1_000)
    assert [c.record(True, step) for step in (10, 20, 30)] == [False, False, False]  # window not full
    assert c.success_rate is None and c.stage == 0
    assert c.record(False, 40) is True  # the window is full: 3 of 4 reach the threshold
    assert c.stage == 1 and c.started == [0, 40]


def test_advancing_needs_a_full_window_at_the_threshold() -> None:
    c = Curriculum(window=4, threshold=0.75, max_share=1.0, total_steps=1_000)
    for step, ok in enumerate([True, False, True, False, True], start=1):
        assert c.record(ok, step) is False  # the last 4 episodes: 2 successes
    assert c.stage == 0 and c.success_rate == 0.5
    assert c.record(True, 6) is True  # the last 4: T, F, T, T
    assert c.stage == 1 and c.started == [0, 6]
    assert c.success_rate is None  # the window starts again in the new stage
    for step in range(7, 11):
        c.record(True, step)
    assert c.stage == 2 and c.last and c.started == [0, 6, 10]
    assert c.record(True, 11) is False and c.stage == 2  # the last stage stays
    summary = c.summary()
    assert [st["started_at_step"] for st in summary["stages"]] == [0, 6, 10]
    assert summary["window"] == 4 and summary["threshold"] == 0.75


def test_a_stage_that_used_its_share_of_the_steps_ends() -> None:
    c = Curriculum(window=50, threshold=0.9, max_share=0.25, total_steps=1_000)
    assert c.record(False, 249) is False
    assert c.record(False, 250) is True and c.stage == 1 and c.started == [0, 250]
    assert c.record(False, 499) is False and c.record(False, 500) is True and c.last


def _stage_envs(vec_cls: Any) -> Any:
    declared = load_builtin("forecast-web-visits-basic")
    stages = stage_scenarios([declared])

    def make() -> Any:
        return transfer_env([declared], sandbox="curriculum-vec", seeds_per_scenario=4, stages=stages)

    return vec_cls([make, make]), stages


@pytest.mark.parametrize("vec", ["dummy", "subproc"])
def test_every_env_of_a_vector_env_plays_the_stage(vec: str) -> None:
    pytest.importorskip("stable_baselines3", reason="the rl extra is part of the test environment")
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    envs, stages = _stage_envs(DummyVecEnv if vec == "dummy" else SubprocVecEnv)
    try:
        assert envs.get_attr("stage") == [0, 0]
        envs.reset()
        assert [s.max_steps for s in envs.get_attr("scenario")] == [stages[0][0].max_steps] * 2
        assert envs.env_method("set_stage", 2) == [2, 2]
        assert envs.get_attr("stage") == [2, 2]
        envs.reset()
        played = envs.get_attr("scenario")
        assert all(s.max_steps == stages[2][0].max_steps and s.goal == stages[2][0].goal for s in played)
        if vec == "dummy":  # a subprocess worker does not survive an exception (SB3 passes none back)
            with pytest.raises(ValueError, match="stage 3"):
                envs.env_method("set_stage", 3, indices=[0])
    finally:
        envs.close()


def _played(monkeypatch: pytest.MonkeyPatch) -> list[Scenario]:
    """The scenario of every episode reset from now on, in order."""
    from mlsandbox.env.gym_env import MLSandboxEnv

    played: list[Scenario] = []
    reset = MLSandboxEnv.reset

    def spy(self: MLSandboxEnv, **kwargs: Any) -> Any:
        out = reset(self, **kwargs)
        played.append(self.scenario)
        return out

    monkeypatch.setattr(MLSandboxEnv, "reset", spy)
    return played


def test_training_plays_the_stage_and_evaluation_only_the_declared_family(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sb3_contrib", reason="the rl extra is part of the test environment")
    declared = load_builtin("churn-clean-small")
    played = _played(monkeypatch)
    # a curriculum that never leaves its easiest stage in this run
    curriculum = Curriculum(window=1_000, threshold=1.0, max_share=1.0)
    result = training.train_policy(
        [declared], steps=256, out=tmp_path, instances=4, seed=0, curriculum=curriculum,
        settings={"n_steps": 128, "batch_size": 64, "n_epochs": 1},
    )  # fmt: skip
    loosened = loosen(training.with_shaping(declared), DEFAULT_STAGES[0])
    assert played and all(s.max_steps == loosened.max_steps and s.goal == loosened.goal for s in played)
    assert curriculum.stage == 0
    summary = json.loads((tmp_path / "training.json").read_text())
    assert summary["curriculum"]["stages"][0]["started_at_step"] == 0
    assert summary["curriculum"]["stages"][1]["started_at_step"] is None

    played.clear()
    evaluation = training.evaluate(result.model, [declared], episodes=2, sandbox="curriculum-eval")
    assert set(evaluation.outcomes) == {"ppo", "ppo-greedy", "random", "rule"}
    assert played
    for s in played:
        assert s.goal == declared.goal and s.max_steps == declared.max_steps
        assert s.budget == declared.budget and s.datasets == declared.datasets
        assert s.seed >= declared.seed + training.HELD_OUT_OFFSET


# ---------------------------------------------------------------- a curriculum over generated instances


def _ranked(family_id: str, n: int, estimates: list[float]) -> list[Ranked]:
    """``n`` instances of the family from its own parameter space (not gated: only their order matters
    here), with the given difficulty estimates."""
    family = load_builtin(family_id)
    assert family.space is not None
    rng = random.Random(family_id)
    return [
        Ranked(family_id, materialize(family, family.space.draw(rng)), estimate)
        for _, estimate in zip(range(n), estimates, strict=True)
    ]


def test_instance_stages_go_from_the_easiest_loosened_to_every_instance_as_generated() -> None:
    churn = _ranked("churn-clean-small", 6, [0.9, 0.1, 0.5, 0.0, 0.7, 0.3])
    forecast = _ranked("forecast-web-visits-basic", 3, [0.6, 0.2, 0.4])
    stages = instance_stages(churn + forecast)
    assert len(stages) == len(INSTANCE_STAGES) == 3
    by_id = {r.scenario.id: r for r in churn + forecast}

    def ids(stage: list[Scenario]) -> list[str]:
        return [s.id for s in stage]

    # the easiest third of each family (at least one), lowest estimate first
    assert [by_id[i].estimate for i in ids(stages[0])] == [0.0, 0.1, 0.2]
    assert [by_id[i].estimate for i in ids(stages[1])] == [0.0, 0.1, 0.3, 0.5, 0.2, 0.4]
    assert sorted(ids(stages[2])) == sorted(by_id)
    # easier stages are loosened; the last is every instance exactly as generated
    for s in stages[0]:
        assert s.max_steps == math.ceil(by_id[s.id].scenario.max_steps * 2)
        assert _defects(s) == 0
    for s in stages[2]:
        assert s == by_id[s.id].scenario


def test_instance_stages_must_end_with_every_instance_and_get_harder() -> None:
    ranked = _ranked("churn-clean-small", 3, [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="last stage"):
        instance_stages(ranked, [EasiestShare(0.5)])
    with pytest.raises(ValueError, match="last stage"):
        instance_stages(ranked, [EasiestShare(1.0, Loosening(bar=1.5))])
    with pytest.raises(ValueError, match="strictly harder"):
        instance_stages(ranked, [EasiestShare(0.5), EasiestShare(0.5), EasiestShare(1.0)])
    with pytest.raises(ValueError, match="strictly harder"):  # more instances but looser than the next
        instance_stages(ranked, [EasiestShare(0.6, Loosening(bar=1.2)), EasiestShare(0.5, Loosening(bar=1.5)),
                                 EasiestShare(1.0)])  # fmt: skip
    with pytest.raises(ValueError, match="no generated instance"):
        instance_stages([])
    with pytest.raises(ValueError):
        EasiestShare(0.0)


def test_training_on_generated_instances_plays_them_at_their_own_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sb3_contrib", reason="the rl extra is part of the test environment")
    declared = load_builtin("churn-clean-small")
    ranked = _ranked("churn-clean-small", 6, [0.9, 0.1, 0.5, 0.0, 0.7, 0.3])
    played = _played(monkeypatch)
    curriculum = Curriculum(stages=INSTANCE_STAGES, window=1_000, threshold=1.0, max_share=1.0)
    training.train_policy(
        [declared], steps=256, out=tmp_path, seed=0, curriculum=curriculum, generated=ranked,
        settings={"n_steps": 128, "batch_size": 64, "n_epochs": 1},
    )  # fmt: skip
    easiest = {r.scenario.id: r.scenario for r in ranked if r.estimate <= 0.1}
    assert played and {s.id for s in played} <= set(easiest)
    for s in played:
        assert s.seed == easiest[s.id].seed  # the instance's own data, not a seed drawn near it
        assert s.max_steps == math.ceil(easiest[s.id].max_steps * 2)
    summary = json.loads((tmp_path / "training.json").read_text())
    assert {g["id"] for g in summary["generated"]} == {r.scenario.id for r in ranked}
    assert summary["curriculum"]["stages"][0]["easiest_share"] == round(1 / 3, 4)
    # a curriculum's stages must match what is trained on
    with pytest.raises(ValueError, match="EasiestShare"):
        training.train_policy(
            [declared], steps=128, out=tmp_path / "x", curriculum=Curriculum(), generated=ranked
        )
    with pytest.raises(ValueError, match="Loosening"):
        training.train_policy(
            [declared], steps=128, out=tmp_path / "y", curriculum=Curriculum(stages=INSTANCE_STAGES)
        )
    with pytest.raises(ValueError, match="not trained on"):
        training.train_policy(
            [load_builtin("tabular-quality-basic")], steps=128, out=tmp_path / "z", generated=ranked
        )
