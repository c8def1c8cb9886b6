"""The transfer setup on the sim backend (no service): the RL wrappers' machine and service slots, the
features of what the agent learnt (Memory), SuiteEpisodes' draws, and the churn-decisions families
solved by the expert's slot checklist and not by the random policy over the same masked slots."""

from __future__ import annotations

import numpy as np
import pytest

from mlsandbox.agents.transfer import (
    FAMILIES,
    SETUP,
    expert_policy,
    play,
    random_policy,
    split,
    success_rate,
    transfer_env,
)
from mlsandbox.env.wrappers import FlatObservation, make_rl_env


@pytest.fixture(scope="module")
def held_out() -> list:
    return split("test", 3)


def test_the_expert_checklist_solves_every_held_out_variant_and_random_does_not(held_out: list) -> None:
    env = transfer_env(held_out, backend="sim", sandbox="sim-transfer")
    try:
        expert = play(env, expert_policy(env), held_out, name="expert")
        rnd = play(env, random_policy(0), held_out, name="random")
    finally:
        env.close()
    assert {o.family for o in expert} == set(FAMILIES)
    assert success_rate(expert) == (len(held_out), len(held_out)), [o.reason for o in expert]
    assert success_rate(rnd)[0] <= 1, [o.reason for o in rnd]
    assert all(o.masked_choices == 0 for o in expert + rnd)
    incident = next(o for o in expert if o.family == "churn-decisions-incident")
    # The tracker dies while the first job runs: the checklist diagnoses it, restarts it, retries the job.
    assert "restart_service(service=mlflow)" in incident.actions
    assert any(a.startswith("retry_job") for a in incident.actions)


def test_memory_features_follow_what_the_agent_observed(held_out: list) -> None:
    env = transfer_env(held_out[:1], backend="sim", sandbox="sim-transfer-mem")
    try:
        obs, _info = env.reset(seed=held_out[0].seed, options={"scenario": held_out[0]})
        flat = env.env
        assert isinstance(flat, FlatObservation)
        # 63 slots: the table kinds' five cleaning strategies on each of the four dataset slots among them
        assert env.action_space.n == 75 and obs.shape == env.observation_space.shape
        before = obs.copy()
        slots = env.slots()
        check = next(i for i, (a, ok) in enumerate(slots) if ok and a["type"] == "check_data_quality")
        obs, *_ = env.step(check)
        raw = slots[check][0]["dataset"]
        missing, outliers, rate = flat.memory.profiles[raw]
        assert missing and outliers and 0 < rate < 1
        assert not np.array_equal(before, obs)
        clean = next(
            i for i, (a, ok) in enumerate(env.slots())
            if ok and a["type"] == "clean_dataset" and a["strategy"] == "impute_median"
        )  # fmt: skip
        env.step(clean)
        assert frozenset({"impute"}) in flat.memory.lineage.values()
        # A machine slot is offered only for the scenario's machine types; micro and small both are.
        machines = {a.get("machine") for a, ok in env.slots() if ok and a["type"] == "train_model"}
        assert machines == set(SETUP["machines"])
        env.reset(seed=held_out[0].seed, options={"scenario": held_out[0]})
        assert flat.memory.profiles == {} and flat.memory.lineage == {}
    finally:
        env.close()


def test_suite_episodes_draw_the_same_scenarios_for_the_same_seed() -> None:
    scenarios = split("train", 2)

    def draws(seed: int) -> list[tuple[str, int]]:
        env = transfer_env(scenarios, backend="sim", sandbox="sim-transfer-draws", seeds_per_scenario=3)
        try:
            env.reset(seed=seed)
            out = []
            for _ in range(6):
                st = env.unwrapped.gateway.state
                out.append((st.scenario.id, st.seed))
                env.reset()
            return out
        finally:
            env.close()

    first = draws(5)
    assert first == draws(5)
    base = {s.id: s.seed for s in scenarios}
    # Each episode is a scenario of the split, at one of its seeds_per_scenario seeds.
    assert all(sid in base and base[sid] <= seed < base[sid] + 3 for sid, seed in first), first
    assert len(set(first)) > 1


def test_suite_episodes_draw_by_the_weights_set_and_name_the_scenario_played() -> None:
    scenarios = split("train", 2)  # two families' variants: each id its own
    ids = sorted({s.id for s in scenarios})
    env = transfer_env(scenarios, backend="sim", sandbox="sim-transfer-weights", seeds_per_scenario=2)
    try:
        env.reset(seed=3)
        # the RL wrappers reach the suite's draw as a vector env's env_method does
        env.get_wrapper_attr("set_weights")({ids[0]: 1.0})
        played = []
        for _ in range(5):
            env.reset()
            played.append(env.unwrapped.gateway.state.scenario.id)
        assert played == [ids[0]] * 5
        _, _, _, _, info = env.step(0)
        assert info["scenario"] == ids[0]  # the step names the scenario played, for a training loop
        env.get_wrapper_attr("set_weights")(None)  # back to every scenario as likely
        seen = set()
        for _ in range(30):
            env.reset()
            seen.add(env.unwrapped.gateway.state.scenario.id)
        assert len(seen) > 1
        for bad in ({ids[0]: -1.0}, {ids[0]: 0.0}, {ids[0]: float("nan")}, {}):
            with pytest.raises(ValueError, match="weights must be finite"):
                env.get_wrapper_attr("set_weights")(bad)
    finally:
        env.close()


def test_failure_sampling_weighs_the_families_failed_more() -> None:
    from mlsandbox.agents.curriculum import FailureSampling

    sampling = FailureSampling(["a", "b", "c"], window=4, floor=0.25)
    for ok in (True, True, True, True, True):
        sampling.record("a", ok)  # solved: the floor
    for ok in (True, False):
        sampling.record("b", ok)  # half
    sampling.record("elsewhere", False)  # not a family trained on: ignored
    assert sampling.weights(step=100) == {"a": 0.25, "b": 0.625, "c": 1.0}  # c not played yet: as failed
    assert sampling.summary()["history"] == [{"steps": 100, "weights": {"a": 0.25, "b": 0.625, "c": 1.0}}]
    with pytest.raises(ValueError, match="floor"):
        FailureSampling(["a"], floor=0.0)


def test_wrapper_options_are_checked() -> None:
    with pytest.raises(ValueError, match="machines must be distinct"):
        make_rl_env("churn-decisions", backend="sim", sandbox="sim-x", machines=["cpu-small", "cpu-small"])
    with pytest.raises(ValueError, match="services must be a non-empty subset"):
        make_rl_env("churn-decisions", backend="sim", sandbox="sim-x", services=["redis"])
