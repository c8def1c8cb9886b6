"""The sim backend's speed as RL uses it: through the RL wrappers, a new seed each episode, resets included.

The env is :func:`~mlsandbox.env.wrappers.make_rl_env` (``DiscreteActions`` around ``FlatObservation``
around ``MLSandboxEnv(backend="sim")``) on ``tabular-quality-basic``; every step also asks for
``action_masks()`` (what MaskablePPO does). Two action mixes:

- **random**: a uniformly random valid slot under the action mask (the project's random policy over slots);
- **rule**: the rule agent's (:class:`~mlsandbox.agents.rule_agent.RuleAgent`) choices, each mapped to the
  wrapper's slot with the same action (it reads the structured observation the inner env returned).

Each episode resets with a seed never used before in the process, so nothing generated for one episode is
reused by the next, and no fit store is used (every fit is done on the spot). Beside them, a training
run's view (``--pool N``): seeds drawn among the N instances of a train split, the fit store in a fresh
directory, a cold phase (fits done as they come) and a warm one (the instances' fits read from the
store, as the later epochs of a run, a vector env's other processes and the next run over the split do). Figures per mix: env-steps/s (steps over the time spent in ``reset``, ``step`` and
``action_masks``; the policy's own time is left out and reported apart), resets/s, reset p50/p95 with a
new seed, per action type p50/p95 ms (``train_model`` is the training surrogate's cost). Also the reset
p50/p95 with a repeated seed, a 60 s ``wait`` while a deployment serves production traffic
(``serving-deploy-slo``, the step a deployment goal's training episodes repeat most), and beside them the old figure, labelled **cached path (repeated actions on
the same data)**: the raw env repeating the eight actions of ``bench_interfaces.VECTOR_PROFILE`` on one
episode's data, whose data actions hit the results cached by the data's digest.

The process is pinned to CPU 0 and BLAS/OpenMP/Arrow run single-threaded. The machine is shared: the load
average is printed and saved with the figures. Prints a table and saves ``.bench/sim.json``.
Usage: ``python benchmarks/bench_sim.py [--seconds S] [--episodes N] [--mix random rule]
[--repeat-resets N] [--cached-seconds S] [--pool N] [--pool-seconds S] [--serving-episodes N]`` (defaults: about five minutes).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy (or anything that loads a BLAS) is imported
try:
    os.sched_setaffinity(0, {0})
    PINNED: int | None = 0
except (AttributeError, OSError):
    PINNED = None

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from machine import describe as describe_machine  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / ".bench" / "sim.json"
SCENARIO = "tabular-quality-basic"
CACHED_LABEL = "cached path (repeated actions on the same data)"
TARGET_STEPS_PER_S = 1000
TARGET_RESET_NEW_MS = 20.0
TARGET_RESET_SAME_MS = 2.0
WAIT_SECONDS = (5.0, 30.0)
"""The wait slots: the wrapper's default and the rule agent's own wait."""
console = Console(width=120)

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


def single_threaded() -> None:
    """BLAS/OpenMP pools (threadpoolctl) and Arrow's pools at one thread each."""
    import pyarrow as pa

    threadpool_limits(1)
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)


def load() -> float:
    return round(os.getloadavg()[0], 2)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values), q))


def summary(values: list[float]) -> dict[str, float | int]:
    return {"n": len(values), "p50": round(pct(values, 50), 3), "p95": round(pct(values, 95), 3)}


# ------------------------------------------------------------------------------------------ the env


