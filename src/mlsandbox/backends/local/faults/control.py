"""Fault mechanisms of the local backend: real signals, cgroup limits, Toxiproxy toxics, MinIO quotas.

:class:`LocalFaultControl` is what ``LocalRuntime.faults`` hands to the perturbation engine:

- services: SIGKILL / SIGSTOP / SIGCONT of a service's process group, restart through the backend,
  health as clients see it (through the proxy), logs;
- network: toxics on the Toxiproxy proxies in front of MinIO and MLflow (the endpoints the agent's and
  the workloads' clients use), proxies disabled for "endpoint down";
- a hard bucket quota through MinIO's admin API (``PUT /minio/admin/v3/set-bucket-quota``, SigV4-signed);
- job limits through the jobs' cgroups (``LocalJobs.set_resources``; RLIMIT_DATA without cgroups);
- CPU contention: burner processes (``mlsandbox.workloads.burn``) pinned with the target's processes to
  one CPU (``sched_setaffinity``);
- the config store: Prefect variables on the sandbox's Prefect server (:class:`PrefectConfigStore`);
- the internal fault hook of the sandbox's own HTTP services (a control file, see
  :mod:`mlsandbox.workloads.fault_hook`).

Every change that would outlive a crash of the process making it (a toxic, a disabled proxy, a quota, a
SIGSTOP, a cut job limit, burner processes and pinned CPUs, an episode's config variables, a fault-hook
control file) is written first to a journal, ``<sandbox>/faults/<pid>-<ticks>.json``, and
removed from it once undone. :func:`undo_stale_journals` (called by the garbage collector) undoes the
journal of every process that is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
import psutil
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from mlsandbox import httpclients
from mlsandbox.backends.common.minio import set_bucket_quota
from mlsandbox.backends.local import services as svc
from mlsandbox.backends.local import supervisor
from mlsandbox.backends.local.supervisor import ProcessRecord
from mlsandbox.backends.protocols import Endpoints, ServiceHealth
from mlsandbox.errors import BackendError

JOURNAL_DIR = "faults"
PROBE_TIMEOUT_S = 5.0


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------------------------- journal


class UndoToxic(_Model):
    type: Literal["toxic"] = "toxic"
    endpoint: str
    name: str


class UndoProxyDisabled(_Model):
    type: Literal["proxy_disabled"] = "proxy_disabled"
    endpoint: str


class UndoBucketQuota(_Model):
    type: Literal["bucket_quota"] = "bucket_quota"
    bucket: str


class UndoFrozen(_Model):
    type: Literal["frozen"] = "frozen"
    service: str
    process: ProcessRecord


class UndoKilled(_Model):
    """Nothing to undo (a restart brings it back): marks a service down on purpose, so that the garbage
    collector does not take the sandbox for broken while the process that killed it lives."""

    type: Literal["killed"] = "killed"
    service: str


class UndoJobLimits(_Model):
    type: Literal["job_limits"] = "job_limits"
    job_id: str
    cpu_dir: str | None = None
    cpu_quota_us: int | None = None
    memory_dir: str | None = None
    memory_limit_bytes: int | None = None


class UndoContention(_Model):
    """CPU burners to kill and processes whose CPU affinity to give back."""

    type: Literal["contention"] = "contention"
    burners: list[ProcessRecord] = Field(default_factory=list)
    pinned: list[tuple[ProcessRecord, list[int]]] = Field(default_factory=list)


class UndoConfigScope(_Model):
    """An episode's config variables (every Prefect variable whose name starts with ``prefix``)."""

    type: Literal["config_scope"] = "config_scope"
    prefix: str


class UndoHookFile(_Model):
    """A fault-hook control file of an HTTP service (removed: the service answers normally again)."""

    type: Literal["hook_file"] = "hook_file"
    path: str


Undo = Annotated[
    UndoToxic
    | UndoProxyDisabled
    | UndoBucketQuota
    | UndoFrozen
    | UndoKilled
    | UndoJobLimits
    | UndoContention
    | UndoConfigScope
    | UndoHookFile,
    Field(discriminator="type"),
]


class JournalFile(_Model):
    owner: ProcessRecord
    entries: dict[str, Undo] = Field(default_factory=dict)


_JOURNAL_ADAPTER: TypeAdapter[JournalFile] = TypeAdapter(JournalFile)


