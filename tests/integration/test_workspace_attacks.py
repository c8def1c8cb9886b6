"""Hostile scripts in an episode's workspace on local: each fails to do harm, the sandbox stays intact,
and the same episode then trains, registers and succeeds. Network attempts target only a listener this
test starts on 127.0.0.1."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from tests.helpers import ok
from tests.workspace_attacks import (
    CONNECT,
    FILL_DISK,
    FORK_BOMB,
    OTHER_BUCKET,
    READ_OTHER_BUCKET,
    listener,
    run,
    stopped_at,
    train_register_and_submit,
)

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
    s3.create_bucket(Bucket=OTHER_BUCKET)
    s3.put_object(Bucket=OTHER_BUCKET, Key="secret.txt", Body=b"not yours")
    state, log = run(gw, READ_OTHER_BUCKET)
    assert state == "succeeded" and "LEAK" not in log and "own bucket ok" in log, log
    assert OTHER_BUCKET not in log.split("buckets", 1)[1].splitlines()[0]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=OTHER_BUCKET)["Contents"]] == ["secret.txt"]
    s3.delete_object(Bucket=OTHER_BUCKET, Key="secret.txt")
    s3.delete_bucket(Bucket=OTHER_BUCKET)


def test_a_listener_outside_the_sandbox_is_unreachable(gw: Gateway, runtime: Any) -> None:
    from urllib.parse import urlsplit

    # Prefect's port is the sandbox's, and not forwarded either
    prefect_port = str(urlsplit(runtime._endpoints.prefect_api_url).port)
    with listener("127.0.0.1") as (port, accepted):
        state, log = run(gw, CONNECT, f"127.0.0.1:{port}", f"127.0.0.1:{prefect_port}")
    assert state == "succeeded" and "LEAK" not in log, log
    assert accepted == []


def test_a_fork_bomb_is_stopped_and_the_sandbox_lives(gw: Gateway, runtime: Any) -> None:
    _, log = run(gw, FORK_BOMB, timeout_s=20)
    stopped_at(log, "stopped after")
    intact(runtime)
    assert run(gw, "print('alive')")[1].strip().endswith("alive")


def test_filling_the_disk_stops_at_the_quota_and_nothing_is_lost(gw: Gateway, runtime: Any) -> None:
    ok(gw, {"type": "write_file", "path": "keep.txt", "content": "kept"})
    _, log = run(gw, FILL_DISK)
    assert stopped_at(log, "stopped at") <= 256
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
    grade = train_register_and_submit(gw, deadline_s=600)
    assert grade["success"], grade
