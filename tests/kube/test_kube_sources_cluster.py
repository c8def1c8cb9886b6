"""Data sources on the kube backend (a real KubeRuntime on the control-plane tier): the API and
PostgreSQL sources are refused with ``unsupported`` until they run as pods; lake sources, which need
only the object store, work."""

from __future__ import annotations

from typing import Any

import pytest
from test_kube_serving_cluster import runtime_of
from tests.helpers import err, ok

from mlsandbox.backends.kube.backend import KubeBackend
from mlsandbox.errors import Unsupported
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.scenario import load_builtin


@pytest.mark.parametrize(
    ("scenario", "capability"),
    [("data-csv-batch-missing-outliers", "sources.api"), ("data-monthly-drift-retrain", "sources.postgres")],
)
def test_kube_refuses_api_and_postgres_sources(
    backend: KubeBackend, sandbox: Any, scenario: str, capability: str
) -> None:
    rt = runtime_of(backend, sandbox.endpoints())
    assert rt.support().reason(capability) is not None
    gw = Gateway(rt, load_builtin(scenario), seed=3, sandbox=sandbox.name)
    try:
        with pytest.raises(Unsupported) as info:
            gw.start()
        assert info.value.capability == capability and info.value.backend == "kube"
    finally:
        gw.close()
    assert not rt.object_store.bucket_exists(gw.state.bucket)


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
        e = err(gw, {"type": "create_environment", "name": "old", "requirements": ["scikit-learn==1.5.2"]})
        assert e["code"] == "unsupported" and e["details"]["capability"] == "environments.build"
    finally:
        gw.close()
    assert rt.config.tagged() == []  # the episode's variables went with it
