"""The whole catalogue's validation (CI plays its representative sample: mlsandbox.scenario.sample).

For every built-in family (or those named, or a pack's) on each backend asked for: the family's reference
agent on ``--seeds`` seeds must succeed (the goal met, no hard constraint broken), and the cheap strategies
an optimiser finds first (``do-nothing``, ``repeat-cheap``) must fail and earn less than the reference on
the family's own seed. ``local`` plays on real services (an ephemeral sandbox unless ``--sandbox`` names a
running one); ``kube`` on the cluster of ``mlsandbox cluster up`` (its Sandbox ``default`` unless
``--sandbox`` names another); ``sim`` on the twin. ``--reference-only`` leaves the cheap strategies out
(the reference's success alone, e.g. on kube, where each episode runs real pods). Prints a line per episode, a table per backend at the end, and saves
``.bench/catalog.json`` after every family (a long run interrupted keeps what it measured; a family played
again replaces its earlier row, the others keep theirs), with the reference agent's success agreement
between ``sim`` and ``local`` over the (family, seed) pairs both played.

    python benchmarks/bench_catalog.py [--backend sim --backend local --backend kube] [--seeds 1]
                                       [--families F ...] [--pack P ...] [--sandbox NAME] [--name NAME]
                                       [--out FILE] [--reference-only]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from machine import describe as describe_machine
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

OUT = Path(__file__).resolve().parents[1] / ".bench" / "catalog.json"
CHEAP = ("do-nothing", "repeat-cheap")
console = Console(stderr=True)


def _save(backend: str, rows: list[dict[str, Any]]) -> None:
    """Merge this run's families into the record of ``backend`` (a family played again replaces its
    earlier row; families not played keep theirs), then recount it and the sim/local agreement."""
    OUT.parent.mkdir(exist_ok=True)
    old = json.loads(OUT.read_text()) if OUT.exists() else {}
    known = {r["family"]: r for r in old.get(backend, {}).get("families", [])}
    known.update({r["family"]: r for r in rows})
    merged = sorted(known.values(), key=lambda r: r["family"])
    old[backend] = {
        "families": merged,
        "valid": sum(r["valid"] for r in merged),
        "total": len(merged),
        "wall_s": round(sum(r["wall_s"] for r in merged), 1),
    }
    old["agreement"] = agreement(old)
    old["machine"] = describe_machine()
    OUT.write_text(json.dumps(old, indent=2, sort_keys=True) + "\n")


def agreement(record: dict[str, Any]) -> dict[str, Any]:
    """Reference success on sim against local, over the (family, seed) pairs both backends played."""

    def refs(backend: str) -> dict[tuple[str, int], bool]:
        return {(r["family"], e["seed"]): e["success"] for r in record.get(backend, {}).get("families", [])
                for e in r["episodes"] if e["agent"] == "reference"}  # fmt: skip

    sim, local = refs("sim"), refs("local")
    pairs = sorted(set(sim) & set(local))
    differ = [f"{f} seed {s}: sim {'succeeds' if sim[f, s] else 'fails'}, local "
              f"{'succeeds' if local[f, s] else 'fails'}" for f, s in pairs if sim[f, s] != local[f, s]]  # fmt: skip
    return {"pairs": len(pairs), "families": len({f for f, _ in pairs}),
            "agreed": len(pairs) - len(differ), "differ": differ}  # fmt: skip


def _episode(env: Any, family: str, agent: str, seed: int) -> dict[str, Any]:
    from mlsandbox.agents import make_agent
    from mlsandbox.agents.runner import run_episode
    from mlsandbox.scenario import load_builtin

    sc = load_builtin(family)
    name = sc.reference_agent if agent == "reference" else agent
    t0 = time.perf_counter()
    try:
        res = run_episode(env, make_agent(name, seed=seed), seed=seed, scenario=sc)
    except Exception as e:  # a crash is a failed validation, reported with its cause
        return {"agent": agent, "seed": seed, "success": False, "reason": f"{type(e).__name__}: {e}",
                "reward": None, "wall_s": round(time.perf_counter() - t0, 2)}  # fmt: skip
    violation = res.final_info.get("constraint_violation")
    grade = res.grade or {}
    return {
        "agent": agent,
        "seed": seed,
        "success": bool(res.success and not violation),
        "reason": (f"constraint broken: {violation.get('message')}" if violation else grade.get("reason")),
        "reward": round(res.total_reward, 3),
        "steps": len(res.steps),
        "wall_s": round(time.perf_counter() - t0, 2),
    }


def validate_family(env: Any, family: str, seeds: list[int], cheap_too: bool = True) -> dict[str, Any]:
    """The family's episodes and verdict: valid when the reference succeeds on every seed and each cheap
    strategy fails below the reference's reward on the first seed (``cheap_too`` False: the reference's
    success alone)."""
    refs = [_episode(env, family, "reference", s) for s in seeds]
    cheap = [_episode(env, family, a, seeds[0]) for a in CHEAP] if cheap_too else []
    problems = [f"reference failed on seed {r['seed']}: {r['reason']}" for r in refs if not r["success"]]
    for c in cheap:
        if c["success"]:
            problems.append(f"{c['agent']} succeeds")
        elif refs[0]["reward"] is not None and c["reward"] is not None and c["reward"] >= refs[0]["reward"]:
            problems.append(f"{c['agent']} earns {c['reward']} >= the reference's {refs[0]['reward']}")
    return {
        "family": family,
        "valid": not problems,
        "problems": problems,
        "reference_successes": sum(r["success"] for r in refs),
        "episodes": refs + cheap,
        "wall_s": round(sum(e["wall_s"] for e in refs + cheap), 2),
    }


def run_backend(
    backend: str,
    families: list[str],
    n_seeds: int,
    sandbox: str | None,
    ephemeral: str = "bench-catalog",
    cheap_too: bool = True,
) -> dict[str, Any]:
    """Every family on one backend (seeds: the family's own, then the next ones)."""
    import os

    from mlsandbox.env import MLSandboxEnv
    from mlsandbox.scenario import load_builtin

    if hasattr(os, "sched_setaffinity"):  # real services and jobs take every core
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    local = None
    if backend == "local" and sandbox is None:
        from mlsandbox.backends.local import LocalBackend

        local = LocalBackend(ephemeral)
        local.up(ephemeral=True)
    name = sandbox or {"local": ephemeral, "kube": "default"}.get(backend, f"{ephemeral}-sim")
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    out: dict[str, Any] = {"seeds_per_family": n_seeds, "families": rows}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[family]}"))  # fmt: skip
    try:
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task(backend, total=len(families), family="")
            for family in families:
                progress.update(bar, family=family)
                env = MLSandboxEnv(family, backend=backend, sandbox=name, start_sandbox=backend == "sim")
                try:
                    first = load_builtin(family).seed
                    row = validate_family(env, family, [first + i for i in range(n_seeds)], cheap_too)
                finally:
                    env.close()
                rows.append(row)
                verdict = "valid" if row["valid"] else "INVALID: " + "; ".join(row["problems"])
                progress.console.print(f"{backend:5} {family:42} {row['wall_s']:7.1f} s  {verdict}")
                out["valid"] = sum(r["valid"] for r in rows)
                out["total"] = len(rows)
                out["wall_s"] = round(time.perf_counter() - started, 1)
                _save(backend, [{**r, "seeds": n_seeds} for r in rows])
                progress.advance(bar)
    finally:
        if local is not None:
            local.down()
    return out


