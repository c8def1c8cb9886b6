"""Figures per kind of work: the sim's speed as RL uses it, and reference episodes on local.

``sim`` (one core, BLAS single-threaded, as :mod:`bench_sim`): for each installed kind, a family of that
kind (the first built-in scenario of the kind without production traffic, lowest difficulty first) through
:func:`~mlsandbox.env.wrappers.make_rl_env`'s wrappers, with the random and rule mixes of
:mod:`bench_sim`, a new seed each episode: env-steps/s (steps over the time in ``reset``, ``step`` and
``action_masks``), the episode length, ``train_model``'s p50 ms. With ``--pool N``, also the figures of a
train split of N instances with the fit store warm (a cold phase first, as ``bench_sim --pool``).

``local`` (the acceptance check of the families of every kind but tabular binary): the family's reference
agent on real services (an ephemeral local sandbox unless ``--sandbox`` names a running one) on each seed:
success, the grade's reason, the episode's wall time, and every job's CPU-seconds and peak memory (what
the runtime measured). Several seeds per family give the success rate.

Both save into ``.bench/kinds.json`` (each run replaces its own section; ``local`` rows are written after
every episode, so a long run interrupted keeps what it measured). Usage:

    python benchmarks/bench_kinds.py sim [--seconds 20] [--kinds K ...] [--pool N]
    python benchmarks/bench_kinds.py local [--seeds 5] [--families F ...] [--sandbox NAME] [--section S]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import bench_sim
from bench_sim import LastObservation, RandomMix, RuleMix, load, summary
from machine import describe as describe_machine

OUT = Path(__file__).resolve().parents[1] / ".bench" / "kinds.json"
TARGET_STEPS_PER_S = 2000.0
SIM_SEED0 = 7_300_000
"""Seeds of the sim mixes (never used by the other benchmarks)."""


def _save(section: str, value: Any) -> None:
    OUT.parent.mkdir(exist_ok=True)
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data[section] = value
    data["machine"] = describe_machine()
    OUT.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def families_by_kind() -> dict[str, list[str]]:
    """The built-in scenarios of each installed kind, lowest difficulty first (ties by id)."""
    from mlsandbox.scenario import catalog_ids, load_builtin
    from mlsandbox.tasks.registry import kinds

    out: dict[str, list[tuple[int, str]]] = {k: [] for k in kinds()}
    for sid in catalog_ids():
        sc = load_builtin(sid)
        out.setdefault(sc.work()[0], []).append((sc.difficulty + (10 if sc.serving else 0), sid))
    return {k: [sid for _, sid in sorted(v)] for k, v in out.items()}


# ------------------------------------------------------------------------------------------------ sim


def _rl_env(scenario: str, sandbox: str, fit_store: str | None = None) -> tuple[Any, LastObservation]:
    from mlsandbox.env.gym_env import MLSandboxEnv
    from mlsandbox.env.wrappers import DiscreteActions, FlatObservation

    last = LastObservation(
        MLSandboxEnv(scenario, backend="sim", sandbox=sandbox, backend_config={"fit_store": fit_store})
    )
    return DiscreteActions(FlatObservation(last), wait_seconds=bench_sim.WAIT_SECONDS), last


def bench_sim_kind(
    scenario: str,
    mix: Any,
    *,
    seconds: float,
    seed0: int,
    pool: int | None = None,
    fit_store: str | None = None,
) -> dict[str, Any]:
    """``pool``: each episode's seed drawn among ``pool`` seeds from ``seed0`` (a train split) instead of a
    new one; ``fit_store``: the fit store's directory (None: no store)."""
    import numpy as np

    env, last = _rl_env(scenario, f"bench-kinds-{mix.name}", fit_store)
    draw = np.random.default_rng(seed0)
    steps, lengths, env_ms, train_ms = 0, [], [], []
    try:
        for w in range(2):  # warm-up: imports and first touches, seeds of their own
            _episode(env, last, mix, seed=seed0 + 900_000 + w, env_ms=[], train_ms=[])
        load_before = load()
        t0 = time.perf_counter()
        ep = 0
        while time.perf_counter() - t0 < seconds:
            seed = seed0 + (ep if pool is None else int(draw.integers(pool)))
            n = _episode(env, last, mix, seed=seed, env_ms=env_ms, train_ms=train_ms)
            steps += n
            lengths.append(n)
            ep += 1
        wall = time.perf_counter() - t0
    finally:
        env.close()
    env_s = sum(env_ms) / 1000
    rate = steps / env_s if env_s else 0.0
    out: dict[str, Any] = {
        "scenario": scenario,
        "episodes": ep,
        "steps": steps,
        "episode_length_p50": statistics.median(lengths) if lengths else 0,
        "env_steps_per_s": round(rate, 1),
        "loop_steps_per_s": round(steps / wall, 1) if wall else 0.0,
        "train_model_ms": summary(train_ms) if train_ms else None,
        "load_average_1m": [load_before, load()],
        "target_steps_per_s": TARGET_STEPS_PER_S,
        "target_met": rate >= TARGET_STEPS_PER_S,
    }
    if isinstance(mix, RuleMix):
        out["unmapped_actions"] = mix.unmapped
    return out


