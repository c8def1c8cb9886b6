"""The sim backend's speed: env steps per second on one core, a rule-agent episode, vectorised envs.

- **steps/s on one core**: one in-process env (``backend="sim"``) pinned to one CPU, stepping the mixed
  action profile of ``bench_interfaces.py`` (listing, profiling and cleaning data on real rows, tracker
  queries, health probes, logs, an invalid action, a wait) for ``--steps`` steps. Target >= 2,000.
- **a rule-agent episode** of ``tabular-quality-basic`` (reset included: the data generated and written,
  then inspect, clean twice, train, wait, register, submit, grade), pinned to one CPU, each episode with
  its own seed (nothing carried over but the process's imports) and again with one seed (what repeated
  episodes of one variant cost). Target <= 20 ms.
- **make_vec**: ``gymnasium.make_vec(..., vectorization_mode="async", backend="sim")`` with 1, 2, 4 and 8
  envs on the mixed profile: env-steps/s and the speed-up over one env (each env is its own sim sandbox,
  so the envs share nothing; the speed-up is bounded by the machine's cores).

Prints the figures and saves ``.bench/sim.json``. Usage: ``python benchmarks/bench_sim.py [--steps N]
[--episodes N] [--vector-steps N] [--only steps episode vector]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from machine import describe as describe_machine
from rich.console import Console
from rich.table import Table

OUT = Path(__file__).resolve().parents[1] / ".bench" / "sim.json"
SCENARIO = "tabular-quality-basic"
console = Console()

VECTOR_PROFILE: list[dict[str, Any]] = [
    {"type": "list_datasets"},
    {"type": "check_data_quality", "dataset": "raw/customers.parquet"},
    {"type": "list_runs"},
    {"type": "get_service_health", "service": "mlflow"},
    {
        "type": "clean_dataset",
        "dataset": "raw/customers.parquet",
        "strategy": "drop_na",
        "output": "clean/v.parquet",
    },
    {"type": "wait", "seconds": "soon"},  # invalid: rejected by validation
    {"type": "get_logs", "target": "minio", "tail": 5},
    {"type": "wait", "seconds": 0},
]
"""The mixed action profile of ``bench_interfaces.py`` (its ``VECTOR_PROFILE``), checked equal in main."""


def pin_one_core() -> int | None:
    """Pin this process to one CPU (the last one it may use); None where affinity is not available."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[-1]})
    except (AttributeError, OSError):
        return None
    import pyarrow as pa

    pa.set_cpu_count(1)  # Arrow's own thread pool, sized for the machine otherwise
    return cpus[-1]


def bench_steps(steps: int) -> dict[str, Any]:
    from mlsandbox.env import MLSandboxEnv
    from mlsandbox.scenario import load_builtin

    scenario = load_builtin(SCENARIO).model_copy(update={"max_steps": steps + 100})
    env = MLSandboxEnv(scenario, backend="sim", sandbox="bench-steps")
    try:
        env.reset(seed=1)
        k = len(VECTOR_PROFILE)
        for i in range(2 * k):  # warm-up: first touches of each code path
            env.step(VECTOR_PROFILE[i % k])
        per_action: dict[str, list[float]] = {}
        cpu0, t0 = time.process_time(), time.perf_counter()
        for i in range(steps):
            action = VECTOR_PROFILE[i % k]
            s = time.perf_counter()
            env.step(action)
            per_action.setdefault(_label(action), []).append((time.perf_counter() - s) * 1000)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        env.close()
    return {
        "steps": steps,
        "steps_per_s": round(steps / wall, 1),
        "steps_per_cpu_s": round(steps / cpu, 1),
        "step_p50_ms_by_action": {a: round(statistics.median(v), 3) for a, v in per_action.items()},
        "target_steps_per_s": 2000,
        "target_met": steps / wall >= 2000,
    }


def _label(action: dict[str, Any]) -> str:
    t = action["type"]
    return f"{t}(invalid)" if t == "wait" and not isinstance(action.get("seconds"), int | float) else t


def bench_episode(episodes: int) -> dict[str, Any]:
    from mlsandbox.agents.rule_agent import RuleAgent
    from mlsandbox.agents.runner import run_episode
    from mlsandbox.env import MLSandboxEnv

    env = MLSandboxEnv(SCENARIO, backend="sim", sandbox="bench-episode")
    try:
        run_episode(env, RuleAgent(), seed=10_000)  # warm-up: imports, first touches
        fresh, same, phases, fresh_cpu, same_cpu = [], [], [], [], []
        for s in range(episodes):
            t0, c0 = time.perf_counter(), time.process_time()
            res = run_episode(env, RuleAgent(), seed=20_000 + s)
            fresh.append((time.perf_counter() - t0) * 1000)
            fresh_cpu.append((time.process_time() - c0) * 1000)
            assert res.success, res.grade
            phases.append(
                {
                    "reset_ms": res.reset_info["timings"]["reset_s"] * 1000,
                    "steps_ms": sum(r.info["timings"]["step_s"] for r in res.steps) * 1000,
                }
            )
        for _ in range(episodes):
            t0, c0 = time.perf_counter(), time.process_time()
            run_episode(env, RuleAgent(), seed=7)
            same.append((time.perf_counter() - t0) * 1000)
            same_cpu.append((time.process_time() - c0) * 1000)
        steps = len(res.steps)
    finally:
        env.close()
    p50 = statistics.median(fresh)
    return {
        "episodes": episodes,
        "steps": steps,
        "episode_ms_p50_new_seed": round(p50, 2),
        "episode_ms_min_new_seed": round(min(fresh), 2),
        "episode_ms_p50_same_seed": round(statistics.median(same), 2),
        "episode_cpu_ms_p50_new_seed": round(statistics.median(fresh_cpu), 2),
        "episode_cpu_ms_p50_same_seed": round(statistics.median(same_cpu), 2),
        "reset_ms_p50": round(statistics.median(p["reset_ms"] for p in phases), 2),
        "steps_ms_p50": round(statistics.median(p["steps_ms"] for p in phases), 2),
        "target_ms": 20,
        "target_met": p50 <= 20,
    }


