"""Grading time of ``submit``: where the seconds of the episode's last step go.

Plays one episode of the rule agent on ``tabular-quality-basic`` (clean, train, register, submit) through
the in-process env on a local sandbox, and times its ``submit`` step split into its parts:

- the grade (``grade_episode``), of which ``load_model`` (the model version's download through the
  tracking server, then loading the flavor) and the scoring of the hidden holdout (the rest);
- the rest of the episode's end: recovering faults, stopping jobs, reward, telemetry and audit;

and, apart (it runs at the next ``reset`` or ``close``, not in ``submit``), the episode's cleanup: jobs,
bucket, registered models and experiment deleted.

This first grade runs in the benchmark's own fresh process (nothing has loaded a model in it yet). The same
model is then graded again ``--repeat`` times in that process (a later grade), and loaded ``--fresh`` times
in a fresh Python process each (``MLflowTracking.load_model`` alone: imports, download, load), which also
reports whether PyTorch was imported there. Prints a table and saves ``.bench/grading.json`` with the
machine block. Goal: grading under 2 s.

Usage: ``python benchmarks/bench_grading.py [--sandbox NAME] [--repeat N] [--fresh N] [--label TEXT]``
(an ephemeral sandbox is started when none is named).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from machine import describe as describe_machine
from rich.console import Console
from rich.table import Table

OUT = Path(__file__).resolve().parents[1] / ".bench" / "grading.json"
SCENARIO = "tabular-quality-basic"
console = Console()

FRESH_LOAD = r"""
import json, sys, time
t0 = time.perf_counter()
from mlsandbox.backends.common.mlflow_tracking import MLflowTracking
t1 = time.perf_counter()
tracking = MLflowTracking(sys.argv[1])
model = tracking.load_model(sys.argv[2], sys.argv[3])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_model_s": t2 - t1, "model": type(model).__name__,
                  "torch_imported": "torch" in sys.modules}))
"""


class Timer:
    """Seconds spent in the wrapped callables, by label (summed over calls)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - t0

        return timed


@contextmanager
def patched(obj: Any, name: str, timer: Timer, label: str) -> Iterator[None]:
    original = getattr(obj, name)
    setattr(obj, name, timer.wrap(label, original))
    try:
        yield
    finally:
        setattr(obj, name, original)


@contextmanager
def instrumented(gateway: Any, timer: Timer) -> Iterator[None]:
    """Time the grading's parts by wrapping what it calls (module attributes looked up at call time)."""
    import mlflow.artifacts

    import mlsandbox.backends.common.mlflow_tracking as mt
    import mlsandbox.gateway.dispatcher as dispatcher

    with (
        patched(dispatcher, "grade_episode", timer, "grade"),
        patched(gateway.runtime.tracking, "load_model", timer, "load_model"),
        patched(mlflow.artifacts, "download_artifacts", timer, "download"),
        patched(mt, "_load_local_model", timer, "load"),
        patched(gateway, "_recover_faults", timer, "recover_faults"),
        patched(gateway, "_stop_running_jobs", timer, "stop_jobs"),
    ):
        yield


def split(total: float, t: dict[str, float]) -> dict[str, float]:
    """The parts of one timed submit step (or one grade when ``total`` is the grade)."""
    grade = t.get("grade", total)
    load_model = t.get("load_model", 0.0)
    download = t.get("download", 0.0)
    load = t.get("load", 0.0)
    out = {
        "total_s": total,
        "grade_s": grade,
        "load_model_s": load_model,
        "download_s": download,
        "model_load_s": load,
        "load_model_other_s": max(0.0, load_model - download - load),  # version lookup, temp dir
        "scoring_s": max(0.0, grade - load_model),
    }
    if "grade" in t:
        out["recover_faults_s"] = t.get("recover_faults", 0.0)
        out["stop_jobs_s"] = t.get("stop_jobs", 0.0)
        out["rest_of_submit_s"] = max(0.0, total - grade)
    return {k: round(v, 4) for k, v in out.items()}


def play_to_submit(sandbox: str, seed: int) -> tuple[Any, Any, dict[str, Any]]:
    """An episode of the rule agent up to (not including) its submit: (env, agent, last observation)."""
    from mlsandbox.agents.rule_agent import RuleAgent
    from mlsandbox.env.gym_env import MLSandboxEnv, decode_observation

    env = MLSandboxEnv(SCENARIO, sandbox=sandbox, start_sandbox=False)
    agent = RuleAgent(seed=seed)
    obs, _ = env.reset(seed=seed, options={"agent": agent.name})
    current = decode_observation(obs)
    agent.reset(current, seed=seed)
    for _ in range(env.scenario.max_steps):
        action = agent.act(current)
        if action.get("type") == "submit":
            return env, action, current
        obs, _, terminated, truncated, _ = env.step(action)
        current = decode_observation(obs)
        console.print(f"  step {current['step']}: {action['type']} {'ok' if current['ok'] else 'error'}")
        if terminated or truncated:
            break
    env.close()
    raise SystemExit("the rule agent's episode ended before it submitted")


