"""Hostile scripts in an episode's workspace on local: each fails to do harm, the sandbox stays intact,
and the same episode then trains, registers and succeeds. Network attempts target only a listener this
test starts on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from tests.helpers import ok

from mlsandbox.agents.code_agent import training_script
from mlsandbox.backends.local.workspaces import unavailable_reason
from mlsandbox.gateway import Gateway
from mlsandbox.scenario import load_builtin

pytestmark = [
    pytest.mark.services,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]


@pytest.fixture(scope="module")
def gw(runtime: Any, sandbox: Any) -> Iterator[Gateway]:
    sc = load_builtin("tabular-quality-basic")
    sc = sc.model_copy(
        # Room for a slow, shared machine: the training script of the last test may take minutes there.
        update={
            "max_steps": 1000,
            "budget": sc.budget.model_copy(update={"credits": 10_000.0, "max_job_seconds": 900.0}),
        }
    )
    g = Gateway(runtime, sc, seed=11, sandbox=sandbox.name)
    g.start()
    yield g
    g.close()


def run(gw: Gateway, code: str, *args: str, timeout_s: float = 60) -> tuple[str, str]:
    """Run ``code`` in the workspace; its final state and its log."""
    job = ok(gw, {"type": "run_python", "code": code, "args": list(args), "timeout_s": timeout_s})["job_id"]
    deadline = time.monotonic() + timeout_s + 60
    while (state := ok(gw, {"type": "get_job", "job_id": job})["state"]) not in (
        "succeeded",
        "failed",
        "cancelled",
    ):
        assert time.monotonic() < deadline
        ok(gw, {"type": "wait", "seconds": 2})
    return state, "\n".join(ok(gw, {"type": "get_logs", "target": job, "tail": 200})["lines"])


def intact(runtime: Any) -> None:
    for service in ("minio", "mlflow"):
        assert runtime.faults.services.health(service).healthy, service


def test_the_gateway_process_and_the_services_cannot_be_seen_read_or_killed(
    gw: Gateway, runtime: Any
) -> None:
    minio = [p.pid for p in psutil.process_iter(["cmdline"]) if "minio" in " ".join(p.info["cmdline"] or [])]
    code = """
import os, signal, sys
gw, minio = int(sys.argv[1]), [int(p) for p in sys.argv[2].split(",") if p]
print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
for what in ("environ", "mem", "cmdline"):
    try: open(f"/proc/{gw}/{what}", "rb").read(64); print("LEAK", what)
    except OSError as e: print("refused", what, type(e).__name__)
for pid in minio + [gw]:
    try: os.kill(pid, signal.SIGKILL); print("LEAK killed", pid)
    except OSError as e: print("refused kill", type(e).__name__)
"""
    # this sandbox's MinIO: the others on the machine (other lanes' sandboxes) may stop on their own meanwhile
    own = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if p.pid in minio and str(runtime.sandbox_dir) in " ".join(p.info["cmdline"] or [])
    ]
    assert own, "the sandbox's MinIO process was not found"
    state, log = run(gw, code, str(os.getpid()), ",".join(map(str, minio)))
    assert state == "succeeded" and "LEAK" not in log, log
    assert all(psutil.pid_exists(p) for p in own)
    intact(runtime)


def test_another_bucket_cannot_be_read_or_written(gw: Gateway, s3: Any) -> None:
    s3.create_bucket(Bucket="ws-attack-other")
    s3.put_object(Bucket="ws-attack-other", Key="secret.txt", Body=b"not yours")
    code = """
import boto3, os
s3 = boto3.client("s3")
print("buckets", [b["Name"] for b in s3.list_buckets()["Buckets"]])
for name, call in [("get", lambda: s3.get_object(Bucket="ws-attack-other", Key="secret.txt")),
                   ("put", lambda: s3.put_object(Bucket="ws-attack-other", Key="x", Body=b"x")),
                   ("list", lambda: s3.list_objects_v2(Bucket="ws-attack-other")),
                   ("artifacts", lambda: s3.list_objects_v2(Bucket="mlflow-artifacts")),
                   ("create", lambda: s3.create_bucket(Bucket="ws-attack-new"))]:
    try: call(); print("LEAK", name)
    except Exception as e: print("refused", name, type(e).__name__)
s3.put_object(Bucket=os.environ["MLSANDBOX_BUCKET"], Key="scratch/ok.txt", Body=b"mine")
print("own bucket ok")
"""
    state, log = run(gw, code)
    assert state == "succeeded" and "LEAK" not in log and "own bucket ok" in log, log
    assert "ws-attack-other" not in log.split("buckets", 1)[1].splitlines()[0]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="ws-attack-other")["Contents"]] == ["secret.txt"]
    s3.delete_object(Bucket="ws-attack-other", Key="secret.txt")
    s3.delete_bucket(Bucket="ws-attack-other")


def test_a_listener_outside_the_sandbox_is_unreachable(gw: Gateway, runtime: Any) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.5)
    accepted: list[Any] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                accepted.append(server.accept())

    threading.Thread(target=accept, daemon=True).start()
    prefect = runtime.flows  # noqa: F841  (Prefect's port is the sandbox's, and not forwarded either)
    code = """
