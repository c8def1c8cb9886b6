"""The sources pack through the real Gateway on in-memory source servers (:mod:`source_fakes`): the
connector's paging, its waits on the runtime's clock, its retries and error codes, the fault marks, the
agent's service actions on source servers; and lake sources on the kube backend's source hosting (its API
and PostgreSQL servers are pods: ``test_kube_sources.py``, and the node tier)."""

from __future__ import annotations

import pytest
from source_fakes import MemoryRuntime  # tests/unit is on sys.path
from tests.helpers import err, ok

from mlsandbox.backends.kube.sources import KubeSourceHosting
from mlsandbox.faults.engine import FaultRecord
from mlsandbox.gateway import Gateway
from mlsandbox.gateway.packs.sources import faults as sources_faults
from mlsandbox.gateway.packs.sources import handlers as sources_impl
from mlsandbox.scenario import load_builtin

API = "data-csv-batch-missing-outliers"
POSTGRES = "data-monthly-drift-retrain"
LAKE = "data-parquet-schema-change"


def _episode(scenario: str, rt: MemoryRuntime | None = None) -> tuple[Gateway, MemoryRuntime]:
    rt = rt or MemoryRuntime()
    gw = Gateway(rt, load_builtin(scenario), seed=1)  # type: ignore[arg-type]
    gw.start()
    return gw, rt


def test_ingest_pages_through_the_api_and_waits_out_429s_on_the_runtime_clock() -> None:
    gw, rt = _episode(API)
    before = rt.clock.monotonic()
    out = ok(gw, {"type": "ingest_source", "source": "orders_api", "output": "sources/orders.csv"})
    # 3000 rows in pages of 500 (the source's max page size) and a burst of 3: three pages, then waits.
    assert out["rows"] == 3000 and out["pages"] == 6
    assert out["rate_limited"] >= 1 and out["waited_s"] >= 1.0
    assert rt.clock.monotonic() - before == pytest.approx(out["waited_s"])  # virtual time, no real sleep
    assert rt.hosting.servers.requests == out["pages"] + out["rate_limited"]
    assert "sources/orders.csv" in rt.object_store.buckets[gw.state.bucket]
    preview = ok(gw, {"type": "preview_source", "source": "orders_api", "rows": 3})
    assert preview["total_rows"] == 3000 and len(preview["rows"]) == 3
    gw.close()
    assert rt.hosting.servers.datasets == {} and rt.hosting.opened[0].closed


def test_an_api_outage_is_retried_then_an_error_and_the_fault_is_marked() -> None:
    gw, rt = _episode(API)
    rec = sources_faults.api_unavailable(gw.episode, "orders_api")
    before = rt.clock.monotonic()
    e = err(gw, {"type": "preview_source", "source": "orders_api"})
    assert e["code"] == "source_unavailable" and "HTTP 503" in e["message"] and "4 times" in e["message"]
    assert rt.clock.monotonic() - before == pytest.approx(0.2 + 0.4 + 0.6)  # the retries' pauses
    assert rec.detected_step == 1 and rec.recovered_at is None
    health = ok(gw, {"type": "get_service_health", "service": "api-source"})
    assert not health["healthy"]
    restarted = ok(gw, {"type": "restart_service", "service": "api-source"})
    assert restarted["healthy"] and rec.recovered_by == "agent" and rec.mitigated_step == 3
    assert rt.hosting.servers.faults == {}
    assert ok(gw, {"type": "preview_source", "source": "orders_api"})["total_rows"] == 3000
    gw.close()


def test_rotated_credentials_are_an_auth_error_until_refreshed() -> None:
    gw, _ = _episode(API)
    rot = sources_faults.credentials_rotated(gw.episode, "orders_api")
    e = err(gw, {"type": "ingest_source", "source": "orders_api"})
    assert e["code"] == "auth_failed" and "HTTP 401" in e["message"]
    assert rot.detected_step == 1 and "sources/orders_api.parquet" not in gw.state.datasets
    out = ok(gw, {"type": "ingest_source", "source": "orders_api", "refresh_credentials": True})
    assert out["credentials_refreshed"] and rot.mitigated_step == 2
    gw.close()


def test_a_server_that_cannot_be_reached_is_source_unavailable() -> None:
    gw, rt = _episode(API)
    rt.hosting.servers.stop("api-source")
    e = err(gw, {"type": "preview_source", "source": "orders_api"})
    assert e["code"] == "source_unavailable" and "cannot reach" in e["message"]
    assert not ok(gw, {"type": "get_service_health", "service": "api-source"})["healthy"]
    gw.close()


def test_postgres_outage_rotation_and_repair_through_service_actions() -> None:
    gw, rt = _episode(POSTGRES)
    history = sources_impl.source_of(gw.episode, "history_db")
    assert history.database in rt.hosting.servers.databases
    preview = ok(gw, {"type": "preview_source", "source": "history_db", "rows": 4})
    assert preview["total_rows"] == 3000 and len(preview["rows"]) == 4

    down = sources_faults.database_down(gw.episode, "history_db")
    e = err(gw, {"type": "ingest_source", "source": "history_db"})
    assert e["code"] == "source_unavailable" and "at memory://postgres: cannot connect" in e["message"]
    assert down.detected_step == 2
    logs = sources_impl.episode_services(gw.episode)["postgres"].logs(5)
    assert "postgres shut down" in logs
    assert ok(gw, {"type": "restart_service", "service": "postgres"})["healthy"]
    assert down.recovered_by == "agent"

    rot = sources_faults.credentials_rotated(gw.episode, "history_db")
    e = err(gw, {"type": "preview_source", "source": "history_db"})
    assert e["code"] == "auth_failed" and "login refused" in e["message"]
    ok(gw, {"type": "preview_source", "source": "history_db", "refresh_credentials": True})
    assert rot.detected_step is not None and rot.mitigated_step is not None
    database = history.database
    gw.close()
    assert database not in rt.hosting.servers.databases  # dropped with the episode
    kinds = {r.fault for r in gw.state.ground_truth.faults if isinstance(r, FaultRecord)}
    assert kinds == {"database_down", "credentials_rotated"}


def test_the_source_probes_are_the_episode_s_client() -> None:
    gw, rt = _episode(POSTGRES)
    service = sources_impl.episode_services(gw.episode)["postgres"]
    rt.hosting.servers.stop("postgres")
    rec = sources_faults.database_down(gw.episode, "history_db")
    assert not service.health().healthy and rec.detected_step == 0
    gw.close()


# ------------------------------------------------------------------------------------------------ kube


def _kube_runtime() -> MemoryRuntime:
    return MemoryRuntime(sources=KubeSourceHosting())


def test_lake_sources_work_on_kube() -> None:
    rt = _kube_runtime()
    gw, _ = _episode(LAKE, rt)
    lake = ok(gw, {"type": "list_sources"})["sources"][0]
    assert [a["batch"] for a in lake["arrived"]] == [0, 1, 2]
    ok(gw, {"type": "list_sources"})  # step 2: batch 3 arrives, with its renamed column
    e = err(gw, {"type": "ingest_source", "source": "sales_lake"})
    assert e["code"] == "schema_mismatch"
    out = ok(gw, {"type": "ingest_source", "source": "sales_lake", "rename": {"amount_usd": "amount"}})
    assert out["rows"] == 4000
    gw.close()