def main() -> None:
    global OUT
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--backend", action="append", choices=["sim", "local", "kube"], help="default: sim and local"
    )
    p.add_argument("--seeds", type=int, default=1, help="reference episodes per family (seeds from its own)")
    p.add_argument("--families", nargs="*", default=None)
    p.add_argument("--pack", nargs="*", default=None)
    p.add_argument("--sandbox", default=None, help="a running local sandbox (or kube Sandbox) to play in")
    p.add_argument(
        "--name", default="bench-catalog", help="the ephemeral sandbox's name (two runs side by side)"
    )
    p.add_argument("--out", type=Path, default=OUT, help=f"the record to merge into (default {OUT})")
    p.add_argument("--reference-only", action="store_true", help="leave the cheap strategies out")
    a = p.parse_args()
    OUT = a.out
    from mlsandbox.scenario import catalog_ids
    from mlsandbox.scenario.packs import pack_families

    families = a.families or (pack_families(a.pack) if a.pack else catalog_ids())
    results = {
        backend: run_backend(backend, families, a.seeds, a.sandbox, a.name, not a.reference_only)
        for backend in a.backend or ["sim", "local"]
    }
    for backend, res in results.items():
        table = Table(title=f"catalogue on {backend}: {res['valid']}/{res['total']} families valid, "
                      f"{res['wall_s']:.0f} s of episodes")  # fmt: skip
        for col in ("family", "valid", "reference", "cheap strategies (reward)", "wall s"):
            table.add_column(col)
        for r in res["families"]:
            cheap = ", ".join(f"{e['agent']} {e['reward']}" for e in r["episodes"] if e["agent"] in CHEAP)
            table.add_row(
                r["family"], "yes" if r["valid"] else "NO", f"{r['reference_successes']}/{a.seeds}", cheap,
                f"{r['wall_s']:.1f}",
            )  # fmt: skip
        Console(width=160).print(table)
    record = json.loads(OUT.read_text())
    agreed = record["agreement"]
    console.print(f"reference success, sim against local (whole record, {agreed['families']} families): "
                  f"agreed on {agreed['agreed']} of {agreed['pairs']} (family, seed) pairs")  # fmt: skip
    for line in agreed["differ"]:
        console.print(f"  differs: {line}")


if __name__ == "__main__":
    main()
