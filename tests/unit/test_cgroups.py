"""Job cgroups of a gone owner are found wherever they are nested, what is left in them is killed and
they are removed; a live owner's and another home's are left alone (real cgroup v1, as root)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from mlsandbox.backends.local import cgroups
from mlsandbox.backends.local.jobs import CGROUP_SHIM, cgroups_available

pytestmark = pytest.mark.skipif(not cgroups_available(), reason="needs root and cgroup v1")
HOME = "/nowhere/home"
GONE = f"{2**22 - 7}-12345-{cgroups.home_tag(HOME)}"  # a pid above any pid_max here: never alive


@pytest.fixture
def sandbox() -> Iterator[str]:
    name = f"cgt-{uuid.uuid4().hex[:8]}"
    yield name
    for d in cgroups.sandbox_dirs(name):  # whatever a failing test left
        for sub in sorted(d.rglob("*"), key=lambda p: len(p.parts), reverse=True) if d.exists() else []:
            if sub.is_dir():
                cgroups.remove_dir(sub)
        cgroups.remove_dir(d)


def _make(sandbox: str, owner: str, leaf: str) -> list[Path]:
    dirs = [d / owner / leaf for d in cgroups.sandbox_dirs(sandbox)]
    for d in dirs:
        d.mkdir(parents=True)
    return dirs


def _join(dirs: list[Path]) -> subprocess.Popen[bytes]:
    files = [str(d / "cgroup.procs") for d in dirs]
    proc = subprocess.Popen(["/bin/sh", "-c", CGROUP_SHIM, "sh", str(len(files)), *files, "sleep", "300"])
    deadline = time.monotonic() + 10
    while not all(str(proc.pid) in (d / "cgroup.procs").read_text().split() for d in dirs):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return proc


def test_a_gone_owners_cgroups_are_emptied_and_removed(sandbox: str) -> None:
    dirs = _make(sandbox, GONE, "ep-job-1.abcd1234")
    proc = _join(dirs)
    roots = [d.parent.parent.parent for d in dirs]  # the "mlsandbox" directories (memory, cpu, cpuacct)

    found = cgroups.collect(HOME, roots=roots)

    assert [(r.sandbox, r.leaf, r.owner) for r in found] == [(sandbox, "ep-job-1.abcd1234", GONE)]
    assert found[0].removed and found[0].killed == 1 and found[0].controllers == sorted(cgroups.controllers())
    assert proc.wait(timeout=10) == -9
    assert not any(d.exists() or d.parent.exists() for d in dirs)
    assert not any(d.exists() for d in cgroups.sandbox_dirs(sandbox))


def test_a_live_owners_and_another_homes_cgroups_stay(sandbox: str) -> None:
    live = cgroups.owner_dir_name(HOME)  # this process
    other_home = f"{2**22 - 7}-12345-{cgroups.home_tag('/another/home')}"
    mine = _make(sandbox, live, "ep-job-2.00000000")
    theirs = _make(sandbox, other_home, "ep-job-3.00000000")
    try:
        assert cgroups.owner_alive(live) is True and cgroups.owner_alive(other_home) is False
        assert cgroups.collect(HOME, roots=[d.parent.parent.parent for d in mine]) == []
        assert all(d.exists() for d in mine + theirs)
        found = cgroups.collect("/another/home", roots=[d.parent.parent.parent for d in theirs])
        assert [r.leaf for r in found] == ["ep-job-3.00000000"] and not any(d.exists() for d in theirs)
        assert all(d.exists() for d in mine)
    finally:
        for d in mine:
            cgroups.remove_dir(d)
            cgroups.remove_dir(d.parent)


def test_find_roots_sees_cgroups_nested_in_another_processes_cgroup(sandbox: str) -> None:
    dirs = _make(sandbox, GONE, "ep-job-4.00000000")
    try:
        assert {d.parent.parent.parent for d in dirs} <= set(cgroups.find_roots())
    finally:
        cgroups.collect(HOME, roots=[d.parent.parent.parent for d in dirs])
    assert not any(d.exists() for d in dirs)


def test_owner_names() -> None:
    assert cgroups.owner_alive("ep-job-1.abcd") is None
    assert cgroups.owner_alive(f"{os.getpid()}-1-{cgroups.home_tag(HOME)}") is False  # wrong start time
    assert psutil.pid_exists(os.getpid())
