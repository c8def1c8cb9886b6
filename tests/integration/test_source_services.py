"""The data-source servers (PostgreSQL, the HTTP API source) as services of the agent: ``get_service_health``
probes them as the episode's client, ``restart_service`` brings them back on their data, ``get_logs``
reads them, and a source outage (database down, API answering 503) is diagnosed and repaired with these
actions, with the repair recorded in ground truth. All on the real servers, through the real Gateway."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql
from tests.helpers import err as _err
from tests.helpers import ok as _ok

from mlsandbox.backends.local.sources import SourceServices
from mlsandbox.faults.engine import FaultRecord
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.gateway.packs.sources import faults as sources_faults
from mlsandbox.gateway.packs.sources import handlers as sources_impl
from mlsandbox.scenario import load_builtin

pytestmark = pytest.mark.services

CORE = ("minio", "mlflow", "prefect-server", "prefect-worker")


def _start(runtime: Any, sandbox: Any, scenario: str) -> Gateway:
    gw = Gateway(runtime, load_builtin(scenario), sandbox=sandbox.name)
    gw.start()
    return gw


def _pid(sandbox: Any, service: str) -> int:
    return int(sandbox.state().services[service].process.pid)


def test_source_services_are_not_services_of_an_episode_without_sources(runtime: Any, sandbox: Any) -> None:
    gw = _start(runtime, sandbox, "tabular-quality-basic")
    try:
        for action in ("get_service_health", "restart_service"):
            err = _err(gw, {"type": action, "service": "postgres"})
            assert err["code"] == "not_found"
            assert "'postgres' is not in use in this episode" in err["message"]
            assert "services: " + ", ".join(CORE) in err["message"]
        err = _err(gw, {"type": "get_logs", "target": "service:api-source"})
        assert err["code"] == "not_found" and "services: minio, mlflow" in err["message"]
        assert _err(gw, {"type": "get_service_health", "service": "redis"})["code"] == "invalid_parameters"
        assert _ok(gw, {"type": "get_service_health", "service": "minio"})["healthy"]
    finally:
        gw.close()


def test_database_down_is_diagnosed_and_repaired_with_service_actions(runtime: Any, sandbox: Any) -> None:
    gw = _start(runtime, sandbox, "data-monthly-drift-retrain")
    try:
        rt = sources_impl.source_of(gw.episode, "history_db")
        healthy = _ok(gw, {"type": "get_service_health", "service": "postgres"})
        assert healthy["healthy"] and healthy["latency_ms"] > 0 and healthy["error"] is None
        port_before = sandbox.state().services["postgres"].port

        # The probe logs in as the episode's role: a role that may not log in is unhealthy for the
        # episode while the server itself (the backend's admin probe) is fine.
        admin_dsn = SourceServices(sandbox).postgres_dsn()
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(sql.Identifier(rt.role)))
        try:
            refused = _ok(gw, {"type": "get_service_health", "service": "postgres"})
            assert not refused["healthy"] and "not permitted to log in" in refused["error"]
            assert runtime.faults.services.health("postgres").healthy
        finally:
            with psycopg.connect(admin_dsn, autocommit=True) as admin:
                admin.execute(sql.SQL("ALTER ROLE {} LOGIN").format(sql.Identifier(rt.role)))

        # The outage: the server process is stopped.
        down = sources_faults.database_down(gw.episode, "history_db")
        step = gw.state.step
        sick = _ok(gw, {"type": "get_service_health", "service": "postgres"})
        assert not sick["healthy"] and "Connection refused" in sick["error"], sick
        assert down.detected_step == step + 1 and down.recovered_at is None
        logs = _ok(gw, {"type": "get_logs", "target": "service:postgres", "tail": 40})
        assert logs["target"] == "postgres" and any("shut" in line for line in logs["lines"]), logs
        assert _err(gw, {"type": "ingest_source", "source": "history_db"})["code"] == "source_unavailable"

        restarted = _ok(gw, {"type": "restart_service", "service": "postgres"})
        assert restarted["restarted"] == "postgres" and restarted["healthy"], restarted
        assert down.recovered_by == "agent" and down.mitigated_step == step + 4
        assert sandbox.state().services["postgres"].port == port_before
        # Back on its data: the episode's database, role and rows survived the restart.
        out = _ok(gw, {"type": "ingest_source", "source": "history_db"})
        assert out["rows"] == 3000
        assert _ok(gw, {"type": "get_service_health", "service": "postgres"})["healthy"]
        # The source server is a service of the backend too, now that it runs.
        assert "postgres" in runtime.faults.services.names()
    finally:
        gw.close()
    assert [r.fault for r in gw.state.ground_truth.faults if isinstance(r, FaultRecord)] == ["database_down"]


def test_api_outage_is_diagnosed_and_repaired_with_service_actions(runtime: Any, sandbox: Any) -> None:
    gw = _start(runtime, sandbox, "data-csv-batch-missing-outliers")
    try:
        healthy = _ok(gw, {"type": "get_service_health", "service": "api-source"})
        assert healthy["healthy"] and healthy["error"] is None
        pid_before = _pid(sandbox, "api-source")
        port_before = sandbox.state().services["api-source"].port

        outage = sources_faults.api_unavailable(gw.episode, "orders_api")
        sick = _ok(gw, {"type": "get_service_health", "service": "api-source"})
        assert not sick["healthy"] and sick["error"].startswith("HTTP 503"), sick
        assert outage.detected_step == gw.state.step
        assert _err(gw, {"type": "preview_source", "source": "orders_api"})["code"] == "source_unavailable"

        restarted = _ok(gw, {"type": "restart_service", "service": "api-source"})
        assert restarted["healthy"], restarted
        assert _pid(sandbox, "api-source") != pid_before
        assert sandbox.state().services["api-source"].port == port_before
        assert outage.recovered_by == "agent" and outage.mitigated_step == gw.state.step
        # Back on its data: the episode's published dataset and token still work.
        assert _ok(gw, {"type": "preview_source", "source": "orders_api"})["total_rows"] == 3000

        # A killed server (no fault record) is seen and brought back the same way.
        runtime.faults.services.kill("api-source")
        dead = _ok(gw, {"type": "get_service_health", "service": "api-source"})
        assert not dead["healthy"] and dead["error"].split(":")[0] in ("ConnectError", "ReadError"), dead
        assert _ok(gw, {"type": "restart_service", "service": "api-source"})["healthy"]
        assert _ok(gw, {"type": "preview_source", "source": "orders_api"})["total_rows"] == 3000
    finally:
        gw.close()
