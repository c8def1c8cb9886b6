"""Lifecycle of the local backend on real services: up, status, side by side, repair, down, crashes, gc."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import psutil
import pytest

from mlsandbox.backends.local import LocalBackend, collect_garbage, list_sandboxes, supervisor
from mlsandbox.backends.local.gc import garbage_reason
from mlsandbox.backends.local.sandbox import SandboxState
from mlsandbox.backends.local.services import ARTIFACT_BUCKET, SERVICE_NAMES, TOXIPROXY, Credentials, Ports
from mlsandbox.backends.local.supervisor import ProcessRecord
from mlsandbox.backends.protocols import Backend, Endpoints
from mlsandbox.errors import MissingToolError, NotRunningError, ServiceStartError

UP_TIMEOUT_S = 300.0


def unique_name(prefix: str = "lc") -> str:
    return f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:6]}"


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def s3_client(ep: Endpoints):  # type: ignore[no-untyped-def]
    return boto3.client(
        "s3",
        endpoint_url=ep.s3_url,
        aws_access_key_id=ep.s3_access_key,
        aws_secret_access_key=ep.s3_secret_key,
        region_name="us-east-1",
    )


def runner(script: str, name: str) -> subprocess.Popen[str]:
    """A separate Python process running ``script`` with the sandbox name as argv[1]."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), name],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def leftovers(backend: LocalBackend) -> list[psutil.Process]:
    return supervisor.find_marked(backend.name, backend.home)


@pytest.fixture
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("MLSANDBOX_HOME", str(home))
    return home


# ------------------------------------------------------------------------------ the session sandbox


@pytest.mark.services
def test_up_runs_four_healthy_services_and_the_fault_proxy(sandbox: LocalBackend) -> None:
    assert isinstance(sandbox, Backend)
    statuses = {s.name: s for s in sandbox.status()}
    assert list(statuses) == [*SERVICE_NAMES, TOXIPROXY]
    for status in statuses.values():
        assert status.state == "running", status
        assert status.pid and psutil.pid_exists(status.pid)
        assert status.rss_bytes and status.rss_bytes > 10 * 2**20
        assert status.uptime_s is not None and status.uptime_s > 0
    ports = [statuses[n].port for n in ("minio", "mlflow", "prefect-server", TOXIPROXY)]
    assert all(ports) and len(set(ports)) == 4
    assert statuses["prefect-server"].url == sandbox.endpoints().prefect_api_url
    assert sandbox.is_alive()
    assert (sandbox.dir / "state.json").is_file()
    assert all((sandbox.dir / "logs" / f"{n}.log").is_file() for n in SERVICE_NAMES)


@pytest.mark.services
def test_state_records_identity_credentials_and_owner(sandbox: LocalBackend) -> None:
    state = sandbox.state()
    assert state is not None and state.phase == "running" and state.ephemeral
    assert state.owner is not None and state.owner.pid == os.getpid()
    for record in state.services.values():
        proc = psutil.Process(record.process.pid)
        assert abs(proc.create_time() - record.process.create_time) < 0.1
        assert os.getpgid(record.process.pid) == record.process.pgid == record.process.pid
        assert proc.environ()[supervisor.MARKER_ENV] == sandbox.name
    assert state.credentials.access_key == sandbox.endpoints().s3_access_key


@pytest.mark.services
def test_up_again_attaches_without_restarting(sandbox: LocalBackend) -> None:
    before = {s.name: s.pid for s in sandbox.status()}
    started = time.monotonic()
    sandbox.up(ephemeral=True)
    assert time.monotonic() - started < 15
    assert {s.name: s.pid for s in sandbox.status()} == before


