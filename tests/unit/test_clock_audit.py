"""The wall clock's tickers and the file audit log (backends/common)."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest

from mlsandbox.backends.common.audit import FileAuditLog
from mlsandbox.backends.common.clock import RealClock
from mlsandbox.backends.protocols import AuditLog, Clock


def test_real_clock_reads_the_system_time() -> None:
    clock: Clock = RealClock()
    assert not clock.virtual
    assert abs(clock.time() - time.time()) < 1.0
    t0 = clock.monotonic()
    clock.sleep(0.05)
    assert clock.monotonic() - t0 >= 0.05
    clock.sleep(-1)  # no error: nothing to wait for


def test_every_repeats_until_cancelled_and_cancel_waits_for_a_run() -> None:
    clock = RealClock()
    calls: list[float] = []
    running = threading.Event()
    release = threading.Event()

    def tick() -> None:
        calls.append(time.monotonic())
        if len(calls) == 3:
            running.set()
            release.wait(5)  # a slow run: cancel waits for it

    ticker = clock.every(0.02, tick, name="test")
    assert running.wait(5), "the ticker did not run three times"
    threading.Timer(0.1, release.set).start()
    t0 = time.monotonic()
    ticker.cancel()
    assert time.monotonic() - t0 >= 0.05, "cancel returned while a run was in progress"
    n = len(calls)
    time.sleep(0.1)
    assert len(calls) == n, "the ticker ran after cancel"
    ticker.cancel()  # idempotent


def test_a_ticker_survives_its_exceptions_and_logs_them(caplog: pytest.LogCaptureFixture) -> None:
    clock = RealClock()
    calls = []
    done = threading.Event()

    def tick() -> None:
        calls.append(1)
        if len(calls) >= 3:
            done.set()
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="mlsandbox.backends.common.clock"):
        ticker = clock.every(0.01, tick, name="failing")
        assert done.wait(5)
        ticker.cancel()
    assert any("failing" in r.getMessage() and r.exc_info for r in caplog.records)


def test_after_runs_once_unless_cancelled_first() -> None:
    clock = RealClock()
    fired: list[str] = []
    done = threading.Event()
    clock.after(0.01, lambda: (fired.append("a"), done.set()), name="once")
    late = clock.after(10, lambda: fired.append("b"), name="late")
    assert done.wait(5)
    t0 = time.monotonic()
    late.cancel()  # wakes the waiting thread at once
    assert time.monotonic() - t0 < 1.0
    time.sleep(0.05)
    assert fired == ["a"]


def test_a_ticker_may_cancel_itself() -> None:
    clock = RealClock()
    calls = []
    holder: dict[str, object] = {}
    done = threading.Event()

    def tick() -> None:
        calls.append(1)
        holder["t"].cancel()  # type: ignore[attr-defined]
        done.set()

    holder["t"] = clock.every(0.01, tick, name="self")
    assert done.wait(5)
    time.sleep(0.05)
    assert calls == [1]


def test_bad_intervals_are_refused() -> None:
    clock = RealClock()
    with pytest.raises(ValueError, match="positive"):
        clock.every(0, lambda: None, name="x")
    with pytest.raises(ValueError, match="negative"):
        clock.after(-1, lambda: None, name="x")


def test_file_audit_log_appends_json_lines_per_episode(tmp_path: Path) -> None:
    audit: AuditLog = FileAuditLog(tmp_path / "episodes")
    assert audit.read("7-abc") == []
    audit.append("7-abc", {"event": "start", "b": 2, "path": tmp_path})
    audit.append("7-abc", {"event": "step"})
    audit.append("8-def", {"event": "start"})
    records = audit.read("7-abc")
    assert [r["event"] for r in records] == ["start", "step"]
    assert records[0]["path"] == str(tmp_path)  # not JSON: written as its text
    location = audit.location("7-abc")
    assert location == str(tmp_path / "episodes" / "7-abc.jsonl")
    assert Path(location).read_text().splitlines()[1] == '{"event": "step"}'
    with pytest.raises(ValueError, match="episode id"):
        audit.append("../escape", {})


def test_file_audit_log_lists_episodes_latest_last_and_skips_a_line_being_written(tmp_path: Path) -> None:
    audit = FileAuditLog(tmp_path)
    assert audit.episodes() == []
    for ep, mtime in (("b-2", 200), ("a-1", 100), ("c-3", 300)):
        audit.append(ep, {"event": "start"})
        os.utime(tmp_path / f"{ep}.jsonl", (mtime, mtime))
    (tmp_path / "notes.txt").write_text("not a log")
    assert audit.episodes() == ["a-1", "b-2", "c-3"]
    with (tmp_path / "c-3.jsonl").open("a") as f:
        f.write('{"event": "st')  # another process is writing this record
    assert audit.read("c-3") == [{"event": "start"}]


def test_file_audit_log_keeps_lines_whole_under_threads(tmp_path: Path) -> None:
    audit = FileAuditLog(tmp_path)
    payload = "x" * 5000

    def writer(i: int) -> None:
        for j in range(50):
            audit.append("ep", {"i": i, "j": j, "p": payload})

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = audit.read("ep")
    assert len(records) == 200
    assert {(r["i"], r["j"]) for r in records} == {(i, j) for i in range(4) for j in range(50)}
