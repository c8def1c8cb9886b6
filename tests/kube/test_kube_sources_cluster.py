"""Data sources on the kube backend (a real KubeRuntime on the control-plane tier): the API and
PostgreSQL sources are supported (pods of the episode, which this tier cannot run: the node tier runs
them); lake sources, which need only the object store, work."""

from __future__ import annotations

from typing import Any

from test_kube_serving_cluster import runtime_of
from tests.helpers import err, ok

from mlsandbox.backends.kube.backend import KubeBackend
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.scenario import load_builtin


def test_kube_supports_api_and_postgres_sources(backend: KubeBackend, sandbox: Any) -> None:
    """They run as pods of the episode (port-forwarded: exercised on real pods in the node tier)."""
    rt = runtime_of(backend, sandbox.endpoints())
    assert rt.support().reason("sources.api") is None
    assert rt.support().reason("sources.postgres") is None


def test_lake_sources_and_the_config_store_work_on_kube(backend: KubeBackend, sandbox: Any) -> None:
    rt = runtime_of(backend, sandbox.endpoints())
    gw = Gateway(rt, load_builtin("data-parquet-schema-change"), seed=3, sandbox=sandbox.name)
    gw.start()
    try:
        lake = ok(gw, {"type": "list_sources"})["sources"][0]
        assert [a["batch"] for a in lake["arrived"]] == [0, 1, 2]
        assert ok(gw, {"type": "ingest_source", "source": "sales_lake", "batches": [0, 1, 2]})["rows"] == 3000
        # The episode's config is what Jobs reach: the in-cluster endpoints.
        shown = ok(gw, {"type": "get_config", "key": "s3_endpoint_url"})["config"]
        assert shown["s3_endpoint_url"] == rt.workload_endpoints.s3_url
        # Named environments are built on kube (tests/node plays one to the end); a set uv cannot
        # resolve is uv's own error, and nothing is stored.
        e = err(gw, {"type": "create_environment", "name": "old", "requirements": ["scikit-learn==0.0.1"]})
        assert e["code"] == "environment_build_failed" and "scikit-learn" in e["message"]
        assert "old" not in gw.state.environments
    finally:
        gw.close()
    assert rt.config.tagged() == []  # the episode's variables went with it