class LastObservation(gym.Wrapper[Any, Any, Any, Any]):
    """Passes everything through and keeps the inner env's last structured observation (its JSON text),
    for the rule agent, which reads structured observations."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.text = "{}"

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self.text = obs["text"]
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.text = obs["text"]
        return obs, reward, terminated, truncated, info


def rl_env(sandbox: str, fit_store: str | None = None) -> tuple[Any, LastObservation]:
    """What :func:`~mlsandbox.env.wrappers.make_rl_env` builds (``wait_seconds`` :data:`WAIT_SECONDS`),
    with :class:`LastObservation` between the inner env and the wrappers. ``fit_store``: the fit store's
    directory (None: no store, every fit done in this process)."""
    from mlsandbox.env.gym_env import MLSandboxEnv
    from mlsandbox.env.wrappers import DiscreteActions, FlatObservation

    last = LastObservation(
        MLSandboxEnv(SCENARIO, backend="sim", sandbox=sandbox, backend_config={"fit_store": fit_store})
    )
    env = DiscreteActions(FlatObservation(last), wait_seconds=WAIT_SECONDS)
    return env, last


def slot_of(env: Any, action: dict[str, Any]) -> int | None:
    """The valid slot whose action is ``action`` (the slot's fields equal; a wait: the nearest length)."""
    best: tuple[float, int] | None = None
    for i, (slot, ok) in enumerate(env.slots()):
        if not ok or slot["type"] != action["type"]:
            continue
        if slot["type"] == "wait":
            gap = abs(float(slot["seconds"]) - float(action.get("seconds", 0)))
            best = min(best or (gap, i), (gap, i))
        elif all(action.get(k) == v for k, v in slot.items()):
            return i
    return None if best is None else best[1]


class RandomMix:
    name = "random"

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def reset(self, env: Any, last: LastObservation) -> None:
        pass

    def act(self, env: Any, last: LastObservation, mask: np.ndarray) -> int:
        return int(self.rng.choice(np.flatnonzero(mask)))


class RuleMix:
    name = "rule"

    def __init__(self, seed: int) -> None:
        from mlsandbox.agents.rule_agent import RuleAgent

        self.agent = RuleAgent()
        self.unmapped = 0

    def reset(self, env: Any, last: LastObservation) -> None:
        self.agent.reset(json.loads(last.text))

    def act(self, env: Any, last: LastObservation, mask: np.ndarray) -> int:
        action = self.agent.act(json.loads(last.text))
        slot = slot_of(env, action)
        if slot is None:  # not expressible in the slots: submit (ends the episode)
            self.unmapped += 1
            slot = env.slot_types.index("submit")
        return slot


# ------------------------------------------------------------------------------------------ benches


def _episode(env: Any, last: LastObservation, mix: Any, *, seed: int) -> None:
    env.reset(seed=seed)
    mix.reset(env, last)
    mask = env.action_masks()
    while True:
        _, _, terminated, truncated, _ = env.step(mix.act(env, last, mask))
        mask = env.action_masks()
        if terminated or truncated:
            return


def bench_mix(
    mix: Any,
    *,
    seconds: float,
    episodes: int,
    seed0: int,
    pool: int | None = None,
    fit_store: str | None = None,
) -> dict[str, Any]:
    """``pool``: each episode's seed drawn among ``pool`` seeds from ``seed0`` (a train split of that many
    instances) instead of a new one; ``fit_store``: the fit store's directory."""
    from mlsandbox.backends.sim import fitstore

    env, last = rl_env(f"bench-{mix.name}", fit_store)
    draw = np.random.default_rng(seed0)
    try:
        for w in range(3):  # warm-up: imports and first touches, seeds of their own
            _episode(env, last, mix, seed=10_000_000 + seed0 + w)
        load_before = load()
        resets: list[float] = []
        resets_cpu: list[float] = []
        per_type: dict[str, list[float]] = {}
        per_type_cpu: dict[str, list[float]] = {}
        step_ms: list[float] = []
        step_cpu: list[float] = []
        policy_s = 0.0
        steps = 0
        lengths: list[int] = []
        t_start = time.perf_counter()
        cpu0 = time.process_time()
        ep = 0
        while ep < episodes and time.perf_counter() - t_start < seconds:
            t0, c0 = time.perf_counter(), time.process_time()
            env.reset(seed=seed0 + (ep if pool is None else int(draw.integers(pool))))
            mask = env.action_masks()
            resets.append((time.perf_counter() - t0) * 1000)
            resets_cpu.append((time.process_time() - c0) * 1000)
            p0 = time.perf_counter()
            mix.reset(env, last)
            policy_s += time.perf_counter() - p0
            n = 0
            while True:
                p0 = time.perf_counter()
                index = mix.act(env, last, mask)
                t0, c0 = time.perf_counter(), time.process_time()
                policy_s += t0 - p0
                _, _, terminated, truncated, _ = env.step(index)
                mask = env.action_masks()
                ms, cpu_ms = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
                step_ms.append(ms)
                step_cpu.append(cpu_ms)
                per_type.setdefault(env.slot_types[index], []).append(ms)
                per_type_cpu.setdefault(env.slot_types[index], []).append(cpu_ms)
                n += 1
                if terminated or truncated:
                    break
            steps += n
            lengths.append(n)
            ep += 1
        wall = time.perf_counter() - t_start
        cpu = time.process_time() - cpu0
    finally:
        env.close()
    env_s = (sum(resets) + sum(step_ms)) / 1000
    out: dict[str, Any] = {
        "episodes": ep,
        "steps": steps,
        "episode_length_p50": statistics.median(lengths) if lengths else 0,
        "env_steps_per_s": round(steps / env_s, 1),
        "loop_steps_per_s": round(steps / wall, 1),
        "steps_per_cpu_s": round(steps / cpu, 1) if cpu else None,
        "env_steps_per_cpu_s": round(steps * 1000 / (sum(resets_cpu) + sum(step_cpu)), 1),
        "resets_per_s": round(len(resets) / (sum(resets) / 1000), 1),
        "reset_ms_new_seed": summary(resets),
        "reset_cpu_ms_new_seed": summary(resets_cpu),
        "step_ms": summary(step_ms),
        "step_cpu_ms": summary(step_cpu),
        "policy_ms_per_step": round(policy_s * 1000 / max(1, steps), 3),
        "per_action_ms": {t: summary(v) for t, v in sorted(per_type.items())},
        "per_action_cpu_ms": {t: summary(v) for t, v in sorted(per_type_cpu.items())},
        "wall_s": round(wall, 2),
        "load_average_1m": [load_before, load()],
        "target_steps_per_s": TARGET_STEPS_PER_S,
        "target_met": steps / env_s >= TARGET_STEPS_PER_S,
    }
    store = fitstore.current()
    if store is not None:
        out["fit_store"] = {"hits": store.hits, "misses": store.misses, "writes": store.writes}
    if isinstance(mix, RuleMix):
        out["unmapped_actions"] = mix.unmapped
    return out


def bench_pool(mix: Any, *, pool: int, seconds: float, seed0: int) -> dict[str, Any]:
    """A training run's view: episodes drawn from a train split of ``pool`` instances, with the fit store
    in a fresh directory. ``cold``: the first ``seconds`` (fits done as they come); ``warm``: the next
    ``seconds`` in a new env of the same process, the instances' fits read from the store (what the later
    epochs of a training run, the other processes of a vector env and the next run over the split see)."""
    import tempfile

    from mlsandbox.backends.sim import fitstore, realfit

    with tempfile.TemporaryDirectory(prefix="bench-fit-store-") as store:
        realfit.clear()
        fitstore.configure(None)  # a new store object per phase: its counters are the phase's
        cold = bench_mix(mix, seconds=seconds, episodes=10**9, seed0=seed0, pool=pool, fit_store=store)
        realfit.clear()  # the warm phase reads the store, not this process's memory of the cold phase
        fitstore.configure(None)
        warm = bench_mix(mix, seconds=seconds, episodes=10**9, seed0=seed0 + 1, pool=pool, fit_store=store)
        from mlsandbox.backends.sim.fitstore import FitStore

        files, size = FitStore(store).size()
    realfit.clear()
    return {
        "pool": pool,
        "cold": cold,
        "warm": warm,
        "store_files": files,
        "store_mib": round(size / 2**20, 1),
    }


class RuleDriven(gym.Wrapper[Any, Any, Any, Any]):
    """The rule mix inside the env, for a vector env whose worker processes cannot share the bench's
    policy: ``step`` ignores the action it is given and plays the rule agent's slot; ``reset`` draws the
    episode's seed among ``pool`` seeds from ``seed0`` (what a vector env's autoreset gives no seed for)."""

    def __init__(self, fit_store: str, pool: int, seed0: int, worker: int) -> None:
        env, self.last = rl_env(f"bench-vec-{worker}", fit_store)
        super().__init__(env)
        self.mix = RuleMix(0)
        self.pool, self.seed0 = pool, seed0
        self.draw = np.random.default_rng(seed0 + 7919 * worker)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        kwargs["seed"] = self.seed0 + int(self.draw.integers(self.pool))
        obs, info = self.env.reset(**kwargs)
        self.mix.reset(self.env, self.last)
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        mask = self.env.action_masks()  # type: ignore[attr-defined]
        return self.env.step(self.mix.act(self.env, self.last, mask))


def _rule_driven(fit_store: str, pool: int, seed0: int, worker: int) -> Any:
    single_threaded()
    return RuleDriven(fit_store, pool, seed0, worker)


def bench_vector(num_envs: list[int], *, pool: int, seconds: float, seed0: int) -> dict[str, Any]:
    """The rule mix on a train split of ``pool`` instances in ``gymnasium``'s ``AsyncVectorEnv`` (one
    worker process per env, the layout ``mlsandbox train --n-envs`` uses), the fit store filled first by
    one episode per instance: env-steps/s over all envs for each N (after ``seconds / 4`` of warm-up in
    which each worker meets the instances)."""
    import functools
    import tempfile

    from gymnasium.vector import AsyncVectorEnv

    from mlsandbox.backends.sim import fitstore, realfit

    out: dict[str, Any] = {"pool": pool, "cpus": os.cpu_count(), "by_envs": {}}
    with tempfile.TemporaryDirectory(prefix="bench-fit-store-") as store:
        realfit.clear()
        fitstore.configure(None)
        env, last = rl_env("bench-vec-fill", store)
        try:
            for i in range(pool):
                _episode(env, last, RuleMix(0), seed=seed0 + i)
        finally:
            env.close()
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))  # the workers may use every core
        for n in num_envs:
            fns = [functools.partial(_rule_driven, store, pool, seed0, w) for w in range(n)]
            envs = AsyncVectorEnv(fns, shared_memory=False)
            try:
                envs.reset(seed=seed0)
                actions = np.zeros(n, dtype=np.int64)
                t_end = time.perf_counter() + seconds / 4
                while time.perf_counter() < t_end:
                    envs.step(actions)
                load_before = load()
                calls = 0
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < seconds:
                    envs.step(actions)
                    calls += 1
                wall = time.perf_counter() - t0
            finally:
                envs.close()
            out["by_envs"][str(n)] = {
                "env_steps": calls * n,
                "env_steps_per_s": round(calls * n / wall, 1),
                "wall_s": round(wall, 2),
                "load_average_1m": [load_before, load()],
            }
        if PINNED is not None:
            os.sched_setaffinity(0, {PINNED})
    realfit.clear()
    base = out["by_envs"].get("1", {}).get("env_steps_per_s")
    for v in out["by_envs"].values():
        v["speedup_vs_1"] = round(v["env_steps_per_s"] / base, 2) if base else None
    return out


