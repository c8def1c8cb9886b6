"""Train in sim, evaluate in real: sb3-contrib's MaskablePPO on the ``churn-decisions`` families.

The policy is trained *only* on the ``sim`` backend (in-process, virtual clock) for a fixed number of
environment steps, on the ``train`` split of the families; then it plays the held-out ``test`` split
(other variants, other seeds) on the *real local backend* (MinIO, MLflow, real training jobs), one
episode per variant, beside the uniform random policy over the valid slots and the rule agent.

    python examples/train_in_sim_eval_in_real.py                      # starts a local sandbox
    python examples/train_in_sim_eval_in_real.py --sandbox NAME       # a running one (mlsandbox up)
    python examples/train_in_sim_eval_in_real.py --steps 20000 --imitation-episodes 0   # PPO from scratch

Options: ``--steps`` PPO steps in sim; ``--imitation-episodes`` episodes of the scripted expert (played
in sim) the policy is warm-started on before PPO (0: none); ``--per-family`` held-out variants per family
(two families: 5 gives 10 real episodes per policy); ``--json PATH`` writes every figure and episode.
Needs the ``rl`` extra (``pip install 'mlsandbox[rl]'``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from mlsandbox.agents import make_agent
from mlsandbox.agents.transfer import (
    FAMILIES_SETUP,
    Outcome,
    model_policy,
    play,
    play_agent,
    random_policy,
    split,
    success_rate,
    train,
    transfer_env,
)
from mlsandbox.env.gym_env import MLSandboxEnv


def evaluate_in_real(
    model: Any, per_family: int, sandbox: str, *, seed: int = 0, rule: bool = True
) -> dict[str, list[Outcome]]:
    """The trained policy, the random policy and (``rule``) the rule agent on the held-out variants, one
    real episode each, on the local sandbox ``sandbox`` (started when it is not running, stopped after)."""
    held_out = split("test", per_family)
    env = transfer_env(held_out, backend="local", sandbox=sandbox, start_sandbox=True, setup=FAMILIES_SETUP)
    results: dict[str, list[Outcome]] = {}
    try:

        def show(o: Outcome) -> None:
            auc = "-" if o.holdout_auc is None else f"{o.holdout_auc:.3f}"
            mark = "ok " if o.success else "   "
            print(f"  {mark}{o.policy:<7} {o.scenario:<36} AUC {auc:<6} {o.steps:>2} steps {o.wall_s:6.1f} s")

        results["ppo"] = play(env, model_policy(model), held_out, name="ppo", on_episode=show)
        results["random"] = play(env, random_policy(seed), held_out, name="random", on_episode=show)
        if rule:
            plain = MLSandboxEnv(held_out[0], backend="local", sandbox=sandbox, start_sandbox=False)
            try:
                results["rule"] = play_agent(
                    plain, lambda s: make_agent("rule", seed=s), held_out, name="rule", on_episode=show
                )
            finally:
                plain.close()
    finally:
        env.close()
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8192, help="PPO environment steps in sim")
    parser.add_argument("--imitation-episodes", type=int, default=32)
    parser.add_argument("--per-family", type=int, default=5, help="held-out variants per family")
    parser.add_argument("--train-per-family", type=int, default=8, help="training variants per family")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sandbox", default="transfer-example", help="local sandbox (started if not up)")
    parser.add_argument("--no-rule", action="store_true", help="skip the rule agent's real episodes")
    parser.add_argument("--json", type=Path, default=None, help="write the figures and episodes here")
    args = parser.parse_args(argv)

    print(f"training MaskablePPO in sim: {args.steps} steps, {args.imitation_episodes} imitation episodes")
    t0 = time.monotonic()
    training = train(
        split("train", args.train_per_family),
        args.steps,
        seed=args.seed,
        imitation_episodes=args.imitation_episodes,
        on_point=lambda p: print(f"  step {p.steps:>6}  {p.wall_s:7.1f} s"),
    )
    print(f"trained in {training.wall_s:.1f} s ({training.steps} PPO steps)")
    print(f"evaluating on the real local backend, sandbox {args.sandbox!r}")
    results = evaluate_in_real(training.model, args.per_family, args.sandbox, seed=args.seed,
                               rule=not args.no_rule)  # fmt: skip
    print(f"{'policy':<8} {'success':>9}")
    figures: dict[str, Any] = {}
    for name, outcomes in results.items():
        ok, n = success_rate(outcomes)
        figures[name] = {"successes": ok, "episodes": n, "success_rate": ok / n if n else 0.0}
        print(f"{name:<8} {ok:>4}/{n:<4} {ok / n if n else 0.0:6.0%}")
    report = {
        "steps": training.steps,
        "imitation_steps": training.imitation_steps,
        "train_wall_s": training.wall_s,
        "total_wall_s": round(time.monotonic() - t0, 2),
        "figures": figures,
        "episodes": {k: [o.as_dict() for o in v] for k, v in results.items()},
    }
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
