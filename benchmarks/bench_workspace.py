"""Overhead of ``run_python`` on local: wall time from the action to its result for a trivial script;
figures printed and saved to ``.bench/workspace.json``.

Run: ``.venv/bin/python benchmarks/bench_workspace.py [--repeat N] [--sandbox NAME]`` (default 20; an
ephemeral sandbox is started when none is named). Each sample is one ``run_python`` of ``print('ok')``
followed by ``get_job`` polled every 20 ms until the job has ended (the time an agent waits for its
result): the isolation's start (bubblewrap, the unprivileged uid, the forwarding path, the scoped store
credentials minted per run) and the interpreter's start are in it, the episode's step costs too.
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
    from mlsandbox.backends.local import LocalBackend
    from mlsandbox.gateway import Gateway
    from mlsandbox.scenario import load_builtin

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--sandbox", default=None)
    args = parser.parse_args()
    backend = LocalBackend(args.sandbox or "bench-workspace")
    backend.up(ephemeral=args.sandbox is None)
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
        if args.sandbox is None:
            backend.down()
    samples = samples[1:]  # the first run warms the caches
    out: dict[str, Any] = {
        "benchmark": "run_python of a trivial script, action to result (local)",
        "repeat": len(samples),
        "p50_s": round(statistics.median(samples), 3),
        "p95_s": round(_percentile(samples, 0.95), 3),
        "min_s": round(min(samples), 3),
        "max_s": round(max(samples), 3),
        "machine": describe_machine(),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=2))
    print(
        f"run_python (trivial) on local: p50 {out['p50_s']} s, p95 {out['p95_s']} s "
        f"over {len(samples)} runs; {machine_summary(out['machine'])}"
    )


if __name__ == "__main__":
    main()