def bench_repeated_reset(n: int) -> dict[str, Any]:
    env, _ = rl_env("bench-reset")
    try:
        env.reset(seed=7)
        load_before = load()
        times, cpu = [], []
        for _ in range(n):
            t0, c0 = time.perf_counter(), time.process_time()
            env.reset(seed=7)
            env.action_masks()
            times.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
    finally:
        env.close()
    return {
        "reset_ms_same_seed": summary(times),
        "reset_cpu_ms_same_seed": summary(cpu),
        "load_average_1m": [load_before, load()],
    }


def bench_cached(seconds: float) -> dict[str, Any]:
    from mlsandbox.env import MLSandboxEnv
    from mlsandbox.scenario import load_builtin

    scenario = load_builtin(SCENARIO).model_copy(update={"max_steps": 10_000_000})
    env = MLSandboxEnv(scenario, backend="sim", sandbox="bench-cached")
    try:
        env.reset(seed=1)
        k = len(VECTOR_PROFILE)
        for i in range(2 * k):  # warm-up: first touches of each code path (and the cached results)
            env.step(VECTOR_PROFILE[i % k])
        load_before = load()
        steps = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for action in VECTOR_PROFILE:
                env.step(action)
            steps += k
        wall = time.perf_counter() - t0
    finally:
        env.close()
    return {
        "label": CACHED_LABEL,
        "steps": steps,
        "env_steps_per_s": round(steps / wall, 1),
        "load_average_1m": [load_before, load()],
    }


