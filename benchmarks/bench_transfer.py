"""Transfer benchmark: MaskablePPO trained only in sim, evaluated on the real local backend.

The policy is trained on the ``sim`` backend for a fixed number of steps on the ``train`` split of the
``churn-decisions`` families (warm-started on the scripted expert's sim episodes unless
``--imitation-episodes 0``), with a learning curve (success rate of the deterministic policy on the
held-out ``test`` variants played in sim, every ``--eval-every`` steps). Then the trained policy, the
uniform random policy over the valid slots and the rule agent each play the held-out variants on a real
local sandbox, one episode each. Prints the success rates (targets: trained >= 80 %, random <= 10 %),
the rule baseline, the training steps and wall time; saves ``.bench/transfer.json`` (with the machine
block) and the learning curve ``.bench/transfer-curve.png``.

Usage: ``python benchmarks/bench_transfer.py [--steps N] [--imitation-episodes K] [--per-family N]
[--sandbox NAME]`` (a local sandbox is started for it unless ``--sandbox`` names a running one). With
the defaults: a few minutes of training in sim on a shared 2-core machine, then 3 x 10 real episodes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from machine import describe as describe_machine
from machine import summary as machine_summary
from rich.console import Console
from rich.table import Table

from mlsandbox.agents.transfer import CurvePoint, split, success_rate, train

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".bench" / "transfer.json"
PNG = ROOT / ".bench" / "transfer-curve.png"
TARGET_TRAINED = 0.8
TARGET_RANDOM = 0.1
console = Console()

sys.path.insert(0, str(ROOT / "examples"))
from train_in_sim_eval_in_real import evaluate_in_real  # noqa: E402


def plot(curve: list[CurvePoint], real_rate: float | None, path: Path) -> None:
    """The learning curve (success on held-out variants in sim against PPO steps) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    xs = [p.steps for p in curve]
    ax.plot(xs, [p.success_rate for p in curve], marker="o", label="held-out variants, in sim")
    train_pts = [(p.steps, p.train_success_rate) for p in curve if p.train_success_rate is not None]
    if train_pts:
        ax.plot(*zip(*train_pts, strict=True), marker=".", linestyle="--", label="training episodes (sim)")
    if real_rate is not None and xs:
        ax.scatter([xs[-1]], [real_rate], color="crimson", zorder=3, label="held-out variants, real local")
    ax.axhline(TARGET_TRAINED, color="grey", linewidth=0.8, linestyle=":", label="target (real)")
    ax.set_xlabel("PPO environment steps (sim)")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title("MaskablePPO trained in sim: churn-decisions families")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8192)
    parser.add_argument("--imitation-episodes", type=int, default=32)
    parser.add_argument("--eval-every", type=int, default=2048)
    parser.add_argument("--per-family", type=int, default=5, help="held-out variants per family (real)")
    parser.add_argument("--train-per-family", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sandbox", default="bench-transfer")
    args = parser.parse_args()
    machine = describe_machine()
    console.print(machine_summary(machine))
    held_out = split("test", args.per_family)
    console.print(
        f"training in sim: {args.steps} PPO steps, {args.imitation_episodes} imitation episodes; "
        f"curve on {len(held_out)} held-out variants (sim)"
    )

    def show(p: CurvePoint) -> None:
        train_rate = "-" if p.train_success_rate is None else f"{p.train_success_rate:.0%}"
        console.print(
            f"  step {p.steps:>6}  {p.wall_s:7.1f} s  held-out (sim) {p.success_rate:5.0%}  "
            f"training episodes {train_rate}"
        )

    training = train(
        split("train", args.train_per_family),
        args.steps,
        seed=args.seed,
        eval_scenarios=held_out,
        eval_every=args.eval_every,
        imitation_episodes=args.imitation_episodes,
        on_point=show,
    )
    console.print(f"trained in {training.wall_s:.1f} s; evaluating on the real local backend")
    t0 = time.monotonic()
    results = evaluate_in_real(training.model, args.per_family, args.sandbox, seed=args.seed)
    eval_wall = round(time.monotonic() - t0, 1)

    figures: dict[str, Any] = {}
    table = Table(title="success on held-out variants, real local backend")
    for col in ("policy", "success", "rate", "mean steps", "mean wall s", "target"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    targets = {"ppo": f">= {TARGET_TRAINED:.0%}", "random": f"<= {TARGET_RANDOM:.0%}", "rule": "-"}
    for name, outcomes in results.items():
        ok, n = success_rate(outcomes)
        rate = ok / n if n else 0.0
        steps = sum(o.steps for o in outcomes) / max(1, n)
        wall = sum(o.wall_s for o in outcomes) / max(1, n)
        figures[name] = {"successes": ok, "episodes": n, "success_rate": rate,
                         "mean_steps": round(steps, 2), "mean_wall_s": round(wall, 2)}  # fmt: skip
        table.add_row(name, f"{ok}/{n}", f"{rate:.0%}", f"{steps:.1f}", f"{wall:.1f}", targets.get(name, "-"))
    console.print(table)
    real_rate = figures["ppo"]["success_rate"]
    met = {
        "trained_success_rate": real_rate >= TARGET_TRAINED,
        "random_success_rate": figures["random"]["success_rate"] <= TARGET_RANDOM,
    }
    console.print(
        f"PPO steps {training.steps} (+ {training.imitation_steps} imitation steps), "
        f"training wall time {training.wall_s:.1f} s, real evaluation {eval_wall:.1f} s; "
        f"targets met: {met}"
    )
    plot(training.curve, real_rate, PNG)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "machine": machine,
                "settings": vars(args) | {"sandbox": args.sandbox},
                "training": {
                    "backend": "sim",
                    "ppo_steps": training.steps,
                    "imitation_steps": training.imitation_steps,
                    "wall_s": training.wall_s,
                    "curve": [p.as_dict() for p in training.curve],
                },
                "evaluation": {"backend": "local", "wall_s": eval_wall, "held_out": [s.id for s in held_out]},
                "figures": figures,
                "targets": {"trained_success_rate": TARGET_TRAINED, "random_success_rate": TARGET_RANDOM},
                "met": met,
                "episodes": {k: [o.as_dict() for o in v] for k, v in results.items()},
                "curve_png": str(PNG.relative_to(ROOT)),
            },
            indent=2,
        )
    )
    console.print(f"saved {OUT.relative_to(ROOT)} and {PNG.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
