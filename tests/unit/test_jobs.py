"""LocalJobs on real child processes (the ``burn`` workload): states, accounting, limits, cleanup.

No services needed: the endpoints point at closed ports, which ``burn`` never contacts.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from tests.helpers import ENDPOINTS

from mlsandbox.backends.local.jobs import (
    AS_ALLOWANCE_MB,
    LIMITS_ENV,
    LocalJobs,
    cgroups_available,
    choose_limits,
    exit_code_of,
    parse_result,
    sandbox_cgroup_dirs,
    tail_lines,
    thread_env,
)
from mlsandbox.backends.protocols import JobSpec, JobStatus

needs_cgroups = pytest.mark.skipif(not cgroups_available(), reason="needs root and cgroup v1")


@pytest.fixture()
def jobs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalJobs]:
    name = re.sub(r"[^a-z0-9-]", "-", f"t-{request.node.name.lower()}")[:40].strip("-")
    runner = LocalJobs(tmp_path, name, ENDPOINTS)
    yield runner
    runner.close()


def burn(job_id: str, *args: str, **fields: object) -> JobSpec:
    return JobSpec(job_id=job_id, workload="burn", args=list(args), **fields)  # type: ignore[arg-type]


def wait_done(jobs: LocalJobs, job_id: str, timeout_s: float = 60.0) -> JobStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = jobs.get(job_id)
        if status.state not in ("queued", "running"):
            return status
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still {jobs.get(job_id).state} after {timeout_s} s")


def wait_log(jobs: LocalJobs, job_id: str, needle: str, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = jobs.logs(job_id, tail=0)
        if needle in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} not in the log of {job_id}: {jobs.logs(job_id)!r}")


@needs_cgroups
def test_the_cgroup_counts_the_cpu_of_processes_the_first_one_never_reaps(tmp_path: Path) -> None:
    """A sandbox's init reaps the script (bubblewrap's pattern): the wait status of the job's first
    process does not carry its CPU; the job's cgroup does."""
    import subprocess

    from mlsandbox.backends.local.jobs import CGROUP_SHIM, Cgroup

    group = Cgroup("t-cpuacct", f"detached-{os.getpid()}", home=str(tmp_path))
    group.create(memory_mb=200, cpus=1.0)
    try:
        # The first process starts a burner in a new session and exits at once, never waiting for it.
        burner = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass"
        code = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {burner!r}])"
        argv = ["/bin/sh", "-c", CGROUP_SHIM, "t", *group.shim_args(), "python3", "-c", code]
        first = subprocess.Popen(argv)
        _, _, usage = os.wait4(first.pid, 0)
        first.returncode = 0
        assert usage.ru_utime + usage.ru_stime < 0.9
        deadline = time.monotonic() + 30
        while group.pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        counted = group.cpu_seconds()
        assert counted is not None and counted >= 0.9, counted
    finally:
        group.remove()
    assert not any(d.exists() for d in group.dirs)


# -------------------------------------------------------------------------------------------- helpers


def test_exit_code_of_maps_signals_to_128_plus_n() -> None:
    assert exit_code_of(0) == 0
    assert exit_code_of(3 << 8) == 3
    assert exit_code_of(9) == 137  # killed by SIGKILL
    assert exit_code_of(15) == 143


def test_parse_result_takes_the_last_result_line() -> None:
    text = 'x\nMLSANDBOX_RESULT {"a": 1}\nnoise\nMLSANDBOX_RESULT {"a": 2}\n[mlsandbox] note\n'
    assert parse_result(text) == {"a": 2}
    assert parse_result("MLSANDBOX_RESULT {not json") == {}
    assert parse_result("MLSANDBOX_RESULT [1]") == {}
    assert parse_result("") == {}


