"""Soak and leaks: many short episodes on one sandbox, through the in-process env and the HTTP gateway.

Each episode of ``churn-clean-small`` (1,500 rows, CSV and Parquet) is a short script: ``list_datasets``,
``check_data_quality``, ``clean_dataset`` (an object written), ``list_runs`` (an MLflow query), every
``FLOW_EVERY``-th episode a ``run_flow`` (deploys the episode's three flows on Prefect and starts a run
that the episode's close cancels and deletes), then ``submit`` (graded). Its reset made a bucket with the
data, an MLflow experiment and the config variables; its close removes them.

Before (after ``WARMUP`` episodes: servers grow caches on their first requests) and after the episodes,
and every ``SAMPLE_EVERY`` episodes in between, a snapshot: each service's resident memory and open file
descriptors (its process tree), the gateway process's or this process's own, MinIO's bucket count, MLflow's
active experiment and registered-model counts, Prefect's deployment, flow-run and variable counts, and the
size on disk of MinIO's data and the two SQLite databases. :func:`leaks` compares the last snapshot with
the baseline: every count must be back where it was; memory and descriptors within :data:`TOLERANCE`.
A service of the sandbox whose process is not running when a snapshot is taken (one stopped earlier on
purpose: the sandbox keeps its record to start it again on the same port) is listed under ``stopped``, not
measured; one running at the baseline and gone afterwards is a leak (``gone``).

Usage: ``python benchmarks/bench_soak.py [--sandbox NAME] [--episodes 100] [--only env http]`` (an
ephemeral sandbox is started when none is named); prints a table per interface and saves
``.bench/soak.json``. The soak tier (``tests/soak``) runs the same functions.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from machine import describe as describe_machine
from rich.console import Console
from rich.table import Table

from mlsandbox.backends.local.backend import LocalBackend
from mlsandbox.backends.local.supervisor import process_tree

OUT = Path(__file__).resolve().parents[1] / ".bench" / "soak.json"
SCENARIO = "churn-clean-small"
WARMUP = 10
SAMPLE_EVERY = 10
FLOW_EVERY = 10
TOLERANCE: dict[str, dict[str, float | None]] = {
    "default": {"rss_mib": 96.0, "rss_ratio": 0.5, "rss_late_mib": 32.0, "fds": 16},
    "minio": {"rss_mib": 160.0, "rss_ratio": 0.0, "rss_late_mib": None, "fds": 16},
}
"""What "back to baseline" allows a process (``default``, or its own entry). Memory: at most
``max(rss_mib, rss_ratio x baseline)`` MiB above the baseline, and at most ``rss_late_mib`` of growth over
the second half of the episodes (a leak keeps growing; a heap that settles does not). Measured here: MLflow,
Prefect and the gateway settle within 15 MiB; the env's own process within 45 MiB (data caches); MinIO's Go
heap follows recent activity, from about 120 MiB in a new sandbox to about 275 MiB after 150 short
episodes, and gives memory back when idle (183 MiB after half an hour), so it gets a wider absolute bound
and no late-growth bound: a leak there would show in the counts, which must match exactly, and in its
descriptors (``fds`` more at most: pooled connections open at the moment of the snapshot)."""


def _tolerance(name: str, key: str) -> float | None:
    return TOLERANCE.get(name, TOLERANCE["default"]).get(key)


COUNTS = (
    "buckets",
    "experiments",
    "registered_models",
    "deployments",
    "flow_runs",
    "variables",
)
console = Console()


def script(episode: int) -> list[dict[str, Any]]:
    """The actions of short episode number ``episode`` (0-based)."""
    actions: list[dict[str, Any]] = [
        {"type": "list_datasets"},
        {"type": "check_data_quality", "dataset": "raw/customers.parquet"},
        {"type": "clean_dataset", "dataset": "raw/customers.parquet", "strategy": "drop_na"},
        {"type": "list_runs"},
    ]
    if episode % FLOW_EVERY == FLOW_EVERY - 1:
        actions.append(
            {
                "type": "run_flow",
                "name": "training",
                "parameters": {"dataset": "customers", "model_name": "churn"},
            }
        )
    actions.append({"type": "submit"})
    return actions


# ------------------------------------------------------------------------------------------ snapshots


@dataclass
class Probe:
    """Reads one sandbox's services (direct endpoints, not the fault proxy)."""

    backend: LocalBackend

    def snapshot(self, extra_pids: dict[str, int] | None = None) -> dict[str, Any]:
        state = self.backend.state()
        if state is None:
            raise RuntimeError(f"sandbox {self.backend.name!r} is not up")
        processes: dict[str, dict[str, float]] = {}
        stopped: list[str] = []
        for name, record in sorted(state.services.items()):
            tree = process_tree(record.process)
            if tree:
                processes[name] = _usage(tree)
            else:  # stopped before, on purpose (a plug-in or source service keeps its record and port)
                stopped.append(name)
        for name, pid in (extra_pids or {}).items():  # the process alone (its children are the jobs, or
            try:  # the sandbox's services when it started them)
                processes[name] = _usage([psutil.Process(pid)])
            except psutil.NoSuchProcess:
                continue
        ep = state.endpoints
        layout = self.backend.layout
        return {
            "t": time.time(),
            "processes": processes,
            "stopped": stopped,
            "counts": {
                "buckets": _bucket_count(ep),
                "experiments": _mlflow_count(ep.mlflow_url, "experiments/search", "experiments"),
                "registered_models": _mlflow_count(
                    ep.mlflow_url, "registered-models/search", "registered_models"
                ),
                "deployments": _prefect_count(ep.prefect_api_url, "deployments"),
                "flow_runs": _prefect_count(ep.prefect_api_url, "flow_runs"),
                "variables": _prefect_count(ep.prefect_api_url, "variables"),
            },
            "disk_mib": {
                "minio": round(_du(layout.minio_data) / 2**20, 2),
                "mlflow_db": round(_du(layout.mlflow_db) / 2**20, 2),
                "prefect_db": round(_du(layout.prefect_db) / 2**20, 2),
                "sandbox": round(_du(layout.root) / 2**20, 2),
            },
        }


