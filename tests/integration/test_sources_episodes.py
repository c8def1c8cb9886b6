"""The data sources on their real servers, through the real Gateway: the PostgreSQL server (as a non-root
user), the HTTP API source (pagination, rate limit, bearer token, fault hook), lake batches arriving at
their steps, each data fault visible through the agent's actions and recorded in ground truth, and the
three built-in data scenarios solved by a scripted action sequence."""

from __future__ import annotations

import time
from typing import Any

import httpx
import psutil
import psycopg
import pytest
from tests.helpers import err as _err
from tests.helpers import ok as _ok

from mlsandbox.backends.local import services as svc
from mlsandbox.backends.local.sources import SourceServices
from mlsandbox.faults.engine import FaultRecord
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.gateway.packs.sources import faults as sources_faults
from mlsandbox.gateway.packs.sources import handlers as sources_impl
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.models import Scenario

pytestmark = pytest.mark.services


def _start(runtime: Any, sandbox: Any, scenario: str | Scenario, seed: int | None = None) -> Gateway:
    sc = load_builtin(scenario) if isinstance(scenario, str) else scenario
    gw = Gateway(runtime, sc, seed=seed, sandbox=sandbox.name)
    gw.start()
    return gw


def _faults(gw: Gateway, kind: str) -> list[FaultRecord]:
    return [r for r in gw.state.ground_truth.faults if isinstance(r, FaultRecord) and r.fault == kind]


def _train_register_submit(gw: Gateway, dataset: str, name: str) -> dict[str, Any]:
    job = _ok(gw, {"type": "train_model", "dataset": dataset, "algorithm": "gradient_boosting"})
    deadline = time.monotonic() + 600  # generous: the machine may be busy
    state = job["state"]
    while state not in ("succeeded", "failed", "cancelled") and time.monotonic() < deadline:
        _ok(gw, {"type": "wait", "seconds": 45})
        state = _ok(gw, {"type": "get_job", "job_id": job["job_id"]})["state"]
    status = _ok(gw, {"type": "get_job", "job_id": job["job_id"]})
    assert status["state"] == "succeeded", status
    _ok(gw, {"type": "register_model", "run_id": status["run_id"], "name": name})
    res = gw.step({"type": "submit"})
    assert res.terminated
    return res.info["grade"]


# --------------------------------------------------------------------------------------- postgres


def test_postgres_server_runs_as_a_non_root_user_on_a_free_port(sandbox: Any) -> None:
    services = SourceServices(sandbox)
    services.ensure("postgres")
    state = sandbox.state()
    record = state.services["postgres"]
    proc = psutil.Process(record.process.pid)
    assert proc.name() == "postgres"
    assert proc.uids().real != 0 and proc.uids().effective != 0
    settings = services.settings()
    assert record.port == settings.postgres_port
    with psycopg.connect(services.postgres_dsn(), autocommit=True) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (svc.POSTGRES_ADMIN,)
    # Only TCP on 127.0.0.1, and the admin password is required.
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(svc.postgres_dsn(settings.postgres_port or 0, "wrong"))
    # The data directory belongs to the server's user, mode 0700.
    data_dir = settings.postgres_dir
    assert data_dir is not None
    st = __import__("os").stat(data_dir)
    assert st.st_uid == proc.uids().real and st.st_mode & 0o777 == 0o700
    # Stopped (a real outage) and started again on the same data.
    assert services.stop("postgres")
    assert not services.healthy("postgres")
    services.ensure("postgres")
    assert services.healthy("postgres")


def test_stale_external_postgres_data_is_garbage_collected(sandbox: Any) -> None:
    from mlsandbox.backends.local import gc
    from mlsandbox.backends.local.sandbox import home_key

    stale = svc.external_postgres_root(home_key()) / "gone-sandbox-x1"
    stale.mkdir(parents=True, exist_ok=True)
    items = gc._collect_postgres_dirs(home_key())
    assert not stale.exists()
    assert any(i.kind == "postgres_data" and i.sandbox == "gone-sandbox-x1" and i.ok for i in items), items
    assert sandbox.name not in {p.name for p in svc.stale_external_postgres_dirs(home_key(), {sandbox.name})}