def test_tail_lines(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("".join(f"line {i}\n" for i in range(5000)))
    assert tail_lines(path, 2) == "line 4998\nline 4999\n"
    assert tail_lines(path, 0).count("\n") == 5000
    assert tail_lines(tmp_path / "missing", 10) == ""


def test_thread_env_follows_cpus() -> None:
    assert thread_env(0.5)["OMP_NUM_THREADS"] == "1"
    assert thread_env(2.7)["OPENBLAS_NUM_THREADS"] == "2"


# ----------------------------------------------------------------------------------------------- jobs


def test_success_reports_result_cpu_and_rss(jobs: LocalJobs) -> None:
    submitted = jobs.submit(burn("ok", "--cpu-seconds", "0.3", "--mem-mb", "20"))
    assert submitted.state == "running"
    status = wait_done(jobs, "ok")
    assert status.state == "succeeded"
    assert status.exit_code == 0
    assert status.result == {"mem_mb": 20, "cpu_seconds": 0.3}
    assert status.cpu_seconds >= 0.3
    assert status.peak_rss_bytes is not None and status.peak_rss_bytes > 20 << 20
    assert status.started_at is not None and status.finished_at is not None
    assert status.finished_at >= status.started_at
    assert "burned" in jobs.logs("ok")


def test_failure_keeps_exit_code_and_stderr(jobs: LocalJobs) -> None:
    jobs.submit(burn("bad", "--exit-code", "3"))
    status = wait_done(jobs, "bad")
    assert (status.state, status.exit_code, status.result) == ("failed", 3, {})
    assert "exiting with status 3" in jobs.logs("bad")


def test_environment_carries_endpoints_marker_and_threads(jobs: LocalJobs) -> None:
    jobs.submit(burn("env", "--sleep", "30", cpus=2, env={"EXTRA": "1"}))
    wait_log(jobs, "env", "sleeping")
    pid = _job_pid(jobs, "env")
    environ = psutil.Process(pid).environ()
    assert environ["MLSANDBOX_SANDBOX"] == jobs.sandbox_name
    assert environ["MLSANDBOX_HOME"] == jobs.home
    assert environ["MLFLOW_TRACKING_URI"] == ENDPOINTS.mlflow_url
    assert environ["MLSANDBOX_S3_URL"] == ENDPOINTS.s3_url
    assert environ["AWS_ACCESS_KEY_ID"] == ENDPOINTS.s3_access_key
    assert environ["OMP_NUM_THREADS"] == "2"
    assert environ["EXTRA"] == "1"
    assert os.getpgid(pid) == pid  # its own process group
    assert jobs.get("env").cpu_seconds > 0  # running: sampled from the process tree
    jobs.cancel("env")


def test_cancel_kills_the_whole_group(jobs: LocalJobs) -> None:
    jobs.submit(burn("tree", "--children", "2", "--sleep", "60"))
    text = wait_log(jobs, "tree", "sleeping")
    children = [int(p) for p in re.search(r"started 2 children: \[(.*)\]", text).group(1).split(", ")]  # type: ignore[union-attr]
    status = jobs.cancel("tree")
    assert status.state == "cancelled"
    assert status.exit_code == 143  # SIGTERM
    for pid in children:
        assert not _alive(pid), f"child {pid} survived the cancel"
    assert jobs.cancel("tree").state == "cancelled"  # idempotent


def test_timeout_kills_and_fails(jobs: LocalJobs) -> None:
    jobs.submit(burn("slow", "--sleep", "60", timeout_s=1.0))
    status = wait_done(jobs, "slow", timeout_s=30)
    assert (status.state, status.exit_code) == ("failed", 137)
    assert "timed out after 1 s" in jobs.logs("slow")


def test_ids_are_validated_and_unique(jobs: LocalJobs) -> None:
    with pytest.raises(ValueError, match="invalid job id"):
        jobs.submit(burn("../escape"))
    jobs.submit(burn("once"))
    with pytest.raises(ValueError, match="already exists"):
        jobs.submit(burn("once"))
    with pytest.raises(KeyError):
        jobs.get("nope")
    with pytest.raises(KeyError):
        jobs.logs("nope")
    with pytest.raises(KeyError):
        jobs.cancel("nope")


def test_invalid_resources_are_rejected(jobs: LocalJobs) -> None:
    for fields in ({"cpus": 0}, {"memory_mb": 0}, {"timeout_s": 0}):
        with pytest.raises(ValueError, match="positive"):
            jobs.submit(burn("bad-spec", **fields))
    assert jobs.list() == []


def test_concurrent_submit_and_poll(jobs: LocalJobs) -> None:
    stop = threading.Event()
    failures: list[BaseException] = []

    def poll() -> None:
        try:
            while not stop.is_set():
                for status in jobs.list():
                    jobs.get(status.job_id)
                    jobs.logs(status.job_id, tail=5)
        except BaseException as exc:
            failures.append(exc)

    pollers = [threading.Thread(target=poll) for _ in range(3)]
    submitters = [threading.Thread(target=jobs.submit, args=(burn(f"c{i}"),)) for i in range(4)]
    for t in pollers + submitters:
        t.start()
    for t in submitters:
        t.join()
    try:
        states = [wait_done(jobs, f"c{i}").state for i in range(4)]
    finally:
        stop.set()
        for t in pollers:
            t.join()
    assert failures == []
    assert states == ["succeeded"] * 4


def test_list_and_cleanup_by_label(jobs: LocalJobs, tmp_path: Path) -> None:
    jobs.submit(burn("a1", "--sleep", "60", labels={"episode": "a"}))
    jobs.submit(burn("a2", labels={"episode": "a"}))
    jobs.submit(burn("b1", labels={"episode": "b"}))
    assert [s.job_id for s in jobs.list()] == ["a1", "a2", "b1"]
    assert [s.job_id for s in jobs.list(label=("episode", "a"))] == ["a1", "a2"]
    wait_log(jobs, "a1", "sleeping")
    pid = _job_pid(jobs, "a1")

    jobs.cleanup(("episode", "a"))
    assert [s.job_id for s in jobs.list()] == ["b1"]
    assert not _alive(pid)
    assert not (tmp_path / "jobs" / "a1.log").exists()
    with pytest.raises(KeyError):
        jobs.get("a1")
    jobs.submit(burn("a1"))  # the id is free again
    assert wait_done(jobs, "a1").state == "succeeded"


def test_runtimes_of_one_sandbox_share_their_jobs(jobs: LocalJobs, tmp_path: Path) -> None:
    other = LocalJobs(tmp_path, jobs.sandbox_name, ENDPOINTS)
    jobs.submit(burn("shared"))
    assert [s.job_id for s in other.list()] == ["shared"]
    with pytest.raises(ValueError, match="already exists"):
        other.submit(burn("shared"))
    assert wait_done(other, "shared").state == "succeeded"


def test_without_cgroups_limits_only_threads(tmp_path: Path) -> None:
    runner = LocalJobs(tmp_path, "t-no-cgroups", ENDPOINTS, use_cgroups=False)
    try:
        runner.submit(burn("plain", "--mem-mb", "60", memory_mb=50, cpus=1))
        status = wait_done(runner, "plain")
        assert status.state == "succeeded"  # memory_mb is not enforced without cgroups
    finally:
        runner.close()


# -------------------------------------------------------------------------------------------- cgroups


@needs_cgroups
def test_oom_is_killed_by_the_kernel_with_137(jobs: LocalJobs) -> None:
    jobs.submit(burn("hog", "--mem-mb", "200", memory_mb=50))
    status = wait_done(jobs, "hog")
    assert (status.state, status.exit_code) == ("failed", 137)
    assert "out of memory" in jobs.logs("hog")
    cgroup = jobs._jobs["hog"].cgroup
    assert cgroup is not None
    assert not cgroup.memory.exists() and not cgroup.cpu.exists()


@needs_cgroups
def test_job_runs_inside_its_cgroups_which_are_removed_after(jobs: LocalJobs) -> None:
    jobs.submit(burn("boxed", "--sleep", "60", memory_mb=300, cpus=0.5))
    wait_log(jobs, "boxed", "sleeping")
    cgroup = jobs._jobs["boxed"].cgroup
    assert cgroup is not None and [cgroup.memory, cgroup.cpu] == jobs.cgroup_dirs("boxed")
    assert _job_pid(jobs, "boxed") in cgroup.pids()
    assert (cgroup.memory / "memory.limit_in_bytes").read_text().strip() == str(300 << 20)
    assert (cgroup.cpu / "cpu.cfs_quota_us").read_text().strip() == "50000"
    jobs.cancel("boxed")
    assert not cgroup.memory.exists() and not cgroup.cpu.exists()
    jobs.close()
    assert not any(d.exists() for d in sandbox_cgroup_dirs(jobs.sandbox_name))


# -------------------------------------------------------------------------------------------- helpers


def _job_pid(jobs: LocalJobs, job_id: str) -> int:
    job = jobs._jobs[job_id]
    assert job.popen is not None
    return job.popen.pid


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# -------------------------------------------------------------------------------------------- rlimits


@pytest.fixture()
def rjobs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalJobs]:
    """Jobs limited by rlimits, forced even as root (what a machine without cgroups gets)."""
    name = re.sub(r"[^a-z0-9-]", "-", f"r-{request.node.name.lower()}")[:40].strip("-")
    runner = LocalJobs(tmp_path, name, ENDPOINTS, limits="rlimit")
    yield runner
    runner.close()


