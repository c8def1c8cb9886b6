"""``mlsandbox train``: MaskablePPO from scratch in sim, no demonstrations, evaluated on held-out seeds.

The learning test is a budget of env-steps, never a time: on ``rl-fast`` (the README's RL scenario, which
declares its own shaping) a policy trained from scratch on 16 instances must solve most held-out seeds
and beat the random policy there. The command test checks what a user gets on disk."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mlsandbox.agents import training
from mlsandbox.agents.transfer import SETUP
from mlsandbox.cli.main import app
from mlsandbox.scenario import catalog_ids, load_builtin, load_scenario

SETUP_SLOTS = 75
RL_FAST = Path(__file__).resolve().parents[2] / "src" / "mlsandbox" / "env" / "scenarios" / "rl-fast.yaml"


def test_default_shaping_only_where_a_family_declares_none() -> None:
    plain = load_builtin("tabular-quality-basic")
    assert not plain.reward.shaping
    shaped = training.with_shaping(plain)
    assert shaped.reward.shaping == training.DEFAULT_SHAPING
    assert training.with_shaping(plain, shaping=False) is plain
    own = load_scenario(RL_FAST)
    assert own.reward.shaping and training.with_shaping(own) is own


def test_held_out_seeds_are_never_training_instances() -> None:
    scenarios = [load_builtin("tabular-quality-basic"), load_builtin("churn-clean-small")]
    tests = training.held_out(scenarios, 5)
    assert len(tests) == 10
    for s in scenarios:
        train_seeds = set(range(s.seed, s.seed + 10_000))
        own = [t.seed for t in tests if t.id == s.id]
        assert len(own) == 5 and not train_seeds & set(own)


def test_ppo_from_scratch_learns_rl_fast_and_beats_random_on_held_out_seeds(tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib", reason="the rl extra is part of the test environment")
    scenario = load_scenario(RL_FAST)
    result = training.train_policy([scenario], steps=32_768, out=tmp_path, instances=16, seed=0)
    assert result.steps >= 32_768
    assert result.curve[-1].success_rate > result.curve[0].success_rate
    evaluation = training.evaluate(result.model, [scenario], episodes=10, backend="sim", sandbox="test-train")
    rates = {r["policy"]: r["successes"] for r in evaluation.table()}
    assert rates["ppo"] >= 6, rates
    assert rates["ppo"] > rates["random"], rates
    assert all(o.masked_choices == 0 for o in evaluation.outcomes["ppo"])
    assert set(rates) == {"ppo", "ppo-greedy", "random", "rule"}


def test_the_command_writes_the_policy_the_curve_and_the_evaluation(tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib", reason="the rl extra is part of the test environment")
    out = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        ["train", str(RL_FAST), "--steps", "2048", "--eval-episodes", "2", "--out", str(out),
         "--stage", "bar=1.5,budget=2", "--novelty", "0.2"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    for name in ("policy.zip", "curve.png", "training.json", "evaluation.json"):
        assert (out / name).stat().st_size > 0, name
    summary = json.loads((out / "training.json").read_text())
    assert summary["steps"] >= 2048 and summary["curve"] and summary["shaping"] is True
    assert summary["novelty"] == 0.2
    # the stage given, then the family as declared
    stages = [
        {k: s[k] for k in ("bar", "budget", "defects", "faults")} for s in summary["curriculum"]["stages"]
    ]
    assert stages == [{"bar": 1.5, "budget": 2.0, "defects": 1.0, "faults": 1.0},
                      {"bar": 1.0, "budget": 1.0, "defects": 1.0, "faults": 1.0}]  # fmt: skip
    rows = json.loads((out / "evaluation.json").read_text())
    assert {r["policy"] for r in rows} == {"ppo", "ppo-greedy", "random", "rule"}
    assert all(r["backend"] == "sim" and r["episodes"] == 2 for r in rows)
    assert "held-out seeds" in res.output
    # no live bar without a terminal: a line per curve point tells a log how training goes
    assert re.search(r"[\d,]+ env-steps +\d+ s +stage \d +success \d+%", res.output), res.output


@pytest.mark.parametrize("given", [[], ["--stage", "bar=1.5"]])
def test_a_family_plays_its_own_stages_unless_the_command_gives_some(
    tmp_path: Path, given: list[str]
) -> None:
    pytest.importorskip("sb3_contrib", reason="the rl extra is part of the test environment")
    out = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        ["train", "churn-decisions", "--steps", "256", "--eval-episodes", "0", "--no-baselines",
         "--out", str(out), *given],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    curriculum = json.loads((out / "training.json").read_text())["curriculum"]
    if given:  # --stage sets every family's stages
        assert "families" not in curriculum and [st["bar"] for st in curriculum["stages"]] == [1.5, 1.0]
    else:
        own = curriculum["families"]["churn-decisions"]
        assert [st["defects"] for st in own] == [0.0, 0.1, 0.3, 1.0] and len(curriculum["stages"]) == 4


def test_a_saved_policy_is_evaluated_again_on_the_same_held_out_seeds(tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib", reason="the rl extra is part of the test environment")
    out = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        [
            "train",
            str(RL_FAST),
            "--steps",
            "1024",
            "--eval-episodes",
            "2",
            "--no-baselines",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "training.json").read_text())
    assert summary["given"] == [str(RL_FAST)]
    assert summary["action_slots"] == SETUP_SLOTS and summary["observation_size"] > 0
    assert "commit" in summary and summary["mlsandbox"]
    first = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert [e["policy"] for e in first] == ["ppo", "ppo", "ppo-greedy", "ppo-greedy"]
    again = CliRunner().invoke(
        app, ["evaluate-policy", str(out), "--eval-episodes", "3", "--no-baselines", "--no-greedy"]
    )
    assert again.exit_code == 0, again.output
    assert "held-out seeds" in again.output
    played = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()][len(first) :]
    seeds = [s.seed for s in training.held_out([load_scenario(RL_FAST)], 3)]
    assert [e["seed"] for e in played] == seeds and seeds[:2] == [e["seed"] for e in first[:2]]
    assert all(e["backend"] == "sim" and e["policy"] == "ppo" for e in played)
    rows = json.loads((out / "evaluation.json").read_text())
    # the policy played again replaces its rows; the greedy one, not played now, keeps its own
    assert [(r["policy"], r["backend"], r["episodes"]) for r in rows] == [
        ("ppo-greedy", "sim", 2),
        ("ppo", "sim", 3),
    ]


def test_a_run_is_recorded_as_it_goes_and_its_checkpoints_are_played(tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib", reason="the rl extra is part of the test environment")
    out = tmp_path / "run"
    seen: list[dict[str, object]] = []

    def point(p: training.CurvePoint) -> None:  # the files as a user looks at them mid-run
        if (out / "training.json").is_file():
            seen.append(json.loads((out / "training.json").read_text()))

    scenario = load_scenario(RL_FAST)
    result = training.train_policy(
        [scenario], steps=1024, out=out, window=512, checkpoint_every=512, on_point=point,
        given=[str(RL_FAST)],
    )  # fmt: skip
    assert seen and all(s["finished"] is False for s in seen)
    assert [len(s["curve"]) for s in seen] == sorted(len(s["curve"]) for s in seen)
    assert json.loads((out / "training.json").read_text())["finished"] is True
    saved = [f"step-{k}" for k in range(512, result.steps + 1, 512)]
    assert training.checkpoints(out) == saved and len(saved) >= 2
    (out / "policy.zip").unlink()  # as if the run had been stopped after its last checkpoint
    res = CliRunner().invoke(app, ["evaluate-policy", str(out), "--eval-episodes", "1"])
    assert res.exit_code == 1 and f"has only its checkpoints: {', '.join(saved)}" in " ".join(
        res.output.split()
    )
    res = CliRunner().invoke(
        app, ["evaluate-policy", str(out), "--checkpoint", "999", "--eval-episodes", "1"]
    )
    assert res.exit_code == 1 and "no checkpoint '999' (saved: step-512" in " ".join(res.output.split())
    for given in ("1024", "step-512"):
        res = CliRunner().invoke(
            app,
            ["evaluate-policy", str(out), "--checkpoint", given, "--eval-episodes", "2", "--no-baselines"],
        )
        assert res.exit_code == 0, res.output
    rows = json.loads((out / "evaluation.json").read_text())
    assert [(r["policy"], r["episodes"]) for r in rows] == [
        ("ppo@step-1024", 2),
        ("ppo@step-1024-greedy", 2),
        ("ppo@step-512", 2),
        ("ppo@step-512-greedy", 2),
    ]
    played = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert {e["policy"] for e in played} == {r["policy"] for r in rows}


def test_failure_sampling_is_recorded_at_each_curve_point(tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib", reason="the rl extra is part of the test environment")
    from mlsandbox.agents.curriculum import FailureSampling

    scenarios = [load_scenario(RL_FAST), load_builtin("churn-clean-small")]
    sampling = FailureSampling([s.id for s in scenarios], window=10)
    result = training.train_policy(
        scenarios, steps=1024, out=tmp_path, window=512, task_sampling=sampling, curriculum=None
    )
    history = json.loads((tmp_path / "training.json").read_text())["task_sampling"]["history"]
    assert [h["steps"] for h in history] == [p.steps for p in result.curve if p.steps % 512 == 0]
    assert all(set(h["weights"]) == {"rl-fast", "churn-clean-small"} for h in history)
    assert all(0.25 <= w <= 1.0 for h in history for w in h["weights"].values())
    with pytest.raises(ValueError, match="cannot go with generated instances"):
        training.train_policy(scenarios, steps=8, out=tmp_path / "g", task_sampling=sampling, generated=[
            training.Ranked("rl-fast", scenarios[0], 0.5)
        ])  # fmt: skip


def test_evaluate_policy_refuses_a_run_it_cannot_play(tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib", reason="the rl extra is part of the test environment")
    import gymnasium as gym
    from sb3_contrib import MaskablePPO

    res = CliRunner().invoke(app, ["evaluate-policy", str(tmp_path / "none")])
    assert res.exit_code == 1 and "no training.json" in res.output
    run = tmp_path / "old"
    run.mkdir()
    (run / "training.json").write_text(json.dumps({"families": ["rl-fast"], "commit": "0123abcd"}))
    res = CliRunner().invoke(app, ["evaluate-policy", str(run), "--local", "0", "--eval-episodes", "0"])
    assert res.exit_code == 1 and "nothing to play" in res.output

    class Small(gym.Env[np.ndarray, int]):  # a policy made for another layout: 5 slots, 7 features
        observation_space = gym.spaces.Box(-1.0, 1.0, (7,), dtype=np.float32)
        action_space: gym.spaces.Discrete = gym.spaces.Discrete(5)

    (run / "training.json").write_text(json.dumps({"given": [str(RL_FAST)], "commit": "0123abcd"}))
    MaskablePPO("MlpPolicy", Small(), n_steps=8, batch_size=8, device="cpu").save(run / "policy.zip")
    res = CliRunner().invoke(app, ["evaluate-policy", str(run), "--eval-episodes", "1"])
    assert res.exit_code == 1
    assert "trained with 5 action slots and 7 observation features" in " ".join(res.output.split())
    assert "commit 0123abcd" in res.output and not (run / "evaluation.json").exists()


def test_several_envs_in_worker_processes_train_with_the_same_rollout_size(tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib", reason="the rl extra is part of the test environment")
    out = tmp_path / "vec"
    res = CliRunner().invoke(
        app,
        ["train", str(RL_FAST), "--steps", "2048", "--n-envs", "2", "--eval-episodes", "1", "--no-baselines",
         "--out", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "training.json").read_text())
    assert summary["n_envs"] == 2
    assert summary["ppo_settings"]["n_steps"] * 2 == training.PPO_SETTINGS["n_steps"]
    assert summary["steps"] >= 2048
    # every env's finished episodes reach the curve: their steps add up to all but the unfinished ones
    recorded = sum(p["episodes"] * p["mean_length"] for p in summary["curve"])
    assert recorded >= summary["steps"] - 2 * load_scenario(RL_FAST).max_steps, (recorded, summary["steps"])
    with pytest.raises(ValueError, match="n_envs must be at least 1"):
        training.train_policy([load_scenario(RL_FAST)], steps=10, out=tmp_path / "x", n_envs=0)


def test_the_command_refuses_an_unknown_family(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["train", "no-such-family", "--steps", "10", "--out", str(tmp_path)])
    assert res.exit_code == 1
    assert "unknown scenario 'no-such-family'" in res.output
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stage", "bar=0.5"], "--stage: stage 'bar=0.5': bar and budget are factors of at least 1"),
        (["--stage", "defects=0", "--stage", "budget=2"], "--stage: stages must get strictly harder"),
        (["--stage", "defects=0", "--no-curriculum"], "it cannot go with --no-curriculum"),
        (["--sample-failures", "--generated", "2"], "--sample-failures weighs families by id"),
    ],
)
def test_the_command_refuses_stages_it_cannot_play(tmp_path: Path, args: list[str], message: str) -> None:
    res = CliRunner().invoke(
        app, ["train", str(RL_FAST), "--steps", "10", "--out", str(tmp_path / "x"), *args]
    )
    assert res.exit_code == 1 and message in " ".join(res.output.split()), res.output
    assert not any(tmp_path.iterdir())


def test_the_command_trains_on_generated_instances_and_evaluates_on_the_test_split(tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib", reason="the rl extra is part of the test environment")
    out = tmp_path / "gen"
    res = CliRunner().invoke(
        app,
        ["train", "churn-clean-small", "--generated", "3", "--steps", "512", "--eval-episodes", "2",
         "--no-baselines", "--gate-workers", "1", "--out", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "training.json").read_text())
    family = load_builtin("churn-clean-small")
    generated = summary["generated"]
    assert len(generated) == 3 and all(g["family"] == family.id for g in generated)
    sets = json.loads((out / "instances.json").read_text())
    assert {g["id"] for g in sets["train"]} == {g["id"] for g in generated}
    assert len(sets["test"]) == 2 and not {g["id"] for g in sets["test"]} & {g["id"] for g in generated}
    assert [st["easiest_share"] for st in summary["curriculum"]["stages"]] == [0.3333, 0.6667, 1.0]
    rows = json.loads((out / "evaluation.json").read_text())
    assert {r["policy"] for r in rows} == {"ppo", "ppo-greedy"}
    assert all(r["episodes"] == 2 for r in rows)  # two test-split instances, each played once
    by_family = json.loads((out / "evaluation-by-family.json").read_text())
    assert [(r["policy"], r["family"], r["episodes"]) for r in by_family] == [
        ("ppo", family.id, 2),
        ("ppo-greedy", family.id, 2),
    ]
    assert "held-out generated instances (test split)" in res.output
    assert "train: 3 generated instances" in res.output and "test: 2 generated instances" in res.output
    # played again later: the first recorded test-split instance, as it was generated
    again = CliRunner().invoke(
        app, ["evaluate-policy", str(out), "--eval-episodes", "1", "--no-baselines", "--no-greedy"]
    )
    assert again.exit_code == 0, again.output
    played = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(played) == 4 + 1
    assert (played[-1]["scenario"], played[-1]["seed"]) == (sets["test"][0]["id"], sets["test"][0]["seed"])
    assert [(r["policy"], r["episodes"]) for r in json.loads((out / "evaluation.json").read_text())] == [
        ("ppo-greedy", 2),
        ("ppo", 1),
    ]


def test_the_command_refuses_generated_instances_of_a_family_without_a_space(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app, ["train", str(RL_FAST), "--generated", "2", "--steps", "10", "--out", str(tmp_path / "x")]
    )
    assert res.exit_code == 1
    assert "--generated needs a parameter space" in res.output and "rl-fast" in res.output
    assert not (tmp_path / "x").exists()


def test_a_policy_over_several_kinds_reads_the_kind() -> None:
    binary, forecast = load_builtin("tabular-quality-basic"), load_builtin("forecast-web-visits-basic")
    assert not training.several_kinds([binary, load_builtin("churn-clean-small")])
    assert training.several_kinds([binary, forecast])
    from mlsandbox.agents.transfer import transfer_env

    one = transfer_env([binary], sandbox="kinds-1")
    both = transfer_env([binary, forecast], sandbox="kinds-2", kind_features=True)
    try:
        assert both.observation_space.shape[0] > one.observation_space.shape[0]
    finally:
        one.close()
        both.close()


def test_the_evaluation_is_broken_down_by_family() -> None:
    from mlsandbox.agents.transfer import Outcome, family_of
    from mlsandbox.cli.training import _family_table

    def outcome(policy: str, scenario: str, success: bool) -> Outcome:
        return Outcome(policy=policy, scenario=scenario, family=family_of(load_builtin("churn-clean-small").model_copy(
            update={"id": scenario})), seed=1, success=success, holdout_auc=None, reason="", steps=3,
            total_reward=1.0 if success else -1.0, credits_used=0.0, wall_s=0.1)  # fmt: skip

    generated = "churn-clean-small-0123456789ab"
    assert (
        family_of(load_builtin("churn-clean-small").model_copy(update={"id": generated}))
        == "churn-clean-small"
    )
    evaluation = training.Evaluation(
        backend="sim",
        outcomes={
            "ppo": [outcome("ppo", generated, True), outcome("ppo", "forecast-web-visits-basic", False)],
            "rule": [outcome("rule", generated, True), outcome("rule", "forecast-web-visits-basic", True)],
        },
    )
    rows = {(r["policy"], r["family"]): (r["successes"], r["episodes"]) for r in evaluation.by_family()}
    assert rows == {
        ("ppo", "churn-clean-small"): (1, 1),
        ("ppo", "forecast-web-visits-basic"): (0, 1),
        ("rule", "churn-clean-small"): (1, 1),
        ("rule", "forecast-web-visits-basic"): (1, 1),
    }
    assert [r["successes"] for r in evaluation.table()] == [1, 2]
    table = _family_table(evaluation.by_family())
    assert [c.header for c in table.columns] == ["family", "ppo (sim)", "rule (sim)"]
    assert table.row_count == 2


def test_a_family_whose_goal_the_slots_cannot_meet_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serving = load_builtin("serving-deploy-slo")
    fetched = load_builtin("data-csv-batch-missing-outliers")
    # the training env has deployment and ingestion slots: every built-in family is reachable but the one
    # whose model only its pipelines may make
    assert training.unreachable([load_builtin(f) for f in catalog_ids()]) == [
        "pipeline-failure-upstream (its constraints forbid register_model and train_model by hand: it needs run_flow)"
    ]
    narrow = tuple(t for t in SETUP["action_types"] if t not in ("deploy_model", "ingest_source"))
    assert training.unreachable([serving, load_builtin("churn-clean-small"), fetched], narrow) == [
        "serving-deploy-slo (its deployment_slo goal needs deploy_model)",
        "data-csv-batch-missing-outliers (its data comes from source orders_api: it needs ingest_source)",
    ]
    monkeypatch.setitem(SETUP, "action_types", narrow)
    with pytest.raises(ValueError, match="cannot meet the goal of serving-deploy-slo"):
        training.train_policy([serving], steps=10, out=tmp_path / "x")
    res = CliRunner().invoke(
        app, ["train", "serving-deploy-slo", "--steps", "10", "--out", str(tmp_path / "y")]
    )
    assert res.exit_code == 1
    assert "deployment_slo goal needs deploy_model" in res.output


def test_stage_labels_merge_stages_whose_lines_would_overlap() -> None:
    # 102,400 env-steps on the axis: stages 1 and 2 began 2,645 apart (2.6 %), stage 3 far later
    assert training.stage_labels([11_856, 14_501, 60_000], 102_400) == [
        (11_856, "stages 1-2"),
        (60_000, "stage 3"),
    ]
    assert training.stage_labels([25_600, 51_200], 102_400) == [(25_600, "stage 1"), (51_200, "stage 2")]
    assert training.stage_labels([], 0) == []
