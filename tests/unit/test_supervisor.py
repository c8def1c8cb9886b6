"""The process supervisor on real processes: own groups, sure stops, pid-reuse safety, tree RSS."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from mlsandbox.backends.local import supervisor
from mlsandbox.backends.local.supervisor import ProcessRecord


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def spawned(tmp_path: Path) -> Iterator[list[ProcessRecord]]:
    """Records of what a test spawned; stopped afterwards whatever happened."""
    records: list[ProcessRecord] = []
    yield records
    supervisor.stop(records, timeout=1.0)


def spawn(tmp_path: Path, argv: list[str], records: list[ProcessRecord], **env: str) -> ProcessRecord:
    record = supervisor.spawn(argv, env={**os.environ, **env}, log_path=tmp_path / "child.log", cwd=tmp_path)
    records.append(record)
    return record


def test_spawn_starts_a_group_leader_logging_to_its_file(
    tmp_path: Path, spawned: list[ProcessRecord]
) -> None:
    record = spawn(tmp_path, python("import time; print('hello', flush=True); time.sleep(60)"), spawned)
    assert record.pid == record.pgid == os.getpgid(record.pid)
    assert os.getsid(record.pid) == record.pid  # a session of its own: no terminal signals reach it
    assert supervisor.is_alive(record)
    assert abs(record.create_time - psutil.Process(record.pid).create_time()) < 0.1
    wait_for(lambda: "hello" in (tmp_path / "child.log").read_text())


def test_stop_terminates_the_whole_group(tmp_path: Path, spawned: list[ProcessRecord]) -> None:
    code = """
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(child.pid, flush=True)
        time.sleep(60)
    """
    record = spawn(tmp_path, python(code), spawned)
    wait_for(lambda: (tmp_path / "child.log").read_text().strip() != "")
    grandchild = int((tmp_path / "child.log").read_text().split()[0])
    assert os.getpgid(grandchild) == record.pgid

    stopped = supervisor.stop([record], timeout=5.0)

    assert {record.pid, grandchild} <= set(stopped)
    assert not supervisor.is_alive(record)
    assert gone(grandchild)


def test_stop_kills_what_ignores_sigterm(tmp_path: Path, spawned: list[ProcessRecord]) -> None:
    code = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(60)
    """
    record = spawn(tmp_path, python(code), spawned)
    wait_for(lambda: "ready" in (tmp_path / "child.log").read_text())
    started = time.monotonic()
    supervisor.stop([record], timeout=0.5)
    assert not supervisor.is_alive(record)
    assert time.monotonic() - started < 5.0
    assert supervisor.exit_code(record) == -9


def test_a_recycled_pid_is_never_signalled(tmp_path: Path, spawned: list[ProcessRecord]) -> None:
    victim = spawn(tmp_path, ["sleep", "60"], spawned)
    # The same pid with another start time: what a record looks like once its pid was reused.
    stale = victim.model_copy(update={"start_ticks": victim.start_ticks - 1})
    assert not supervisor.is_alive(stale)
    assert supervisor.get_process(stale) is None
    assert supervisor.stop([stale], timeout=0.5) == []
    assert supervisor.is_alive(victim)


def test_exited_child_is_reaped_and_reports_its_code(tmp_path: Path, spawned: list[ProcessRecord]) -> None:
    record = spawn(tmp_path, python("import sys; sys.exit(3)"), spawned)
    wait_for(lambda: not supervisor.is_alive(record))
    assert supervisor.exit_code(record) == 3
    assert gone(record.pid)  # reaped: no zombie left


def test_tree_rss_sums_the_process_tree(tmp_path: Path, spawned: list[ProcessRecord]) -> None:
    hog = "b = bytearray(80 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('ready', flush=True); import time; time.sleep(60)"
    code = f"""
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", {hog!r}])
        exec({hog!r})
    """
    record = spawn(tmp_path, python(code), spawned)
    wait_for(lambda: (tmp_path / "child.log").read_text().count("ready") == 2, timeout=20)
    parent_rss = psutil.Process(record.pid).memory_info().rss
    total = supervisor.tree_rss(record)
    assert total >= 160 * 2**20
    assert total > parent_rss + 70 * 2**20
    assert len(supervisor.process_tree(record)) == 2


def test_find_marked_matches_sandbox_and_home_only(tmp_path: Path, spawned: list[ProcessRecord]) -> None:
    name = f"u{uuid.uuid4().hex[:8]}"
    home = str(tmp_path)
    mine = spawn(tmp_path, ["sleep", "60"], spawned, **supervisor.marker_env(name, home))
    other_name = spawn(tmp_path, ["sleep", "60"], spawned, **supervisor.marker_env(name + "x", home))
    other_home = spawn(tmp_path, ["sleep", "60"], spawned, **supervisor.marker_env(name, home + "/elsewhere"))
    # Popen returns once the child's exec has closed its close-on-exec pipe, which the kernel does before
    # it lays out the new environment: until then /proc/PID/environ reads empty (seen on a loaded machine).
    wait_for(lambda: all(psutil.Process(r.pid).environ() for r in (mine, other_name, other_home)))

    found = {p.pid for p in supervisor.find_marked(name, home)}

    assert found == {mine.pid}
    assert {p.pid for p in supervisor.find_marked(None, home)} == {mine.pid, other_name.pid}
    assert other_home.pid not in found


def test_stop_reaches_marked_processes_that_left_the_group(
    tmp_path: Path, spawned: list[ProcessRecord]
) -> None:
    name = f"u{uuid.uuid4().hex[:8]}"
    home = str(tmp_path)
    code = """
        import subprocess, time
        child = subprocess.Popen(["sleep", "60"], start_new_session=True)
        print(child.pid, flush=True)
        time.sleep(60)
    """
    record = spawn(tmp_path, python(code), spawned, **supervisor.marker_env(name, home))
    wait_for(lambda: (tmp_path / "child.log").read_text().strip() != "")
    escaped = int((tmp_path / "child.log").read_text().split()[0])
    assert os.getpgid(escaped) != record.pgid

    supervisor.stop([record], extra=supervisor.find_marked(name, home), timeout=2.0)

    assert gone(escaped)
    assert supervisor.find_marked(name, home) == []


def test_the_caller_is_never_a_target(tmp_path: Path) -> None:
    name = f"u{uuid.uuid4().hex[:8]}"
    home = str(tmp_path)
    env = {**os.environ, **supervisor.marker_env(name, home)}
    code = """
        from mlsandbox.backends.local import supervisor
        import sys
        found = supervisor.find_marked(sys.argv[1], sys.argv[2])
        print(len(found))
    """
    out = subprocess.run([*python(code), name, home], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


def test_tail_returns_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert supervisor.tail(log, 3).splitlines() == ["line 97", "line 98", "line 99"]
    assert supervisor.tail(tmp_path / "missing.log") == ""
