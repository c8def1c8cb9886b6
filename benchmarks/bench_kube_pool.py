"""Many sandboxes at once on the cluster `mlsandbox cluster up` left running: N workers play episodes
concurrently through the operator's warm pool, each episode on a Sandbox claimed from the pool.

For each N (``BENCH_POOL_N``, default ``1,4``): a ``SandboxPool`` of size N (its template: the scenario
``BENCH_POOL_SCENARIO``, default ``tabular-quality-basic``) is filled; then N worker threads each run
``BENCH_POOL_EPISODES`` episodes (default 2), each one: claim a Sandbox from the pool
(:class:`mlsandbox.integrations.kube_claims.SandboxClaim`, the claim RLlib's runners make; the latency is
the claimant's: claim created -> bound -> the Sandbox's namespace answering), play the episode with
``mlsandbox run --backend kube --name <member> --agent BENCH_POOL_AGENT`` (default ``rule``) as a user
would, release the claim (the member goes back to the pool after a warm reset). Sampled every few seconds
meanwhile: the memory of the node (its processes and its pods' cgroup, as ``mlsandbox cluster status``
counts it) and the pods of the sandboxes by phase (Pending pods: what the node could not place).

Figures per N: pool fill time, claim latency p50/p95, episodes per minute, episode wall p50/p95, failures
(with their last lines: what broke first), peak node memory, peak Pending pods. Prints a table and saves
``.bench/kube_pool.json``. Needs a running cluster (``mlsandbox cluster up``); it deletes its pools.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from machine import describe as describe_machine
from rich.console import Console
from rich.table import Table

from mlsandbox.backends.kube import cluster_state as cs
from mlsandbox.backends.kube.cluster import Cluster
from mlsandbox.integrations.kube_claims import SANDBOX_API_VERSION, SandboxClaim

OUT = Path(__file__).resolve().parents[1] / ".bench" / "kube_pool.json"
SIZES = [int(n) for n in os.environ.get("BENCH_POOL_N", "1,4").split(",") if n.strip()]
EPISODES = int(os.environ.get("BENCH_POOL_EPISODES", "2"))
SCENARIO = os.environ.get("BENCH_POOL_SCENARIO", "tabular-quality-basic")
AGENT = os.environ.get("BENCH_POOL_AGENT", "rule")
SAMPLE_S = 5.0
EPISODE_TIMEOUT_S = 1200
CLI = str(Path(sys.executable).parent / "mlsandbox")
console = Console()


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Sampler:
    """Node memory and the sandboxes' pods by phase, every SAMPLE_S seconds, until stopped."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.cluster, self.name = cluster, name
        self.memory: list[int] = []
        self.pending: list[int] = []
        self.running: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        from mlsandbox.k8s_operator.local_cluster import status

        while not self._stop.is_set():
            try:
                self.memory.append(status(self.name).memory_bytes)
                pods = [
                    p for p in self.cluster.list("v1", "Pod") if p["metadata"]["namespace"].startswith("sbx-")
                ]
                phases = [(p.get("status") or {}).get("phase") for p in pods]
                self.pending.append(phases.count("Pending"))
                self.running.append(phases.count("Running"))
            except Exception as e:  # a sample lost is not a benchmark lost
                console.print(f"[yellow]sample failed: {e}[/yellow]")
            self._stop.wait(SAMPLE_S)


def make_pool(cluster: Cluster, namespace: str, name: str, size: int) -> float:
    """Create the pool and wait until it is full; seconds."""
    body = {
        "apiVersion": SANDBOX_API_VERSION,
        "kind": "SandboxPool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": size, "template": {"scenario": SCENARIO, "seed": 1}},
    }
    t = time.perf_counter()
    cluster.create(body)
    while True:
        pool = cluster.get(SANDBOX_API_VERSION, "SandboxPool", name, namespace) or {}
        s = pool.get("status") or {}
        if s.get("readyReplicas") == size and s.get("replicas") == size:
            return time.perf_counter() - t
        if time.perf_counter() - t > 600:
            raise TimeoutError(f"pool {name} not full after 600 s: {s}")
        time.sleep(0.5)


def delete_pool(cluster: Cluster, namespace: str, name: str) -> None:
    cluster.delete(SANDBOX_API_VERSION, "SandboxPool", name, namespace)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        left = [
            s
            for s in cluster.list(SANDBOX_API_VERSION, "Sandbox", namespace, f"mlsandbox.dev/pool={name}")
            if s
        ]
        if not left:
            return
        time.sleep(1)


