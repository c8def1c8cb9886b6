"""The integrations: OpenEnv's overhead per step over in-process, and RLlib's env steps/s with 1 and 2
EnvRunners, on the local and the sim backend.

**OpenEnv.** The same cheap actions as ``bench_interfaces.py`` (``list_datasets``, ``list_runs``, ``wait
0``, an invalid action) on an episode: in-process (the Gymnasium env), through the OpenEnv server
(``python -m mlsandbox.integrations.openenv``, a separate process) over its WebSocket session with the typed
``EnvClient``, and as MCP ``tools/call`` over HTTP in an OpenEnv session. On local the episodes share one
sandbox; on sim each env and each server session has an in-process sandbox of its own. Prints p50/p95 per
action and the overhead over in-process (p50 difference, median over actions).

**RLlib.** PPO (``mlsandbox.integrations.rllib.ppo_config``) on a local Ray cluster with N = 1 and 2
EnvRunner actors (``rl-fast``): on local every env runs on the same sandbox (12 env steps per runner per
iteration), on sim each env is an in-process sandbox in its EnvRunner (``--sim-fragment`` steps per runner
per iteration, default 256), with a new seed each episode and on a train split of ``--sim-instances``
seeds (whose fits the fit store serves again), with 1 and ``--sim-envs-per-runner`` envs in each EnvRunner
(a vector env: the policy's forward pass and RLlib's connectors run once for all of them; the steps per
runner per iteration stay ``--sim-fragment``, split among its envs). After a warm-up iteration, env steps
sampled per second of wall time over the measured iterations (the learner's update is part of each
iteration, as in training), and the share of an iteration spent sampling.

Saves ``.bench/integrations.json`` and the figure ``.bench/integrations.png``.

Usage: ``python benchmarks/bench_integrations.py [--sandbox NAME] [--steps N] [--iterations N] [--only
openenv rllib] [--backends local sim] [--sim-fragment N] [--sim-instances N ...] [--sim-envs-per-runner N]`` (an ephemeral local sandbox is started when none is named).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from bench_interfaces import ACTIONS, free_port, measure_sync, pct, tool_of
from machine import describe as describe_machine
from machine import summary as machine_summary
from rich.console import Console
from rich.table import Table

from mlsandbox.backends.local.backend import LocalBackend
from mlsandbox.env.gym_env import MLSandboxEnv
from mlsandbox.gateway.tools import tool_call_to_action
from mlsandbox.scenario import load_builtin

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".bench" / "integrations.json"
FIGURE = ROOT / ".bench" / "integrations.png"
SCENARIO = "tabular-quality-basic"
MAX_STEPS = 10_000
console = Console()
# The mixed action profile, its percentiles and the step timer of the interfaces benchmark: the same
# profile measured through OpenEnv's transports.
measure = measure_sync


@contextmanager
def openenv_server(backend: str, sandbox: str, scenario_file: str) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "mlsandbox.integrations.openenv", "--backend", backend, "--sandbox", sandbox,
           "--no-start", "--port", str(port), "--log-level", "warning", "--scenario", scenario_file]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the OpenEnv server exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
                )
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the OpenEnv server did not start")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def bench_in_process(backend: str, sandbox: str, n: int) -> dict[str, list[float]]:
    scenario = load_builtin(SCENARIO).model_copy(update={"max_steps": MAX_STEPS})
    env = MLSandboxEnv(scenario, backend=backend, sandbox=sandbox, start_sandbox=False)
    try:
        env.reset(seed=1)
        return measure(lambda label, args: env.step(tool_call_to_action(tool_of(label), args)), n)
    finally:
        env.close()


def bench_openenv(url: str, n: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    from mlsandbox.integrations.openenv import MLSandboxClient

    with MLSandboxClient(base_url=url, message_timeout_s=300).sync() as env:
        env.reset(seed=1)  # the server's scenario: SCENARIO without a step limit
        ws = measure(lambda label, args: env.step(tool_call_to_action(tool_of(label), args)), n)

    with httpx.Client(base_url=url, timeout=120) as http:
        rpc = {"jsonrpc": "2.0", "id": 0}
        session = http.post("/mcp", json={**rpc, "method": "openenv/session/create"}).json()["result"][
            "session_id"
        ]

        def call(label: str, args: dict[str, Any]) -> Any:
            params = {"session_id": session, "name": tool_of(label), "arguments": args}
            return http.post("/mcp", json={**rpc, "method": "tools/call", "params": params}).json()

        mcp = measure(call, n)
        http.post("/mcp", json={**rpc, "method": "openenv/session/close", "params": {"session_id": session}})
    return ws, mcp


def rllib_throughput(
    backend: str,
    sandbox: str,
    runners: int,
    iterations: int,
    *,
    fragment: int = 12,
    instances: int | None = None,
    warmup: int = 1,
    envs_per_runner: int = 1,
) -> dict[str, Any]:
    """PPO's env steps/s; ``fragment`` env steps per runner per iteration, split among its
    ``envs_per_runner`` envs."""
    from mlsandbox.integrations.rllib import ppo_config

    algo = ppo_config(
        env_config={"instances": instances},
        backend=backend,
        sandbox=sandbox,
        num_env_runners=runners,
        num_envs_per_env_runner=envs_per_runner,
        rollout_fragment_length=max(1, fragment // envs_per_runner),
        minibatch_size=min(128, fragment),
        seed=1,
    ).build_algo()
    try:
        for _ in range(warmup):  # warm-up: first episodes, first jobs, lazy imports in the runners
            warm = algo.train()
        before = warm["env_runners"]["num_env_steps_sampled_lifetime"]
        t0 = time.perf_counter()
        for _ in range(iterations):
            last = algo.train()
        wall = time.perf_counter() - t0
    finally:
        algo.stop()
    steps = last["env_runners"]["num_env_steps_sampled_lifetime"] - before
    return {
        "backend": backend,
        "env_runners": runners,
        "rollout_fragment_length": fragment,
        "envs_per_runner": envs_per_runner,
        "instances": instances,
        "iterations": iterations,
        "env_steps": int(steps),
        "wall_s": round(wall, 2),
        "env_steps_per_s": round(steps / wall, 3),
        # RLlib's timers are moving averages: sampling over the whole iteration.
        "sampling_share": round(
            last["timers"]["env_runner_sampling_timer"] / last["timers"]["training_iteration"], 3
        ),
        "episode_return_mean": round(float(last["env_runners"].get("episode_return_mean", float("nan"))), 4),
    }


def figure(figures: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    oe = (figures.get("openenv") or {}).get("local")
    if oe:
        labels = [label for label, _ in ACTIONS]
        width = 0.27
        for k, (name, key) in enumerate((("in-process", "in_process"), ("OpenEnv WebSocket", "websocket"),
                                          ("OpenEnv MCP (HTTP)", "mcp_http"))):  # fmt: skip
            ys = [oe[key][label]["p50_ms"] for label in labels]
            axes[0].bar([i + (k - 1) * width for i in range(len(labels))], ys, width, label=name)
        axes[0].set_xticks(range(len(labels)))
        axes[0].set_xticklabels(labels)
        axes[0].set_yscale("log")
        axes[0].set_ylabel("step latency p50 (ms, log scale)")
        axes[0].set_title(
            f"OpenEnv overhead: +{oe['overhead_p50_ms']['websocket']:.1f} ms per step (WebSocket)"
        )
        axes[0].legend(fontsize=8)
    rl = figures.get("rllib")
    if rl:

        def series(r: dict[str, Any]) -> str:
            split = (
                f", {r['instances']} seeds"
                if r.get("instances")
                else (", new seeds" if r["backend"] == "sim" else "")
            )
            envs = f", {r.get('envs_per_runner', 1)} envs/runner" if r["backend"] == "sim" else ""
            return f"{r['backend']}{split}{envs}"

        names = list(dict.fromkeys(series(r) for r in rl))
        width = 0.8 / len(names)
        for k, name in enumerate(names):
            rows = [r for r in rl if series(r) == name]
            xs = [r["env_runners"] + (k - (len(names) - 1) / 2) * width for r in rows]
            axes[1].bar(xs, [r["env_steps_per_s"] for r in rows], width, label=name, color=f"C{2 + k}")
            for x, r in zip(xs, rows, strict=True):
                axes[1].text(
                    x,
                    r["env_steps_per_s"],
                    f"{r['env_steps_per_s']:.0f}",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
        axes[1].set_xticks(sorted({r["env_runners"] for r in rl}))
        axes[1].set_yscale("log")
        axes[1].set_xlabel("EnvRunners (Ray actors)")
        axes[1].set_ylabel("env steps / s (PPO, wall time, log)")
        axes[1].set_title("RLlib on rl-fast: shared local sandbox vs in-process sim")
        axes[1].legend(fontsize=8)
    fig.tight_layout()
    FIGURE.parent.mkdir(exist_ok=True)
    fig.savefig(FIGURE, dpi=110)


def openenv_block(backend: str, sandbox: str, steps: int) -> dict[str, Any]:
    local = bench_in_process(backend, sandbox, steps)
    with tempfile.TemporaryDirectory() as tmp:
        scenario_file = Path(tmp) / f"{SCENARIO}.yaml"
        data = load_builtin(SCENARIO).model_copy(update={"max_steps": MAX_STEPS}).model_dump(mode="json")
        scenario_file.write_text(yaml.safe_dump(data))
        with openenv_server(backend, sandbox, str(scenario_file)) as url:
            ws, mcp = bench_openenv(url, steps)
    block: dict[str, Any] = {}
    for key, times in (("in_process", local), ("websocket", ws), ("mcp_http", mcp)):
        block[key] = {
            label: {"p50_ms": round(pct(v, 0.5), 2), "p95_ms": round(pct(v, 0.95), 2)}
            for label, v in times.items()
        }
    block["overhead_p50_ms"] = {
        key: round(
            statistics.median(
                block[key][label]["p50_ms"] - block["in_process"][label]["p50_ms"] for label, _ in ACTIONS
            ),
            2,
        )
        for key in ("websocket", "mcp_http")
    }
    block["load_average_1m"] = round(os.getloadavg()[0], 2)
    return block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sandbox", help="a running local sandbox to use (default: start an ephemeral one)")
    parser.add_argument("--steps", type=int, default=30, help="measured steps per action and interface")
    parser.add_argument("--iterations", type=int, default=3, help="measured RLlib iterations per N")
    parser.add_argument("--only", nargs="*", default=["openenv", "rllib"], choices=["openenv", "rllib"])
    parser.add_argument("--backends", nargs="*", default=["local", "sim"], choices=["local", "sim"])
    parser.add_argument(
        "--sim-fragment",
        type=int,
        default=256,
        help="sim rows: env steps per runner per iteration (default 256; local rows: 12)",
    )
    parser.add_argument(
        "--sim-instances",
        type=int,
        nargs="*",
        default=[0, 16],
        help="sim rows: seeds of a train split (0: a new seed each episode; default 0 16)",
    )
    parser.add_argument(
        "--sim-envs-per-runner",
        type=int,
        default=8,
        help="sim rows: also measured with this many envs in each EnvRunner (default 8; 1: only one)",
    )
    args = parser.parse_args()

    backend = LocalBackend(args.sandbox or f"bench-int-{os.getpid()}")
    owns = "local" in args.backends and not backend.is_alive()
    if owns:
        console.print(f"starting sandbox {backend.name} ...")
        backend.up(ephemeral=True)
    sandboxes = {"local": backend.name, "sim": f"bench-int-sim-{os.getpid()}"}
    figures: dict[str, Any] = {"machine": describe_machine()}
    try:
        if "openenv" in args.only:
            figures["openenv"] = {}
            for kind in args.backends:
                console.print(f"measuring in-process and OpenEnv on {kind} ...")
                figures["openenv"][kind] = openenv_block(kind, sandboxes[kind], args.steps)
        if "rllib" in args.only:
            import ray

            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
            try:
                figures["rllib"] = []
                for kind in args.backends:
                    splits = [n or None for n in args.sim_instances] if kind == "sim" else [None]
                    vectors = sorted({1, args.sim_envs_per_runner}) if kind == "sim" else [1]
                    for instances, envs, runners in itertools.product(splits, vectors, (1, 2)):
                        console.print(
                            f"measuring RLlib with {runners} EnvRunner(s) of {envs} env(s) on {kind}"
                            + (f", a train split of {instances}" if instances else "")
                            + " ..."
                        )
                        row = rllib_throughput(
                            kind,
                            sandboxes[kind],
                            runners,
                            args.iterations,
                            fragment=args.sim_fragment if kind == "sim" else 12,
                            instances=instances,
                            warmup=2 if kind == "sim" else 1,
                            envs_per_runner=envs,
                        )
                        row["load_average_1m"] = round(os.getloadavg()[0], 2)
                        figures["rllib"].append(row)
            finally:
                ray.shutdown()
    finally:
        if owns:
            backend.down()
    figures["machine"]["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)

    console.print(machine_summary(figures["machine"]))
    for kind, oe in (figures.get("openenv") or {}).items():
        table = Table(title=f"per-step latency p50 / p95 (ms), {kind}")
        for col in ("action", "in-process", "OpenEnv WebSocket", "OpenEnv MCP (HTTP)"):
            table.add_column(col, justify="left" if col == "action" else "right")
        for label, _ in ACTIONS:
            table.add_row(label, *(f"{oe[k][label]['p50_ms']:.2f} / {oe[k][label]['p95_ms']:.2f}"
                                   for k in ("in_process", "websocket", "mcp_http")))  # fmt: skip
        console.print(table)
        console.print(
            f"OpenEnv overhead over in-process on {kind} (p50, median over actions): WebSocket "
            f"+{oe['overhead_p50_ms']['websocket']:.2f} ms, MCP over HTTP +{oe['overhead_p50_ms']['mcp_http']:.2f} ms"
        )
    if "rllib" in figures:
        table = Table(title="RLlib PPO env steps/s (rl-fast)")
        for col in (
            "backend",
            "EnvRunners",
            "envs / runner",
            "steps / runner / iteration",
            "train split",
            "env steps",
            "wall s",
            "steps/s",
            "sampling share",
            "return mean",
        ):
            table.add_column(col, justify="right")
        for r in figures["rllib"]:
            table.add_row(r["backend"], str(r["env_runners"]), str(r.get("envs_per_runner", 1)),
                          str(r.get("rollout_fragment_length", 12)),
                          str(r.get("instances") or "new seeds"), str(r["env_steps"]), f"{r['wall_s']:.1f}",
                          f"{r['env_steps_per_s']:.2f}", f"{r['sampling_share']:.0%}",
                          f"{r['episode_return_mean']:+.3f}")  # fmt: skip
        console.print(table)
    OUT.parent.mkdir(exist_ok=True)
    if OUT.exists() and set(args.only) != {"openenv", "rllib"}:  # a partial run keeps the other figures
        figures = {**json.loads(OUT.read_text()), **figures}
    OUT.write_text(json.dumps(figures, indent=2))
    figure(figures)
    console.print(f"saved {OUT} and {FIGURE}")


if __name__ == "__main__":
    main()
