"""The training env's slots on ``sim`` beyond the transfer families': a family whose data comes only from
an HTTP API, one whose goal is a deployment holding an SLO, and one whose training defaults make a neural
network diverge are each solved through slots alone, each slot unmasked exactly when the gateway would
carry it out, and the observation records what was ingested and deployed (from the agent's own
observations)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from mlsandbox.agents.transfer import SETUP, transfer_env
from mlsandbox.env.wrappers import FlatObservation, NoveltyBonus, in_process_env
from mlsandbox.scenario import load_builtin

Pick = Callable[[dict[str, Any]], bool]


def _tail(env: Any, obs: np.ndarray) -> list[float]:
    """The source and deployment features: the last ``2 * max_sources + 1`` before the kind one-hot."""
    flat = env.env  # transfer_env: the slots over the flat observation
    assert isinstance(flat, FlatObservation)
    n = 2 * flat.max_sources + 1
    end = len(obs) - len(flat.kinds)
    return [float(v) for v in obs[end - n : end]]


class Player:
    def __init__(self, family: str, **kw: Any) -> None:
        self.scenario = load_builtin(family)
        self.env = transfer_env([self.scenario], backend="sim", sandbox=f"slots-{family}", **kw)
        self.obs, _ = self.env.reset(seed=self.scenario.seed)
        self.info: dict[str, Any] = {}
        self.done = False

    def open(self, type_: str) -> list[dict[str, Any]]:
        return [a for a, ok in self.env.slots() if ok and a["type"] == type_]  # type: ignore[attr-defined]

    def play(self, pick: Pick) -> dict[str, Any]:
        slots = self.env.slots()  # type: ignore[attr-defined]
        index = next(i for i, (a, ok) in enumerate(slots) if ok and pick(a))
        self.obs, reward, term, trunc, self.info = self.env.step(index)
        self.last_reward = float(reward)
        self.done = bool(term or trunc)
        observation = in_process_env(self.env).last_observation or {}
        assert observation.get("ok"), observation.get("error")  # an unmasked slot is carried out
        return observation

    def train_and_register(self, dataset: str, algorithm: str = "gradient_boosting") -> None:
        self.play(
            lambda a: (
                a["type"] == "clean_dataset" and a["dataset"] == dataset and a["strategy"] == "impute_median"
            )
        )
        cleaned = list(in_process_env(self.env).episode.datasets)[-1]
        self.play(
            lambda a: a["type"] == "train_model" and a["dataset"] == cleaned and a["algorithm"] == algorithm
        )
        for _ in range(10):
            jobs = in_process_env(self.env).episode.jobs.values()
            if all(j.state in ("succeeded", "failed") for j in jobs):
                break
            self.play(lambda a: a["type"] == "wait")
        assert self.open("register_model"), "the trained job's run can be registered"
        self.play(lambda a: a["type"] == "register_model")

    def close(self) -> None:
        self.env.close()


def test_a_family_fed_by_an_api_is_solved_through_the_ingestion_slot() -> None:
    p = Player("data-csv-batch-missing-outliers")
    try:
        api = next(s.name for s in p.scenario.sources if s.type == "api")
        assert not any(d.startswith("sources/") for d in in_process_env(p.env).episode.datasets)
        assert [a["source"] for a in p.open("ingest_source")] == [s.name for s in p.scenario.sources][
            : SETUP["max_sources"]
        ]
        assert p.open("deploy_model") == []  # no serving in this family
        before = _tail(p.env, p.obs)
        result = p.play(lambda a: a["type"] == "ingest_source" and a["source"] == api)["result"]
        assert result["dataset"] == f"sources/{api}.parquet" and result["rows"] > 0
        assert api not in [a["source"] for a in p.open("ingest_source")]  # its output is in the lake now
        i = [s.name for s in p.scenario.sources].index(api)
        after = _tail(p.env, p.obs)
        assert before[2 * i : 2 * i + 2] == [1.0, 0.0] and after[2 * i : 2 * i + 2] == [1.0, 1.0]
        p.train_and_register(result["dataset"])
        p.play(lambda a: a["type"] == "submit")
        assert p.done and p.info["grade"]["success"], p.info.get("grade")
    finally:
        p.close()


def test_a_deployment_goal_is_met_through_the_deployment_slot() -> None:
    p = Player("serving-deploy-slo")
    try:
        assert p.open("ingest_source") == [] and p.open("deploy_model") == []  # nothing registered yet
        p.train_and_register("raw/customers.parquet")
        offered = p.open("deploy_model")
        assert [a["replicas"] for a in offered] == [1, 2] and {a["version"] for a in offered} == {"1"}
        assert _tail(p.env, p.obs)[-1] == 0.0
        p.play(lambda a: a["type"] == "deploy_model" and a["replicas"] == 1)
        assert p.open("deploy_model") == []  # the latest version is served already
        assert _tail(p.env, p.obs)[-1] == 1.0
        p.play(lambda a: a["type"] == "wait")  # production traffic runs for the SLO's window
        p.play(lambda a: a["type"] == "submit")
        grade = p.info["grade"]
        assert p.done and grade["success"], grade
        assert in_process_env(p.env).episode.serving.served_version == "1"
    finally:
        p.close()


def test_the_novelty_bonus_pays_a_state_less_each_time_it_is_seen_and_only_in_training() -> None:
    p = Player("serving-deploy-slo", novelty=0.5)
    path: list[Pick] = [
        lambda a: a["type"] == "clean_dataset" and a["strategy"] == "impute_median",
        lambda a: (
            a["type"] == "train_model"
            and a["dataset"].startswith("clean/")
            and a["algorithm"] == "logistic_regression"
        ),
        lambda a: a["type"] == "wait",
        lambda a: a["type"] == "register_model",
        lambda a: a["type"] == "deploy_model" and a["replicas"] == 1,
        lambda a: a["type"] == "wait",
        lambda a: a["type"] == "submit",
    ]
    try:
        bonuses: list[list[float]] = []
        for episode in range(2):
            if episode:
                p.obs, _ = p.env.reset(seed=p.scenario.seed)
            bonuses.append([])
            for pick in path:
                before = list(p.info.get("milestones") or []) if bonuses[-1] else []
                p.play(pick)
                bonus = p.info["novelty_bonus"]
                bonuses[-1].append(bonus)
                # the env's own reward is its components; the bonus comes on top, and is named
                assert p.last_reward == pytest.approx(sum(p.info["reward_components"].values()) + bonus)
                assert set(before) <= set(p.info["milestones"])  # milestones are never lost
            assert p.done and p.info["grade"]["success"], p.info["grade"]
        # every step of the path is a state new in the first episode, met a second time in the second
        assert bonuses[0] == pytest.approx([0.5] * len(path))
        assert bonuses[1] == pytest.approx([0.5 / np.sqrt(2)] * len(path))
        assert "model_served" in p.info["milestones"] and "model_registered" in p.info["milestones"]
    finally:
        p.close()
    with pytest.raises(ValueError, match="scale is positive"):
        NoveltyBonus(p.env, 0.0)


def test_the_neural_network_slot_names_its_learning_rate_so_bad_defaults_do_not_reach_it() -> None:
    p = Player("churn-diverging-mlp")
    try:
        mlp = [a for a in p.open("clean_dataset") if a["strategy"] == "impute_median"]
        assert mlp, "the table can be imputed"
        p.train_and_register(mlp[0]["dataset"], algorithm="mlp")
        (job,) = in_process_env(p.env).episode.jobs.values()
        assert job.algorithm == "mlp" and job.state == "succeeded"
        p.play(lambda a: a["type"] == "submit")
        assert p.done and p.info["grade"]["success"], p.info["grade"]
        # the same network left at the defaults diverges: the fault is live in this family
        env = transfer_env([p.scenario], backend="sim", sandbox="slots-mlp-defaults")
        try:
            env.reset(seed=p.scenario.seed)
            inner = in_process_env(env)
            inner.step({"type": "clean_dataset", "dataset": mlp[0]["dataset"], "strategy": "impute_median"})
            cleaned = list(inner.episode.datasets)[-1]
            inner.step(
                {"type": "train_model", "dataset": cleaned, "algorithm": "mlp", "machine": "cpu-small"}
            )
            for _ in range(10):
                if all(j.state in ("succeeded", "failed") for j in inner.episode.jobs.values()):
                    break
                inner.step({"type": "wait", "seconds": 60})
            (plain,) = inner.episode.jobs.values()
            assert plain.state == "failed"
        finally:
            env.close()
    finally:
        p.close()