def play(member: str, env: dict[str, str]) -> tuple[bool, float, str]:
    """One episode on ``member`` from the command line: (succeeded, wall seconds as reported, last lines)."""
    args = [CLI, "run", "--backend", "kube", "--name", member, "--scenario", SCENARIO, "--agent", AGENT]
    done = subprocess.run(
        args, env=env, capture_output=True, text=True, timeout=EPISODE_TIMEOUT_S, check=False
    )
    out = (done.stdout + done.stderr).strip()
    found = re.search(r"success: .*?([\d.]+) s wall", out)
    wall = float(found.group(1)) if found else float("nan")
    tail = "\n".join(out.splitlines()[-3:])
    return done.returncode == 0 and found is not None, wall, tail


def run_n(cluster: Cluster, state: cs.ClusterState, n: int) -> dict[str, Any]:
    assert state.client is not None
    namespace = state.client.control_namespace
    pool = f"bench-{n}"
    fill = make_pool(cluster, namespace, pool, n)
    console.print(f"N={n}: pool of {n} full in {fill:.1f} s")
    claims: list[float] = []
    walls: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    env = dict(os.environ)

    def worker(index: int) -> None:
        for episode in range(EPISODES):
            claim = SandboxClaim(
                f"bench-{n}-{index}-{episode}",
                scenario=SCENARIO,
                pool=pool,
                control_namespace=namespace,
                kubeconfig=state.client.kubeconfig if state.client else None,
            )
            t = time.perf_counter()
            try:
                member = claim.acquire(timeout=600)
            except Exception as e:
                with lock:
                    failures.append(f"claim: {type(e).__name__}: {e}")
                continue
            latency = time.perf_counter() - t
            try:
                ok, wall, tail = play(member, env)
            except subprocess.TimeoutExpired:
                ok, wall, tail = False, float("nan"), f"timed out after {EPISODE_TIMEOUT_S} s"
            finally:
                claim.release()
            with lock:
                claims.append(latency)
                if ok:
                    walls.append(wall)
                else:
                    failures.append(f"episode on {member}: {tail}")
            console.print(
                f"  N={n} worker {index} episode {episode}: claim {latency:.2f} s, ok={ok}, wall {wall:.1f} s"
            )

    started = time.perf_counter()
    with Sampler(cluster, state.name) as sampler:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    elapsed = time.perf_counter() - started
    delete_pool(cluster, namespace, pool)
    return {
        "n": n,
        "episodes_per_worker": EPISODES,
        "pool_fill_s": round(fill, 2),
        "claim_s": [round(c, 3) for c in claims],
        "claim_p50_s": pct(claims, 0.5),
        "claim_p95_s": pct(claims, 0.95),
        "episodes_ok": len(walls),
        "episodes_failed": len(failures),
        "elapsed_s": round(elapsed, 1),
        "episodes_per_minute": round(len(walls) / (elapsed / 60.0), 2),
        "episode_wall_p50_s": pct(walls, 0.5),
        "episode_wall_p95_s": pct(walls, 0.95),
        "node_memory_peak_bytes": max(sampler.memory, default=None),
        "node_memory_mean_bytes": int(statistics.mean(sampler.memory)) if sampler.memory else None,
        "pending_pods_peak": max(sampler.pending, default=None),
        "running_pods_peak": max(sampler.running, default=None),
        "failures": failures,
    }


def main() -> None:
    state = cs.read(cs.default_name())
    if state is None or state.client is None or state.phase != "running":
        raise SystemExit("no running cluster is recorded: run `mlsandbox cluster up` first")
    cluster = Cluster(kubeconfig=state.client.kubeconfig)
    results = [run_n(cluster, state, n) for n in SIZES]
    table = Table(
        title=f"{SCENARIO} with the {AGENT} agent, {EPISODES} episode(s) per worker, engine {state.engine}"
    )
    for column in (
        "N",
        "pool fill s",
        "claim p50/p95 s",
        "episodes/min",
        "wall p50/p95 s",
        "failed",
        "node mem peak",
        "Pending peak",
    ):
        table.add_column(column)
    for r in results:
        mem = r["node_memory_peak_bytes"]
        table.add_row(
            str(r["n"]),
            f"{r['pool_fill_s']:.1f}",
            f"{r['claim_p50_s'] or 0:.2f} / {r['claim_p95_s'] or 0:.2f}",
            f"{r['episodes_per_minute']:.2f}",
            f"{r['episode_wall_p50_s'] or 0:.0f} / {r['episode_wall_p95_s'] or 0:.0f}",
            str(r["episodes_failed"]),
            f"{mem / 2**30:.2f} GiB" if mem else "-",
            str(r["pending_pods_peak"]),
        )
    console.print(table)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": describe_machine(),
        "engine": state.engine,
        "scenario": SCENARIO,
        "agent": AGENT,
        "results": results,
    }
    OUT.write_text(json.dumps(report, indent=2))
    console.print(f"saved {OUT}")


if __name__ == "__main__":
    main()
