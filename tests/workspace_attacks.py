"""What the workspace attack batteries of every backend share (local: tests/integration/
test_workspace_attacks.py; kube on the real node: tests/node/test_node_workspace.py): running a script and
reading its end, the hostile scripts themselves, and the episode's success with a training script after
them."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from tests.helpers import ok

from mlsandbox.agents.code_agent import training_script

TERMINAL = ("succeeded", "failed", "cancelled")

OTHER_BUCKET = "ws-attack-other"
READ_OTHER_BUCKET = f"""
import boto3, os
s3 = boto3.client("s3")
try: print("buckets", [b["Name"] for b in s3.list_buckets()["Buckets"]])
except Exception as e: print("buckets refused", type(e).__name__)
for name, call in [("get", lambda: s3.get_object(Bucket="{OTHER_BUCKET}", Key="secret.txt")),
                   ("put", lambda: s3.put_object(Bucket="{OTHER_BUCKET}", Key="x", Body=b"x")),
                   ("list", lambda: s3.list_objects_v2(Bucket="{OTHER_BUCKET}")),
                   ("artifacts", lambda: s3.list_objects_v2(Bucket="mlflow-artifacts")),
                   ("create", lambda: s3.create_bucket(Bucket="ws-attack-new"))]:
    try: call(); print("LEAK", name)
    except Exception as e: print("refused", name, type(e).__name__)
s3.put_object(Bucket=os.environ["MLSANDBOX_BUCKET"], Key="scratch/ok.txt", Body=b"mine")
print("own bucket ok")
"""
"""Another bucket read, written and listed, the tracker's artifacts listed, a bucket made: each refused;
the episode's own bucket written. (Listing the buckets may be refused too.)"""

CONNECT = """
import socket, sys
for host, port in [a.rsplit(":", 1) for a in sys.argv[1:]]:
    try: socket.create_connection((host, int(port)), timeout=3); print("LEAK", host, port)
    except OSError as e: print("refused", host, port, type(e).__name__)
"""
"""A connection to each ``host:port`` argument: each must be refused."""

FORK_BOMB = """
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

FILL_DISK = """
import os
written = 0
try:
    with open("junk.bin", "wb") as f:
        while True:
            f.write(b"x" * (1 << 20)); f.flush(); written += 1
except OSError as e:
    print("stopped at", written, "MiB", type(e).__name__, flush=True)
os.remove("junk.bin")
"""


@contextlib.contextmanager
def listener(host: str) -> Iterator[tuple[int, list[Any]]]:
    """A TCP listener of this test process on ``host`` (outside every sandbox): its port, and the
    connections it accepted (there must be none)."""
    server = socket.socket()
    server.bind((host, 0))
    server.listen(8)
    server.settimeout(0.5)
    accepted: list[Any] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                accepted.append(server.accept())

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        server.close()


def run(
    gw: Any, code: str, *args: str, timeout_s: float = 60, grace_s: float = 60, **kw: Any
) -> tuple[str, str]:
    """Run ``code`` in the workspace (``kw``: more of the ``run_python`` action); its final state and log."""
    action = {"type": "run_python", "code": code, "args": list(args), "timeout_s": timeout_s, **kw}
    job = ok(gw, action)["job_id"]
    deadline = time.monotonic() + timeout_s + grace_s
    while (state := ok(gw, {"type": "get_job", "job_id": job})["state"]) not in TERMINAL:
        assert time.monotonic() < deadline, f"{job} still {state}"
        ok(gw, {"type": "wait", "seconds": 2})
    return state, "\n".join(ok(gw, {"type": "get_logs", "target": job, "tail": 200})["lines"])


def stopped_at(log: str, marker: str) -> int:
    """The number after ``marker`` in a hostile script's log."""
    assert marker in log, log
    return int(log.split(marker)[1].split()[0])


def train_register_and_submit(gw: Any, deadline_s: float = 900) -> dict[str, Any]:
    """The episode's goal met with a script: the code agent's training script on the best raw dataset,
    run in the workspace, its run registered under the goal's name, then ``submit``; the grade."""
    name = gw.scenario.goal.model_name
    datasets = [d["name"] for d in ok(gw, {"type": "list_datasets"})["datasets"]]
    dataset = sorted(datasets, key=lambda n: (not n.endswith(".parquet"), not n.startswith("raw/"), n))[0]
    script = training_script(dataset, ok(gw, {"type": "check_data_quality", "dataset": dataset})["profile"])
    assert script is not None
    ok(gw, {"type": "write_file", "path": "train.py", "content": script})
    job = ok(gw, {"type": "run_python", "path": "train.py", "resources": {"cpus": 1, "memory_mb": 2048}})
    deadline = time.monotonic() + deadline_s
    while (st := ok(gw, {"type": "get_job", "job_id": job["job_id"]}))["state"] not in TERMINAL:
        assert time.monotonic() < deadline
        ok(gw, {"type": "wait", "seconds": 10})
    lines = ok(gw, {"type": "get_logs", "target": job["job_id"], "tail": 50})["lines"]
    assert st["state"] == "succeeded", lines
    run_id = json.loads([line for line in lines if line.startswith("{")][-1])["run_id"]
    ok(gw, {"type": "register_model", "run_id": run_id, "name": name})
    return dict(gw.step({"type": "submit"}).info["grade"])


__all__ = [
    "CONNECT",
    "FILL_DISK",
    "FORK_BOMB",
    "OTHER_BUCKET",
    "READ_OTHER_BUCKET",
    "listener",
    "run",
    "stopped_at",
    "train_register_and_submit",
]
