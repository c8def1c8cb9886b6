"""The caches that make a sim step cheap change nothing an agent sees.

- :meth:`DiscreteActions.slots` remembers slot lists by what the curated templates read, across steps and
  episodes: at every step of random and scripted play the list it gives equals one built from scratch.
- A template given by the caller turns that memory off (what such a template reads is unknown).
- The compute pool hands on the status its pump just read: ``get`` answers what the backend's own ``get``
  answers.
- The data actions' results are bounded by bytes as well as by count.
"""

from __future__ import annotations

import numpy as np

from mlsandbox.env.wrappers import DiscreteActions, Template, make_rl_env
from mlsandbox.gateway.packs.core import handlers as core_handlers


def _fresh(env: DiscreteActions) -> list:
    """The slot list built from scratch (no memory of earlier states)."""
    keep = (env._slots_cache, env._built, env._by_content)
    env._slots_cache, env._by_content = None, False
    try:
        return env.slots()
    finally:
        env._slots_cache, env._built, env._by_content = keep


def _play(env: DiscreteActions, seeds: list[int], rng: np.random.Generator, checked: list[int]) -> None:
    for seed in seeds:
        env.reset(seed=seed)
        while True:
            assert env.slots() == _fresh(env)
            checked[0] += 1
            mask = env.action_masks()
            _, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(mask))))
            if terminated or truncated:
                assert env.slots() == _fresh(env)
                break


def test_remembered_slot_lists_equal_fresh_ones_across_steps_and_episodes() -> None:
    env = make_rl_env(
        "tabular-quality-basic", backend="sim", sandbox="test-slot-cache", wait_seconds=(5.0, 30.0)
    )
    try:
        assert isinstance(env, DiscreteActions)
        checked = [0]
        # seeds repeat, so states recur across episodes and the remembered lists are used
        _play(env, [3, 4, 3, 4, 3], np.random.default_rng(0), checked)
        assert checked[0] > 20
        assert env._built, "curated templates only: lists are remembered by content"
    finally:
        env.close()


def test_a_callers_template_turns_the_memory_by_content_off() -> None:
    calls: list[int] = []

    def build(ctx, i):  # reads the step, which the content key does not hold
        calls.append(ctx.state.step)
        return {"type": "list_runs"}, ctx.state.step % 2 == 0

    env = make_rl_env(
        "tabular-quality-basic",
        backend="sim",
        sandbox="test-slot-cache-custom",
        templates={"list_runs": Template(lambda _: 1, build)},
    )
    try:
        env.reset(seed=5)
        index = env.slot_types.index("list_runs")
        seen = []
        for _ in range(4):
            seen.append(bool(env.action_masks()[index]))
            env.step(index if env.action_masks()[index] else env.slot_types.index("list_datasets"))
        assert seen == [True, False, True, False]
        assert not env._built
    finally:
        env.close()


def test_data_action_results_are_bounded_by_bytes(monkeypatch) -> None:
    monkeypatch.setattr(core_handlers, "_RESULTS", type(core_handlers._RESULTS)())
    monkeypatch.setattr(core_handlers, "_RESULTS_BYTES", [0])
    monkeypatch.setattr(core_handlers, "RESULTS_MAX_BYTES", 10_000)
    for i in range(10):
        core_handlers._memo(("k", i), lambda i=i: (b"x" * 3_000, {"i": i}))
    kept = list(core_handlers._RESULTS)
    assert kept == [("k", 7), ("k", 8), ("k", 9)]  # the least recently used went first
    assert core_handlers._RESULTS_BYTES[0] == sum(
        core_handlers._size(v) for v in core_handlers._RESULTS.values()
    )
    payload, result = core_handlers._memo(("k", 9), lambda: (b"", {"i": -1}))
    assert payload == b"x" * 3_000 and result == {"i": 9}


def test_a_train_split_of_instances_draws_every_episode_among_its_seeds() -> None:
    from mlsandbox.integrations.rllib import env_creator
    from mlsandbox.scenario import load_builtin

    base = load_builtin("tabular-quality-basic").seed
    env = make_rl_env("tabular-quality-basic", backend="sim", sandbox="test-split", instances=3)
    try:
        seeds = set()
        for k in range(12):
            _, info = env.reset(seed=100 if k == 0 else None)
            seeds.add(info["seed"])
        assert seeds <= {base, base + 1, base + 2} and len(seeds) >= 2
    finally:
        env.close()
    rl = env_creator({"backend": "sim", "sandbox": "test-split-rllib", "instances": 2})
    try:
        seeds = {rl.reset(seed=5 if k == 0 else None)[1]["seed"] for k in range(8)}
        fast = rl.unwrapped.scenario.seed
        assert seeds <= {fast, fast + 1}
        assert set(rl.observation_space.spaces) == {"action_mask", "observations"}
    finally:
        rl.close()