def _usage(procs: list[psutil.Process]) -> dict[str, float]:
    rss, fds, threads = 0, 0, 0
    for p in procs:
        try:
            rss += p.memory_info().rss
            fds += p.num_fds()
            threads += p.num_threads()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return {"rss_mib": round(rss / 2**20, 1), "fds": fds, "threads": threads}


def _bucket_count(ep: Any) -> int:
    from mlsandbox.backends.common.s3 import S3ObjectStore

    return len(S3ObjectStore(ep.s3_url, ep.s3_access_key, ep.s3_secret_key).list_buckets())


def _mlflow_count(url: str, path: str, key: str) -> int:
    total, token = 0, None
    with httpx.Client(timeout=30, trust_env=False) as client:
        while True:
            body: dict[str, Any] = {"max_results": 1000}
            if path.startswith("experiments"):
                body["view_type"] = "ACTIVE_ONLY"
            if token:
                body["page_token"] = token
            if path.startswith("registered-models"):
                resp = client.get(f"{url}/api/2.0/mlflow/{path}", params=body)
            else:
                resp = client.post(f"{url}/api/2.0/mlflow/{path}", json=body)
            resp.raise_for_status()
            page = resp.json()
            total += len(page.get(key, []))
            token = page.get("next_page_token")
            if not token:
                return total


def _prefect_count(api: str, what: str) -> int:
    resp = httpx.post(f"{api}/{what}/count", json={}, timeout=30, trust_env=False)
    resp.raise_for_status()
    return int(resp.json())


def _du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                continue
    return total


