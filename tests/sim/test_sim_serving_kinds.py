"""Serving families of the new tabular kinds on the sim backend: the reference agent deploys the kind's
model and succeeds (graded by the kind's metric with the SLO); random and do-nothing agents fail; the
sim's replicas answer in the kind's response shape."""

from __future__ import annotations

import pytest

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv
from mlsandbox.env.spaces import decode_observation
from mlsandbox.scenario import load_builtin

FAMILIES = {"serving-regression-eta-slo": "rmse", "serving-multiclass-triage-slo": "macro_f1"}


def _run(scenario: str, agent: str, seed: int = 0) -> tuple[dict[str, object], list[dict[str, object]]]:
    env = MLSandboxEnv(scenario, backend="sim", sandbox="sim-serving-kinds")
    try:
        res = run_episode(env, make_agent(agent, seed=seed), seed=seed)
    finally:
        env.close()
    assert res.grade is not None
    predicts = [s.observation for s in res.steps if s.action.get("type") == "predict"]
    return res.grade, predicts


@pytest.mark.parametrize("scenario", sorted(FAMILIES))
def test_reference_serves_the_kind_and_random_and_do_nothing_fail(scenario: str) -> None:
    grade, predicts = _run(scenario, load_builtin(scenario).reference_agent)
    assert grade["success"], grade
    assert grade["metric"] == FAMILIES[scenario]
    first = predicts[0] if predicts else {}
    assert first.get("ok") and first["result"]["status"] == 200, predicts  # type: ignore[index]
    answer = first["result"]
    if FAMILIES[scenario] == "rmse":  # a number per row, no probability
        assert all(isinstance(v, float) for v in answer["predictions"]) and answer["probabilities"] is None  # type: ignore[index]
    else:  # a class label and its probability
        assert all(isinstance(v, str) for v in answer["predictions"]) and answer["probabilities"]  # type: ignore[index]
    for agent in ("random", "do-nothing"):
        grade, _ = _run(scenario, agent)
        assert not grade["success"], (agent, grade)


@pytest.mark.parametrize("scenario", ["serving-deploy-slo", *sorted(FAMILIES)])
def test_a_replica_answers_entities_as_the_served_model_scores_each_row_alone(scenario: str) -> None:
    """Production traffic asks for entities one or a few at a time; the sim scores the feature service's
    population once per served version. Each answer must be the one the model gives that row alone."""
    import orjson
    import pandas as pd

    env = MLSandboxEnv(scenario, backend="sim", sandbox="sim-serving-entities")
    try:
        obs, _ = env.reset(seed=3)
        agent = make_agent(load_builtin(scenario).reference_agent, seed=3)
        current = decode_observation(obs)
        agent.reset(current, seed=3)
        assert env.gateway is not None
        episodes = env.gateway.runtime.serving.episodes  # type: ignore[attr-defined]
        for _ in range(60):  # the reference agent's steps until its deployment serves
            obs, _, terminated, truncated, _ = env.step(agent.act(current))
            current = decode_observation(obs)
            assert not (terminated or truncated), "the reference agent ended before it deployed"
            serving = episodes.get(env.episode.episode_id)
            if serving is not None and any(r.ready for dep in serving.items.values() for r in dep.replicas):
                break
        ((name, dep),) = serving.items.items()
        served, table = dep.served, serving.features
        ids = list(table)[:: max(1, len(table) // 25)][:25]
        index = {c: k for k, c in enumerate(serving.feature_columns)}

        def alone(i: str) -> tuple[object, object]:
            frame = pd.DataFrame({c: [table[i][index[c]]] for c, _ in served.columns})
            for c, kind in served.columns:
                if kind == "number":
                    frame[c] = frame[c].astype("float64")
            labels, proba = served.predict(frame)
            label = pytest.approx(labels[0], rel=1e-9) if isinstance(labels[0], float) else labels[0]
            return label, None if proba is None else pytest.approx(proba[0], rel=1e-9, abs=1e-12)

        for batch in ([i] for i in ids[:20]):
            res = serving.request(name, "/predict", orjson.dumps({"entity_ids": batch}), timeout_s=30.0)
            answer = orjson.loads(res.body)
            label, proba = alone(batch[0])
            assert res.status == 200 and answer["predictions"] == [label]
            if proba is not None:
                assert answer["probabilities"] == [proba]
        res = serving.request(name, "/predict", orjson.dumps({"entity_ids": ids[20:]}), timeout_s=30.0)
        assert orjson.loads(res.body)["predictions"] == [alone(i)[0] for i in ids[20:]]
        assert dep.scored is not None and dep.scored[0] is served and len(dep.scored[2]) == len(table)
        unknown = serving.request(name, "/predict", orjson.dumps({"entity_ids": ["no-such"]}), timeout_s=30.0)
        assert unknown.status == 404  # an unknown entity is still refused as the model server does
    finally:
        env.close()
