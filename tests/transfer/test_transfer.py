"""The transfer tier: MaskablePPO trained only on the sim backend, with a small fixed step budget, then
played on the real local sandbox (the session's) on held-out variants of the ``churn-decisions``
families, beside the random policy. It runs the example ``examples/train_in_sim_eval_in_real.py`` as a
user would (its ``main``), so the example is kept working too. Asserted: the trained policy solves more
real episodes than the random policy, it never picks a masked slot, and the example's report says what
it ran. The 80 % figure lives in the benchmark (benchmarks/bench_transfer.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from mlsandbox.backends.local import LocalBackend

pytestmark = pytest.mark.transfer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_in_sim_eval_in_real.py"
STEPS = 1024
"""PPO steps in sim (one rollout and one update): a budget of steps, never a time."""
IMITATION_EPISODES = 16
PER_FAMILY = 2
"""Held-out variants per family: 4 real episodes per policy."""


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_in_sim_eval_in_real", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_policy_trained_in_sim_beats_random_on_real_episodes(sandbox: LocalBackend, tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib", reason="the mlsandbox[rl] extra is installed by make setup")
    out = tmp_path / "transfer.json"
    report = _example().main(
        ["--steps", str(STEPS), "--imitation-episodes", str(IMITATION_EPISODES),
         "--per-family", str(PER_FAMILY), "--sandbox", sandbox.name, "--no-rule", "--json", str(out)]
    )  # fmt: skip
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["steps"] >= STEPS and report["imitation_steps"] > 0
    episodes = report["episodes"]
    assert set(episodes) == {"ppo", "random"}
    for name in ("ppo", "random"):
        runs = episodes[name]
        assert len(runs) == 2 * PER_FAMILY
        assert {r["family"] for r in runs} == {"churn-decisions", "churn-decisions-incident"}
        assert all(r["seed"] >= 500_000 for r in runs), "held-out variants use the test split's seeds"
        assert all(r["reason"] for r in runs)  # every episode was graded
    ppo, rnd = report["figures"]["ppo"], report["figures"]["random"]
    print(f"\nreal local episodes: trained {ppo['successes']}/{ppo['episodes']}, "
          f"random {rnd['successes']}/{rnd['episodes']}")  # fmt: skip
    for r in episodes["ppo"]:
        print(f"  {r['scenario']}: {r['reason']} ({r['steps']} steps, {r['wall_s']} s)")
    assert ppo["successes"] > rnd["successes"], report["figures"]
    # Both policies only ever chose slots the masks offered (nothing was sent as the masked action).
    assert all(r["masked_choices"] == 0 for name in ("ppo", "random") for r in episodes[name])