def leaks(baseline: dict[str, Any], after: dict[str, Any], middle: dict[str, Any] | None = None) -> list[str]:
    """What did not come back to the baseline (empty: nothing leaked), one line each; ``middle``: the
    snapshot half-way, for the late-growth bound."""
    found = [
        f"{k}: {baseline['counts'][k]} -> {after['counts'][k]}"
        for k in COUNTS
        if after["counts"][k] != baseline["counts"][k]
    ]
    for name, before in baseline["processes"].items():
        now = after["processes"].get(name)
        if now is None:
            found.append(f"{name}: gone")
            continue
        allowed = max(
            _tolerance(name, "rss_mib") or 0.0, (_tolerance(name, "rss_ratio") or 0.0) * before["rss_mib"]
        )
        if now["rss_mib"] - before["rss_mib"] > allowed:
            found.append(
                f"{name}: RSS {before['rss_mib']} -> {now['rss_mib']} MiB (more than +{allowed:.0f})"
            )
        half = (middle or {}).get("processes", {}).get(name)
        late = _tolerance(name, "rss_late_mib")
        if half is not None and late is not None and now["rss_mib"] - half["rss_mib"] > late:
            found.append(
                f"{name}: RSS still growing over the second half: {half['rss_mib']} -> {now['rss_mib']} MiB "
                f"(more than +{late:.0f})"
            )
        fds = _tolerance(name, "fds") or 0
        if now["fds"] - before["fds"] > fds:
            found.append(f"{name}: fds {before['fds']} -> {now['fds']} (more than +{fds:.0f})")
    return found


# ------------------------------------------------------------------------------------------- the runs


