"""Model serving: our model server against ``mlflow models serve`` on the same model, one worker each.

A scikit-learn pipeline like the trainer's (scaling, one-hot encoding, logistic regression) is fitted on a
built-in scenario's data and saved as an MLflow model directory. Each server is started on it (ours:
``python -m mlsandbox.workloads.model_server --model-path``; MLflow's: ``mlflow models serve
--env-manager local --workers 1``) and loaded by the same closed-loop client: ``--concurrency``
connections (keep-alive, a small asyncio HTTP/1.1 client, so the client costs little CPU), each sending
one-row ``dataframe_split`` requests back to back for ``--seconds``. Prints requests/s, p50 and p99 for
both and the ratio (target: >= 2x the requests/s at no worse p99), checks both answer the same
predictions, and measures the metrics scrape per service (model server and feature service): time per
``GET /metrics``, its size, and the server's CPU time per scrape. Saves ``.bench/serving.json``.

Usage: ``python benchmarks/bench_serving.py [--seconds 10] [--concurrency 16]``. On a shared machine the
figures are noisy; the ratio is what to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
from machine import describe as describe_machine

OUT = Path(__file__).resolve().parents[1] / ".bench" / "serving.json"
COLUMNS = ["tenure_months", "monthly_spend", "support_calls", "age", "discount_pct", "plan", "region"]


def build_model(root: Path) -> tuple[Path, Any]:
    import mlflow.models
    import mlflow.sklearn

    from mlsandbox.data.tabular import generate_tabular
    from mlsandbox.scenario.loader import load_builtin
    from mlsandbox.workloads.trainer import make_pipeline

    spec = load_builtin("tabular-quality-basic").datasets[0]
    data = generate_tabular(spec, 7).holdout
    y, x = data[spec.target], data.drop(columns=[spec.target])
    pipe = make_pipeline(x, "logistic_regression", {}, 0).fit(x, y)
    path = root / "model"
    mlflow.sklearn.save_model(
        pipe, str(path), signature=mlflow.models.infer_signature(x.head(20), pipe.predict(x.head(20)))
    )
    return path, x


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 180.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    for sig in (15, 9):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=10)
            break
        except subprocess.TimeoutExpired:
            continue
    proc.poll()


def scrape_overhead(url: str, pid: int, n: int = 200) -> dict[str, float]:
    proc = psutil.Process(pid)
    with httpx.Client() as c:
        c.get(url)
        cpu0 = sum(proc.cpu_times()[:2])
        times = []
        size = 0
        for _ in range(n):
            t0 = time.perf_counter()
            r = c.get(url)
            times.append(time.perf_counter() - t0)
            size = len(r.content)
        cpu1 = sum(proc.cpu_times()[:2])
    return {
        "scrape_p50_ms": float(np.percentile(np.asarray(times) * 1000, 50)),
        "scrape_p99_ms": float(np.percentile(np.asarray(times) * 1000, 99)),
        "server_cpu_ms_per_scrape": (cpu1 - cpu0) * 1000.0 / n,
        "bytes": size,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mlsandbox-bench-serving-"))
    procs: list[subprocess.Popen[bytes]] = []
    figures: dict[str, Any] = {
        "machine": describe_machine(),
        "seconds": args.seconds,
        "concurrency": args.concurrency,
    }
    try:
        model, x = build_model(root)
        row = x.head(1)
        body = json.dumps(
            {"dataframe_split": {"columns": list(row.columns), "data": row.astype(object).values.tolist()}}
        ).encode()
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        ours_port, theirs_port = free_port(), free_port()
        ours = subprocess.Popen(
            [sys.executable, "-m", "mlsandbox.workloads.model_server", "--model-path", str(model),
             "--port", str(ours_port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        procs.append(ours)
        mlflow_bin = str(Path(sys.executable).with_name("mlflow"))
        theirs = subprocess.Popen(
            [mlflow_bin, "models", "serve", "-m", str(model), "-p", str(theirs_port), "-h", "127.0.0.1",
             "--env-manager", "local", "--workers", "1"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        procs.append(theirs)
        figures["ours_ready_s"] = wait_http(f"http://127.0.0.1:{ours_port}/health", ours)
        figures["mlflow_ready_s"] = wait_http(f"http://127.0.0.1:{theirs_port}/ping", theirs)

        a = httpx.post(f"http://127.0.0.1:{ours_port}/predict", content=body).json()["predictions"]
        b = httpx.post(
            f"http://127.0.0.1:{theirs_port}/invocations",
            content=body,
            headers={"content-type": "application/json"},
        ).json()["predictions"]
        figures["same_predictions"] = a == b

        results = {}
        for name, port, path in (("mlflow", theirs_port, b"/invocations"), ("ours", ours_port, b"/predict")):
            req_body = body
            # warm up, then measure
            _run_load(port, path, req_body, 1.0, args.concurrency)
            results[name] = _run_load(port, path, req_body, args.seconds, args.concurrency)
        figures["ours"], figures["mlflow"] = results["ours"], results["mlflow"]
        figures["rps_ratio"] = results["ours"]["rps"] / max(results["mlflow"]["rps"], 1e-9)
        figures["p99_ratio"] = results["ours"]["p99_ms"] / max(results["mlflow"]["p99_ms"], 1e-9)

        figures["scrape_model_server"] = scrape_overhead(f"http://127.0.0.1:{ours_port}/metrics", ours.pid)
        feats = x.head(2000).copy()
        feats.insert(0, "entity_id", [f"e{i}" for i in range(len(feats))])
        fpath = root / "features.parquet"
        feats.to_parquet(fpath)
        fport = free_port()
        fs = subprocess.Popen(
            [sys.executable, "-m", "mlsandbox.workloads.feature_service", "--path", str(fpath), "--port", str(fport)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        procs.append(fs)
        wait_http(f"http://127.0.0.1:{fport}/health", fs)
        with httpx.Client() as c:
            for i in range(100):
                c.post(f"http://127.0.0.1:{fport}/features", json={"ids": [f"e{i}"]})
        figures["scrape_feature_service"] = scrape_overhead(f"http://127.0.0.1:{fport}/metrics", fs.pid)
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(root, ignore_errors=True)

    o, m = figures["ours"], figures["mlflow"]
    print(
        f"one-row requests, {args.concurrency} concurrent clients, {args.seconds:.0f} s each, one worker each"
    )
    print(f"{'server':<22}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}")
    print(
        f"{'mlflow models serve':<22}{m['rps']:>10.0f}{m['p50_ms']:>10.2f}{m['p99_ms']:>10.2f}{m['errors']:>8}"
    )
    print(
        f"{'mlsandbox model_server':<22}{o['rps']:>10.0f}{o['p50_ms']:>10.2f}{o['p99_ms']:>10.2f}{o['errors']:>8}"
    )
    print(
        f"ratio: {figures['rps_ratio']:.2f}x requests/s, p99 {figures['p99_ratio']:.2f}x (target >= 2x, <= 1x)"
    )
    print(f"same predictions: {figures['same_predictions']}")
    for svc in ("scrape_model_server", "scrape_feature_service"):
        s = figures[svc]
        print(
            f"{svc}: p50 {s['scrape_p50_ms']:.2f} ms, p99 {s['scrape_p99_ms']:.2f} ms, "
            f"{s['server_cpu_ms_per_scrape']:.2f} ms server CPU, {s['bytes']} bytes"
        )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(figures, indent=2))
    print(f"saved {OUT}")


def _run_load(port: int, path: bytes, body: bytes, seconds: float, concurrency: int) -> dict[str, float]:
    lat: list[float] = []
    errors: list[int] = []

    async def worker(until: float) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        req = (
            b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body
        )  # fmt: skip
        while time.perf_counter() < until:
            t0 = time.perf_counter()
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            lat.append(time.perf_counter() - t0)
            if not head.startswith(b"HTTP/1.1 200"):
                errors.append(1)
        writer.close()

    async def run() -> float:
        t0 = time.perf_counter()
        until = t0 + seconds
        await asyncio.gather(*(worker(until) for _ in range(concurrency)))
        return time.perf_counter() - t0

    elapsed = asyncio.run(run())
    a = np.asarray(lat) * 1000.0
    return {
        "requests": len(lat),
        "errors": len(errors),
        "rps": len(lat) / elapsed,
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
    }


if __name__ == "__main__":
    main()
