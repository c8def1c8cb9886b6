"""Fidelity benchmark: the sim backend against the real local one over the built-in scenarios.

Every built-in scenario that runs in sim (a scenario whose episode the sim backend refuses is listed as
left out, with the reason) is played by the rule, reference and random agents with the same seeds on a
local sandbox and on sim (``mlsandbox.fidelity``). Prints per scenario and overall: success agreement
(target >= 95 % of (scenario, seed, agent) triples), median |holdout AUC difference| (target <= 0.02),
reward difference, steps, how many trajectories diverge and the KS statistic of job wall times; saves
``.bench/fidelity.json`` (with the machine block) and the HTML pages under ``.bench/fidelity/``.

Usage: ``python benchmarks/bench_fidelity.py [--seeds K] [--scenario ID ...] [--agent NAME ...]
[--sandbox NAME]`` (a local sandbox is started for it unless ``--sandbox`` names a running one).
A local episode takes 10 s to a few minutes on 2 cores: one seed of every scenario is about an hour.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from machine import describe as describe_machine
from machine import summary as machine_summary
from rich.console import Console
from rich.table import Table

from mlsandbox.fidelity.report import AUC_DIFF_TARGET, SUCCESS_AGREEMENT_TARGET, Figures
from mlsandbox.fidelity.run import AGENTS
from mlsandbox.fidelity.suite import run_fidelity
from mlsandbox.scenario import catalog_ids, load_builtin

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".bench" / "fidelity.json"
PAGES = ROOT / ".bench" / "fidelity"
console = Console()


def runs_in_sim(scenario: str) -> str | None:
    """None when a sim episode of the scenario starts; the reason otherwise."""
    from mlsandbox.env.gym_env import MLSandboxEnv

    env = MLSandboxEnv(scenario, backend="sim", sandbox="bench-fidelity-check")
    try:
        env.reset(seed=load_builtin(scenario).seed)
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    finally:
        env.close()


def row(name: str, f: Figures) -> list[str]:
    def fmt(x: float | None, spec: str) -> str:
        return "-" if x is None else spec.format(x)

    return [
        name,
        f"{f.comparable}/{f.triples}",
        fmt(f.success_agreement, "{:.0%}"),
        fmt(f.median_abs_auc_diff, "{:.4f}"),
        str(f.auc_pairs),
        fmt(f.mean_reward_diff, "{:+.2f}"),
        f"{fmt(f.mean_steps_local, '{:.1f}')} / {fmt(f.mean_steps_sim, '{:.1f}')}",
        str(f.diverged),
        fmt(f.job_duration_ks, "{:.2f}"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--base-seed", type=int, default=0)
    parser.add_argument("--scenario", action="append", default=None)
    parser.add_argument("--agent", action="append", default=None)
    parser.add_argument("--sandbox", default="bench-fidelity")
    args = parser.parse_args()
    machine = describe_machine()
    console.print(machine_summary(machine))
    left_out: dict[str, str] = {}
    scenarios = []
    for sid in args.scenario or catalog_ids():
        why = runs_in_sim(sid)
        if why is None:
            scenarios.append(sid)
        else:
            left_out[sid] = why
    agents = tuple(args.agent or AGENTS)
    t0 = time.perf_counter()

    def progress(t: Any) -> None:
        verdict = "agree" if t.success_agrees else "DISAGREE"
        auc = "" if t.auc_diff is None else f" AUC diff {t.auc_diff:+.4f}"
        console.print(
            f"  {t.scenario} {t.agent} seed {t.seed}: {verdict} (local {t.local.success}, sim {t.sim.success})"
            f"{auc}, steps {len(t.local.steps)}/{len(t.sim.steps)}, local {t.local.wall_s:.0f} s"
        )

    index = run_fidelity(
        scenarios, PAGES, seeds=args.seeds, agents=agents, base_seed=args.base_seed,
        sandbox=args.sandbox, on_triple=progress,
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    table = Table(title=f"fidelity: local against sim ({args.seeds} seed(s), agents {', '.join(agents)})")
    for col in ("scenario", "triples", "success agr.", "med |AUC diff|", "AUC pairs", "reward diff",
                "steps local/sim", "diverged", "KS job time"):  # fmt: skip
        table.add_column(col, justify="left" if col == "scenario" else "right")
    for sid, f in index.scenarios.items():
        table.add_row(*row(sid, f))
    table.add_row(*row("overall", index.figures), style="bold")
    console.print(table)
    f = index.figures
    agreement_ok = f.success_agreement is not None and f.success_agreement >= SUCCESS_AGREEMENT_TARGET
    auc_ok = f.median_abs_auc_diff is not None and f.median_abs_auc_diff <= AUC_DIFF_TARGET
    console.print(
        f"success agreement {f.success_agreement:.1%} (target >= {SUCCESS_AGREEMENT_TARGET:.0%}: "
        f"{'met' if agreement_ok else 'NOT met'}); median |holdout AUC difference| "
        f"{f.median_abs_auc_diff if f.median_abs_auc_diff is not None else float('nan'):.4f} "
        f"(target <= {AUC_DIFF_TARGET}: {'met' if auc_ok else 'NOT met'}); {seconds / 60:.1f} min"
    )
    for sid, why in left_out.items():
        console.print(f"left out (does not run in sim): {sid}: {why}")
    disagreements = [
        {"scenario": t.scenario, "agent": t.agent, "seed": t.seed, "local": t.local.success, "sim": t.sim.success,
         "local_reason": t.local.grade_reason or t.local.error, "sim_reason": t.sim.grade_reason or t.sim.error,
         "divergence": None if t.divergence is None else t.divergence.model_dump()}
        for sid in index.scenarios
        for t in _triples(sid)
        if not t.success_agrees or (t.auc_diff is not None and abs(t.auc_diff) > AUC_DIFF_TARGET)
    ]  # fmt: skip
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "machine": machine,
                "seeds": args.seeds,
                "base_seed": args.base_seed,
                "agents": list(agents),
                "seconds": round(seconds, 1),
                "overall": f.model_dump(),
                "targets": {
                    "success_agreement": SUCCESS_AGREEMENT_TARGET,
                    "median_abs_auc_diff": AUC_DIFF_TARGET,
                },
                "met": {"success_agreement": agreement_ok, "median_abs_auc_diff": auc_ok},
                "scenarios": {sid: s.model_dump() for sid, s in index.scenarios.items()},
                "left_out": left_out,
                "disagreements": disagreements,
                "pages": str(PAGES.relative_to(ROOT)),
            },
            indent=2,
        )
    )
    console.print(f"saved {OUT} and {PAGES / 'index.html'}")


def _triples(scenario: str) -> list[Any]:
    from mlsandbox.fidelity.report import ScenarioFidelity

    return ScenarioFidelity.model_validate_json((PAGES / f"{scenario}.json").read_text()).triples


if __name__ == "__main__":
    main()
