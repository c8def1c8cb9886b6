"""Services added by plug-ins (entry points ``mlsandbox.services``, a :class:`~mlsandbox.plugins.ServiceSpec`
each), run by the local backend next to its own.

``up`` starts every spec with ``start: up`` (:func:`start_plugin_services`); an ``on_demand`` one starts
the first time something calls :meth:`PluginServices.ensure` (a plug-in's action or fault). Each is a
child process in its own process group with the sandbox marker, recorded in the sandbox state like the
core services (``down`` and garbage collection stop it). A plug-in service that fails to start is left
out with a warning naming it and the tail of its log: it never fails ``up`` nor stops the others. Its
port is chosen free at its first start and kept for later starts (its URL stays the same).
"""

from __future__ import annotations

import contextlib
import time

from mlsandbox import plugins
from mlsandbox.errors import NotRunningError, ServiceStartError
from mlsandbox.plugins import ServiceSpec

from . import services as svc
from . import supervisor
from .sandbox import (
    LOG_TAIL_LINES,
    STOP_TIMEOUT_S,
    LocalSandbox,
    ServiceRecord,
    read_state,
    sandbox_lock,
    write_state,
)


class PluginServices:
    """The plug-in services of one running local sandbox."""

    def __init__(self, backend: LocalSandbox, specs: dict[str, ServiceSpec] | None = None) -> None:
        self.backend = backend
        self.layout = backend.layout
        self.specs = dict(plugins.services() if specs is None else specs)

    @classmethod
    def of(cls, sandbox_name: str) -> PluginServices:
        return cls(LocalSandbox(sandbox_name))

    def spec(self, name: str) -> ServiceSpec:
        if name in svc.RESERVED_SERVICE_NAMES:
            raise ValueError(f"plug-in service {name!r} takes the name of a built-in service")
        if name not in self.specs:
            known = ", ".join(self.specs) or "none installed"
            raise ValueError(f"unknown plug-in service {name!r}; plug-in services: {known}")
        return self.specs[name]

    # ---------------------------------------------------------------------------------- lifecycle

    def record(self, name: str) -> ServiceRecord | None:
        state = read_state(self.layout)
        return state.services.get(name) if state else None

    def is_running(self, name: str) -> bool:
        record = self.record(name)
        return record is not None and supervisor.is_alive(record.process)

    def url(self, name: str) -> str:
        """The service's health URL (or ``http://127.0.0.1:<port>`` without one) once it was started."""
        record = self.record(name)
        if record is None or record.url is None:
            raise NotRunningError(f"plug-in service {name!r} has not been started in {self.backend.name!r}")
        return record.url

    def healthy(self, name: str) -> bool:
        record = self.record(name)
        if record is None or not supervisor.is_alive(record.process):
            return False
        with svc.http_client() as client:
            return svc.probe_plugin_service(self._health_url(name, record), client)

    def ensure(self, name: str, timeout: float | None = None) -> ServiceRecord:
        """Start plug-in service ``name`` unless its process runs; wait until its health URL answers.

        :class:`ServiceStartError` (with the tail of its log) when it exits or stays unhealthy past
        ``timeout`` (default: the spec's ``start_timeout_s``); it is stopped then."""
        spec = self.spec(name)
        with sandbox_lock(self.backend.name):
            state = read_state(self.layout)
            if state is None or state.phase != "running":
                raise NotRunningError(f"sandbox {self.backend.name!r} is not up: run `mlsandbox up`")
            old = state.services.get(name)
            if old is not None and supervisor.is_alive(old.process):
                return old
            port = old.port if old is not None and old.port is not None else svc.free_port()
            base = svc.child_env(self.backend.name, self.backend.home, {})
            ep = state.client_endpoints or state.endpoints
            launch, rendered = svc.plugin_service_launch(
                self.layout, name, spec, port, ep, self.backend.name, base
            )
            t0 = time.monotonic()
            process = supervisor.spawn(
                launch.argv, env=launch.env, log_path=self.layout.log(name), cwd=launch.cwd, append=True
            )
            record = ServiceRecord(
                name=name,
                process=process,
                port=port,
                url=rendered.health_url or f"http://{svc.HOST}:{port}",
                log=str(self.layout.log(name)),
            )
            state.services[name] = record
            write_state(self.layout, state)
        self._wait_healthy(name, rendered, process, timeout or spec.start_timeout_s)
        return record.model_copy(update={"ready_s": round(time.monotonic() - t0, 3)})

    def stop(self, name: str) -> bool:
        """Stop plug-in service ``name``; True when it was running."""
        with sandbox_lock(self.backend.name):
            state = read_state(self.layout)
            record = state.services.get(name) if state else None
            if state is None or record is None:
                return False
            alive = supervisor.is_alive(record.process)
            if alive:
                supervisor.stop([record.process], timeout=STOP_TIMEOUT_S)
            return alive

    # ------------------------------------------------------------------------------------ helpers

    def _health_url(self, name: str, record: ServiceRecord) -> str | None:
        return record.url if self.specs.get(name, ServiceSpec(argv=["-"])).health_url else None

    def _wait_healthy(
        self, name: str, spec: ServiceSpec, process: supervisor.ProcessRecord, timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        with svc.http_client(timeout=2.0) as client:
            while True:
                alive = supervisor.is_alive(process)
                if alive and svc.probe_plugin_service(spec.health_url, client):
                    return
                if not alive or time.monotonic() > deadline:
                    with contextlib.suppress(Exception):
                        self.stop(name)
                    tail = supervisor.tail(self.layout.log(name), LOG_TAIL_LINES) or "(empty)"
                    code = supervisor.exit_code(process)
                    what = f"exited (code {code})" if not alive else f"not healthy within {timeout:.0f} s"
                    raise ServiceStartError(
                        f"plug-in service {name!r} of sandbox {self.backend.name!r} {what}.\n"
                        f"Last lines of {self.layout.log(name)}:\n{tail}"
                    )
                time.sleep(0.1)


def start_plugin_services(backend: LocalSandbox) -> dict[str, str]:
    """Start the ``start: up`` plug-in services of a running sandbox (those not running yet).

    Returns ``{name: "running" | <why it failed>}``; a failure is logged as a warning, never raised."""
    specs = {n: s for n, s in plugins.services().items() if s.start == "up"}
    if not specs:
        return {}
    return plugins.start_up_services(specs, PluginServices(backend, specs).ensure)


__all__ = ["PluginServices", "start_plugin_services"]