def _episode(
    env: Any, last: LastObservation, mix: Any, *, seed: int, env_ms: list[float], train_ms: list[float]
) -> int:
    t0 = time.perf_counter()
    env.reset(seed=seed)
    mask = env.action_masks()
    env_ms.append((time.perf_counter() - t0) * 1000)
    mix.reset(env, last)
    n = 0
    while True:
        index = mix.act(env, last, mask)
        t0 = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(index)
        mask = env.action_masks()
        ms = (time.perf_counter() - t0) * 1000
        env_ms.append(ms)
        if env.slot_types[index] == "train_model":
            train_ms.append(ms)
        n += 1
        if terminated or truncated:
            return n


def run_sim(args: argparse.Namespace) -> dict[str, Any]:
    found = families_by_kind()
    kinds = args.kinds or [k for k, v in found.items() if v]
    out: dict[str, Any] = {"pinned_cpu": bench_sim.PINNED, "seconds_per_mix": args.seconds}
    for i, kind in enumerate(kinds):
        scenarios = [s for s in found.get(kind, []) if not _serving(s)]
        if not scenarios:
            out[kind] = {"skipped": "no family of this kind without production traffic"}
            continue
        seed0 = SIM_SEED0 + 10_000 * i
        out[kind] = {
            mix.name: bench_sim_kind(scenarios[0], mix, seconds=args.seconds, seed0=seed0)
            for mix in (RandomMix(seed0), RuleMix(seed0))
        }
        print(f"{kind:22} {_sim_line(out[kind])}", flush=True)
        if args.pool:
            out[kind]["train_split"] = {
                mix.name: _split(scenarios[0], mix, pool=args.pool, seconds=args.seconds, seed0=seed0)
                for mix in (RandomMix(seed0), RuleMix(seed0))
            }
            print(
                f"{'':22} train split of {args.pool}, warm: {_sim_line(out[kind]['train_split'])}", flush=True
            )
    _save("sim", out)
    return out


def _split(scenario: str, mix: Any, *, pool: int, seconds: float, seed0: int) -> dict[str, Any]:
    """The mix on a train split of ``pool`` instances with the fit store in a fresh directory: a cold phase
    (fits done as they come), then the figures of a warm one (fits read from the store), as
    :func:`bench_sim.bench_pool`."""
    import tempfile

    from mlsandbox.backends.sim import fitstore, realfit

    with tempfile.TemporaryDirectory(prefix="bench-kinds-store-") as store:
        realfit.clear()
        fitstore.configure(None)
        cold = bench_sim_kind(scenario, mix, seconds=seconds, seed0=seed0, pool=pool, fit_store=store)
        realfit.clear()
        fitstore.configure(None)
        warm = bench_sim_kind(scenario, mix, seconds=seconds, seed0=seed0 + 1, pool=pool, fit_store=store)
    realfit.clear()
    return {**warm, "pool": pool, "cold_env_steps_per_s": cold["env_steps_per_s"]}


def _serving(scenario: str) -> bool:
    from mlsandbox.scenario import load_builtin

    return load_builtin(scenario).serving is not None


def _sim_line(figures: dict[str, Any]) -> str:
    return "  ".join(
        f"{mix}: {f['env_steps_per_s']:>8.1f} steps/s ({f['episodes']} episodes, {f['scenario']})"
        for mix, f in figures.items()
    )


# ---------------------------------------------------------------------------------------------- local


def _jobs(env: Any) -> list[dict[str, Any]]:
    """Every job of the episode as the runtime measured it: CPU-seconds and peak memory."""
    rows = []
    runtime = env.gateway.runtime if env.gateway is not None else None
    for job in env.episode.jobs.values():
        row: dict[str, Any] = {"job_id": job.job_id, "algorithm": job.algorithm, "state": job.state}
        if runtime is not None:
            try:
                status = runtime.jobs.get(job.backend_id)
            except Exception as e:  # the row is still worth keeping
                row["error"] = str(e)
            else:
                peak = status.peak_rss_bytes
                row.update(
                    state=status.state,
                    cpu_seconds=round(status.cpu_seconds, 3),
                    peak_rss_mb=None if peak is None else round(peak / 2**20, 1),
                )
        rows.append(row)
    return rows