# -------------------------------------------------------------------------------------------- api


def test_api_source_pagination_rate_limit_auth_and_fault_hook(runtime: Any, sandbox: Any) -> None:
    gw = _start(runtime, sandbox, "data-csv-batch-missing-outliers")
    try:
        rt = sources_impl.source_of(gw.episode, "orders_api")
        services = SourceServices(sandbox)
        assert services.healthy("api-source")
        dataset_dir = services.api_root() / "datasets" / str(rt.api_id)
        assert (dataset_dir / "data.parquet").is_file() and (dataset_dir / "meta.json").is_file()
        url = f"{services.api_url()}/v1/datasets/{rt.api_id}/records"
        with httpx.Client(trust_env=False, timeout=10) as client:
            assert client.get(url).status_code == 401
            bad = client.get(url, headers={"Authorization": "Bearer not-the-token"})
            assert bad.status_code == 401 and "Bearer" in bad.headers["WWW-Authenticate"]
            auth = {"Authorization": f"Bearer {rt.secret}"}
            first = client.get(url, params={"page": 1, "page_size": 400}, headers=auth)
            body = first.json()
            assert body["total_rows"] == 3000 and body["total_pages"] == 8 and body["next_page"] == 2
            assert len(body["records"]) == 400
            assert client.get(url, params={"page_size": 5000}, headers=auth).status_code == 400
            # The burst (3 requests) is soon spent: rate limited, with Retry-After in whole seconds.
            codes = []
            for _ in range(8):
                resp = client.get(url, params={"page": 8, "page_size": 400, "format": "csv"}, headers=auth)
                codes.append(resp.status_code)
                if resp.status_code == 429:
                    break
            assert codes[-1] == 429 and int(resp.headers["Retry-After"]) >= 1, codes
            time.sleep(int(resp.headers["Retry-After"]))
            csv_page = client.get(url, params={"page": 8, "page_size": 400, "format": "csv"}, headers=auth)
            assert csv_page.status_code == 200 and "X-Next-Page" not in csv_page.headers
            assert csv_page.headers["X-Total-Rows"] == "3000"
            assert csv_page.text.count("\n") == 1 + 200  # header + the last 200 rows
        # The agent's view: list, preview, raw/ hidden (the data is only in the source).
        listed = _ok(gw, {"type": "list_sources"})["sources"]
        assert [s["name"] for s in listed] == ["orders_api"] and listed[0]["kind"] == "api"
        assert not any(d["name"].startswith("raw/orders") for d in gw.episode.dataset_list())
        preview = _ok(gw, {"type": "preview_source", "source": "orders_api", "rows": 3})
        assert preview["total_rows"] == 3000 and len(preview["rows"]) == 3
        assert _err(gw, {"type": "preview_source", "source": "nope"})["code"] == "not_found"
        # A full ingest follows every page and waits out the rate limit.
        out = _ok(gw, {"type": "ingest_source", "source": "orders_api", "output": "sources/orders.csv"})
        assert out["rows"] == 3000 and out["pages"] == 6 and out["rate_limited"] >= 1
        assert "sources/orders.csv" in {d["name"] for d in gw.episode.dataset_list()}
        quality = _ok(gw, {"type": "check_data_quality", "dataset": "sources/orders.csv"})["profile"]
        injected = gw.state.ground_truth.manifests["orders"]["defects"]
        assert quality["rows"] == 3000
        assert quality["missing_cells"] == sum(d["count"] for d in injected if d["kind"] == "missing") > 0

        # API 503 through the fault hook: the agent gets a structured error; ground truth records it.
        rec = sources_faults.api_unavailable(gw.episode, "orders_api")
        err = _err(gw, {"type": "preview_source", "source": "orders_api"})
        assert err["code"] == "source_unavailable" and "503" in err["message"]
        assert rec.detected_step == gw.state.step and _faults(gw, "api_unavailable") == [rec]
        sources_faults.recover(gw.episode, rec)
        time.sleep(0.2)  # the hook re-reads its control file at most every 100 ms
        _ok(gw, {"type": "ingest_source", "source": "orders_api", "output": "sources/orders2.parquet"})
        assert rec.recovered_at is not None and rec.mitigated_step is not None

        # Credentials rotated: the connector's cached token is refused until it re-reads the secret store.
        rot = sources_faults.credentials_rotated(gw.episode, "orders_api")
        assert _err(gw, {"type": "preview_source", "source": "orders_api"})["code"] == "auth_failed"
        assert rot.detected_step is not None
        ok = _ok(gw, {"type": "preview_source", "source": "orders_api", "refresh_credentials": True})
        assert ok["credentials_refreshed"] and rot.mitigated_step is not None
    finally:
        gw.close()
    # The published dataset is gone with the episode.
    assert not dataset_dir.exists()


