"""Service control of a local sandbox: kill, freeze, thaw, restart, probe and read the logs of its
services (the core ones, and the data-source servers an episode started).

Kill is SIGKILL of the service's process group (and of descendants that left it), freeze SIGSTOP, thaw
SIGCONT; a frozen service is journaled (SIGCONT after a crash) and a killed one too (so the garbage
collector does not take the sandbox for broken while the process that killed it lives). Health is probed
the way clients reach the service (MinIO and MLflow through the proxy).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

import httpx
import psutil

from mlsandbox import httpclients
from mlsandbox.backends.local import services as svc
from mlsandbox.backends.local import supervisor
from mlsandbox.backends.local.faults.journal import Journal, UndoFrozen, UndoKilled
from mlsandbox.backends.local.sandbox import LocalSandbox, SandboxState
from mlsandbox.backends.local.supervisor import ProcessRecord
from mlsandbox.backends.protocols import Endpoints, ServiceHealth
from mlsandbox.errors import BackendError

PROBE_TIMEOUT_S = 5.0


class LocalServiceControl:
    """Kill, freeze, thaw, restart, probe and read the logs of a local sandbox's services."""

    def __init__(self, backend: LocalSandbox, journal: Journal, client_endpoints: Endpoints) -> None:
        self.backend = backend
        self.journal = journal
        self.client_endpoints = client_endpoints

    def _state(self) -> SandboxState:
        return self.backend.running_state()

    def names(self) -> list[str]:
        """The core services, plus the data-source servers (PostgreSQL, the API source) once started."""
        state = self._state()
        return [*state.service_names(), *(n for n in svc.SOURCE_SERVICES if n in state.services)]

    def _sources(self) -> Any:
        from mlsandbox.backends.local.sources import SourceServices

        return SourceServices(self.backend)

    def _record(self, service: str) -> ProcessRecord:
        state = self._state()
        if service in svc.SOURCE_SERVICES and service not in state.services:
            raise ValueError(
                f"service {service!r} is not running in this sandbox: it is started on demand by an episode "
                f"with a {'PostgreSQL' if service == svc.POSTGRES else 'HTTP API'} data source; "
                f"services: {', '.join(self.names())}"
            )
        if service not in self.names():
            raise ValueError(f"unknown service {service!r}; services: {', '.join(self.names())}")
        record = state.services.get(service)
        if record is None:
            raise BackendError(f"service {service!r} was never started")
        return record.process

    def kill(self, service: str) -> None:
        record = self._record(service)
        self.journal.add(f"killed:{service}", UndoKilled(service=service))
        if supervisor.is_alive(record):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pgid, signal.SIGKILL)
            for proc in supervisor.process_tree(record):  # descendants that left the group
                with contextlib.suppress(Exception):
                    proc.kill()
            deadline = time.monotonic() + 5.0
            while supervisor.is_alive(record) and time.monotonic() < deadline:
                time.sleep(0.02)
        self.journal.remove(f"frozen:{service}")

    def freeze(self, service: str) -> None:
        record = self._record(service)
        self.journal.add(f"frozen:{service}", UndoFrozen(service=service, process=record))
        if supervisor.is_alive(record):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pgid, signal.SIGSTOP)
            # A group stop is not instant (every thread of a busy process must reach it): return once
            # the process is seen stopped, so the fault is in place when inject() returns.
            proc = supervisor.get_process(record)
            deadline = time.monotonic() + 5.0
            while proc is not None and time.monotonic() < deadline:
                try:
                    if proc.status() == psutil.STATUS_STOPPED:
                        break
                except psutil.NoSuchProcess:
                    break
                time.sleep(0.01)

    def thaw(self, service: str) -> None:
        record = self._record(service)
        if supervisor.is_alive(record):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pgid, signal.SIGCONT)
        self.journal.remove(f"frozen:{service}")

    def is_running(self, service: str) -> bool:
        return supervisor.is_alive(self._record(service))

    def restart(self, service: str, *, wait: bool = True, timeout: float = 90.0) -> ServiceHealth:
        self._record(service)
        t0 = time.monotonic()
        if service in svc.SOURCE_SERVICES:  # on its data: the same port, data directory and credentials
            try:
                self._sources().restart(service, timeout=timeout)
            except Exception as e:
                return ServiceHealth(service=service, healthy=False, error=f"{type(e).__name__}: {e}")
            finally:
                self.journal.remove(f"frozen:{service}")
                self.journal.remove(f"killed:{service}")
            return ServiceHealth(
                service=service, healthy=True, latency_ms=round((time.monotonic() - t0) * 1000, 1)
            )
        self.backend.start_service(service)
        self.journal.remove(f"frozen:{service}")
        self.journal.remove(f"killed:{service}")
        if not wait:
            return ServiceHealth(service=service, healthy=False, error="starting")
        with svc.http_client() as client:
            while time.monotonic() - t0 < timeout:
                if self.backend.service_healthy(service, client):
                    return ServiceHealth(
                        service=service, healthy=True, latency_ms=round((time.monotonic() - t0) * 1000, 1)
                    )
                time.sleep(0.2)
        return ServiceHealth(service=service, healthy=False, error=f"not healthy {timeout:g} s after restart")

    def health(self, service: str, *, timeout: float = PROBE_TIMEOUT_S) -> ServiceHealth:
        """Probe as a client would: MinIO and MLflow through the proxy, the others directly."""
        state = self._state()
        record = self._record(service)
        if service in svc.SOURCE_SERVICES:  # as a client: SELECT 1 as the admin role, GET /health
            return self._sources().probe(service, timeout=timeout)
        ep = self.client_endpoints
        t0 = time.perf_counter()
        try:
            with httpclients.client(timeout) as client:
                if service == svc.MINIO:
                    resp = client.get(f"{ep.s3_url}/minio/health/live")
                    ok, detail = resp.status_code == 200, f"HTTP {resp.status_code}"
                elif service == svc.MLFLOW:
                    resp = client.get(f"{ep.mlflow_url}/health")
                    ok, detail = resp.status_code == 200, f"HTTP {resp.status_code}"
                elif service == svc.PREFECT_SERVER:
                    resp = client.get(f"{state.endpoints.prefect_api_url}/health")
                    ok, detail = resp.status_code == 200, f"HTTP {resp.status_code}"
                elif service == svc.PREFECT_WORKER:
                    ok = supervisor.is_alive(record) and svc.probe(
                        service, state.endpoints, state.worker_name, client
                    )
                    detail = "worker not online"
                else:
                    ok = self.backend.service_healthy(service, client)
                    detail = "no answer"
        except httpx.TimeoutException:
            return ServiceHealth(service=service, healthy=False, error=f"timed out after {timeout:g} s")
        except httpx.HTTPError as exc:
            return ServiceHealth(service=service, healthy=False, error=f"{type(exc).__name__}: {exc}")
        latency = round((time.perf_counter() - t0) * 1000, 1)
        return ServiceHealth(service=service, healthy=ok, latency_ms=latency, error=None if ok else detail)

    def logs(self, service: str, tail: int = 50) -> str:
        self._record(service)
        return supervisor.tail(self.backend.log_path(service), tail)
