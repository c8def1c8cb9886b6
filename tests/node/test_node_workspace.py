"""The code workspace on ``--backend kube``, on the real node: hostile scripts in an episode's workspace run
in their locked-down pods and fail to do harm; the sandbox stays intact; a script's files come back to the
workspace; the same episode then trains, registers and succeeds with a script.

Network attempts target only addresses of this test's node (a listener this test starts, the node's own
address, the cluster's service addresses): nothing leaves the machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from tests.helpers import ok
from tests.workspace_attacks import (
    CONNECT,
    FILL_DISK,
    FORK_BOMB,
    OTHER_BUCKET,
    READ_OTHER_BUCKET,
    listener,
    stopped_at,
    train_register_and_submit,
)
from tests.workspace_attacks import run as run_in_workspace

from mlsandbox.backends.common.workspaces import uid_of
from mlsandbox.backends.kube import manifests as M
from mlsandbox.scenario import load_builtin

if TYPE_CHECKING:
    from tests.conftest import NodeSandbox

    from mlsandbox.gateway.dispatcher import Gateway

pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def gw(node_sandbox: NodeSandbox) -> Iterator[Gateway]:
    from mlsandbox.gateway.dispatcher import Gateway

    sc = load_builtin("tabular-quality-basic")
    sc = sc.model_copy(
        update={
            "max_steps": 1000,
            "budget": sc.budget.model_copy(update={"credits": 10_000.0, "max_job_seconds": 900.0}),
        }
    )
    g = Gateway(node_sandbox.backend().runtime(), sc, seed=11, sandbox=node_sandbox.name)
    g.start()
    yield g
    g.close()


def run(gw: Gateway, code: str, *args: str, **kw: Any) -> tuple[str, str]:
    """A script's run in the workspace, with room for a pod's start on a loaded node."""
    return run_in_workspace(gw, code, *args, grace_s=240, **kw)


def intact(gw: Gateway) -> None:
    """MinIO and MLflow answer the gateway."""
    rt = gw.runtime
    assert rt.object_store.bucket_exists(gw.state.bucket)
    rt.tracking.list_model_versions(gw.state.model_prefix)


def test_a_scripts_files_come_back_and_its_pod_is_locked_down(gw: Gateway, node_sandbox: NodeSandbox) -> None:
    ok(gw, {"type": "write_file", "path": "data/in.txt", "content": "seed"})
    ok(gw, {"type": "write_file", "path": "gone.txt", "content": "to be removed"})
    code = """