import socket, sys
for port in sys.argv[1:]:
    try: socket.create_connection(("127.0.0.1", int(port)), timeout=2); print("LEAK", port)
    except OSError as e: print("refused", port, type(e).__name__)
"""
    from urllib.parse import urlsplit

    prefect_port = str(urlsplit(runtime._endpoints.prefect_api_url).port)
    try:
        state, log = run(gw, code, str(server.getsockname()[1]), prefect_port)
    finally:
        stop.set()
        server.close()
    assert state == "succeeded" and "LEAK" not in log, log
    assert accepted == []


def test_a_fork_bomb_is_stopped_and_the_sandbox_lives(gw: Gateway, runtime: Any) -> None:
    code = """
import os, time
n = 0
while True:
    try:
        if os.fork() == 0:
            time.sleep(30); os._exit(0)
        n += 1
    except OSError as e:
        print("stopped after", n, type(e).__name__, flush=True); break
"""
    _, log = run(gw, code, timeout_s=20)
    assert "stopped after" in log, log
    intact(runtime)
    assert run(gw, "print('alive')")[1].strip().endswith("alive")


def test_filling_the_disk_stops_at_the_quota_and_nothing_is_lost(gw: Gateway, runtime: Any) -> None:
    ok(gw, {"type": "write_file", "path": "keep.txt", "content": "kept"})
    code = """
import os
written = 0
try:
    with open("junk.bin", "wb") as f:
        while True:
            f.write(b"x" * (1 << 20)); written += 1
except OSError as e:
    print("stopped at", written, "MiB", type(e).__name__)
os.remove("junk.bin")
"""
    _, log = run(gw, code)
    assert "stopped at" in log, log
    assert int(log.split("stopped at")[1].split()[0]) <= 256
    assert ok(gw, {"type": "read_file", "path": "keep.txt"})["content"] == "kept"
    intact(runtime)


def test_nothing_outside_the_workspace_can_be_written_or_read(gw: Gateway, runtime: Any) -> None:
    sandbox_dir = str(runtime.sandbox_dir)
    code = """
import os, sys
for path in ["/usr/pwned", "/etc/pwned", "/pwned", sys.argv[1] + "/pwned", "/run/mlsandbox/pwned"]:
    try: open(path, "w").write("x"); print("LEAK write", path)
    except OSError as e: print("refused", path, type(e).__name__)
for path in [sys.argv[1], "/root", "/etc/shadow", "/home"]:
    print("exists" if os.path.exists(path) else "absent", path)
try: os.setuid(0); print("LEAK setuid")
except OSError as e: print("refused setuid", type(e).__name__)
print("euid", os.geteuid())
print([l for l in open("/proc/self/status") if l.startswith("CapEff")][0].strip())
"""
    state, log = run(gw, code, sandbox_dir)
    assert state == "succeeded" and "LEAK" not in log, log
    assert f"absent {sandbox_dir}" in log and "euid 0" not in log
    assert "CapEff:\t0000000000000000" in log
    assert not os.path.exists(os.path.join(sandbox_dir, "pwned"))
    assert not os.path.exists("/usr/pwned") and not os.path.exists("/pwned")


def test_bad_input_is_a_clear_error_and_changes_nothing(gw: Gateway) -> None:
    for action, code in [
        ({"type": "write_file", "path": "../escape.py", "content": "x"}, "invalid_parameters"),
        ({"type": "write_file", "path": "big.txt", "content": "x" * ((1 << 20) + 1)}, "invalid_parameters"),
        ({"type": "read_file", "path": "missing.txt"}, "not_found"),
        ({"type": "run_python", "path": "missing.py"}, "not_found"),
        ({"type": "run_python"}, "invalid_parameters"),
    ]:
        obs = gw.step(action).observation
        assert not obs["ok"] and obs["error"]["code"] == code, (action, obs["error"])
    state, log = run(gw, "import time\nwhile True: time.sleep(1)", timeout_s=3)
    assert state == "failed" and "timed out" in log, log


def test_the_episode_then_trains_registers_and_succeeds(gw: Gateway) -> None:
    import json

    name = gw.scenario.goal.model_name
    datasets = [d["name"] for d in ok(gw, {"type": "list_datasets"})["datasets"]]
    dataset = sorted(datasets, key=lambda n: (not n.endswith(".parquet"), not n.startswith("raw/"), n))[0]
    script = training_script(dataset, ok(gw, {"type": "check_data_quality", "dataset": dataset})["profile"])
    assert script is not None
    ok(gw, {"type": "write_file", "path": "train.py", "content": script})
    job = ok(gw, {"type": "run_python", "path": "train.py", "resources": {"cpus": 1, "memory_mb": 2048}})
    deadline = time.monotonic() + 600
    while (st := ok(gw, {"type": "get_job", "job_id": job["job_id"]}))["state"] not in (
        "succeeded",
        "failed",
    ):
        assert time.monotonic() < deadline
        ok(gw, {"type": "wait", "seconds": 10})
    lines = ok(gw, {"type": "get_logs", "target": job["job_id"], "tail": 50})["lines"]
    assert st["state"] == "succeeded", lines
    run_id = json.loads([line for line in lines if line.startswith("{")][-1])["run_id"]
    ok(gw, {"type": "register_model", "run_id": run_id, "name": name})
    res = gw.step({"type": "submit"})
    grade = res.info["grade"]
    assert grade["success"], grade