def run_local(args: argparse.Namespace) -> dict[str, Any]:
    import os

    from mlsandbox.agents import make_agent
    from mlsandbox.agents.runner import run_episode
    from mlsandbox.backends.local import LocalBackend
    from mlsandbox.env import MLSandboxEnv
    from mlsandbox.scenario import load_builtin

    # Real services and jobs take the machine's cores (bench_sim pinned this process to one at import;
    # the sandbox's processes would inherit it).
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    found = families_by_kind()
    families = args.families or [s for k, v in found.items() if k != "tabular" for s in v]
    backend = LocalBackend(args.sandbox or "bench-kinds")
    if args.sandbox is None:
        backend.up(ephemeral=True)
    rows: list[dict[str, Any]] = []
    out: dict[str, Any] = {"seeds": args.seeds, "seed0": args.seed0, "episodes": rows}
    try:
        for family in families:
            sc = load_builtin(family)
            for seed in range(args.seed0, args.seed0 + args.seeds):
                env = MLSandboxEnv(family, sandbox=backend.name, start_sandbox=False)
                try:
                    t0 = time.perf_counter()
                    res = run_episode(env, make_agent(sc.reference_agent, seed=seed), seed=seed)
                    wall = time.perf_counter() - t0
                    jobs = _jobs(env)
                finally:
                    env.close()
                grade = res.grade or {}
                row = {
                    "family": family,
                    "kind": sc.work()[0],
                    "metric": sc.work()[1],
                    "seed": seed,
                    "success": bool(grade.get("success")),
                    "reason": grade.get("reason"),
                    "steps": len(res.steps),
                    "wall_s": round(wall, 2),
                    "jobs": jobs,
                }
                rows.append(row)
                cpu = sum(j.get("cpu_seconds") or 0.0 for j in jobs)
                peak = max((j.get("peak_rss_mb") or 0.0 for j in jobs), default=0.0)
                print(
                    f"{family:40} seed {seed}: {'ok  ' if row['success'] else 'FAIL'} {wall:7.1f} s  "
                    f"jobs {len(jobs)} cpu {cpu:6.1f} s peak {peak:6.0f} MB  {row['reason']}",
                    flush=True,
                )
                out["by_family"] = by_family(rows)
                out["by_kind"] = by_kind(rows)
                _save(args.section, out)
    finally:
        if args.sandbox is None:
            backend.down()
    return out


def by_family(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for family in dict.fromkeys(r["family"] for r in rows):
        mine = [r for r in rows if r["family"] == family]
        out[family] = {
            "kind": mine[0]["kind"],
            "episodes": len(mine),
            "successes": sum(r["success"] for r in mine),
            "wall_s": summary([r["wall_s"] for r in mine]),
        }
    return out


def by_kind(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        mine = [r for r in rows if r["kind"] == kind]
        jobs = [j for r in mine for j in r["jobs"] if j.get("state") == "succeeded"]
        out[kind] = {
            "episodes": len(mine),
            "successes": sum(r["success"] for r in mine),
            "episode_wall_s": summary([r["wall_s"] for r in mine]),
            "job_cpu_seconds": summary([j["cpu_seconds"] for j in jobs if j.get("cpu_seconds") is not None])
            if jobs
            else None,
            "job_peak_rss_mb": summary([j["peak_rss_mb"] for j in jobs if j.get("peak_rss_mb") is not None])
            if any(j.get("peak_rss_mb") is not None for j in jobs)
            else None,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sim = sub.add_parser("sim")
    sim.add_argument("--seconds", type=float, default=20.0, help="per kind and mix")
    sim.add_argument("--kinds", nargs="*")
    sim.add_argument(
        "--pool",
        type=int,
        default=0,
        help="also a train split of this many instances, the fit store warm (each kind's train_split)",
    )
    local = sub.add_parser("local")
    local.add_argument("--seeds", type=int, default=5)
    local.add_argument("--seed0", type=int, default=101)
    local.add_argument("--families", nargs="*")
    local.add_argument("--sandbox")
    local.add_argument("--section", default="local", help="the JSON section the rows go to")
    args = parser.parse_args()
    if args.what == "sim":
        run_sim(args)
    else:
        result = run_local(args)
        print(json.dumps(result["by_kind"], indent=2))


if __name__ == "__main__":
    main()