def time_close(env: Any, gw: Any) -> dict[str, float]:
    """The episode's cleanup after submit (run by the next ``reset`` or by ``close``), split by part."""
    rt, t = gw.runtime, Timer()
    with (
        patched(gw, "_recover_faults", t, "recover_faults"),
        patched(gw.pool, "cleanup", t, "jobs"),
        patched(rt.object_store, "delete_bucket", t, "bucket"),
        patched(gw, "_delete_models", t, "models"),
        patched(rt.tracking, "delete_experiment", t, "experiment"),
    ):
        t0 = time.perf_counter()
        env.close()
        total = time.perf_counter() - t0
    out = {"total_s": total, **{f"{k}_s": v for k, v in t.seconds.items()}}
    return {k: round(v, 4) for k, v in out.items()}


def fresh_loads(tracking_uri: str, name: str, version: str, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        console.print(f"loading the model in a fresh process ({i + 1}/{n}) ...")
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", FRESH_LOAD, tracking_uri, name, version],
            capture_output=True,
            text=True,
            check=True,
        )
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["process_s"] = time.perf_counter() - t0
        out.append({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()})
    return out


def main() -> None:
    from mlsandbox.backends.local.backend import LocalBackend
    from mlsandbox.evaluation.reward import grade_episode

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sandbox", help="a running sandbox to use (default: start an ephemeral one)")
    parser.add_argument("--repeat", type=int, default=3, help="later grades in this process")
    parser.add_argument("--fresh", type=int, default=2, help="loads in a fresh process each")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default="", help="a note saved with the figures (e.g. before/after)")
    args = parser.parse_args()
    torch_before = "torch" in sys.modules

    backend = LocalBackend(args.sandbox or f"bench-grade-{os.getpid()}")
    owns = not backend.is_alive()
    if owns:
        if args.sandbox:
            raise SystemExit(f"sandbox {args.sandbox!r} is not running")
        console.print(f"starting sandbox {backend.name} ...")
        backend.up(ephemeral=True)
    try:
        console.print(f"playing the rule agent on {SCENARIO} up to submit ...")
        env, action, _ = play_to_submit(backend.name, args.seed)
        try:
            gw = env.gateway
            assert gw is not None
            timer = Timer()
            load_before = os.getloadavg()[0]
            with instrumented(gw, timer):
                t0 = time.perf_counter()
                _, _, terminated, _, info = env.step(action)
                submit_s = time.perf_counter() - t0
            if not terminated or "grade" not in info:
                raise SystemExit(f"submit did not end the episode with a grade: {info}")
            first = split(submit_s, timer.seconds)
            grade = info["grade"]
            console.print(f"graded: {grade['reason']}")
            later = []
            for i in range(args.repeat):
                console.print(f"grading again ({i + 1}/{args.repeat}) ...")
                t = Timer()
                with instrumented(gw, t):
                    t0 = time.perf_counter()
                    again = grade_episode(gw.state, gw.runtime.tracking)
                    elapsed = time.perf_counter() - t0
                if again.as_dict() != grade:
                    raise SystemExit(f"a later grade differs: {again.as_dict()} != {grade}")
                later.append(split(elapsed, t.seconds))
            name = gw.state.registry_name(gw.scenario.goal.model_name)
            fresh = fresh_loads(gw.runtime.tracking.tracking_uri, name, str(grade["version"]), args.fresh)
            close = time_close(env, gw)
        finally:
            env.close()
    finally:
        if owns:
            backend.down()

    later_median = {k: round(statistics.median(r[k] for r in later), 4) for k in later[0]} if later else {}
    table = Table(
        title=f"submit's grading ({SCENARIO}, rule agent; load {load_before:.1f})",
        caption="first: the process's first grade; later: the same model graded again",
    )
    table.add_column("part")
    table.add_column("first s", justify="right")
    table.add_column(f"later s (median of {len(later)})", justify="right")
    for key, label in (
        ("total_s", "submit step (all)"),
        ("grade_s", "  grade"),
        ("load_model_s", "    load_model"),
        ("download_s", "      download"),
        ("model_load_s", "      model load"),
        ("load_model_other_s", "      version lookup"),
        ("scoring_s", "    scoring the holdout"),
        ("rest_of_submit_s", "  rest of submit"),
        ("recover_faults_s", "    recover faults"),
        ("stop_jobs_s", "    stop jobs"),
    ):
        lv = later_median.get(key)
        table.add_row(label, f"{first.get(key, 0.0):.3f}", "" if lv is None else f"{lv:.3f}")
    console.print(table)
    console.print(
        "episode close after submit (at the next reset or close): "
        + ", ".join(f"{k.removesuffix('_s')} {v:.3f} s" for k, v in close.items())
    )
    for row in fresh:
        console.print(
            f"fresh process: import {row['import_s']:.2f} s, load_model {row['load_model_s']:.2f} s, "
            f"process {row['process_s']:.2f} s, torch imported: {row['torch_imported']}"
        )

    figures: dict[str, Any] = {
        "machine": {
            **describe_machine(),
            "load_avg_1m_at_start": round(load_before, 2),
            "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        },
        "label": args.label,
        "scenario": SCENARIO,
        "agent": "rule",
        "grade": grade,
        "torch_imported_before": torch_before,
        "torch_imported_after": "torch" in sys.modules,
        "first_submit": first,
        "later_grades": later,
        "later_grade_median": later_median,
        "fresh_process_loads": fresh,
        "episode_close": close,
        "goal_grade_s": 2.0,
    }
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(figures, indent=2) + "\n")
    console.print(f"saved {OUT}")


if __name__ == "__main__":
    main()
