"""Fault benchmark: injection latency (call -> symptom observed) and recovery latency (call -> symptom
gone) per fault type on the local backend, p50/p95 over a few repetitions.

A symptom is what a client sees: a request through the proxy slower by the configured latency, a refused
connection, a write failing with the quota error, a failing or hanging health check, a job exiting 137, an
S3 client configured from the config store failing to authenticate or connect, a running job's CPU rate
falling under CPU contention, a real uvicorn app answering 503 through its fault hook.
Prints a table and saves .bench/faults.json. Runs its own ephemeral sandbox.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from machine import describe as describe_machine
from rich.console import Console
from rich.table import Table

from mlsandbox.backends.local.backend import LocalBackend
from mlsandbox.backends.local.jobs import cgroups_available
from mlsandbox.backends.protocols import HttpFault, JobSpec
from mlsandbox.workloads import fault_hook

NAME = f"bench-faults-{os.getpid()}"
OUT = Path(__file__).resolve().parents[1] / ".bench" / "faults.json"
REPS = int(os.environ.get("BENCH_FAULT_REPS", "5"))
console = Console()


def until(check: Callable[[], bool], timeout: float = 60.0, poll: float = 0.01) -> float:
    """Seconds until ``check()`` is true."""
    t0 = time.perf_counter()
    while not check():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("symptom not observed")
        time.sleep(poll)
    return time.perf_counter() - t0


def get(url: str, timeout: float = 2.0) -> tuple[bool, float]:
    t0 = time.perf_counter()
    try:
        with httpx.Client(timeout=timeout, trust_env=False) as c:
            ok = c.get(url).status_code == 200
    except httpx.HTTPError:
        ok = False
    return ok, time.perf_counter() - t0


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def measure(rt: Any, backend: LocalBackend) -> dict[str, dict[str, list[float]]]:
    c = rt.faults
    s3 = f"{rt.endpoints.s3_url}/minio/health/live"
    out: dict[str, dict[str, list[float]]] = {}

    def record(
        kind: str,
        inject: Callable[[], None],
        present: Callable[[], bool],
        recover: Callable[[], None],
        gone: Callable[[], bool],
    ) -> None:
        row = out.setdefault(kind, {"inject_s": [], "recover_s": []})
        for _ in range(REPS):
            t0 = time.perf_counter()
            inject()
            until(present)
            row["inject_s"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            recover()
            until(gone)
            row["recover_s"].append(time.perf_counter() - t0)

    if "latency" not in c.unavailable():
        record(
            "latency 200ms",
            lambda: c.network.add_toxic("minio", "b", "latency", {"latency": 200}),
            lambda: get(s3)[1] >= 0.2,
            lambda: c.network.remove_toxic("minio", "b"),
            lambda: get(s3)[1] < 0.2,
        )
        record(
            "endpoint_down",
            lambda: c.network.set_enabled("minio", False),
            lambda: not get(s3)[0],
            lambda: c.network.set_enabled("minio", True),
            lambda: get(s3)[0],
        )
        record(
            "reset_peer",
            lambda: c.network.add_toxic("minio", "r", "reset_peer", {"timeout": 0}),
            lambda: not get(s3)[0],
            lambda: c.network.remove_toxic("minio", "r"),
            lambda: get(s3)[0],
        )
    rt.object_store.create_bucket("bench-quota")

    def write_fails() -> bool:
        try:
            rt.object_store.put_object("bench-quota", "x", b"payload")
        except Exception as e:
            return "QuotaExceeded" in str(e)
        return False

    record(
        "disk_full",
        lambda: c.set_bucket_quota("bench-quota", 1),
        write_fails,
        lambda: c.set_bucket_quota("bench-quota", None),
        lambda: not write_fails(),
    )
    health = lambda: c.services.health("minio", timeout=0.5).healthy  # noqa: E731
    record(
        "kill minio",
        lambda: c.services.kill("minio"),
        lambda: not health(),
        lambda: c.services.restart("minio", wait=False),
        health,
    )
    record(
        "freeze minio",
        lambda: c.services.freeze("minio"),
        lambda: not health(),
        lambda: c.services.thaw("minio"),
        health,
    )
    _config_faults(rt, record)
    _contention(rt, record)
    _http_errors(c, record)
    if cgroups_available():
        # A job started under the fault (its memory limit cut to 50 MiB) that needs 100 MiB.
        row = out.setdefault("memory_limit (job exits 137)", {"inject_s": [], "recover_s": []})
        for i in range(REPS):
            jid = f"bench-oom-{i}"
            t0 = time.perf_counter()
            rt.jobs.submit(
                JobSpec(
                    job_id=jid, workload="burn", args=["--mem-mb", "100"], memory_mb=50, labels={"b": "f"}
                )
            )
            until(lambda jid=jid: rt.jobs.get(jid).exit_code == 137, timeout=90)
            row["inject_s"].append(time.perf_counter() - t0)
        rt.jobs.cleanup(("b", "f"))
    return out


def _config_faults(rt: Any, record: Callable[..., None]) -> None:
    """Wrong endpoint / rotated secret in the config store; the symptom: a client built from it fails."""
    import boto3
    from botocore.config import Config

    store, prefix = rt.config, "mls-bench-"
    store.open_scope(prefix, store.job_config())

    def client_works() -> bool:
        v = {
            k: store.get(prefix + k) for k in ("s3_endpoint_url", "s3_access_key_id", "s3_secret_access_key")
        }
        s3 = boto3.client(
            "s3",
            endpoint_url=v["s3_endpoint_url"],
            aws_access_key_id=v["s3_access_key_id"],
            aws_secret_access_key=v["s3_secret_access_key"],
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 1}, connect_timeout=1, s3={"addressing_style": "path"}),
        )
        try:
            s3.list_buckets()
        except Exception:
            return False
        return True

    try:
        for kind, key, bad in (
            ("wrong_endpoint (config)", "s3_endpoint_url", "http://127.0.0.1:9"),
            ("rotated_credentials (config)", "s3_secret_access_key", "stale-secret-value"),
        ):
            good = store.get(prefix + key)
            record(
                kind,
                lambda key=key, bad=bad: store.set(prefix + key, bad),
                lambda: not client_works(),
                lambda key=key, good=good: store.set(prefix + key, good),
                client_works,
            )
    finally:
        store.close_scope(prefix)


def _contention(rt: Any, record: Callable[..., None]) -> None:
    """Three burners pinned with a running job to one CPU; the symptom: the job's CPU rate halves."""
    c = rt.faults
    rt.jobs.submit(
        JobSpec(job_id="bench-cc", workload="burn", args=["--cpu-seconds", "600"], labels={"b": "cc"})
    )

    def rate(seconds: float = 0.5) -> float:
        a = rt.jobs.get("bench-cc").cpu_seconds
        time.sleep(seconds)
        return (rt.jobs.get("bench-cc").cpu_seconds - a) / seconds

    try:
        time.sleep(1.0)
        base = sorted(rate() for _ in range(3))[1]

        def inject() -> None:
            c.start_contention("bench", "jobs", 3)
            c.refresh_contention("bench", ["bench-cc"])

        record(
            "cpu_contention (3 burners)",
            inject,
            lambda: rate() < 0.5 * base,
            lambda: c.stop_contention("bench"),
            lambda: rate() > 0.75 * base,
        )
    finally:
        c.stop_contention("bench")
        rt.jobs.cleanup(("b", "cc"))