import os
print("read", open("data/in.txt").read())
os.makedirs("out", exist_ok=True)
open("out/result.txt", "w").write("made in the pod")
open("data/in.txt", "a").write("+changed")
os.remove("gone.txt")
os.symlink("/etc/passwd", "out/link")
print("uid", os.getuid(), "euid", os.geteuid())
print([l for l in open("/proc/self/status") if l.startswith("CapEff")][0].strip())
print("token", os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token"))
print("env", sorted(k for k in os.environ if "SECRET" in k or "KEY" in k or "TOKEN" in k))
print("values", " ".join(os.environ.values()))
"""
    state, log = run(gw, code)
    assert state == "succeeded", log
    assert "read seed" in log and f"uid {uid_of(gw.state.episode_id)}" in log, log
    assert "CapEff:\t0000000000000000" in log and "token False" in log, log
    assert node_sandbox.env["MLSANDBOX_KUBE_S3_SECRET_KEY"] not in log
    files = {e["path"]: e for e in ok(gw, {"type": "list_files"})["files"]}
    assert ok(gw, {"type": "read_file", "path": "out/result.txt"})["content"] == "made in the pod"
    assert ok(gw, {"type": "read_file", "path": "data/in.txt"})["content"] == "seed+changed"
    assert "gone.txt" not in files and "out/link" not in files, sorted(files)
    job = gw.state.jobs[next(reversed(gw.state.jobs))]
    pod = gw.runtime.jobs.pod(job.backend_id)  # type: ignore[attr-defined]
    assert pod is not None
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsUser"] == uid_of(gw.state.episode_id)
    assert all(c["securityContext"]["readOnlyRootFilesystem"] for c in spec["containers"])
    assert spec["containers"][0]["image"] == node_sandbox.env["MLSANDBOX_TRAINER_IMAGE"]


def test_the_services_and_other_processes_cannot_be_seen_or_killed(gw: Gateway) -> None:
    code = """
import os, signal
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("pids", len(pids))
for pid in pids:
    try: cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
    except OSError: continue
    if any(w in cmd for w in ("minio", "mlflow", "pytest", "prefect", "kubelet", "containerd")): print("LEAK", cmd)
for pid in (1, 2, 10, 100):
    if pid == os.getpid(): continue
    try: os.kill(pid, signal.SIGKILL); print("killed", pid)
    except OSError as e: print("refused kill", pid, type(e).__name__)
"""
    state, log = run(gw, code)
    assert state == "succeeded" and "LEAK" not in log, log
    assert int(log.split("pids", 1)[1].split()[0]) < 10, log
    intact(gw)


def test_another_bucket_cannot_be_read_or_written(gw: Gateway) -> None:
    store = gw.runtime.object_store
    store.create_bucket(OTHER_BUCKET)
    store.put_object(OTHER_BUCKET, "secret.txt", b"not yours")
    try:
        state, log = run(gw, READ_OTHER_BUCKET)
        assert state == "succeeded" and "LEAK" not in log and "own bucket ok" in log, log
        assert OTHER_BUCKET not in log.split("buckets", 1)[1].splitlines()[0]
        assert [o.key for o in store.list_objects(OTHER_BUCKET)] == ["secret.txt"]
        assert not store.bucket_exists("ws-attack-new")
    finally:
        store.delete_bucket(OTHER_BUCKET)


def test_nothing_but_minio_and_mlflow_is_reachable(gw: Gateway, node_sandbox: NodeSandbox) -> None:
    node_ip = node_sandbox.cluster.cp.node_ip
    reach = """
import os, socket
from urllib.parse import urlsplit
for url in (os.environ["AWS_ENDPOINT_URL_S3"], os.environ["MLFLOW_TRACKING_URI"]):
    u = urlsplit(url)
    socket.create_connection((u.hostname, u.port), timeout=10); print("reached", u.hostname)
"""
    with listener("0.0.0.0") as (port, accepted):
        targets = [f"{node_ip}:{port}", f"127.0.0.1:{port}", "10.96.0.1:443", f"{node_ip}:6443"]
        state, log = run(gw, CONNECT + reach, *targets)
    assert state == "succeeded" and "LEAK" not in log, log
    assert log.count("refused") == len(targets) and log.count("reached") == 2, log
    assert accepted == []


def test_a_fork_bomb_and_a_full_disk_stop_at_their_limits(gw: Gateway) -> None:
    _, log = run(gw, FORK_BOMB, timeout_s=20)
    assert stopped_at(log, "stopped after") < 300, log
    ok(gw, {"type": "write_file", "path": "keep.txt", "content": "kept"})
    _, log = run(gw, FILL_DISK, resources={"cpus": 1, "memory_mb": 1024})
    assert stopped_at(log, "stopped at") <= 256, log
    assert ok(gw, {"type": "read_file", "path": "keep.txt"})["content"] == "kept"
    intact(gw)
    assert run(gw, "print('alive')")[1].strip().splitlines()[-1].endswith("alive")


def test_nothing_outside_the_workspace_can_be_written_and_root_is_out_of_reach(gw: Gateway) -> None:
    code = """
import os
for path in ["/usr/pwned", "/etc/pwned", "/pwned", "/app/pwned", "/var/run/secrets/pwned"]:
    try: open(path, "w").write("x"); print("LEAK write", path)
    except OSError as e: print("refused", path, type(e).__name__)
try: os.setuid(0); print("LEAK setuid")
except OSError as e: print("refused setuid", type(e).__name__)
print("euid", os.geteuid())
"""
    state, log = run(gw, code)
    assert state == "succeeded" and "LEAK" not in log and "euid 0" not in log, log


def test_a_timeout_kills_the_script_and_the_episode_then_succeeds_with_a_script(
    gw: Gateway, node_sandbox: NodeSandbox
) -> None:
    state, log = run(gw, "import time\nwhile True: time.sleep(1)", timeout_s=5)
    assert state == "failed" and "timed out" in log, log
    grade = train_register_and_submit(gw)
    assert grade["success"], grade
    # every run's Secret of scoped credentials went with its Job; the Jobs go at the episode's end
    cluster = node_sandbox.backend().cluster
    selector = f"{M.WORKLOAD_LABEL}=script"
    secrets = cluster.list("v1", "Secret", node_sandbox.namespace, selector)
    assert all(s["metadata"].get("ownerReferences") for s in secrets), secrets


def test_the_code_writing_baseline_succeeds_on_real_pods(node_sandbox: NodeSandbox) -> None:
    """``--agent code`` through the episode runner on ``--backend kube``: its script, run in the
    workspace's pod, trains and registers a model that the grader finds on the hidden holdout."""
    from tests.node.test_node_episodes import run_in_process

    res = run_in_process(node_sandbox, "tabular-quality-basic", "code", lambda _: None)
    actions = [s.observation.get("action") for s in res.steps]
    print(f"code agent on real pods: {res.wall_s:.1f} s, {len(res.steps)} steps, grade {res.grade}")
    assert "run_python" in actions and "write_file" in actions, actions
    assert res.success, res.grade
