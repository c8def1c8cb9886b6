"""The workspace pack off services: its actions in the catalog, sim's refusal, paths that leave it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlsandbox.backends import get_backend
from mlsandbox.backends.local.workspaces import LocalWorkspaces, clean_path
from mlsandbox.backends.protocols import Endpoints, WorkspaceError
from mlsandbox.gateway import Gateway
from mlsandbox.gateway.registry import get_catalog
from mlsandbox.scenario import load_builtin

ACTIONS = ("write_file", "read_file", "list_files", "run_python")


def test_the_workspace_actions_are_in_the_catalog_with_their_capability() -> None:
    catalog = get_catalog()
    for t in ACTIONS:
        assert t in catalog.types
        assert catalog.capability(t) == "workspaces"
    described = {d["type"]: d for d in catalog.describe()}
    assert "isolated" in described["run_python"]["description"]


def test_sim_refuses_every_workspace_action_with_unsupported() -> None:
    backend = get_backend("sim")
    backend.up()
    gw = Gateway(backend.runtime(), load_builtin("tabular-quality-basic"), seed=1)
    gw.start()
    try:
        for action in (
            {"type": "write_file", "path": "a.py", "content": "print(1)"},
            {"type": "read_file", "path": "a.py"},
            {"type": "list_files"},
            {"type": "run_python", "code": "print(1)"},
        ):
            obs = gw.step(action).observation
            assert not obs["ok"] and obs["error"]["code"] == "unsupported", obs
            assert obs["error"]["details"]["capability"] == "workspaces"
        assert not gw.state.jobs
    finally:
        gw.close()


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../b", "a/\x00b"])
def test_a_path_that_leaves_the_workspace_is_refused(path: str) -> None:
    with pytest.raises(WorkspaceError):
        clean_path(path)


def test_files_never_follow_a_planted_link_out(tmp_path: Path) -> None:
    ws = LocalWorkspaces(
        tmp_path,
        Endpoints(s3_url="", s3_access_key="", s3_secret_key="", mlflow_url="", prefect_api_url=""),
        quota_bytes=1 << 20,
    )
    ws._root = False  # a plain directory, no tmpfs
    ws.open("e1", "ep-e1")
    secret = tmp_path / "secret.txt"
    secret.write_text("host file")
    files = tmp_path / "workspaces" / "e1" / "files"
    (files / "link").symlink_to(secret)
    (files / "dir").symlink_to(tmp_path)
    with pytest.raises(WorkspaceError):
        ws.read_file("e1", "link")
    with pytest.raises(WorkspaceError):
        ws.read_file("e1", "dir/secret.txt")
    with pytest.raises(WorkspaceError):
        ws.write_file("e1", "dir/new.txt", b"x")
    ws.write_file("e1", "link", b"replaced")  # the link itself is replaced, its target untouched
    assert secret.read_text() == "host file"
    with pytest.raises(WorkspaceError, match="limit"):
        ws.write_file("e1", "big.bin", b"x" * (2 << 20))
    assert ws.read_file("e1", "link") == (b"replaced", 8)
    ws.close("e1")
    assert not (tmp_path / "workspaces" / "e1").exists()


def _dead_owner() -> str:
    """The owner marker of a process that is gone (a child that has exited)."""
    import subprocess

    from mlsandbox.backends.local.supervisor import start_ticks

    child = subprocess.Popen(["true"])
    ticks = start_ticks(child.pid)
    child.wait()
    return f"{child.pid}-{ticks}"


def test_gc_unmounts_and_removes_the_workspaces_of_a_gone_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from mlsandbox.backends.local import gc
    from mlsandbox.backends.local.workspaces import OWNER_FILE, workspace_mounts

    monkeypatch.setenv("MLSANDBOX_HOME", str(tmp_path))
    sandbox = tmp_path / "sandboxes" / "box"
    ws = LocalWorkspaces(
        sandbox,
        Endpoints(s3_url="", s3_access_key="", s3_secret_key="", mlflow_url="", prefect_api_url=""),
        quota_bytes=1 << 20,
    )
    ws.open("live", "ep-live")
    ws.open("crashed", "ep-crashed")
    crashed = sandbox / "workspaces" / "crashed"
    (crashed / OWNER_FILE).write_text(_dead_owner())
    mounted = crashed / "files" in workspace_mounts(tmp_path)
    assert mounted == (os.geteuid() == 0 and ws._spaces["crashed"].mounted)
    ws._spaces.pop("crashed")  # the gateway that opened it "crashed": nobody closes it
    items = gc._collect_workspaces()
    assert [i.what for i in items] == ["workspace crashed"], items
    assert items[0].ok and items[0].sandbox == "box"
    assert ("unmounted" in items[0].detail) == mounted
    assert not crashed.exists()
    assert crashed / "files" not in workspace_mounts(tmp_path)
    assert (sandbox / "workspaces" / "live" / "files").is_dir()  # its owner (this process) lives
    assert gc._collect_workspaces() == []
    ws.close_all()
    assert not (sandbox / "workspaces" / "live").exists()


def test_gc_leaves_a_workspace_without_owner_file_while_its_sandbox_lives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlsandbox.backends.local import gc
    from mlsandbox.backends.local.services import Layout
    from mlsandbox.backends.local.workspaces import OWNER_FILE

    monkeypatch.setenv("MLSANDBOX_HOME", str(tmp_path))
    sandbox = tmp_path / "sandboxes" / "box"
    old = sandbox / "workspaces" / "old"  # as an older version made it: no owner file
    (old / "files").mkdir(parents=True)
    assert not (old / OWNER_FILE).exists()
    Layout(sandbox).state_file.write_text("{}")
    assert gc._collect_workspaces() == [] and old.exists()
    Layout(sandbox).state_file.unlink()  # the sandbox is gone: its leftovers go
    assert [i.what for i in gc._collect_workspaces()] == ["workspace old"] and not old.exists()
