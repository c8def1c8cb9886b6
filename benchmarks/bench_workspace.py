"""Overhead of ``run_python``: wall time from the action to its result for a trivial script, on local or
kube; figures printed and saved to ``.bench/workspace.json`` (a section per backend).

Run: ``.venv/bin/python benchmarks/bench_workspace.py [--backend local|kube] [--repeat N] [--sandbox NAME]``
(default local, 20 runs). On local an ephemeral sandbox is started when none is named; on kube the sandbox
of ``mlsandbox cluster up`` (default ``default``) is used. Each sample is one ``run_python`` of
``print('ok')`` followed by ``get_job`` polled every 20 ms until the job has ended (the time an agent
waits for its result): the isolation's start (local: bubblewrap, the unprivileged uid, the forwarding path;
kube: the Job, its pod, the fetch of the workspace and the write-back), the scoped store credentials
minted per run and the interpreter's start are in it, the episode's step costs too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from machine import describe as describe_machine
from machine import summary as machine_summary

OUT = Path(__file__).resolve().parents[1] / ".bench" / "workspace.json"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    from mlsandbox.backends.registry import get_backend
    from mlsandbox.gateway import Gateway
    from mlsandbox.scenario import load_builtin

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=("local", "kube"), default="local")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--sandbox", default=None)
    args = parser.parse_args()
    ephemeral = args.backend == "local" and args.sandbox is None
    name = args.sandbox or ("bench-workspace" if args.backend == "local" else "default")
    backend = get_backend(args.backend, name)
    if ephemeral:
        backend.up(ephemeral=True)  # type: ignore[call-arg]
    sc = load_builtin("tabular-quality-basic")
    sc = sc.model_copy(update={"max_steps": 10_000})
    gw = Gateway(backend.runtime(), sc, seed=1, sandbox=backend.name)
    gw.start()
    samples: list[float] = []
    try:
        gw.step({"type": "write_file", "path": "trivial.py", "content": "print('ok')\n"})
        for _ in range(args.repeat + 1):
            t0 = time.perf_counter()
            obs = gw.step({"type": "run_python", "path": "trivial.py", "timeout_s": 60}).observation
            assert obs["ok"], obs
            job = obs["result"]["job_id"]
            while True:
                state = gw.step({"type": "get_job", "job_id": job}).observation["result"]["state"]
                if state in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(0.02)
            assert state == "succeeded", gw.step({"type": "get_logs", "target": job}).observation
            samples.append(time.perf_counter() - t0)
    finally:
        gw.close()
        if ephemeral:
            backend.down()
    samples = samples[1:]  # the first run warms the caches
    out: dict[str, Any] = {
        "benchmark": f"run_python of a trivial script, action to result ({args.backend})",
        "repeat": len(samples),
        "p50_s": round(statistics.median(samples), 3),
        "p95_s": round(_percentile(samples, 0.95), 3),
        "min_s": round(min(samples), 3),
        "max_s": round(max(samples), 3),
        "machine": describe_machine(),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    saved = json.loads(OUT.read_text()) if OUT.exists() else {}
    if "benchmark" in saved:  # the single-backend record of earlier versions
        saved = {"local": saved}
    saved[args.backend] = out
    OUT.write_text(json.dumps(saved, indent=2))
    print(
        f"run_python (trivial) on {args.backend}: p50 {out['p50_s']} s, p95 {out['p95_s']} s "
        f"over {len(samples)} runs; {machine_summary(out['machine'])}"
    )


if __name__ == "__main__":
    main()
