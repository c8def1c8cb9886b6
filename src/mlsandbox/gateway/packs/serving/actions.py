"""The ``serving`` pack: deployments of registered models, test requests, metrics and alerts."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from mlsandbox.gateway.actions import ActionModel
from mlsandbox.gateway.packs.compute.actions import EnvName
from mlsandbox.gateway.registry import ActionPack, PackAction
from mlsandbox.gateway.safety import ModelName
from mlsandbox.scenario.serving import Metric

DeploymentName = Annotated[
    str,
    Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$", description="A deployment name (by default the model's)"),
]
Version = Annotated[str, Field(pattern=r"^[1-9][0-9]{0,5}$", description="A model version number, e.g. 2")]
MachineName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,31}$", description="A machine type")]
Replicas = Annotated[int, Field(ge=1, le=16, description="Number of model-server processes")]


class DeployModel(ActionModel):
    """Serve a registered model version over HTTP: ``replicas`` model-server processes on ``machine``
    (a type of list_machines), requests spread over them. The deployment is named after the model unless
    ``deployment`` is given; production traffic goes to the deployment named after the scenario's model.
    Deploying to an existing deployment rolls it to the new version (the new replicas must be healthy
    before the old ones stop). Returns once every replica answers its health check. Each replica runs
    under its machine's CPU and memory limits (the kernel kills a replica over its memory) and costs its
    machine's price per second. ``environment`` (from list_environments) runs the replicas with that
    environment's libraries. A version whose run has no passing validation metric is risky."""

    type: Literal["deploy_model"] = "deploy_model"
    name: ModelName = Field(description="Registered model name, as given to register_model")
    version: Version
    replicas: Replicas = 1
    machine: MachineName = "cpu-small"
    deployment: DeploymentName | None = None
    environment: EnvName | None = Field(
        default=None, description="A Python environment for the replicas (default: the sandbox's own)"
    )


class Rollback(ActionModel):
    """Roll a deployment back to a version it served before (rolling replacement, same replicas)."""

    type: Literal["rollback"] = "rollback"
    deployment: DeploymentName
    version: Version


class Scale(ActionModel):
    """Set the number of replicas of a deployment (new ones start and must be healthy; extra ones stop;
    replicas that died are replaced)."""

    type: Literal["scale"] = "scale"
    deployment: DeploymentName
    replicas: Replicas


class Undeploy(ActionModel):
    """Stop every replica of a deployment and remove it."""

    type: Literal["undeploy"] = "undeploy"
    deployment: DeploymentName


class GetDeployment(ActionModel):
    """A deployment's model, version, machine and its limits, environment, replicas (running, or exited
    with exit code and reason such as OOMKilled) and version history; all deployments when none is
    named."""

    type: Literal["get_deployment"] = "get_deployment"
    deployment: DeploymentName | None = None


FeatureValue = float | int | str | bool | None


class Predict(ActionModel):
    """Send one request through a deployment, as a client would: either feature rows (``instances``,
    one object per row with every input column) or ``entity_ids`` (the server fetches their features
    from the feature service). Returns the HTTP status, the predictions (and positive-class
    probabilities) or the server's error, and the latency."""

    type: Literal["predict"] = "predict"
    deployment: DeploymentName
    instances: list[dict[Annotated[str, Field(max_length=64)], FeatureValue]] | None = Field(
        default=None, min_length=1, max_length=100
    )
    entity_ids: list[Annotated[str, Field(max_length=64)]] | None = Field(
        default=None, min_length=1, max_length=100
    )

    @model_validator(mode="after")
    def _one(self) -> Predict:
        if (self.instances is None) == (self.entity_ids is None):
            raise ValueError("give exactly one of instances or entity_ids")
        return self


class GetMetrics(ActionModel):
    """Monitoring time series of a deployment (or ``feature-service``) over the last ``window_s``
    seconds: a summary over the window and 10 points. Server side: rps, error_rate (5xx share),
    latency_p50/p95/p99_ms, cpu_percent, memory_mb (summed over replicas), replicas_up; for the
    deployment taking production traffic also live_accuracy (labels arrive with a delay),
    feature_drift_psi (largest PSI of a served feature against the training distribution; with
    per-feature values) and the clients' view (client_rps, client_error_rate, client_latency_p99_ms)."""

    type: Literal["get_metrics"] = "get_metrics"
    target: DeploymentName
    names: list[Metric] | None = Field(default=None, description="Metrics to return (default: all)")
    window_s: float = Field(default=60.0, ge=1, le=900)


class GetAlerts(ActionModel):
    """Alerts of the scenario's alert rules: firing ones and, unless ``active_only``, resolved ones."""

    type: Literal["get_alerts"] = "get_alerts"
    active_only: bool = False


class AckAlert(ActionModel):
    """Acknowledge an alert (it keeps firing until its condition clears)."""

    type: Literal["ack_alert"] = "ack_alert"
    alert_id: Annotated[str, Field(pattern=r"^alert-[0-9]{1,6}$", description="An alert id such as alert-1")]


PACK = ActionPack(
    name="serving",
    actions=(
        PackAction(DeployModel, capability="serving"),
        PackAction(Rollback, capability="serving", destructive=True),
        PackAction(Scale, capability="serving.scale", destructive=True),
        PackAction(Undeploy, capability="serving", destructive=True),
        PackAction(GetDeployment, capability="serving", read_only=True),
        PackAction(Predict, capability="serving", read_only=True),
        PackAction(GetMetrics, capability="serving", read_only=True),
        PackAction(GetAlerts, capability="serving", read_only=True),
        PackAction(AckAlert, capability="serving"),
    ),
    implementation="mlsandbox.gateway.packs.serving.handlers",
    description="Model deployments (replicas, rollouts, rollback, scaling), test requests, monitoring and alerts.",
)