def test_wrong_token_in_the_scenario_is_an_auth_error(runtime: Any, sandbox: Any) -> None:
    data = load_builtin("data-csv-batch-missing-outliers").model_dump()
    data["sources"][0].update(token="server-token-1234", client_token="stale-token-0000")
    gw = _start(runtime, sandbox, Scenario.model_validate(data))
    try:
        err = _err(gw, {"type": "ingest_source", "source": "orders_api"})
        assert err["code"] == "auth_failed" and "401" in err["message"]
        assert gw.state.datasets.get("sources/orders_api.parquet") is None  # nothing written
        out = _ok(gw, {"type": "ingest_source", "source": "orders_api", "refresh_credentials": True})
        assert out["rows"] == 3000
    finally:
        gw.close()


def test_csv_batch_scenario_is_solved_by_ingest_clean_train(runtime: Any, sandbox: Any) -> None:
    gw = _start(runtime, sandbox, "data-csv-batch-missing-outliers")
    try:
        _ok(gw, {"type": "list_sources"})
        _ok(gw, {"type": "ingest_source", "source": "orders_api", "output": "sources/orders.csv"})
        profile = _ok(gw, {"type": "check_data_quality", "dataset": "sources/orders.csv"})["profile"]
        assert "basket_value" in str(profile)
        clean = _ok(
            gw, {"type": "clean_dataset", "dataset": "sources/orders.csv", "strategy": "impute_median"}
        )
        clipped = _ok(gw, {"type": "clean_dataset", "dataset": clean["dataset"], "strategy": "clip_outliers"})
        grade = _train_register_submit(gw, clipped["dataset"], "returns")
        assert grade["success"], grade
    finally:
        gw.close()


# ------------------------------------------------------------------------------------------- lake


def test_schema_change_scenario_batches_arrive_and_rename_repairs(runtime: Any, sandbox: Any) -> None:
    gw = _start(runtime, sandbox, "data-parquet-schema-change")
    try:
        lake = _ok(gw, {"type": "list_sources"})["sources"][0]
        assert [a["batch"] for a in lake["arrived"]] == [0, 1, 2]  # batch 3 is due at step 2
        assert not any(d["name"].startswith("raw/") for d in gw.episode.dataset_list())
        lake = _ok(gw, {"type": "list_sources"})["sources"][0]
        assert [a["batch"] for a in lake["arrived"]] == [0, 1, 2, 3]
        diff = _ok(
            gw,
            {
                "type": "schema_diff",
                "reference": "lake/sales_lake/batch-00.parquet",
                "current": "lake/sales_lake/batch-03.parquet",
            },
        )
        assert diff["removed_columns"] == ["amount"] and diff["added_columns"] == ["amount_usd"]
        assert diff["likely_renames"] == [{"from": "amount", "to": "amount_usd"}]
        err = _err(gw, {"type": "ingest_source", "source": "sales_lake"})
        assert err["code"] == "schema_mismatch" and "amount_usd" in err["message"]
        out = _ok(gw, {"type": "ingest_source", "source": "sales_lake", "rename": {"amount_usd": "amount"}})
        assert out["rows"] == 4000 and out["batches"] == [0, 1, 2, 3] and "amount_usd" not in out["columns"]
        assert gw.state.ground_truth.manifests["source:sales_lake"]["schema_changes"][0]["batch"] == 3
        grade = _train_register_submit(gw, out["dataset"], "repurchase")
        assert grade["success"], grade
    finally:
        gw.close()


