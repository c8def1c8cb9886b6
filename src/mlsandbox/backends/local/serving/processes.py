"""Serving processes of one episode on the local backend: model server replicas and the feature service.

Each process is started supervised (:func:`mlsandbox.backends.local.supervisor.spawn`: its own session and
process group, log under ``<sandbox>/serving/<episode>/``) with the sandbox's environment marker and the
job-owner marker (``MLSANDBOX_JOB_OWNER``) of this process: ``down`` stops it with the sandbox, and
``mlsandbox gc`` stops it once the process that started it is gone (a crashed episode). It binds a free
port itself and reports it in a port file when it is ready. Its fault-hook control file is its own, or
its service's (``fault_name``: every replica of a deployment reads the deployment's file, which outlives
them, so an ``http:NAME`` fault holds across a scale or a rollout).

Limits. A process started with ``memory_mb`` runs under its machine's limits, the way a pool job does
(:mod:`mlsandbox.backends.local.jobs`, same ``MLSANDBOX_JOB_LIMITS`` choice): as root on cgroup v1 in its
own memory and cpu cgroups (``memory.limit_in_bytes`` without swap, ``cpu.cfs_quota_us`` from ``cpus``,
under the sandbox's job cgroups, so ``mlsandbox gc`` removes them once their processes are gone); the
kernel OOM-kills a replica that goes over, and :meth:`ServingProcess.termination` says so. Otherwise
rlimits (``RLIMIT_DATA`` = memory, ``RLIMIT_AS`` = memory + 768 MiB) set by a ``sh`` shim before it
``exec``s the server: an allocation past them fails with ``MemoryError``. The cgroups are removed when the
process is stopped (undeploy, scale down, rollout, episode end).

Environments. With ``python`` (a named environment's interpreter) the server runs under that interpreter,
importing the workload package from a small shim directory (``<root>/pkg``: an empty ``mlsandbox``
package whose ``workloads`` links to this one), so the model is loaded by the environment's libraries.
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

from mlsandbox import httpclients
from mlsandbox.backends.local import supervisor
from mlsandbox.backends.local.jobs import (
    AS_ALLOWANCE_MB,
    CGROUP_SHIM,
    OWNER_ENV,
    Cgroup,
    choose_limits,
)
from mlsandbox.backends.local.sandbox import home_key
from mlsandbox.backends.protocols import Endpoints
from mlsandbox.backends.protocols.serving import ServingError
from mlsandbox.workloads.contract import endpoint_env, thread_env
from mlsandbox.workloads.fault_hook import ENV_VAR as FAULT_ENV

EPISODE_ENV = "MLSANDBOX_EPISODE"
SERVING_ENV = "MLSANDBOX_SERVING"
"""What the process is (``model_server:<deployment>`` or ``feature_service``), for people reading ps."""


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
    cgroup: Cgroup | None = None
    memory_mb: int | None = None
    version: str | None = None
    """The model version a model-server replica serves (None for the feature service)."""
    shared_fault_file: bool = False
    """The fault-hook control file is its service's (every replica of a deployment reads it): it
    outlives this process."""

    def termination(self) -> dict[str, object] | None:
        """How an exited process ended: exit code (128 + N for signal N) and, when the kernel killed it
        for memory, ``reason: OOMKilled``; None while it runs."""
        if self.alive():
            return None
        code = supervisor.exit_code(self.record)
        out: dict[str, object] = {}
        if code is not None:
            out["exit_code"] = 128 - code if code < 0 else code
        if self.cgroup is not None and self.cgroup.oom_kills():
            out["reason"] = "OOMKilled"
            out["message"] = f"killed by the kernel: out of memory (memory limit {self.memory_mb} MiB)"
        elif code is not None:
            out["reason"] = "Killed" if out["exit_code"] == 137 else "Error"
        return out

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return supervisor.is_alive(self.record)

    def process(self) -> psutil.Process | None:
        return supervisor.get_process(self.record)


def owner_marker() -> str:
    return f"{os.getpid()}-{supervisor.start_ticks(os.getpid())}"


# Sets RLIMIT_DATA ($1 KiB) and RLIMIT_AS ($2 KiB), then becomes the server (exit 125: could not set them).
_RLIMIT_SHIM = 'ulimit -d "$1" && ulimit -v "$2" || exit 125; shift 2; exec "$@"'


class ProcessHost:
    """Starts, waits for and stops the serving processes of one episode."""

    def __init__(self, sandbox_dir: Path, sandbox_name: str, endpoints: Endpoints, episode_id: str) -> None:
        self.root = Path(sandbox_dir) / "serving" / episode_id
        self.sandbox_name = sandbox_name
        self.home = home_key()
        self.endpoints = endpoints
        self.episode_id = episode_id
        self.procs: dict[str, ServingProcess] = {}
        self._limits: str | None = None

    @property
    def limits(self) -> str:
        """``cgroup``, ``rlimit`` or ``none`` (``MLSANDBOX_JOB_LIMITS``, as for jobs)."""
        if self._limits is None:
            try:
                self._limits = choose_limits()
            except ValueError as e:
                raise ServingError("backend_error", str(e)) from None
        return self._limits

    def _package_shim(self) -> Path:
        """A directory whose ``mlsandbox.workloads`` is this package's (for another interpreter)."""
        import mlsandbox.workloads

        shim = self.root / "pkg"
        pkg = shim / "mlsandbox"
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "__init__.py").touch()
        link = pkg / "workloads"
        if not link.exists():
            with contextlib.suppress(FileExistsError):
                link.symlink_to(Path(mlsandbox.workloads.__file__).resolve().parent)
        return shim

    def start(
        self,
        name: str,
        module: str,
        args: list[str],
        *,
        cpus: float,
        what: str,
        memory_mb: int | None = None,
        python: str | None = None,
        fault_name: str | None = None,
        port: int = 0,
    ) -> ServingProcess:
        """Start a server; with ``memory_mb``, under kernel limits (see the module docstring); with
        ``python``, under that interpreter; with ``fault_name``, reading the fault-hook control file of
        that service (:meth:`fault_file`) rather than one of its own; ``port``: its port (0: any free one)."""
        uid = f"{name}-{secrets.token_hex(3)}"
        port_file = self.root / f"{uid}.port"
        fault_file = self.fault_file(fault_name or uid)
        log = self.root / f"{uid}.log"
        port_file.unlink(missing_ok=True)
        base = dict(os.environ)
        if python is not None:
            for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
                base.pop(var, None)
            base["PYTHONPATH"] = str(self._package_shim())
        env = {
            **base,
            **endpoint_env(**self.endpoints.model_dump()),
            **thread_env(cpus),
            "PYTHONUNBUFFERED": "1",
            OWNER_ENV: owner_marker(),
            EPISODE_ENV: self.episode_id,
            SERVING_ENV: what,
            FAULT_ENV: str(fault_file),
            **supervisor.marker_env(self.sandbox_name, self.home),
        }
        argv = [
            python or sys.executable,
            "-m",
            module,
            *args,
            "--port",
            str(port),
            "--port-file",
            str(port_file),
        ]
        cgroup = None
        if memory_mb is not None and self.limits == "cgroup":
            cgroup = Cgroup(self.sandbox_name, uid)
            try:
                cgroup.create(memory_mb, cpus)
            except Exception as e:
                raise ServingError("backend_error", str(e)) from None
            argv = ["/bin/sh", "-c", CGROUP_SHIM, "mlsandbox-serving", *cgroup.shim_args(), *argv]
        elif memory_mb is not None and self.limits == "rlimit":
            data_kib, as_kib = memory_mb << 10, (memory_mb + AS_ALLOWANCE_MB) << 10
            argv = ["/bin/sh", "-c", _RLIMIT_SHIM, "mlsandbox-serving", str(data_kib), str(as_kib), *argv]
        try:
            record = supervisor.spawn(argv, env=env, log_path=log, cwd=self.root)
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            raise
        proc = ServingProcess(
            uid,
            record,
            log,
            port_file,
            fault_file,
            started=time.time(),
            cgroup=cgroup,
            memory_mb=memory_mb,
            shared_fault_file=fault_name is not None,
        )
        self.procs[uid] = proc
        return proc

    def fault_file(self, name: str) -> Path:
        """The fault-hook control file of the service ``name`` of this episode."""
        return self.root / "faults" / f"{name}.json"

    def wait_ready(self, procs: list[ServingProcess], timeout_s: float = 90.0) -> None:
        """Wait until every process wrote its port and answers ``/health``; :class:`ServingError`
        ``deploy_failed`` (with the log tail) when one exits or the time runs out."""
        deadline = time.monotonic() + timeout_s
        pending = list(procs)
        with httpclients.client(2.0) as client:
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
                            "deploy_failed",
                            f"{p.name} exited during start (status {code}); log tail:\n"
                            + supervisor.tail(p.log, 8),
                        )
                if pending and time.monotonic() > deadline:
                    raise ServingError(
                        "deploy_failed",
                        f"{pending[0].name} not ready after {timeout_s:.0f} s; log tail:\n"
                        + supervisor.tail(pending[0].log, 8),
                    )
                time.sleep(0.1)

    def stop(self, procs: list[ServingProcess], timeout: float = 5.0) -> None:
        supervisor.stop([p.record for p in procs], timeout=timeout)
        for p in procs:
            if p.cgroup is not None:
                p.cgroup.remove()
            self.procs.pop(p.name, None)
            if not p.shared_fault_file:
                p.fault_file.unlink(missing_ok=True)
            p.port_file.unlink(missing_ok=True)

    def stop_all(self) -> None:
        self.stop(list(self.procs.values()))

    def alive_count(self) -> int:
        return sum(1 for p in self.procs.values() if p.alive())
