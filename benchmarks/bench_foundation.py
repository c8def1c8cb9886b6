"""Foundation benchmark: cold up, warm reset, step latency per action, one full episode, peak RSS.

Prints a table and saves the figures as JSON under .bench/foundation.json. Targets (2-core machine):
cold up <= 30 s, warm reset <= 1 s, cheap actions p50 <= 50 ms, total RSS <= 1.5 GB.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from machine import describe as describe_machine
from machine import summary as machine_summary
from rich.console import Console
from rich.table import Table

from mlsandbox.agents import RuleAgent
from mlsandbox.agents.runner import run_episode
from mlsandbox.backends.local.backend import LocalBackend
from mlsandbox.env.gym_env import MLSandboxEnv, decode_observation

NAME = f"bench-{os.getpid()}"
OUT = Path(__file__).resolve().parents[1] / ".bench" / "foundation.json"
console = Console()


def sandbox_rss(name: str) -> int:
    total = 0
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get("MLSANDBOX_SANDBOX") == name:
                total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total


class PeakRSS(threading.Thread):
    def __init__(self, name: str, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.name_, self.every, self.peak, self._stop_evt = name, every, 0, threading.Event()

    def run(self) -> None:
        while not self._stop_evt.is_set():
            self.peak = max(self.peak, sandbox_rss(self.name_))
            self._stop_evt.wait(self.every)

    def stop(self) -> int:
        self._stop_evt.set()
        self.join()
        return self.peak


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main() -> None:
    figures: dict[str, Any] = {"machine": describe_machine()}
    print(machine_summary(figures["machine"]))
    backend = LocalBackend(NAME)
    monitor = PeakRSS(NAME)
    monitor.start()
    try:
        t0 = time.perf_counter()
        backend.up()
        figures["cold_up_s"] = round(time.perf_counter() - t0, 2)
        time.sleep(2)
        figures["idle_rss_mb"] = round(sandbox_rss(NAME) / 2**20, 1)
        env = MLSandboxEnv("tabular-quality-basic", sandbox=NAME, start_sandbox=False)
        resets = []
        for i in range(6):
            t = time.perf_counter()
            env.reset(seed=100 + i)
            resets.append(time.perf_counter() - t)
        figures["warm_reset_s"] = {"p50": round(pct(resets[1:], 0.5), 3), "max": round(max(resets[1:]), 3)}

        env.reset(seed=1)
        clean_obs = decode_observation(
            env.step(
                {"type": "clean_dataset", "dataset": "raw/customers.parquet", "strategy": "impute_median"}
            )[0]
        )
        clean_key = clean_obs["result"]["dataset"]
        job = decode_observation(
            env.step({"type": "train_model", "dataset": clean_key, "algorithm": "logistic_regression"})[0]
        )
        job_id = job["result"]["job_id"]
        actions = {
            "list_datasets": {"type": "list_datasets"},
            "check_data_quality": {"type": "check_data_quality", "dataset": "raw/customers.csv"},
            "get_job": {"type": "get_job", "job_id": job_id},
            "list_runs": {"type": "list_runs"},
            "clean_dataset": {
                "type": "clean_dataset",
                "dataset": "raw/customers.parquet",
                "strategy": "clip_outliers",
            },
            "invalid_json": "{oops",
        }
        latency: dict[str, dict[str, float]] = {}
        for kind, action in actions.items():
            samples = []
            for _ in range(12):
                if env.gateway is not None and env.gateway.state.step >= 25:
                    env.reset(seed=1)
                t = time.perf_counter()
                env.step(action)
                samples.append((time.perf_counter() - t) * 1000)
            latency[kind] = {"p50_ms": round(pct(samples, 0.5), 2), "p95_ms": round(pct(samples, 0.95), 2)}
        figures["step_latency"] = latency

        t = time.perf_counter()
        res = run_episode(env, RuleAgent(), seed=7)
        figures["episode"] = {
            "wall_s": round(time.perf_counter() - t, 2),
            "steps": len(res.steps),
            "reward": round(res.total_reward, 3),
            "success": res.success,
            "holdout_auc": (res.grade or {}).get("holdout_auc"),
        }
        env.close()
    finally:
        t = time.perf_counter()
        backend.down()
        figures["down_s"] = round(time.perf_counter() - t, 2)
        figures["peak_total_rss_mb"] = round(monitor.stop() / 2**20, 1)
    figures["targets"] = {
        "cold_up_s": 30,
        "warm_reset_s": 1.0,
        "cheap_action_p50_ms": 50,
        "total_rss_mb": 1536,
    }
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(figures, indent=2))

    table = Table(title="mlsandbox foundation benchmark")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    table.add_row("cold up", f"{figures['cold_up_s']} s", "<= 30 s")
    table.add_row(
        "warm reset p50 / max",
        f"{figures['warm_reset_s']['p50']} / {figures['warm_reset_s']['max']} s",
        "<= 1 s",
    )
    for kind, v in latency.items():
        target = "<= 50 ms" if kind in ("list_datasets", "check_data_quality", "get_job", "list_runs") else ""
        table.add_row(f"step {kind} p50 / p95", f"{v['p50_ms']} / {v['p95_ms']} ms", target)
    table.add_row(
        "rule episode wall", f"{figures['episode']['wall_s']} s ({figures['episode']['steps']} steps)", ""
    )
    table.add_row("idle RSS (all services)", f"{figures['idle_rss_mb']} MiB", "")
    table.add_row("peak total RSS", f"{figures['peak_total_rss_mb']} MiB", "<= 1536 MiB")
    table.add_row("down", f"{figures['down_s']} s", "")
    console.print(table)
    console.print(f"saved {OUT}")


if __name__ == "__main__":
    main()