def test_lake_faults_late_missing_and_injected_schema_change(runtime: Any, sandbox: Any) -> None:
    gw = _start(runtime, sandbox, "data-monthly-drift-retrain")
    try:
        late = sources_faults.late_batch(gw.episode, "monthly_lake", 4, steps=3)  # due at 1, arrives at 4
        gone = sources_faults.missing_batch(gw.episode, "monthly_lake", 5)
        with pytest.raises(ValueError, match="already arrived"):
            sources_faults.missing_batch(gw.episode, "monthly_lake", 0)
        lake = next(s for s in _ok(gw, {"type": "list_sources"})["sources"] if s["name"] == "monthly_lake")
        assert lake["overdue"] == [4] and late.detected_step == 1
        lake = next(s for s in _ok(gw, {"type": "list_sources"})["sources"] if s["name"] == "monthly_lake")
        assert lake["overdue"] == [4, 5] and gone.detected_step == 2
        err = _err(gw, {"type": "ingest_source", "source": "monthly_lake", "batches": [5]})
        assert err["code"] == "not_found" and "[5]" in err["message"]
        _ok(gw, {"type": "wait", "seconds": 0})
        lake = next(s for s in _ok(gw, {"type": "list_sources"})["sources"] if s["name"] == "monthly_lake")
        assert [a["batch"] for a in lake["arrived"]] == [0, 1, 2, 3, 4] and lake["overdue"] == [5]
        assert lake["arrived"][4]["arrived_step"] == 4
        assert {r.fault for r in gw.state.ground_truth.faults} == {"late_batch", "missing_batch"}
    finally:
        gw.close()


def test_injected_schema_change_retypes_an_arriving_batch(runtime: Any, sandbox: Any) -> None:
    gw = _start(runtime, sandbox, "data-parquet-schema-change")
    try:
        rec = sources_faults.schema_change(
            gw.episode, "sales_lake", 3, "retype", "frequency", new_type="string"
        )
        _ok(gw, {"type": "list_sources"})
        _ok(gw, {"type": "list_sources"})  # step 2: batch 3 arrives (with both changes: the fault wins)
        diff = _ok(
            gw,
            {
                "type": "schema_diff",
                "reference": "lake/sales_lake/batch-00.parquet",
                "current": "lake/sales_lake/batch-03.parquet",
            },
        )
        assert [c["column"] for c in diff["type_changes"]] == ["frequency"]
        assert rec.detected_step == gw.state.step
        err = _err(gw, {"type": "ingest_source", "source": "sales_lake", "batches": [0, 3]})
        assert err["code"] == "schema_mismatch" and "frequency" in err["message"]
        assert (
            _ok(gw, {"type": "ingest_source", "source": "sales_lake", "batches": [0, 1, 2]})["rows"] == 3000
        )
    finally:
        gw.close()


# ------------------------------------------------------------------------------ postgres + drift


