"""Acceptance of the code-writing baseline (``--agent code``) on local: episodes of binary-classification
families through the normal episode runner, several seeds each; success per family and seed printed and
saved to ``.bench/code_agent.json``.

Run: ``.venv/bin/python benchmarks/bench_code_agent.py [--seeds 5] [--family ID ...] [--sandbox NAME]``
(an ephemeral sandbox is started when none is named). Each episode is what ``mlsandbox run --agent code``
plays: the agent profiles the data, writes a scikit-learn script from the profile, runs it as a job in
the workspace, reads its log, registers the run's model and submits; the grade is the registered model on
the family's hidden holdout.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from machine import describe as describe_machine
from machine import summary as machine_summary

OUT = Path(__file__).resolve().parents[1] / ".bench" / "code_agent.json"
FAMILIES = (
    "tabular-quality-basic",  # missing values (one categorical column too) and outliers
    "churn-clean-small",  # clean, small
    "churn-imbalanced-missing",  # rare positives (15 %) and missing values
    "churn-deadline-outliers",  # outliers; the first jobs are killed by a 2 s deadline (retry)
)


def main() -> None:
    from mlsandbox.agents.code_agent import CodeAgent
    from mlsandbox.agents.runner import run_episode
    from mlsandbox.backends.local import LocalBackend
    from mlsandbox.env.gym_env import MLSandboxEnv
    from mlsandbox.scenario import load_builtin

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--family", action="append", default=None)
    parser.add_argument("--sandbox", default=None)
    args = parser.parse_args()
    families = args.family or list(FAMILIES)
    backend = LocalBackend(args.sandbox or "bench-code-agent")
    backend.up(ephemeral=args.sandbox is None)
    rows: list[dict[str, Any]] = []
    try:
        for family in families:
            sc = load_builtin(family)
            env = MLSandboxEnv(sc, backend="local", sandbox=backend.name, start_sandbox=False)
            try:
                for seed in range(sc.seed, sc.seed + args.seeds):
                    res = run_episode(env, CodeAgent(seed), seed=seed)
                    grade = res.grade or {}
                    jobs = [s for s in res.steps if s.observation.get("action") == "run_python"]
                    row = {
                        "family": family,
                        "seed": seed,
                        "success": res.success,
                        "holdout_auc": grade.get("holdout_auc"),
                        "reason": grade.get("reason"),
                        "steps": len(res.steps),
                        "scripts_run": len(jobs),
                        "invalid_actions": res.invalid_actions,
                        "reward": round(res.total_reward, 3),
                        "wall_s": round(res.wall_s, 1),
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            finally:
                env.close()
    finally:
        if args.sandbox is None:
            backend.down()
    table: dict[str, dict[str, Any]] = {}
    for family in families:
        mine = [r for r in rows if r["family"] == family]
        table[family] = {
            "succeeded": sum(r["success"] for r in mine),
            "episodes": len(mine),
            "by_seed": {str(r["seed"]): r["success"] for r in mine},
            "median_wall_s": sorted(r["wall_s"] for r in mine)[len(mine) // 2] if mine else None,
        }
    print(f"\ncode-writing baseline on local ({machine_summary(describe_machine())})")
    for family, t in table.items():
        seeds = " ".join(("ok" if v else "FAIL") + f"@{s}" for s, v in t["by_seed"].items())
        print(f"  {family:28s} {t['succeeded']}/{t['episodes']}  {seeds}  median {t['median_wall_s']} s")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "when": time.strftime("%Y-%m-%d"),
                "machine": describe_machine(),
                "families": table,
                "episodes": rows,
            },
            indent=2,
        )
    )
    print(f"saved to {OUT}")


if __name__ == "__main__":
    main()
