"""Pipelines on the sandbox's Prefect server: deploy the flows of :mod:`mlsandbox.workloads.flows`, run
them on the sandbox's process worker, read their states and logs, retry them."""

from mlsandbox.pipelines.prefect_api import FLOW_ENTRYPOINTS, FlowRunView, PrefectPipelines

__all__ = ["FLOW_ENTRYPOINTS", "FlowRunView", "PrefectPipelines"]
