"""Agents and RL wrappers of every kind: the random and degenerate agents train the dataset kind's
algorithms; the RL action space keeps its shape and its algorithm slots map to the kind's algorithms by
position; the observation can carry the kind."""

from __future__ import annotations

from typing import Any

import numpy as np

from mlsandbox.agents import make_agent
from mlsandbox.agents.kind_reference import quick_algorithms
from mlsandbox.env.wrappers import make_rl_env
from mlsandbox.tasks import registry


def _first(kind: str) -> dict[str, Any]:
    return {
        "ok": True,
        "result": {
            "datasets": [{"name": "raw/t.parquet"}],
            "deliverable": {"register_model_as": "m", "kind": kind},
        },
    }


def test_quick_algorithms_are_the_kinds_and_binary_keeps_its_three() -> None:
    assert quick_algorithms(registry.get("tabular")) == (
        "logistic_regression",
        "random_forest",
        "gradient_boosting",
    )
    assert quick_algorithms(registry.get("tabular_regression"))[0] == "ridge"


def test_the_random_agent_trains_the_kinds_algorithms() -> None:
    agent = make_agent("random", seed=3)
    agent.reset(_first("tabular_regression"), seed=3)
    seen = set()
    for _ in range(400):
        action = agent.act({"ok": True, "result": {}})
        if action["type"] == "train_model":
            seen.add(action["algorithm"])
    assert seen and seen <= set(registry.get("tabular_regression").algorithms)
    assert "logistic_regression" not in seen


def test_spam_jobs_trains_the_kinds_algorithms() -> None:
    agent = make_agent("spam-jobs", seed=0)
    agent.reset(_first("tabular_regression"))
    action = agent.act(_first("tabular_regression"))
    assert action["type"] == "train_model" and action["algorithm"] == "ridge"


def test_rl_slots_keep_their_shape_and_map_to_the_kinds_algorithms() -> None:
    binary = make_rl_env("tabular-quality-basic", backend="sim", sandbox="rl-kinds")
    regression = make_rl_env("regression-delivery-times", backend="sim", sandbox="rl-kinds")
    try:
        assert binary.action_space == regression.action_space
        assert binary.observation_space == regression.observation_space
        _, info = regression.reset(seed=1)
        assert info["kind"] == "tabular_regression"
        trains = [a for a, _ in regression.slots() if a["type"] == "train_model"]  # type: ignore[attr-defined]
        algorithms = {a["algorithm"] for a in trains}
        assert algorithms == set(registry.get("tabular_regression").algorithms)
        mask = regression.action_masks()  # type: ignore[attr-defined]
        valid = {
            a["algorithm"]
            for (a, _), ok in zip(regression.slots(), mask, strict=True)  # type: ignore[attr-defined]
            if ok and a["type"] == "train_model"
        }
        assert valid == set(registry.get("tabular_regression").algorithms)
    finally:
        binary.close()
        regression.close()


def test_the_observation_can_carry_the_kind() -> None:
    env = make_rl_env("regression-delivery-times", backend="sim", sandbox="rl-kinds", kind_features=True)
    plain = make_rl_env("regression-delivery-times", backend="sim", sandbox="rl-kinds")
    try:
        names = list(registry.kinds())
        assert env.observation_space.shape[0] == plain.observation_space.shape[0] + len(names)  # type: ignore[index]
        obs, _ = env.reset(seed=2)
        tail = obs[-len(names) :]
        assert np.array_equal(tail, [float(n == "tabular_regression") for n in names])
    finally:
        env.close()
        plain.close()