SERVING_SCENARIO = "serving-deploy-slo"


def bench_serving_waits(episodes: int, waits: int, seed0: int) -> dict[str, Any]:
    """A 60 s ``wait`` while production traffic runs (``serving-deploy-slo``: 4 requests/s by entity id,
    one replica, the monitor's ticks): each episode a new seed, its data cleaned, a logistic regression
    trained, registered and deployed, then ``waits`` waits timed."""
    from mlsandbox.env import MLSandboxEnv

    env = MLSandboxEnv(SERVING_SCENARIO, backend="sim", sandbox="bench-serving-waits")
    times: list[float] = []
    cpu: list[float] = []
    load_before = load()
    try:
        for e in range(episodes):
            env.reset(seed=seed0 + e)
            env.step(
                {"type": "clean_dataset", "dataset": "raw/customers.parquet", "strategy": "impute_median"}
            )
            cleaned = list(env.episode.datasets)[-1]
            env.step({"type": "train_model", "dataset": cleaned, "algorithm": "logistic_regression"})
            env.step({"type": "wait", "seconds": 60})
            job = next(iter(env.episode.jobs.values()))
            env.step({"type": "register_model", "run_id": job.run_id, "name": "churn"})
            env.step({"type": "deploy_model", "name": "churn", "version": "1", "replicas": 1})
            for _ in range(waits):
                t0, c0 = time.perf_counter(), time.process_time()
                _, _, terminated, truncated, _ = env.step({"type": "wait", "seconds": 60})
                times.append((time.perf_counter() - t0) * 1000)
                cpu.append((time.process_time() - c0) * 1000)
                if terminated or truncated:
                    break
            if not env.episode.serving.served_version:
                raise SystemExit(f"{SERVING_SCENARIO} seed {seed0 + e}: the deployment did not serve")
    finally:
        env.close()
    return {
        "scenario": SERVING_SCENARIO,
        "wait_ms": summary(times),
        "wait_cpu_ms": summary(cpu),
        "load_average_1m": [load_before, load()],
    }


