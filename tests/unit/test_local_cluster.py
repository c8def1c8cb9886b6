"""``mlsandbox cluster``'s parts that need no cluster: the record and what the kube backend reads of it,
the engine choice and its reasons, the keeper that owns a detached cluster (and the node lock it holds),
``mlsandbox gc`` of a cluster whose owner died, the commands without a cluster."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlsandbox.backends.kube import cluster_state as cs
from mlsandbox.backends.kube.backend import KubeBackend
from mlsandbox.backends.protocols import Endpoints
from mlsandbox.k8s_operator import local_cluster as lc

ENDPOINTS = Endpoints(
    s3_url="http://10.1.2.3:30900",
    s3_access_key="ak",
    s3_secret_key="sk",
    mlflow_url="http://10.1.2.3:30500",
    prefect_api_url="http://10.1.2.3:30420/api",
)


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLSANDBOX_HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv(cs.CLUSTER_ENV, raising=False)
    for var in ("MLSANDBOX_KUBE_S3_URL", "MLSANDBOX_TRAINER_IMAGE", "MLSANDBOX_CONTROL_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _record(home: Path, *, owner: cs.Owner | None = None, name: str = cs.DEFAULT_CLUSTER) -> cs.ClusterState:
    kubeconfig = home / f"{name}.kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n")
    state = cs.ClusterState(
        name=name,
        engine="node",
        reason="test",
        phase="running",
        owner=owner or cs.Owner.of(os.getpid()),
        client=cs.ClientSettings(
            kubeconfig=str(kubeconfig),
            control_namespace="mlsandbox",
            endpoints=ENDPOINTS,
            image="mlsandbox/trainer:9",
            server_image="mlsandbox/model-server:9",
            server_cpu_request=0.25,
            sandbox="default",
        ),
    )
    cs.write(state)
    return state


def _dead_owner() -> cs.Owner:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    owner = cs.Owner.of(child.pid)
    child.wait()
    return owner


# ------------------------------------------------------------------------------------- the record


def test_the_record_round_trips_and_is_private(home: Path) -> None:
    state = _record(home)
    path = cs.state_path(state.name)
    assert path == home / "clusters" / "mlsandbox.json"
    assert oct(path.stat().st_mode & 0o777) == "0o600"  # it holds the S3 keys
    assert cs.read(state.name) == state
    assert cs.read("other") is None


def test_the_backend_finds_the_recorded_cluster_with_no_flag(home: Path) -> None:
    state = _record(home)
    assert state.client is not None
    backend = KubeBackend("default")
    assert backend._kubeconfig == state.client.kubeconfig
    assert backend.control_namespace == "mlsandbox"
    assert backend.image == "mlsandbox/trainer:9" and backend.server_image == "mlsandbox/model-server:9"
    assert backend._urls()["minio"] == "http://10.1.2.3:30900"
    assert backend.server_cpu_request == 0.25
    assert KubeBackend("default", server_cpu_request=1.0).server_cpu_request == 1.0
    # Exporting the recorded kubeconfig is the same cluster.
    os.environ["KUBECONFIG"] = state.client.kubeconfig
    try:
        assert KubeBackend("default")._urls()["mlflow"] == "http://10.1.2.3:30500"
    finally:
        del os.environ["KUBECONFIG"]


def test_another_kubeconfig_or_a_dead_owner_ignores_the_record(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record(home)
    elsewhere = home / "other.kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(elsewhere))
    backend = KubeBackend("default")
    assert backend.recorded is None and backend._urls()["minio"] == "http://127.0.0.1:9000"
    monkeypatch.delenv("KUBECONFIG")
    assert KubeBackend("default", kubeconfig=str(elsewhere)).recorded is None
    _record(home, owner=_dead_owner())
    assert cs.recorded_client() is None and KubeBackend("default").recorded is None


def test_the_environment_still_overrides_a_recorded_endpoint(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record(home)
    monkeypatch.setenv("MLSANDBOX_KUBE_S3_URL", "http://elsewhere:9000")
    urls = KubeBackend("default")._urls()
    assert urls["minio"] == "http://elsewhere:9000" and urls["mlflow"] == "http://10.1.2.3:30500"


def test_the_cluster_read_is_named_by_the_environment(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _record(home, name="second")
    assert cs.recorded_client() is None
    monkeypatch.setenv(cs.CLUSTER_ENV, "second")
    settings = cs.recorded_client()
    assert settings is not None and settings.sandbox == "default"


# ------------------------------------------------------------------------------------ the engine


@pytest.mark.parametrize(
    ("docker", "kind", "root", "engine", "words"),
    [
        (
            (True, "docker answers and runs privileged containers"),
            "/bin/kind",
            False,
            "kind",
            "kind is installed",
        ),
        (
            (False, "docker refuses privileged containers (no)"),
            "/bin/kind",
            True,
            "node",
            "refuses privileged",
        ),
        ((True, "docker answers"), None, True, "node", "kind is not installed"),
        ((False, "docker's daemon does not answer (x)"), None, False, None, "needs root"),
    ],
)
def test_the_engine_and_why(
    monkeypatch: pytest.MonkeyPatch,
    docker: tuple[bool, str],
    kind: str | None,
    root: bool,
    engine: str | None,
    words: str,
) -> None:
    monkeypatch.setattr(lc, "docker_privileged", lambda: docker)
    monkeypatch.setattr(lc, "kind_binary", lambda: kind)
    monkeypatch.setattr(lc.os, "geteuid", lambda: 0 if root else 1000)
    choice = lc.choose_engine()
    assert choice.engine == engine and words in choice.reason, choice


def test_kind_forced_where_it_cannot_run_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        lc, "docker_privileged", lambda: (False, "docker refuses privileged containers (denied)")
    )
    monkeypatch.setattr(lc, "kind_binary", lambda: "/bin/kind")
    choice = lc.choose_engine("kind")
    assert choice.engine is None and "refuses privileged" in choice.reason


def _fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_exit: int) -> None:
    script = tmp_path / "bin" / "docker"
    script.parent.mkdir()
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  info) echo '[\"name=seccomp,profile=builtin\"]';;\n"
        "  images) echo 'debian:bookworm-slim';;\n"
        f'  run) echo "$@" > {tmp_path}/run-args; '
        f"echo 'docker: Error response from daemon: privileged mode refused.' >&2; exit {run_exit};;\n"
        "esac\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}:{os.environ['PATH']}")


def test_the_privileged_probe_runs_a_local_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_docker(tmp_path, monkeypatch, run_exit=125)
    ok, why = lc.docker_privileged()
    assert not ok and "privileged mode refused" in why


def test_the_privileged_probe_passes_when_docker_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_docker(tmp_path, monkeypatch, run_exit=0)
    assert lc.docker_privileged() == (True, "docker answers and runs privileged containers")
    # As root, as kind's node runs: an image of a non-root user applies no capabilities and would pass.
    assert (tmp_path / "run-args").read_text().split() == [
        "run", "--rm", "--privileged", "--user", "0", "--entrypoint", "true", "debian:bookworm-slim",
    ]  # fmt: skip


# ------------------------------------------------------------------------------------- the owner


def _locked(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_the_keeper_owns_a_detached_cluster_and_holds_the_lock_until_down(home: Path) -> None:
    dirs = [home / "cp", home / "node"]
    for d in dirs:
        d.mkdir()
    state = _record(home)
    state.control_plane, state.node = str(dirs[0]), str(dirs[1])
    lock = home / "lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    owner = cs.hand_over(state, fd)
    os.close(fd)  # the process that made it is gone
    try:
        assert owner.alive() and owner.pid != os.getpid()
        assert _locked(lock), "the keeper does not hold the node lock"
        for d in dirs:
            assert str(owner.pid) in (d / "owner").read_text()
        recorded = cs.read(state.name)
        assert recorded is not None and recorded.detached and recorded.owner == owner
        for d in dirs:
            (d / "owner").unlink()
            d.rmdir()
        cs.remove(recorded)
        deadline = time.monotonic() + 10
        while owner.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not owner.alive() and not _locked(lock)
        assert cs.read(state.name) is None
    finally:
        if owner.alive():
            os.kill(owner.pid, 9)


def test_gc_removes_a_cluster_whose_owner_died(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cs.os, "geteuid", lambda: 0)
    _record(home, owner=_dead_owner(), name="gone")
    _record(home, name="alive")
    lines = cs.collect_garbage()
    assert any(line.startswith("cluster gone: owner") for line in lines), lines
    assert cs.read("gone") is None and cs.read("alive") is not None


def test_a_test_sessions_cluster_is_not_taken_down_by_another_process(home: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a real-node cluster is taken down by root only")
    _record(home, owner=cs.Owner.of(os.getppid()), name="session")
    with pytest.raises(lc.ClusterError, match="belongs to the running process"):
        lc.down("session")


# ----------------------------------------------------------------------------------- the commands


def test_status_and_down_without_a_cluster_say_so(home: Path) -> None:
    from mlsandbox.cli.main import app

    runner = CliRunner()
    for command in (["cluster", "status"], ["cluster", "down"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 1
        assert "no cluster 'mlsandbox' is recorded" in result.output


def test_usage_names_the_commands_a_user_runs(home: Path) -> None:
    lines = lc.usage(_record(home))
    text = "\n".join(lines)
    assert "mlsandbox run --backend kube --scenario tabular-quality-basic --agent rule" in text
    assert "export KUBECONFIG=" in text and "kubectl -n mlsandbox get sandboxes,pods" in text
    assert "http://10.1.2.3:30900" in text and "mlsandbox cluster down" in text


def test_progress_times_each_step() -> None:
    said: list[str] = []
    progress = lc.Progress(said.append)
    with progress.step("one"):
        pass
    assert list(progress.timings) == ["one"] and said[0] == "one ..." and said[1].startswith("one: ")
