"""Interface overhead: per-step latency of cheap actions in-process, over HTTP and over MCP (stdio, HTTP).

Each interface runs the same cheap actions on its own episode of one sandbox: ``list_datasets``,
``list_runs`` (a call to MLflow), ``wait 0`` and an invalid action (rejected by validation). The HTTP
gateway (``serve``) and the MCP servers run as separate processes, as agents would use them; the client
side is the typed ``GatewayClient`` and the MCP SDK's ``Client``. Prints p50/p95 per action and interface,
the overhead over in-process (p50 difference) and the ratio, and saves ``.bench/interfaces.json``.
Target: HTTP overhead <= 5 ms p50 per step.

Usage: ``python benchmarks/bench_interfaces.py [--sandbox NAME] [--steps N]`` (an ephemeral sandbox is
started when none is named).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import yaml
from mcp import Client, StdioServerParameters
from rich.console import Console
from rich.table import Table

from mlsandbox.backends.local.backend import LocalBackend
from mlsandbox.env.gym_env import MLSandboxEnv
from mlsandbox.gateway.client import GatewayClient
from mlsandbox.gateway.tools import tool_call_to_action
from mlsandbox.scenario import load_builtin

OUT = Path(__file__).resolve().parents[1] / ".bench" / "interfaces.json"
SCENARIO = "tabular-quality-basic"
MAX_STEPS = 10_000
ACTIONS: list[tuple[str, dict[str, Any]]] = [
    ("list_datasets", {}),
    ("list_runs", {}),
    ("wait", {"seconds": 0}),
    ("invalid", {"seconds": "soon"}),  # a wait with a bad parameter: validation error observation
]
console = Console()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def tool_of(label: str) -> str:
    return "wait" if label == "invalid" else label


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure_sync(
    step: Callable[[str, dict[str, Any]], Any], n: int, warmup: int = 3
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {label: [] for label, _ in ACTIONS}
    for i in range(warmup + n):
        for label, args in ACTIONS:
            t0 = time.perf_counter()
            step(label, args)
            dt = (time.perf_counter() - t0) * 1000
            if i >= warmup:
                times[label].append(dt)
    return times


async def measure_async(
    step: Callable[[str, dict[str, Any]], Awaitable[Any]], n: int, warmup: int = 3
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {label: [] for label, _ in ACTIONS}
    for i in range(warmup + n):
        for label, args in ACTIONS:
            t0 = time.perf_counter()
            await step(label, args)
            dt = (time.perf_counter() - t0) * 1000
            if i >= warmup:
                times[label].append(dt)
    return times


@contextmanager
def process(
    cmd: list[str], port: int | None = None, timeout: float = 180
) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if port is not None:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{cmd[3]} exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
                    )
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{cmd[3]} did not start") from None
                    time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def bench_in_process(name: str, n: int) -> dict[str, list[float]]:
    scenario = load_builtin(SCENARIO).model_copy(update={"max_steps": MAX_STEPS})
    env = MLSandboxEnv(scenario, sandbox=name, start_sandbox=False)
    try:
        env.reset(seed=1)
        return measure_sync(lambda label, args: env.step(tool_call_to_action(tool_of(label), args)), n)
    finally:
        env.close()


def bench_http(name: str, n: int) -> dict[str, list[float]]:
    port = free_port()
    cmd = [sys.executable, "-m", "mlsandbox.gateway.commands", "serve", "--sandbox", name, "--no-start",
           "--port", str(port), "--log-level", "warning"]  # fmt: skip
    with process(cmd, port):
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/health", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with GatewayClient(url) as gw:
            s = gw.create_session(SCENARIO, seed=1, options={"max_steps": MAX_STEPS})
            return measure_sync(
                lambda label, args: gw.step(s.session_id, tool_call_to_action(tool_of(label), args)), n
            )


def mcp_cmd(name: str, scenario_file: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mlsandbox.gateway.commands", "mcp", "--sandbox", name, "--no-start",
            "--scenario", scenario_file, "--seed", "1", *extra]  # fmt: skip


async def _mcp_steps(client: Client, n: int) -> dict[str, list[float]]:
    async def step(label: str, args: dict[str, Any]) -> Any:
        return await client.call_tool(tool_of(label), args)

    return await measure_async(step, n)


def bench_mcp_stdio(name: str, scenario_file: str, n: int) -> dict[str, list[float]]:
    cmd = mcp_cmd(name, scenario_file)

    async def main() -> dict[str, list[float]]:
        async with Client(StdioServerParameters(command=cmd[0], args=cmd[1:])) as client:
            return await _mcp_steps(client, n)

    return anyio.run(main)


def bench_mcp_http(name: str, scenario_file: str, n: int) -> dict[str, list[float]]:
    port = free_port()
    with process(mcp_cmd(name, scenario_file, "--transport", "streamable-http", "--port", str(port)), port):

        async def main() -> dict[str, list[float]]:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                return await _mcp_steps(client, n)

        return anyio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sandbox", help="a running sandbox to use (default: start an ephemeral one)")
    parser.add_argument("--steps", type=int, default=40, help="measured steps per action and interface")
    parser.add_argument(
        "--only", nargs="*", help="interfaces to measure besides in-process (http, mcp-stdio, mcp-http)"
    )
    args = parser.parse_args()

    backend = LocalBackend(args.sandbox or f"bench-if-{os.getpid()}")
    owns = not backend.is_alive()
    if owns:
        if args.sandbox:
            raise SystemExit(f"sandbox {args.sandbox!r} is not running")
        console.print(f"starting sandbox {backend.name} ...")
        backend.up(ephemeral=True)
    results: dict[str, dict[str, list[float]]] = {}
    try:
        scenario = load_builtin(SCENARIO).model_copy(update={"max_steps": MAX_STEPS})
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            yaml.safe_dump(scenario.model_dump(mode="json"), f)
            scenario_file = f.name
        try:
            for label, fn in (
                ("in-process", lambda: bench_in_process(backend.name, args.steps)),
                ("http", lambda: bench_http(backend.name, args.steps)),
                ("mcp-stdio", lambda: bench_mcp_stdio(backend.name, scenario_file, args.steps)),
                ("mcp-http", lambda: bench_mcp_http(backend.name, scenario_file, args.steps)),
            ):
                if args.only and label != "in-process" and label not in args.only:
                    continue
                console.print(f"measuring {label} ...")
                results[label] = fn()
        finally:
            os.unlink(scenario_file)
    finally:
        if owns:
            backend.down()

    figures: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_avg_1m_at_end": round(os.getloadavg()[0], 2),  # other work on the machine skews latencies
        },
        "steps_per_action": args.steps,
        "interfaces": {},
    }
    base = results["in-process"]
    table = Table(
        title=f"per-step latency, ms ({args.steps} steps per action; overhead = p50 - in-process p50)"
    )
    for col in ("interface", "action", "p50", "p95", "overhead p50", "ratio p50"):
        table.add_column(col, justify="right" if col not in ("interface", "action") else "left")
    for iface, times in results.items():
        rows: dict[str, Any] = {}
        for action, values in times.items():
            p50, p95 = pct(values, 0.5), pct(values, 0.95)
            b50 = pct(base[action], 0.5)
            rows[action] = {
                "p50_ms": round(p50, 3),
                "p95_ms": round(p95, 3),
                "overhead_p50_ms": round(p50 - b50, 3),
                "ratio_p50": round(p50 / b50, 3) if b50 > 0 else None,
            }
            table.add_row(iface, action, f"{p50:.2f}", f"{p95:.2f}", f"{p50 - b50:+.2f}", f"{p50 / b50:.2f}x")
        all_steps = [v for values in times.values() for v in values]
        all_base = [v for values in base.values() for v in values]
        rows["all"] = {
            "p50_ms": round(pct(all_steps, 0.5), 3),
            "p95_ms": round(pct(all_steps, 0.95), 3),
            "overhead_p50_ms": round(pct(all_steps, 0.5) - pct(all_base, 0.5), 3),
            "ratio_p50": round(pct(all_steps, 0.5) / pct(all_base, 0.5), 3),
        }
        figures["interfaces"][iface] = rows
        table.add_section()
    if "http" not in figures["interfaces"]:
        console.print(table)
        return
    per_action = sorted(v["overhead_p50_ms"] for k, v in figures["interfaces"]["http"].items() if k != "all")
    http_overhead = round((per_action[1] + per_action[2]) / 2, 3)  # median of the four actions' p50 overheads
    figures["target_http_overhead_p50_ms"] = 5.0
    figures["http_overhead_p50_ms"] = http_overhead
    figures["http_target_met"] = http_overhead <= 5.0
    console.print(table)
    console.print(
        f"HTTP overhead p50 (median over actions): {http_overhead:+.2f} ms (target <= 5 ms: "
        f"{'met' if figures['http_target_met'] else 'NOT met'})"
    )
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(figures, indent=2))
    console.print(f"saved {OUT}")


if __name__ == "__main__":
    main()