# ------------------------------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="time per mix (default 20)")
    parser.add_argument("--episodes", type=int, default=100_000, help="at most this many episodes per mix")
    parser.add_argument("--mix", nargs="*", choices=("random", "rule"), default=["random", "rule"])
    parser.add_argument("--repeat-resets", type=int, default=200, help="resets with one seed (default 200)")
    parser.add_argument(
        "--cached-seconds", type=float, default=5.0, help="time on the cached path (default 5)"
    )
    parser.add_argument(
        "--pool",
        type=int,
        default=16,
        help="instances of the train-split figure (seeds drawn among them; 0: skip; default 16)",
    )
    parser.add_argument(
        "--pool-seconds",
        type=float,
        default=40.0,
        help="time per phase of the train-split figure (default 40)",
    )
    parser.add_argument(
        "--vec",
        type=int,
        nargs="*",
        default=[1, 2, 4, 8],
        help="vector env sizes of the rule mix on the train split (none: skip; default 1 2 4 8)",
    )
    parser.add_argument(
        "--vec-seconds", type=float, default=20.0, help="time per vector env size (default 20)"
    )
    parser.add_argument(
        "--serving-episodes",
        type=int,
        default=3,
        help="episodes of the 60 s wait under production traffic, five waits each (0: skip; default 3)",
    )
    args = parser.parse_args()
    single_threaded()
    _check_profile()
    figures: dict[str, Any] = {
        "machine": describe_machine(),
        "backend": "sim",
        "scenario": SCENARIO,
        "pinned_cpu": PINNED,
        "shared_machine": True,
        "mixes": {},
    }
    mixes = {"random": RandomMix(0), "rule": RuleMix(0)}
    for i, name in enumerate(args.mix):
        figures["mixes"][name] = bench_mix(
            mixes[name], seconds=args.seconds, episodes=args.episodes, seed0=1_000_000 * (i + 1)
        )
    if args.pool > 0:
        figures["train_split"] = {
            name: bench_pool(
                mixes[name], pool=args.pool, seconds=args.pool_seconds, seed0=50_000_000 * (i + 1)
            )
            for i, name in enumerate(args.mix)
        }
    if args.vec:
        figures["vector"] = bench_vector(
            args.vec, pool=max(1, args.pool or 16), seconds=args.vec_seconds, seed0=90_000_000
        )
    if args.serving_episodes > 0:
        figures["serving_wait"] = bench_serving_waits(args.serving_episodes, 5, seed0=95_000_000)
    if args.repeat_resets > 0:
        figures["repeated_seed"] = bench_repeated_reset(args.repeat_resets)
    if args.cached_seconds > 0:
        figures["cached_path"] = bench_cached(args.cached_seconds)
    figures["load_average_1m_end"] = load()
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