_APP = textwrap.dedent(
    """
    from fastapi import FastAPI
    from mlsandbox.workloads.fault_hook import FaultHookMiddleware
    app = FastAPI()
    app.add_middleware(FaultHookMiddleware)
    @app.get("/ping")
    def ping() -> dict:
        return {"ok": True}
    """
)


def _http_errors(c: Any, record: Callable[..., None]) -> None:
    """A real uvicorn app with the fault hook (registered as ``http:bench-api``); the symptom: it answers 503."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bench_app.py").write_text(_APP)
        hook = Path(tmp) / "hook.json"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = [
            sys.executable,
            "-m",
            "uvicorn",
            "bench_app:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
        proc = subprocess.Popen(argv, cwd=tmp, env={**os.environ, "MLSANDBOX_FAULT_HOOK_FILE": str(hook)})
        url = f"http://127.0.0.1:{port}/ping"

        def status() -> int:
            try:
                with httpx.Client(timeout=2.0, trust_env=False) as client:
                    return client.get(url).status_code
            except httpx.HTTPError:
                return 0

        try:
            until(lambda: status() == 200, timeout=60, poll=0.1)
            fault_hook.register_hook("bench-api", hook, scope="bench")
            record(
                "http_errors (503 via fault hook)",
                lambda: c.set_http_fault(
                    "bench-api", HttpFault(error_rate=1.0, status=503), episode_id="bench"
                ),
                lambda: status() == 503,
                lambda: c.clear_http_fault("bench-api", episode_id="bench"),
                lambda: status() == 200,
            )
        finally:
            fault_hook.unregister_hook("bench-api", scope="bench")
            proc.terminate()
            proc.wait(10)


def main() -> None:
    backend = LocalBackend(NAME)
    t0 = time.perf_counter()
    backend.up(ephemeral=True)
    up_s = time.perf_counter() - t0
    try:
        raw = measure(backend.runtime(), backend)
    except Exception:
        logs = backend.dir / "logs"
        for log in sorted(logs.glob("*.log")):
            console.print(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
        raise
    finally:
        backend.down()
    table = Table(title=f"fault injection / recovery latency ({REPS} reps; sandbox up {up_s:.1f} s)")
    for col in ("fault", "inject p50 ms", "inject p95 ms", "recover p50 ms", "recover p95 ms"):
        table.add_column(col, justify="right" if "ms" in col else "left")
    figures: dict[str, Any] = {}
    for kind, row in raw.items():
        f = {
            f"{k}_{q}_ms": round(pct(v, p) * 1000, 1)
            for k, v in (("inject", row["inject_s"]), ("recover", row["recover_s"]))
            if v
            for q, p in (("p50", 0.5), ("p95", 0.95))
        }
        f["reps"] = len(row["inject_s"])
        figures[kind] = f
        table.add_row(
            kind,
            *(
                str(f.get(k, "-"))
                for k in ("inject_p50_ms", "inject_p95_ms", "recover_p50_ms", "recover_p95_ms")
            ),
        )
    console.print(table)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "machine": describe_machine(),
                "up_s": round(up_s, 2),
                "faults": figures,
                "mean_inject_ms": round(statistics.mean(v["inject_p50_ms"] for v in figures.values()), 1),
            },
            indent=2,
        )
    )
    console.print(f"saved {OUT}")


if __name__ == "__main__":
    main()
