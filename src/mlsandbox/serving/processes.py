"""Serving processes of one episode on the local backend: model server replicas and the feature service.

Each process is started supervised (:func:`mlsandbox.backends.local.supervisor.spawn`: its own session and
process group, log under ``<sandbox>/serving/<episode>/``) with the sandbox's environment marker and the
job-owner marker (``MLSANDBOX_JOB_OWNER``) of this process: ``down`` stops it with the sandbox, and
``mlsandbox gc`` stops it once the process that started it is gone (a crashed episode). It binds a free
port itself and reports it in a port file when it is ready; each has its own fault-hook control file.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from mlsandbox.backends.base import Endpoints
from mlsandbox.backends.local import supervisor
from mlsandbox.backends.local.jobs import OWNER_ENV, endpoint_env, thread_env
from mlsandbox.workloads.fault_hook import ENV_VAR as FAULT_ENV

EPISODE_ENV = "MLSANDBOX_EPISODE"
SERVING_ENV = "MLSANDBOX_SERVING"
"""What the process is (``model_server:<deployment>`` or ``feature_service``), for people reading ps."""


class ServingError(Exception):
    """A serving operation that cannot be done; ``code`` is an action error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class ServingProcess:
    """One started server."""

    name: str
    record: supervisor.ProcessRecord
    log: Path
    port_file: Path
    fault_file: Path
    port: int | None = None
    started: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return supervisor.is_alive(self.record)

    def process(self) -> psutil.Process | None:
        return supervisor.get_process(self.record)


def _owner_marker() -> str:
    return f"{os.getpid()}-{supervisor.start_ticks(os.getpid())}"


class ProcessHost:
    """Starts, waits for and stops the serving processes of one episode."""

    def __init__(self, sandbox_dir: Path, sandbox_name: str, endpoints: Endpoints, episode_id: str) -> None:
        from mlsandbox.backends.local.backend import home_key

        self.root = Path(sandbox_dir) / "serving" / episode_id
        self.sandbox_name = sandbox_name
        self.home = home_key()
        self.endpoints = endpoints
        self.episode_id = episode_id
        self.procs: dict[str, ServingProcess] = {}

    def start(self, name: str, module: str, args: list[str], *, cpus: float, what: str) -> ServingProcess:
        uid = f"{name}-{secrets.token_hex(3)}"
        port_file = self.root / f"{uid}.port"
        fault_file = self.root / "faults" / f"{uid}.json"
        log = self.root / f"{uid}.log"
        port_file.unlink(missing_ok=True)
        env = {
            **os.environ,
            **endpoint_env(self.endpoints),
            **thread_env(cpus),
            "PYTHONUNBUFFERED": "1",
            OWNER_ENV: _owner_marker(),
            EPISODE_ENV: self.episode_id,
            SERVING_ENV: what,
            FAULT_ENV: str(fault_file),
            **supervisor.marker_env(self.sandbox_name, self.home),
        }
        argv = [sys.executable, "-m", module, *args, "--port", "0", "--port-file", str(port_file)]
        record = supervisor.spawn(argv, env=env, log_path=log, cwd=self.root)
        proc = ServingProcess(uid, record, log, port_file, fault_file, started=time.time())
        self.procs[uid] = proc
        return proc

    def wait_ready(self, procs: list[ServingProcess], timeout_s: float = 90.0) -> None:
        """Wait until every process wrote its port and answers ``/health``; :class:`ServingError` (with the
        log tail) when one exits or the time runs out."""
        deadline = time.monotonic() + timeout_s
        pending = list(procs)
        with httpx.Client(timeout=2.0) as client:
            while pending:
                for p in list(pending):
                    if p.port is None and p.port_file.exists():
                        with contextlib.suppress(ValueError, KeyError, OSError):
                            p.port = int(json.loads(p.port_file.read_text())["port"])
                    if p.port is not None:
                        try:
                            if client.get(p.url + "/health").status_code == 200:
                                pending.remove(p)
                                continue
                        except httpx.HTTPError:
                            pass
                    if not p.alive():
                        code = supervisor.exit_code(p.record)
                        raise ServingError(
                            "backend_error",
                            f"{p.name} exited during start (status {code}); log tail:\n"
                            + supervisor.tail(p.log, 8),
                        )
                if pending and time.monotonic() > deadline:
                    raise ServingError(
                        "backend_error", f"{pending[0].name} not ready after {timeout_s:.0f} s"
                    )
                time.sleep(0.1)

    def stop(self, procs: list[ServingProcess], timeout: float = 5.0) -> None:
        supervisor.stop([p.record for p in procs], timeout=timeout)
        for p in procs:
            self.procs.pop(p.name, None)
            p.fault_file.unlink(missing_ok=True)
            p.port_file.unlink(missing_ok=True)

    def stop_all(self) -> None:
        self.stop(list(self.procs.values()))

    def alive_count(self) -> int:
        return sum(1 for p in self.procs.values() if p.alive())