def _run(
    probe: Probe,
    episodes: int,
    play: Callable[[int], None],
    settle: Callable[[], None],
    extra_pids: dict[str, int],
    progress: Callable[[int, float], None] | None,
) -> dict[str, Any]:
    """Warm up, take the baseline, play ``episodes``; before each snapshot ``settle()`` ends the episode
    in progress, so every snapshot sees the sandbox with no episode open."""
    for i in range(WARMUP):
        play(-1 - i)
    settle()
    baseline = probe.snapshot(extra_pids)
    samples = [{"episode": 0, **baseline}]
    times: list[float] = []
    t_all = time.perf_counter()
    for i in range(episodes):
        t0 = time.perf_counter()
        play(i)
        times.append(time.perf_counter() - t0)
        if (i + 1) % SAMPLE_EVERY == 0 or i + 1 == episodes:
            settle()
            samples.append({"episode": i + 1, **probe.snapshot(extra_pids)})
            if progress is not None:
                progress(i + 1, time.perf_counter() - t_all)
    wall = time.perf_counter() - t_all
    after = samples[-1]
    times.sort()
    return {
        "episodes": episodes,
        "warmup": WARMUP,
        "wall_s": round(wall, 1),
        "episode_s": {
            "p50": round(times[len(times) // 2], 3),
            "p95": round(times[int(len(times) * 0.95) - 1 if len(times) > 1 else 0], 3),
            "max": round(times[-1], 3),
        },
        "baseline": baseline,
        "after": after,
        "samples": samples,
        "leaks": leaks(baseline, after, samples[len(samples) // 2]),
        "tolerance": TOLERANCE,
    }


def soak_env(
    backend: LocalBackend, episodes: int, progress: Callable[[int, float], None] | None = None
) -> dict[str, Any]:
    """``episodes`` short episodes through one in-process env (``reset`` ends the previous one; ``close``
    the last one before a snapshot)."""
    from mlsandbox.env import decode_observation
    from mlsandbox.env.gym_env import MLSandboxEnv

    env = MLSandboxEnv(SCENARIO, sandbox=backend.name, start_sandbox=False)

    def play(i: int) -> None:
        env.reset(seed=1000 + i)
        for action in script(i):
            obs = decode_observation(env.step(action)[0])
            if not obs["ok"]:
                raise RuntimeError(f"episode {i}: {action['type']} failed: {obs['error']}")

    try:
        result = _run(Probe(backend), episodes, play, env.close, {"this process": os.getpid()}, progress)
    finally:
        env.close()
    result["interface"] = "env"
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def gateway(
    sandbox: str, *, max_sessions: int = 16, port: int | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``mlsandbox serve`` on the running sandbox ``sandbox``, as its own process; yields its URL and process."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "mlsandbox.cli.interfaces", "serve", "--sandbox", sandbox, "--no-start",
           "--port", str(port), "--max-sessions", str(max_sessions), "--log-level", "warning"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            err = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            raise RuntimeError(f"the gateway exited ({proc.returncode}): {err}")
        try:
            httpx.get(f"{url}/health", timeout=2, trust_env=False).raise_for_status()
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def soak_http(
    backend: LocalBackend, episodes: int, progress: Callable[[int, float], None] | None = None
) -> dict[str, Any]:
    """``episodes`` short episodes through ``mlsandbox serve`` (one session reset for each episode; the
    session is closed before a snapshot and a new one created after it)."""
    from mlsandbox.gateway.client import GatewayClient

    with gateway(backend.name, max_sessions=4) as (url, proc), GatewayClient(url) as gw:
        session: list[str] = []

        def play(i: int) -> None:
            seed = 1000 + i
            if not session:
                session.append(gw.create_session(SCENARIO, seed=seed).session_id)
            else:
                gw.reset(session[0], seed=seed)
            for action in script(i):
                res = gw.step(session[0], action)
                if not res.observation.ok:
                    raise RuntimeError(f"episode {i}: {action['type']} failed: {res.observation.error}")

        def settle() -> None:  # the session and its episode closed
            if session:
                gw.close(session.pop())

        result = _run(Probe(backend), episodes, play, settle, {"gateway": proc.pid}, progress)
    result["interface"] = "http"
    return result


# ---------------------------------------------------------------------------------------------- report


def print_result(result: dict[str, Any]) -> None:
    table = Table(title=f"soak through {result['interface']}: {result['episodes']} episodes in {result['wall_s']} s "
                  f"(episode p50 {result['episode_s']['p50']} s)")  # fmt: skip
    for col in ("what", "baseline", "after", "change"):
        table.add_column(col, justify="left" if col == "what" else "right")
    base, after = result["baseline"], result["after"]
    for name, b in base["processes"].items():
        a = after["processes"].get(name, {})
        for key, unit in (("rss_mib", "MiB"), ("fds", "fds"), ("threads", "threads")):
            if key in a:
                table.add_row(f"{name} {unit}", f"{b[key]:g}", f"{a[key]:g}", f"{a[key] - b[key]:+g}")
    for key in COUNTS:
        b_, a_ = base["counts"][key], after["counts"][key]
        table.add_row(key, str(b_), str(a_), f"{a_ - b_:+d}")
    for key, b_ in base["disk_mib"].items():
        a_ = after["disk_mib"][key]
        table.add_row(f"disk {key} MiB", f"{b_:g}", f"{a_:g}", f"{a_ - b_:+.2f}")
    console.print(table)
    if base.get("stopped"):
        console.print("stopped before the baseline (not measured): " + ", ".join(base["stopped"]))
    console.print("leaks: " + ("; ".join(result["leaks"]) if result["leaks"] else "none"))


def save(results: list[dict[str, Any]], out: Path = OUT) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(out.read_text()) if out.exists() else {}
    runs = {r["interface"]: r for r in previous.get("runs", [])}
    runs.update({r["interface"]: r for r in results})
    doc = {
        "benchmark": "soak",
        "scenario": SCENARIO,
        "machine": describe_machine(),
        "runs": list(runs.values()),
    }
    out.write_text(json.dumps(doc, indent=2))


@contextmanager
def bench_sandbox(name: str | None, prefix: str) -> Iterator[LocalBackend]:
    """The sandbox a benchmark runs on: the running one named, or an ephemeral one started here and
    stopped at the end."""
    backend = LocalBackend(name or f"{prefix}-{os.getpid()}")
    if name is not None:
        yield backend
        return
    console.print(f"starting sandbox {backend.name} ...")
    backend.up(ephemeral=True)
    try:
        yield backend
    finally:
        backend.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sandbox", help="a running sandbox (default: start an ephemeral one)")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--only", nargs="*", choices=["env", "http"], default=["env", "http"])
    args = parser.parse_args()
    with bench_sandbox(args.sandbox, "soak") as backend:
        results = []
        for interface in args.only:
            run = soak_env if interface == "env" else soak_http
            result = run(
                backend,
                args.episodes,
                lambda n, s, it=interface: console.print(f"  {it}: {n}/{args.episodes} episodes, {s:.0f} s"),
            )
            print_result(result)
            results.append(result)
        save(results)
        console.print(f"saved {OUT}")


if __name__ == "__main__":
    main()