class Journal:
    """The undo records of this process for one sandbox (one file, rewritten atomically)."""

    def __init__(self, sandbox_dir: Path) -> None:
        self.owner = ProcessRecord.of(os.getpid())
        self.path = Path(sandbox_dir) / JOURNAL_DIR / f"{self.owner.pid}-{self.owner.start_ticks}.json"
        self._lock = threading.Lock()
        self._data = JournalFile(owner=self.owner)
        if self.path.is_file():
            with contextlib.suppress(ValueError, OSError):
                self._data = JournalFile.model_validate_json(self.path.read_text())

    def add(self, key: str, undo: Any) -> None:
        with self._lock:
            self._data.entries[key] = undo
            self._write()

    def remove(self, key: str) -> None:
        with self._lock:
            if self._data.entries.pop(key, None) is not None:
                self._write()

    def entry_keys(self) -> list[str]:
        with self._lock:
            return list(self._data.entries)

    def _write(self) -> None:
        if not self._data.entries:
            self.path.unlink(missing_ok=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{threading.get_ident()}")
        tmp.write_text(self._data.model_dump_json(indent=2))
        os.replace(tmp, self.path)


# ------------------------------------------------------------------------------------------ mechanisms


class ToxiproxyControl:
    """Toxics and proxy switches on a sandbox's Toxiproxy (its proxies are named after the services)."""

    def __init__(self, api_url: str, journal: Journal) -> None:
        self.api_url = api_url
        self.journal = journal

    def endpoints(self) -> list[str]:
        return list(svc.PROXIED)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        with httpclients.client(10.0) as client:
            return client.request(method, f"{self.api_url}{path}", json=body)

    def add_toxic(
        self, endpoint: str, name: str, kind: str, attributes: dict[str, Any], *, stream: str = "downstream"
    ) -> None:
        self._check(endpoint)
        self.journal.add(f"toxic:{endpoint}:{name}", UndoToxic(endpoint=endpoint, name=name))
        self._call("DELETE", f"/proxies/{endpoint}/toxics/{name}")
        body = {"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attributes}
        resp = self._call("POST", f"/proxies/{endpoint}/toxics", body)
        if resp.status_code not in (200, 201):
            raise BackendError(
                f"toxiproxy refused toxic {name!r} on {endpoint}: {resp.status_code} {resp.text}"
            )

    def remove_toxic(self, endpoint: str, name: str) -> None:
        self._check(endpoint)
        resp = self._call("DELETE", f"/proxies/{endpoint}/toxics/{name}")
        if resp.status_code not in (200, 204, 404):
            raise BackendError(f"toxiproxy: removing toxic {name!r} failed: {resp.status_code} {resp.text}")
        self.journal.remove(f"toxic:{endpoint}:{name}")

    def set_enabled(self, endpoint: str, enabled: bool) -> None:
        self._check(endpoint)
        if not enabled:
            self.journal.add(f"proxy:{endpoint}", UndoProxyDisabled(endpoint=endpoint))
        resp = self._call("POST", f"/proxies/{endpoint}", {"enabled": enabled})
        if resp.status_code != 200:
            raise BackendError(f"toxiproxy: switching {endpoint} failed: {resp.status_code} {resp.text}")
        if enabled:
            self.journal.remove(f"proxy:{endpoint}")

    def toxics(self, endpoint: str) -> list[dict[str, Any]]:
        resp = self._call("GET", f"/proxies/{endpoint}/toxics")
        resp.raise_for_status()
        return list(resp.json())

    def reset(self) -> None:
        """Every toxic removed, every proxy enabled (Toxiproxy's own ``POST /reset``)."""
        resp = self._call("POST", "/reset")
        if resp.status_code not in (200, 204):
            raise BackendError(f"toxiproxy reset failed: {resp.status_code} {resp.text}")
        for key in self.journal.entry_keys():
            if key.startswith(("toxic:", "proxy:")):
                self.journal.remove(key)

    def _check(self, endpoint: str) -> None:
        if endpoint not in svc.PROXIED:
            raise ValueError(f"unknown endpoint {endpoint!r}; endpoints: {', '.join(svc.PROXIED)}")


class PrefectConfigStore:
    """Key/value config in Prefect variables of the sandbox's Prefect server (its REST API).

    An episode's config lives under a name prefix (a *scope*): :meth:`open_scope` writes it and journals
    it, :meth:`close_scope` deletes every variable of the scope (so does the garbage collector for the
    scope of a gone process). Values are strings.
    """

    def __init__(self, api_url: str, journal: Journal | None = None) -> None:
        self.api_url = api_url.rstrip("/")
        self.journal = journal
        # One client (and its connection pool) for every call: a new client per call loaded the CA
        # bundle each time (about 30 ms), which made up most of an episode's start and end.
        self._client = httpclients.client(10.0)

    RETRIES = (0.2, 0.5, 1.0)
    """Pauses before retrying a call the server refused as busy (503) or that could not connect."""

    def _call(self, method: str, path: str, body: Any = None) -> httpx.Response:
        for pause in (*self.RETRIES, None):
            try:
                resp = self._client.request(method, f"{self.api_url}{path}", json=body)
                if resp.status_code != 503 or pause is None:
                    return resp
            # Read/write errors: a pooled connection the server closed (a restarted Prefect).
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
                if pause is None:
                    raise BackendError(
                        f"config store (Prefect at {self.api_url}): {type(e).__name__}: {e}"
                    ) from e
            except httpx.HTTPError as e:
                raise BackendError(
                    f"config store (Prefect at {self.api_url}): {type(e).__name__}: {e}"
                ) from e
            time.sleep(pause)
        raise AssertionError("unreachable")

    def get(self, name: str) -> str | None:
        resp = self._call("GET", f"/variables/name/{name}")
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise BackendError(f"config store: reading {name!r} failed: {resp.status_code} {resp.text[:200]}")
        value = resp.json().get("value")
        return None if value is None else str(value)

    def set(self, name: str, value: str) -> None:
        resp = self._call("PATCH", f"/variables/name/{name}", {"value": value})
        if resp.status_code == 404:
            resp = self._call("POST", "/variables/", {"name": name, "value": value})
        if resp.status_code not in (200, 201, 204):
            raise BackendError(f"config store: writing {name!r} failed: {resp.status_code} {resp.text[:200]}")

    def delete(self, name: str) -> None:
        resp = self._call("DELETE", f"/variables/name/{name}")
        if resp.status_code not in (200, 204, 404):
            raise BackendError(
                f"config store: deleting {name!r} failed: {resp.status_code} {resp.text[:200]}"
            )

    def names(self, prefix: str) -> list[str]:
        # LIKE treats "_" as a wildcard: the exact prefix is checked here.
        body = {"variables": {"name": {"like_": f"{prefix}%"}}, "limit": 200}
        resp = self._call("POST", "/variables/filter", body)
        if resp.status_code != 200:
            raise BackendError(f"config store: listing failed: {resp.status_code} {resp.text[:200]}")
        return sorted(v["name"] for v in resp.json() if str(v.get("name", "")).startswith(prefix))

    def open_scope(self, prefix: str, values: dict[str, str]) -> None:
        if self.journal is not None:
            self.journal.add(f"config:{prefix}", UndoConfigScope(prefix=prefix))
        for key, value in values.items():
            self.set(prefix + key, value)

    def close_scope(self, prefix: str) -> None:
        for name in self.names(prefix):
            self.delete(name)
        if self.journal is not None:
            self.journal.remove(f"config:{prefix}")


class _Contention:
    def __init__(self, burners: list[subprocess.Popen[bytes]], cpu: int | None) -> None:
        self.burners = burners
        self.cpu = cpu
        self.records = [ProcessRecord.of(p.pid) for p in burners]
        self.pinned: dict[int, tuple[ProcessRecord, list[int]]] = {}


def _restore_affinity(record: ProcessRecord, cpus: list[int]) -> None:
    if supervisor.is_alive(record):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(record.pid, set(cpus))


class LocalServiceControl:
    """Kill, freeze, thaw, restart, probe and read the logs of a local sandbox's services."""

    def __init__(self, backend: Any, journal: Journal, client_endpoints: Endpoints) -> None:
        self.backend = backend  # a LocalBackend (not imported: it imports this module's package)
        self.journal = journal
        self.client_endpoints = client_endpoints

    def _state(self) -> Any:
        return self.backend._running_state()

    def names(self) -> list[str]:
        """The core services, plus the data-source servers (PostgreSQL, the API source) once started."""
        state = self._state()
        return [*state.service_names(), *(n for n in svc.SOURCE_SERVICES if n in state.services)]

    def _sources(self) -> Any:
        from mlsandbox.backends.local.sources import (
            SourceServices,  # imports the backend module, which imports this package
        )

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
            return self._sources().probe(service, timeout=timeout)  # type: ignore[no-any-return]
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


class LocalFaultControl:
    """The :class:`~mlsandbox.backends.protocols.FaultControl` of a local sandbox."""

    def __init__(self, backend: Any, client_endpoints: Endpoints, jobs: Any) -> None:
        self.backend = backend
        self.journal = Journal(backend.dir)
        self.jobs = jobs
        self._services = LocalServiceControl(backend, self.journal, client_endpoints)
        state = backend._running_state()
        url = svc.toxiproxy_url(state.ports)
        self._network = ToxiproxyControl(url, self.journal) if url else None
        self._direct = state.endpoints
        self._config = PrefectConfigStore(state.endpoints.prefect_api_url, self.journal)
        self._contention: dict[str, _Contention] = {}
        self._lock = threading.Lock()
        self.sandbox_name = backend.name
        self.client_endpoints = client_endpoints

    @property
    def services(self) -> LocalServiceControl:
        return self._services

    @property
    def network(self) -> ToxiproxyControl | None:
        return self._network

    @property
    def config(self) -> PrefectConfigStore:
        """The sandbox's config store (Prefect variables)."""
        return self._config

    def credentials(self) -> dict[str, str]:
        """What clients of this sandbox should be configured with (the source of truth of the config)."""
        ep = self.client_endpoints
        return {
            "s3_endpoint_url": ep.s3_url,
            "s3_access_key_id": ep.s3_access_key,
            "s3_secret_access_key": ep.s3_secret_key,
            "mlflow_tracking_uri": ep.mlflow_url,
        }

    # ---------------------------------------------------------------------------------- http fault hooks

    def set_http_fault(
        self, path: Path, *, error_rate: float, status: int, delay_ms: int, seed: int = 0
    ) -> None:
        """Write a service's fault-hook control file (journaled: the garbage collector removes it)."""
        from mlsandbox.workloads.fault_hook import write_fault

        self.journal.add(f"hook:{path}", UndoHookFile(path=str(path)))
        write_fault(Path(path), error_rate=error_rate, status=status, delay_ms=delay_ms, seed=seed)

    def clear_http_fault(self, path: Path) -> None:
        from mlsandbox.workloads.fault_hook import clear_fault

        clear_fault(Path(path))
        self.journal.remove(f"hook:{path}")

    # ------------------------------------------------------------------------------------ cpu contention

    def target_pids(self, target: str) -> list[int]:
        """Pids of ``service:NAME`` (its process tree) or of a job (backend job id)."""
        if target.startswith("service:"):
            record = self._services._record(target.split(":", 1)[1])
            return [p.pid for p in supervisor.process_tree(record)]
        return list(self.jobs.pids(target))

    def start_contention(self, key: str, workers: int, *, pin: bool = True) -> int | None:
        """Start ``workers`` CPU burners (idempotent per ``key``); returns the CPU they are pinned to."""
        from mlsandbox.backends.local.jobs import OWNER_ENV, owner_marker

        with self._lock:
            if key in self._contention:
                return self._contention[key].cpu
            cpu = max(os.sched_getaffinity(0)) if pin else None
            env = {
                **os.environ,
                **supervisor.marker_env(self.sandbox_name, str(self.jobs.home)),
                OWNER_ENV: owner_marker(),
            }
            argv = [sys.executable, "-m", "mlsandbox.workloads.burn", "--cpu-seconds", "86400"]
            burners = []
            try:
                for _ in range(workers):
                    proc = subprocess.Popen(
                        argv,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                    burners.append(proc)
                    if cpu is not None:
                        os.sched_setaffinity(proc.pid, {cpu})
                c = _Contention(burners, cpu)
            except BaseException:
                for proc in burners:
                    proc.kill()
                    proc.wait()
                raise
            self._contention[key] = c
            self._journal_contention(key, c)
            return cpu

    def pin_to_contention(self, key: str, pids: list[int]) -> list[int]:
        """Pin processes to the contended CPU (their affinity is given back on stop); returns new pins."""
        with self._lock:
            c = self._contention.get(key)
            if c is None or c.cpu is None:
                return []
            new = []
            for pid in pids:
                if pid in c.pinned:
                    continue
                try:
                    record = ProcessRecord.of(pid)
                    original = sorted(os.sched_getaffinity(pid))
                    c.pinned[pid] = (record, original)
                    os.sched_setaffinity(pid, {c.cpu})
                    new.append(pid)
                except (OSError, Exception):  # gone meanwhile
                    c.pinned.pop(pid, None)
            if new:
                self._journal_contention(key, c)
            return new

    def stop_contention(self, key: str) -> None:
        """Kill the burners and give pinned processes their CPUs back (idempotent)."""
        with self._lock:
            c = self._contention.pop(key, None)
            if c is None:
                return
            for proc in c.burners:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            for proc in c.burners:
                proc.wait()
            for record, cpus in c.pinned.values():
                _restore_affinity(record, cpus)
            self.journal.remove(f"contention:{key}")

    def _journal_contention(self, key: str, c: _Contention) -> None:
        self.journal.add(
            f"contention:{key}", UndoContention(burners=c.records, pinned=list(c.pinned.values()))
        )

    # ----------------------------------------------------------------------------------------- limits

    def set_bucket_quota(self, bucket: str, quota_bytes: int | None) -> None:
        key = f"quota:{bucket}"
        if quota_bytes:
            self.journal.add(key, UndoBucketQuota(bucket=bucket))
        set_bucket_quota(self._direct, bucket, quota_bytes)
        if not quota_bytes:
            self.journal.remove(key)

    def set_job_limits(self, job_id: str, cpus: float | None = None, memory_mb: int | None = None) -> None:
        """Cut a running job's limits (journaled: the garbage collector restores the cgroup values)."""
        key = f"job:{job_id}"
        if key not in self.journal.entry_keys():
            dirs = self.jobs.cgroup_dirs(job_id)
            undo = UndoJobLimits(job_id=job_id)
            if dirs:
                memory, cpu = dirs
                with contextlib.suppress(OSError, ValueError):
                    undo.cpu_dir, undo.cpu_quota_us = str(cpu), int((cpu / "cpu.cfs_quota_us").read_text())
                    undo.memory_dir = str(memory)
                    undo.memory_limit_bytes = int((memory / "memory.limit_in_bytes").read_text())
            self.journal.add(key, undo)
        self.jobs.set_resources(job_id, cpus=cpus, memory_mb=memory_mb)

    def restore_job_limits(self, job_id: str, cpus: float | None, memory_mb: int | None) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.jobs.set_resources(job_id, cpus=cpus, memory_mb=memory_mb)
        self.journal.remove(f"job:{job_id}")

    def unavailable(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self._network is None:
            reason = "toxiproxy-server is not installed (run `make setup`)"
            out.update(
                dict.fromkeys(("latency", "bandwidth", "timeout", "reset_peer", "endpoint_down"), reason)
            )
        limits = getattr(
            self.jobs, "limits", "cgroup" if getattr(self.jobs, "use_cgroups", False) else "none"
        )
        if limits != "cgroup":
            reason = (
                "a job's CPU quota needs cgroup v1 and root; jobs here are limited by rlimits "
                "(memory: RLIMIT_DATA/RLIMIT_AS, CPU time: RLIMIT_CPU)"
                if limits == "rlimit"
                else "job limits need root and cgroup v1, or rlimits"
            )
            out["cpu_throttle"] = reason
            if limits != "rlimit":
                out["memory_limit"] = reason
        return out


def unavailable_here() -> dict[str, str]:
    """Fault types a new local sandbox on this machine cannot make real (without starting one): no
    Toxiproxy binary, or jobs without cgroups (``MLSANDBOX_JOB_LIMITS``, root, cgroup v1)."""
    from mlsandbox.backends.local.jobs import choose_limits

    out: dict[str, str] = {}
    if svc.toxiproxy_binary() is None:
        reason = "toxiproxy-server is not installed (run `make setup`)"
        out.update(dict.fromkeys(("latency", "bandwidth", "timeout", "reset_peer", "endpoint_down"), reason))
    try:
        limits = choose_limits()
    except ValueError as e:
        limits, note = "none", str(e)
    else:
        note = ""
    if limits != "cgroup":
        out["cpu_throttle"] = note or (
            "a job's CPU quota needs cgroup v1 and root; jobs here are limited by rlimits"
            if limits == "rlimit"
            else "job limits are off (MLSANDBOX_JOB_LIMITS=none)"
        )
        if limits != "rlimit":
            out["memory_limit"] = out["cpu_throttle"]
    return out


# ------------------------------------------------------------------------------------ garbage collection


def _undo(entry: Any, state: Any) -> None:
    if isinstance(entry, UndoToxic | UndoProxyDisabled):
        url = svc.toxiproxy_url(state.ports)
        if url is None:
            return
        with httpclients.client(5.0) as client:
            if isinstance(entry, UndoToxic):
                client.delete(f"{url}/proxies/{entry.endpoint}/toxics/{entry.name}")
            else:
                client.post(f"{url}/proxies/{entry.endpoint}", json={"enabled": True})
    elif isinstance(entry, UndoBucketQuota):
        with contextlib.suppress(BackendError):
            set_bucket_quota(state.endpoints, entry.bucket, None)
    elif isinstance(entry, UndoFrozen):
        if supervisor.is_alive(entry.process):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(entry.process.pgid, signal.SIGCONT)
    elif isinstance(entry, UndoContention):
        for record in entry.burners:
            proc = supervisor.get_process(record)
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.kill()
        for record, cpus in entry.pinned:
            _restore_affinity(record, cpus)
    elif isinstance(entry, UndoConfigScope):
        PrefectConfigStore(state.endpoints.prefect_api_url).close_scope(entry.prefix)
    elif isinstance(entry, UndoHookFile):
        Path(entry.path).unlink(missing_ok=True)
    elif isinstance(entry, UndoJobLimits):
        if entry.cpu_dir and entry.cpu_quota_us is not None:
            with contextlib.suppress(OSError):
                (Path(entry.cpu_dir) / "cpu.cfs_quota_us").write_text(str(entry.cpu_quota_us))
        if entry.memory_dir and entry.memory_limit_bytes is not None:
            with contextlib.suppress(OSError):
                (Path(entry.memory_dir) / "memory.limit_in_bytes").write_text(str(entry.memory_limit_bytes))


def _journals(sandbox_dir: Path) -> list[tuple[Path, JournalFile | None]]:
    root = Path(sandbox_dir) / JOURNAL_DIR
    if not root.is_dir():
        return []
    out: list[tuple[Path, JournalFile | None]] = []
    for path in sorted(root.glob("*.json")):
        try:
            out.append((path, _JOURNAL_ADAPTER.validate_json(path.read_text())))
        except (ValueError, OSError):
            out.append((path, None))
    return out


def killed_on_purpose(sandbox_dir: Path) -> set[str]:
    """Services that a live process killed as a fault (down on purpose, not broken)."""
    return {
        e.service
        for _, journal in _journals(sandbox_dir)
        if journal is not None and supervisor.is_alive(journal.owner)
        for e in journal.entries.values()
        if isinstance(e, UndoKilled)
    }


def undo_stale_journals(sandbox_dir: Path, state: Any) -> list[str]:
    """Undo the journaled faults of every process that is gone; one line per journal undone."""
    lines = []
    for path, journal in _journals(sandbox_dir):
        if journal is None:
            path.unlink(missing_ok=True)
            continue
        if supervisor.is_alive(journal.owner):
            continue
        failed = 0
        # Frozen services first: the other undos (a quota through MinIO's admin API, config variables on
        # Prefect) need the services answering.
        entries = sorted(journal.entries.values(), key=lambda e: not isinstance(e, UndoFrozen))
        for entry in entries:
            try:
                _undo(entry, state)
            except Exception:  # best effort: the rest is still undone
                failed += 1
        path.unlink(missing_ok=True)
        kinds = sorted({e.type for e in journal.entries.values()})
        lines.append(
            f"sandbox {state.name}: undid {len(journal.entries)} fault change(s) of gone process "
            f"{journal.owner.pid} ({', '.join(kinds)}){f'; {failed} failed' if failed else ''}"
        )
    return lines