def _limit(pid: int, row: str) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith(row):
            return line[len(row) :].split()[0]
    raise AssertionError(row)


def test_limit_mode_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LIMITS_ENV, "rlimit")
    assert choose_limits() == "rlimit"
    monkeypatch.setenv(LIMITS_ENV, "auto")
    assert choose_limits() == ("cgroup" if cgroups_available() else "rlimit")
    monkeypatch.setenv(LIMITS_ENV, "quota")
    with pytest.raises(ValueError, match="MLSANDBOX_JOB_LIMITS='quota': use auto, cgroup, rlimit, none"):
        choose_limits()


def test_rlimit_job_over_its_memory_fails_with_memoryerror(rjobs: LocalJobs) -> None:
    assert not rjobs.use_cgroups and rjobs.limits == "rlimit"
    rjobs.submit(burn("small", "--mem-mb", "40", memory_mb=200))
    rjobs.submit(burn("hog", "--mem-mb", "300", memory_mb=100))
    assert wait_done(rjobs, "small").state == "succeeded"
    status = wait_done(rjobs, "hog")
    assert (status.state, status.exit_code) == ("failed", 1)
    assert "MemoryError" in rjobs.logs("hog")


def test_rlimit_job_carries_its_limits_and_its_memory_can_be_cut(rjobs: LocalJobs) -> None:
    rjobs.submit(burn("boxed", "--sleep", "30", memory_mb=300, cpus=0.5, timeout_s=40))
    wait_log(rjobs, "boxed", "sleeping")
    pid = _job_pid(rjobs, "boxed")
    assert _limit(pid, "Max data size") == str(300 << 20)
    assert _limit(pid, "Max address space") == str((300 + AS_ALLOWANCE_MB) << 20)
    assert _limit(pid, "Max cpu time") == "20"  # 40 s x 0.5 CPU
    rjobs.set_resources("boxed", memory_mb=64)
    assert _limit(pid, "Max data size") == str(64 << 20)
    with pytest.raises(ValueError, match="CPU quota cannot be changed here"):
        rjobs.set_resources("boxed", cpus=0.1)
    rjobs.cancel("boxed")


def test_rlimit_cpu_time_kills_the_job_with_sigxcpu(rjobs: LocalJobs) -> None:
    # 150 s x 0.01 CPU = 1.5 -> 2 CPU-seconds; the wall-clock limit is far enough that a loaded machine
    # (the spin gets a small share of a core) cannot end the job by timeout (SIGTERM, 143) first.
    rjobs.submit(burn("spin", "--cpu-seconds", "30", cpus=0.01, timeout_s=150))
    status = wait_done(rjobs, "spin", timeout_s=180)
    assert (status.state, status.exit_code) == ("failed", 152)  # 128 + SIGXCPU
    assert "CPU time limit exceeded" in rjobs.logs("spin")
    assert 1.5 <= status.cpu_seconds < 4