def bench_vector(num_envs: int, steps: int) -> dict[str, Any]:
    import gymnasium as gym

    import mlsandbox  # noqa: F401  (registers the env)
    from mlsandbox.scenario import load_builtin

    scenario = load_builtin(SCENARIO).model_copy(update={"max_steps": steps + 100})
    envs = gym.make_vec("mlsandbox/MLSandbox-v0", num_envs=num_envs, vectorization_mode="async",
                        scenario=scenario, backend="sim", sandbox="bench-vec")  # fmt: skip
    try:
        envs.reset(seed=1)
        k = len(VECTOR_PROFILE)
        for w in range(2 * k):
            envs.step([json.dumps(VECTOR_PROFILE[(w + i) % k]) for i in range(num_envs)])
        t0 = time.perf_counter()
        for j in range(steps):
            envs.step([json.dumps(VECTOR_PROFILE[(j + 3 * i) % k]) for i in range(num_envs)])
        wall = time.perf_counter() - t0
    finally:
        envs.close()
    return {"num_envs": num_envs, "vector_steps": steps, "env_steps_per_s": round(num_envs * steps / wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--vector-steps", type=int, default=400)
    parser.add_argument("--only", nargs="*", choices=("steps", "episode", "vector"), default=None)
    args = parser.parse_args()
    only = set(args.only or ("steps", "episode", "vector"))
    _check_profile()
    figures: dict[str, Any] = {"machine": describe_machine(), "backend": "sim"}
    if "vector" in only:  # first, before this process is pinned (each worker is a process of its own)
        rows = [bench_vector(n, args.vector_steps) for n in (1, 2, 4, 8)]
        one = rows[0]["env_steps_per_s"]
        for r in rows:
            r["speedup_vs_1"] = round(r["env_steps_per_s"] / one, 2)
        figures["vector"] = {"rows": rows, "cpus": os.cpu_count()}
    core = pin_one_core()
    figures["pinned_cpu"] = core
    if "steps" in only:
        figures["steps"] = bench_steps(args.steps)
    if "episode" in only:
        figures["episode"] = bench_episode(args.episodes)
    report(figures)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(figures, indent=2))
    console.print(f"saved {OUT}")


def _check_profile() -> None:
    import importlib.util
    import sys

    here = Path(__file__).resolve().parent
    spec = importlib.util.spec_from_file_location("bench_interfaces_profile", here / "bench_interfaces.py")
    if spec is None or spec.loader is None:
        return
    sys.path.insert(0, str(here))
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception:  # its own imports (MCP, the local backend) are not ours to need
        return
    finally:
        sys.path.remove(str(here))
    if module.VECTOR_PROFILE != VECTOR_PROFILE:
        raise SystemExit("the mixed profile differs from bench_interfaces.VECTOR_PROFILE: update it here")


def report(figures: dict[str, Any]) -> None:
    console.print(f"machine: {figures['machine']['cpus']} CPUs, reference {figures['machine']['reference_ms']} ms, "
                  f"load {figures['machine']['load_average_1m']}; pinned to CPU {figures.get('pinned_cpu')}")  # fmt: skip
    if "steps" in figures:
        s = figures["steps"]
        table = Table(title=f"sim, one core, mixed profile: {s['steps_per_s']:.0f} steps/s (target >= 2,000: "
                      f"{'met' if s['target_met'] else 'NOT met'}); {s['steps_per_cpu_s']:.0f} per CPU-second")  # fmt: skip
        table.add_column("action")
        table.add_column("p50 ms", justify="right")
        for a, v in s["step_p50_ms_by_action"].items():
            table.add_row(a, f"{v:.3f}")
        console.print(table)
    if "episode" in figures:
        e = figures["episode"]
        console.print(
            f"rule episode of {SCENARIO} ({e['steps']} steps), one core: p50 {e['episode_ms_p50_new_seed']:.1f} ms "
            f"wall, {e['episode_cpu_ms_p50_new_seed']:.1f} ms CPU with a new seed each (reset "
            f"{e['reset_ms_p50']:.1f} ms + steps {e['steps_ms_p50']:.1f} ms); {e['episode_ms_p50_same_seed']:.1f} ms "
            f"wall, {e['episode_cpu_ms_p50_same_seed']:.1f} ms CPU with one seed (target <= 20 ms: "
            f"{'met' if e['target_met'] else 'NOT met'})"
        )
    if "vector" in figures:
        table = Table(title=f"make_vec (async), sim, mixed profile, {figures['vector']['cpus']} CPUs")
        for col in ("N", "env-steps/s", "speed-up"):
            table.add_column(col, justify="right")
        for r in figures["vector"]["rows"]:
            table.add_row(str(r["num_envs"]), f"{r['env_steps_per_s']:.0f}", f"{r['speedup_vs_1']:.2f}x")
        console.print(table)


if __name__ == "__main__":
    main()