@pytest.mark.services
def test_mlflow_is_one_process_the_server_itself(sandbox: LocalBackend) -> None:
    (status,) = [s for s in sandbox.status() if s.name == "mlflow"]
    server = psutil.Process(status.pid)
    assert server.children(recursive=True) == []  # no CLI parent waiting on a uvicorn child
    assert "uvicorn" in server.cmdline() and "mlflow.server.fastapi_app:app" in server.cmdline()
    listening = {c.laddr.port for c in server.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
    assert status.port in listening


@pytest.mark.services
def test_mlflow_artifacts_are_proxied_into_minio(sandbox: LocalBackend) -> None:
    from mlflow import MlflowClient

    ep = sandbox.endpoints()
    client = MlflowClient(tracking_uri=ep.mlflow_url)
    experiment_id = client.create_experiment(unique_name("exp"))
    run = client.create_run(experiment_id)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hello.txt"
        path.write_text("hi")
        client.log_artifact(run.info.run_id, str(path))  # no S3 credentials on this side: proxied
    keys = [o["Key"] for o in s3_client(ep).list_objects_v2(Bucket=ARTIFACT_BUCKET).get("Contents", [])]
    assert any(k.endswith(f"{run.info.run_id}/artifacts/hello.txt") for k in keys)


@pytest.mark.services
def test_gc_leaves_a_live_sandbox_alone(sandbox: LocalBackend) -> None:
    lines = collect_garbage()
    assert not any(sandbox.name in line for line in lines)
    assert sandbox.is_alive()
    assert sandbox.name in {info.name for info in list_sandboxes()}


# ------------------------------------------------------------------------------ more sandboxes


@pytest.fixture
def other_sandbox() -> Iterator[LocalBackend]:
    backend = LocalBackend(unique_name("side"))
    try:
        yield backend
    finally:
        backend.down()


@pytest.mark.services
@pytest.mark.slow
def test_second_sandbox_side_by_side_repair_and_down(
    sandbox: LocalBackend, other_sandbox: LocalBackend
) -> None:
    other = other_sandbox
    other.up(timeout=UP_TIMEOUT_S)
    first, second = sandbox.state(), other.state()
    assert first is not None and second is not None
    assert not set(first.ports.model_dump().values()) & set(second.ports.model_dump().values())
    assert first.credentials != second.credentials
    assert sandbox.is_alive() and other.is_alive()

    # A service dies: the sandbox is unhealthy; up() repairs it on its existing data.
    s3_client(other.endpoints()).create_bucket(Bucket="keep")
    s3_client(other.endpoints()).put_object(Bucket="keep", Key="k", Body=b"v")
    minio = second.services["minio"].process
    os.killpg(minio.pgid, signal.SIGKILL)
    wait_for(lambda: not supervisor.is_alive(minio), 10, "minio to die")
    assert not other.is_alive()
    assert {s.name: s.state for s in other.status()}["minio"] == "stopped"
    other.up(timeout=UP_TIMEOUT_S)
    assert other.is_alive()
    assert s3_client(other.endpoints()).get_object(Bucket="keep", Key="k")["Body"].read() == b"v"

    # A job that left the process groups still carries the marker: down() stops it too.
    stray = subprocess.Popen(
        ["sleep", "300"],
        env={**os.environ, **supervisor.marker_env(other.name, other.home)},
        start_new_session=True,
    )
    other.down()
    assert stray.wait(timeout=10) is not None
    assert leftovers(other) == []
    assert not other.dir.exists()
    assert sandbox.is_alive()
    other.down()  # idempotent


@pytest.mark.services
@pytest.mark.slow
def test_sandbox_of_a_killed_owner_is_garbage_collected() -> None:
    name = unique_name("crash")
    backend = LocalBackend(name)
    proc = runner(
        """
        import sys, time
        from mlsandbox.backends.local import LocalBackend
        LocalBackend(sys.argv[1]).up(ephemeral=True, timeout=300)
        print("up", flush=True)
        time.sleep(600)
        """,
        name,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until up() returned (or the runner died)
        assert line.strip() == "up", line + proc.stdout.read()
        assert backend.is_alive()
        proc.kill()
        proc.wait(timeout=10)
        assert leftovers(backend), "the services outlive their owner until collected"

        lines = collect_garbage()

        assert any(name in line and "owner" in line for line in lines), lines
        assert leftovers(backend) == []
        assert not backend.dir.exists()
    finally:
        proc.kill()
        backend.down()


@pytest.mark.services
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_interrupted_up_leaves_no_process(sig: signal.Signals) -> None:
    name = unique_name("intr")
    backend = LocalBackend(name)
    proc = runner(
        """
        import signal, sys
        # As in a terminal, whatever this test runs under (a shell's background job ignores SIGINT).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from mlsandbox.backends.local import LocalBackend
        LocalBackend(sys.argv[1]).up(timeout=300)
        """,
        name,
    )

    def three_services_spawned() -> bool:
        try:
            state = backend.state()
        except Exception:
            return False
        return state is not None and len(state.services) >= 3

    try:
        wait_for(three_services_spawned, 120, "the services to be spawned")
        assert leftovers(backend)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        assert proc.returncode != 0
        assert leftovers(backend) == []
        assert not (backend.dir / "state.json").exists()
    finally:
        proc.kill()
        backend.down()


@pytest.mark.services
def test_a_failing_service_fails_up_with_its_log_and_stops_the_rest(isolated_home: Path) -> None:
    fake = isolated_home / "bin" / "minio"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'FATAL: the disk is on fire' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    backend = LocalBackend(unique_name("fail"))

    with pytest.raises(ServiceStartError) as info:
        backend.up(timeout=60)

    message = str(info.value)
    assert message.startswith("minio failed to start")
    assert "exited (code 3)" in message
    assert "FATAL: the disk is on fire" in message
    assert str(backend.dir / "logs" / "minio.log") in message
    assert leftovers(backend) == []
    assert not (backend.dir / "state.json").exists()
    backend.down()


# ------------------------------------------------------------------------------ no services needed


def test_missing_minio_binary_says_how_to_install_it(isolated_home: Path) -> None:
    backend = LocalBackend(unique_name("nominio"))
    with pytest.raises(MissingToolError) as info:
        backend.up()
    message = str(info.value)
    assert "make setup" in message and "scripts/setup.sh" in message
    assert str(isolated_home / "bin" / "minio") in message
    assert not (backend.dir / "state.json").exists()


def test_a_sandbox_that_is_not_up(isolated_home: Path) -> None:
    backend = LocalBackend(unique_name("down"))
    backend.down()
    backend.down()
    assert not backend.is_alive()
    assert [s.state for s in backend.status()] == ["stopped"] * len(SERVICE_NAMES)
    with pytest.raises(NotRunningError, match="is not up"):
        backend.runtime()
    with pytest.raises(NotRunningError):
        backend.endpoints()
    assert collect_garbage() == []


def _state(ephemeral: bool, owner: ProcessRecord | None, services: dict[str, ProcessRecord]) -> SandboxState:
    ports = Ports(minio=1, minio_console=2, mlflow=3, prefect=4)
    creds = Credentials.generate()
    from mlsandbox.backends.local.sandbox import ServiceRecord
    from mlsandbox.backends.local.services import endpoints

    return SandboxState(
        name="x",
        home="/nowhere",
        phase="running",
        ephemeral=ephemeral,
        owner=owner,
        created_at=time.time(),
        ports=ports,
        credentials=creds,
        endpoints=endpoints(ports, creds),
        worker_name="w",
        services={n: ServiceRecord(name=n, process=p, log="/dev/null") for n, p in services.items()},
    )


def test_garbage_rules() -> None:
    me = ProcessRecord.of(os.getpid())
    dead = me.model_copy(update={"start_ticks": me.start_ticks - 1})  # a pid reused by another process
    all_alive = dict.fromkeys(SERVICE_NAMES, me)
    one_dead = {**all_alive, "mlflow": dead}

    assert garbage_reason(_state(False, None, all_alive)) is None  # healthy persistent
    assert garbage_reason(_state(True, me, one_dead)) is None  # live ephemeral: its owner decides
    assert "owner" in (garbage_reason(_state(True, dead, all_alive)) or "")
    assert "mlflow" in (garbage_reason(_state(False, None, one_dead)) or "")
    assert garbage_reason(None) is not None
    assert garbage_reason(None, readable=False) is not None
    starting = _state(False, None, all_alive).model_copy(update={"phase": "starting"})
    assert garbage_reason(starting) is not None
