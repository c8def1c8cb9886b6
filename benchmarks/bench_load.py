"""Load: N concurrent HTTP sessions playing full episodes against one gateway (``mlsandbox serve``).

Every session plays a whole episode of ``churn-clean-small`` with its own seed: list and profile the data,
clean it into a dataset named after the session, train a logistic regression (a real job), poll it with
``get_job`` and ``wait``, check ``list_runs``, register the run's model as ``churn`` and ``submit``. Checked
for every session: no HTTP error at all (no 5xx, nothing refused), every step ``ok``; no cross-talk (its
``list_datasets`` holds its own cleaned dataset and no other session's, ``list_runs`` exactly its own run,
the registered version is 1); its grade correct (the grade's holdout AUC equals the AUC computed here, from
the registered model loaded from MLflow and the holdout regenerated from the scenario and the session's
seed). With the gateway's session cap set to N, once N sessions are open one more ``POST /sessions`` is
answered 429.

The client-side latency of each step is recorded; "light" steps (``list_datasets``, ``check_data_quality``,
``get_job``, ``list_runs``) give the per-step latency p50/p95 at each N. Usage: ``python
benchmarks/bench_load.py [--sandbox NAME] [--sessions 1 4 16]`` (an ephemeral sandbox is started when none
is named); saves ``.bench/load.json``. The load tier (``tests/load``) runs :func:`run_load` with a smaller N.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from bench_soak import bench_sandbox, gateway
from machine import describe as describe_machine
from rich.console import Console
from rich.table import Table

from mlsandbox.backends.local.backend import LocalBackend
from mlsandbox.gateway.client import GatewayClient, GatewayHTTPError

OUT = Path(__file__).resolve().parents[1] / ".bench" / "load.json"
SCENARIO = "churn-clean-small"
MODEL = "churn"
LIGHT = ("list_datasets", "check_data_quality", "get_job", "list_runs")
WAIT_S = 2
MAX_STEPS = 400
SEED_BASE = 500
console = Console()


@dataclass
class Session:
    """What one session did and saw."""

    index: int
    seed: int
    episode: str = ""
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)
    """HTTP errors (status and detail) and failed steps: any is a failure."""
    crosstalk: list[str] = field(default_factory=list)
    grade: dict[str, Any] = field(default_factory=dict)
    expected_auc: float | None = None
    steps: int = 0
    wall_s: float = 0.0


def _step(gw: GatewayClient, sid: str, s: Session, action: dict[str, Any]) -> Any:
    t0 = time.perf_counter()
    res = gw.step(sid, action)
    s.latencies[action["type"]].append((time.perf_counter() - t0) * 1000)
    s.steps += 1
    if not res.observation.ok:
        raise RuntimeError(f"{action['type']} failed: {res.observation.error}")
    return res


def play(url: str, s: Session, opened: threading.Barrier | None, sandbox: LocalBackend) -> None:
    """One whole episode of session ``s`` (its own client); failures are recorded in ``s``."""
    t_start = time.perf_counter()
    with GatewayClient(url, timeout=300) as gw:
        try:
            t0 = time.perf_counter()
            created = gw.create_session(SCENARIO, seed=s.seed, options={"max_steps": MAX_STEPS})
            s.latencies["create_session"].append((time.perf_counter() - t0) * 1000)
            sid, s.episode = created.session_id, str(created.info["episode_id"])
            if opened is not None:
                opened.wait(timeout=600)  # every session is open: the cap is checked now
                opened.wait(timeout=600)  # ... and checked
            mine = f"clean/s{s.index}.parquet"
            _step(gw, sid, s, {"type": "list_datasets"})
            _step(gw, sid, s, {"type": "check_data_quality", "dataset": "raw/customers.parquet"})
            _step(gw, sid, s, {"type": "clean_dataset", "dataset": "raw/customers.parquet",
                               "strategy": "impute_median", "output": mine})  # fmt: skip
            _step(gw, sid, s, {"type": "train_model", "dataset": mine, "algorithm": "logistic_regression"})
            deadline = time.monotonic() + 600
            while True:
                job = _step(gw, sid, s, {"type": "get_job", "job_id": "job-1"}).observation.result
                if job["state"] not in ("queued", "running") or time.monotonic() > deadline:
                    break
                _step(gw, sid, s, {"type": "wait", "seconds": WAIT_S})
            if job["state"] != "succeeded":
                raise RuntimeError(f"job-1 ended {job['state']}: {job}")
            runs = _step(gw, sid, s, {"type": "list_runs"}).observation.result["runs"]
            if len(runs) != 1:
                s.crosstalk.append(f"list_runs shows {len(runs)} runs: {[r.get('run_id') for r in runs]}")
            run_id = runs[0]["run_id"]
            reg = _step(gw, sid, s, {"type": "register_model", "run_id": run_id, "name": MODEL})
            if str(reg.observation.result.get("version")) != "1":
                s.crosstalk.append(f"registered version {reg.observation.result.get('version')}, not 1")
            listed = _step(gw, sid, s, {"type": "list_datasets"}).observation.result
            names = [d["name"] for d in listed["datasets"]]
            others = [n for n in names if n.startswith("clean/s") and n != mine]
            if mine not in names or others:
                s.crosstalk.append(f"list_datasets: {names}")
            final = _step(gw, sid, s, {"type": "submit"})
            s.grade = dict(final.info.get("grade") or {})
            s.expected_auc = expected_auc(sandbox, s.episode, s.seed, str(reg.observation.result["version"]))
            gw.close(sid)
        except GatewayHTTPError as e:
            s.errors.append(f"HTTP {e.status_code} {e}")
        except Exception as e:
            s.errors.append(f"{type(e).__name__}: {e}")
    s.wall_s = time.perf_counter() - t_start


def expected_auc(sandbox: LocalBackend, episode: str, seed: int, version: str) -> float:
    """The holdout AUC of the session's registered model, computed here: its version loaded from MLflow,
    the holdout regenerated from the scenario's spec and the session's seed (as the episode made it)."""
    from sklearn.metrics import roc_auc_score

    from mlsandbox.scenario import load_builtin
    from mlsandbox.world.datasets import generated_dataset

    scenario = load_builtin(SCENARIO)
    spec = scenario.dataset(scenario.goal.dataset)
    index = [d.name for d in scenario.datasets].index(spec.name)
    _, holdout, _ = generated_dataset(spec, seed * 1000 + index)
    model = sandbox.runtime().tracking.load_model(f"ep-{episode}.{MODEL}", version)
    x, y = holdout.drop(columns=[spec.target]), holdout[spec.target].to_numpy()
    return float(roc_auc_score(y, np.asarray(model.predict_proba(x))[:, 1]))


def run_load(sandbox: LocalBackend, n: int) -> dict[str, Any]:
    """N sessions at once on one gateway whose cap is N; the figures and every finding."""
    sessions = [Session(index=i, seed=SEED_BASE + i) for i in range(n)]
    opened = threading.Barrier(n + 1)
    cap: dict[str, Any] = {}
    with gateway(sandbox.name, max_sessions=n) as (url, _):
        threads = [threading.Thread(target=play, args=(url, s, opened, sandbox)) for s in sessions]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        try:
            opened.wait(timeout=600)
            with GatewayClient(url) as probe:
                try:
                    extra = probe.create_session(SCENARIO, seed=1)
                    cap = {"status": 201, "detail": f"session {extra.session_id} created past the cap"}
                except GatewayHTTPError as e:
                    cap = {"status": e.status_code, "detail": str(e.detail)}
            opened.wait(timeout=600)
        except threading.BrokenBarrierError:
            cap = {"status": None, "detail": "not every session opened"}
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    light = [ms for s in sessions for a in LIGHT for ms in s.latencies.get(a, [])]
    per_action = {
        a: _pct([ms for s in sessions for ms in s.latencies.get(a, [])])
        for a in sorted({a for s in sessions for a in s.latencies})
    }
    return {
        "sessions": n,
        "wall_s": round(wall, 1),
        "steps": sum(s.steps for s in sessions),
        "light_step_ms": _pct(light),
        "per_action_ms": per_action,
        "cap": cap,
        "errors": [f"session {s.index}: {e}" for s in sessions for e in s.errors],
        "crosstalk": [f"session {s.index}: {c}" for s in sessions for c in s.crosstalk],
        "grades": [
            {
                "session": s.index,
                "seed": s.seed,
                "holdout_auc": s.grade.get("holdout_auc"),
                "expected_auc": None if s.expected_auc is None else round(s.expected_auc, 6),
                "success": s.grade.get("success"),
                "wall_s": round(s.wall_s, 1),
            }
            for s in sessions
        ],
    }


def problems(result: dict[str, Any]) -> list[str]:
    """Everything that went wrong in a :func:`run_load` result (empty: the run is clean)."""
    found = list(result["errors"]) + list(result["crosstalk"])
    if result["cap"].get("status") != 429:
        found.append(f"the session cap was answered {result['cap']}")
    for g in result["grades"]:
        if g["holdout_auc"] is None or g["expected_auc"] is None:
            found.append(f"session {g['session']}: no grade ({g})")
        elif abs(g["holdout_auc"] - g["expected_auc"]) > 1e-6:
            found.append(
                f"session {g['session']}: graded AUC {g['holdout_auc']} but its model scores {g['expected_auc']}"
            )
    return found


def _pct(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    v = np.asarray(values)
    return {
        "n": len(values),
        "p50": round(float(np.percentile(v, 50)), 2),
        "p95": round(float(np.percentile(v, 95)), 2),
        "max": round(float(v.max()), 2),
    }


def print_results(results: list[dict[str, Any]]) -> None:
    table = Table(title=f"{SCENARIO}: N concurrent HTTP sessions, full episodes")
    for col in ("N", "wall s", "steps", "light step p50 ms", "p95 ms", "max ms", "cap", "problems"):
        table.add_column(col, justify="right")
    for r in results:
        lat = r["light_step_ms"]
        table.add_row(
            str(r["sessions"]), f"{r['wall_s']}", str(r["steps"]), f"{lat.get('p50', '-')}",
            f"{lat.get('p95', '-')}", f"{lat.get('max', '-')}", str(r["cap"].get("status")),
            str(len(problems(r))),
        )  # fmt: skip
    console.print(table)
    for r in results:
        for p in problems(r):
            console.print(f"[red]N={r['sessions']}: {p}[/]")


def save(results: list[dict[str, Any]], out: Path = OUT) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(out.read_text()) if out.exists() else {}
    runs = {r["sessions"]: r for r in previous.get("runs", [])}
    runs.update({r["sessions"]: r for r in results})
    doc = {
        "benchmark": "load",
        "scenario": SCENARIO,
        "machine": describe_machine(),
        "runs": [runs[k] for k in sorted(runs)],
    }
    out.write_text(json.dumps(doc, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sandbox", help="a running sandbox (default: start an ephemeral one)")
    parser.add_argument("--sessions", type=int, nargs="*", default=[1, 4, 16])
    args = parser.parse_args()
    try:
        with bench_sandbox(args.sandbox, "load") as backend:
            results = []
            for n in args.sessions:
                console.print(f"N = {n} ...")
                results.append(run_load(backend, n))
                save(results)
            print_results(results)
            console.print(f"saved {OUT}")
    finally:
        sys.stdout.flush()


if __name__ == "__main__":
    main()