def test_drift_scenario_database_faults_and_retraining(runtime: Any, sandbox: Any) -> None:
    gw = _start(runtime, sandbox, "data-monthly-drift-retrain")
    try:
        rt = sources_impl.source_of(gw.episode, "history_db")
        preview = _ok(gw, {"type": "preview_source", "source": "history_db", "rows": 4})
        assert preview["total_rows"] == 3000 and len(preview["rows"]) == 4
        # Database down: a real outage of the server, seen as a structured error.
        down = sources_faults.database_down(gw.episode, "history_db")
        err = _err(gw, {"type": "ingest_source", "source": "history_db"})
        assert err["code"] == "source_unavailable" and "cannot connect" in err["message"]
        assert down.detected_step is not None
        sources_faults.recover(gw.episode, down)
        hist = _ok(gw, {"type": "ingest_source", "source": "history_db", "output": "sources/history.parquet"})
        assert hist["rows"] == 3000 and down.mitigated_step is not None
        # Credentials rotated on the server: login refused until the connector re-reads the secret.
        rot = sources_faults.credentials_rotated(gw.episode, "history_db")
        assert _err(gw, {"type": "preview_source", "source": "history_db"})["code"] == "auth_failed"
        _ok(gw, {"type": "preview_source", "source": "history_db", "refresh_credentials": True})
        assert rot.detected_step is not None and rot.mitigated_step is not None
        # Wait for the last monthly batch, then compare.
        while len(sources_impl.source_of(gw.episode, "monthly_lake").arrived) < 6:
            _ok(gw, {"type": "wait", "seconds": 0})
        drift = _ok(
            gw,
            {
                "type": "drift_check",
                "reference": "sources/history.parquet",
                "current": "lake/monthly_lake/batch-05.parquet",
            },
        )
        assert "support_calls" in drift["drifted_columns"]
        assert (
            drift["columns"]["support_calls"]["psi"] > 0.25 and drift["columns"]["support_calls"]["ks"] > 0.2
        )
        assert drift["columns"]["discount_pct"]["drift"] == "stable"
        same = _ok(
            gw,
            {
                "type": "drift_check",
                "reference": "lake/monthly_lake/batch-00.parquet",
                "current": "lake/monthly_lake/batch-01.parquet",
            },
        )
        assert same["drifted_columns"] == []
        sample = _ok(
            gw, {"type": "sample_dataset", "dataset": "sources/history.parquet", "rows": 3, "seed": 1}
        )
        assert len(sample["rows"]) == 3 and sample["total_rows"] == 3000
        recent = _ok(gw, {"type": "ingest_source", "source": "monthly_lake", "batches": [3, 4, 5]})
        assert recent["rows"] == 4500
        grade = _train_register_submit(gw, recent["dataset"], "churn")
        assert grade["success"], grade
        assert {"database_down", "credentials_rotated"} <= {r.fault for r in gw.state.ground_truth.faults}
    finally:
        database = rt.database
        gw.close()
    with psycopg.connect(SourceServices(sandbox).postgres_dsn(), autocommit=True) as admin:
        assert admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone() is None


def test_drift_scenario_stale_model_fails(runtime: Any, sandbox: Any) -> None:
    """The holdout follows the latest month: a model trained on the history alone is not good enough."""
    gw = _start(runtime, sandbox, "data-monthly-drift-retrain")
    try:
        out = _ok(gw, {"type": "ingest_source", "source": "history_db"})
        grade = _train_register_submit(gw, out["dataset"], "churn")
        assert not grade["success"] and grade["holdout_auc"] < 0.6, grade
    finally:
        gw.close()


@pytest.mark.parametrize("scenario_id", ["data-parquet-schema-change", "data-monthly-drift-retrain"])
def test_reference_agent_of_the_data_scenarios_solves_them(
    runtime: Any, sandbox: Any, scenario_id: str
) -> None:
    from mlsandbox.agents import make_agent

    sc = load_builtin(scenario_id)
    gw = Gateway(runtime, sc, sandbox=sandbox.name)
    try:
        obs = gw.start()
        agent = make_agent(sc.reference_agent, seed=sc.seed)
        agent.reset(obs)
        res = None
        while res is None or not (res.terminated or res.truncated):
            res = gw.step(agent.act(obs))
            obs = res.observation
        assert res.terminated and res.info["grade"]["success"], res.info["grade"]
    finally:
        gw.close()


def test_perturbation_plan_reaches_the_api_source_through_its_fault_hook(runtime: Any, sandbox: Any) -> None:
    data = load_builtin("data-csv-batch-missing-outliers").model_dump(mode="json")
    data["perturbations"] = [
        {
            "name": "api-outage",
            "when": {"at_step": 2},
            "target": "http:orders_api",
            "fault": {"type": "http_errors", "error_rate": 1.0, "status": 503},
            "duration": {"steps": 2},
        }
    ]
    gw = _start(runtime, sandbox, Scenario.model_validate(data))
    try:
        _ok(gw, {"type": "preview_source", "source": "orders_api"})  # step 1: healthy
        err = _err(gw, {"type": "preview_source", "source": "orders_api"})  # step 2: the plan's outage
        assert err["code"] == "source_unavailable" and "503" in err["message"]
        assert [r.name for r in gw.state.ground_truth.faults if r.error is None] == ["api-outage"]
        _ok(gw, {"type": "wait", "seconds": 0})
        _ok(gw, {"type": "wait", "seconds": 0.3})  # the outage has expired; the hook re-reads its file
        assert _ok(gw, {"type": "preview_source", "source": "orders_api"})["total_rows"] == 3000
    finally:
        gw.close()