def _pair(s: dict[str, Any]) -> str:
    return f"{s['p50']:.2f} / {s['p95']:.2f}"


def report(figures: dict[str, Any]) -> None:
    m = figures["machine"]
    console.print(
        f"machine: {m['cpus']} CPUs ({m['cpu_model']}), reference workload {m['reference_ms']} ms; "
        f"pinned to CPU {figures['pinned_cpu']}, BLAS/OpenMP/Arrow single-threaded. The machine is SHARED: "
        f"load average (1 min) {m['load_average_1m']} at start, {figures['load_average_1m_end']} at end; "
        "figures move with it."
    )
    mixes = figures["mixes"]
    table = Table(title=f"sim through the RL wrappers, {SCENARIO}, a new seed each episode, resets included")
    table.add_column("figure")
    for name in mixes:
        table.add_column(name, justify="right")

    def row(label: str, get: Any) -> None:
        table.add_row(label, *(get(v) for v in mixes.values()))

    row("episodes / steps", lambda v: f"{v['episodes']} / {v['steps']}")
    row(f"env-steps/s (target >= {TARGET_STEPS_PER_S:,})", lambda v: f"{v['env_steps_per_s']:,.0f}")
    row("env-steps per CPU-second", lambda v: f"{v['env_steps_per_cpu_s']:,.0f}")
    row("loop steps/s (policy included)", lambda v: f"{v['loop_steps_per_s']:,.0f}")
    row("resets/s", lambda v: f"{v['resets_per_s']:,.1f}")
    row(
        f"reset p50 / p95 ms, new seed (target p50 <= {TARGET_RESET_NEW_MS:g})",
        lambda v: _pair(v["reset_ms_new_seed"]) + " (CPU " + _pair(v["reset_cpu_ms_new_seed"]) + ")",
    )
    row(
        "step p50 / p95 ms (mask included)",
        lambda v: _pair(v["step_ms"]) + " (CPU " + _pair(v["step_cpu_ms"]) + ")",
    )
    row("load average during", lambda v: " -> ".join(str(x) for x in v["load_average_1m"]))
    types = sorted({t for v in mixes.values() for t in v["per_action_ms"]})
    for t in types:
        row(
            f"  {t} p50 / p95 ms (CPU)",
            lambda v, t=t: (
                f"{_pair(v['per_action_ms'][t])} ({_pair(v['per_action_cpu_ms'][t])}) n={v['per_action_ms'][t]['n']}"
                if t in v["per_action_ms"]
                else "-"
            ),
        )
    console.print(table)
    if "train_split" in figures:
        split = figures["train_split"]
        first = next(iter(split.values()))
        t = Table(
            title=(
                f"a train split of {first['pool']} instances (seeds drawn among them), the fit store in a fresh "
                "directory: cold = its first phase, warm = the next (fits read from the store)"
            )
        )
        t.add_column("mix / phase")
        for col in (
            "env-steps/s",
            "reset p50 ms",
            "step p50 / p95 ms",
            "train_model p50 / p95 ms",
            "store hits / misses",
        ):
            t.add_column(col, justify="right")
        for name, v in split.items():
            for phase in ("cold", "warm"):
                f = v[phase]
                train = f["per_action_ms"].get("train_model")
                fs = f.get("fit_store", {})
                t.add_row(
                    f"{name} / {phase}",
                    f"{f['env_steps_per_s']:,.0f}",
                    f"{f['reset_ms_new_seed']['p50']:.2f}",
                    _pair(f["step_ms"]),
                    _pair(train) if train else "-",
                    f"{fs.get('hits', 0)} / {fs.get('misses', 0)}",
                )
        console.print(t)
        console.print(
            f"store after the run: {first['store_files']} fits, {first['store_mib']} MiB (per mix); "
            "the new-seed figures above use no store"
        )
    if "vector" in figures:
        vec = figures["vector"]
        t = Table(
            title=(
                f"the rule mix in gymnasium's AsyncVectorEnv (one worker process per env), a train split of "
                f"{vec['pool']} instances, the fit store filled first; {vec['cpus']} CPUs, not pinned"
            )
        )
        for col in ("envs", "env-steps/s", "x one env", "load average during"):
            t.add_column(col, justify="right")
        for n, v in vec["by_envs"].items():
            t.add_row(
                n,
                f"{v['env_steps_per_s']:,.0f}",
                f"{v['speedup_vs_1']:.2f}" if v["speedup_vs_1"] else "-",
                " -> ".join(str(x) for x in v["load_average_1m"]),
            )
        console.print(t)
    if "serving_wait" in figures:
        w = figures["serving_wait"]
        console.print(
            f"a 60 s wait under production traffic ({w['scenario']}, one replica, new seeds): "
            f"p50 / p95 {_pair(w['wait_ms'])} ms (CPU {_pair(w['wait_cpu_ms'])} ms), n={w['wait_ms']['n']}"
        )
    if "repeated_seed" in figures:
        r = figures["repeated_seed"]["reset_ms_same_seed"]
        console.print(
            f"reset with a repeated seed (wrappers, mask included): p50 {r['p50']:.2f} ms, p95 {r['p95']:.2f} ms "
            f"(target p50 <= {TARGET_RESET_SAME_MS:g} ms); CPU "
            f"{_pair(figures['repeated_seed']['reset_cpu_ms_same_seed'])} ms"
        )
    if "cached_path" in figures:
        c = figures["cached_path"]
        console.print(
            f"{c['label']}: {c['env_steps_per_s']:,.0f} env-steps/s (raw env, the eight actions of "
            "bench_interfaces.VECTOR_PROFILE repeated on one episode's data; not what RL sees)"
        )


if __name__ == "__main__":
    main()
