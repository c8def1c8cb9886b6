"""The ``compute`` pack: machines, reservations, the job queue, and named Python environments."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from mlsandbox.gateway.actions import ActionModel
from mlsandbox.gateway.registry import ActionPack, PackAction
from mlsandbox.gateway.safety import JobId

MachineName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,31}$", description="A machine type")]
EnvName = Annotated[
    str, Field(pattern=r"^[a-z][a-z0-9-]{0,31}$", description="An environment name, e.g. sklearn-15")
]
ReservationId = Annotated[str, Field(pattern=r"^res-[0-9]{1,6}$", description="A reservation id")]


class ListMachines(ActionModel):
    """The machine types of the compute pool (CPU, memory, price of an idle reserved machine in credits
    per second), the pool's capacity and what is free now, and the reservations held."""

    type: Literal["list_machines"] = "list_machines"


class RequestResources(ActionModel):
    """Reserve a machine for this episode: its CPU and memory are held (other jobs cannot take them) and
    train_model(machine=...) jobs of that type run on it at once. An idle reservation costs its machine's
    price per second until released. Refused when the pool has not enough free capacity."""

    type: Literal["request_resources"] = "request_resources"
    machine: MachineName


class ReleaseResources(ActionModel):
    """Give a reservation back to the pool (it stops costing credits); not while a job runs on it."""

    type: Literal["release_resources"] = "release_resources"
    reservation_id: ReservationId


class CancelJob(ActionModel):
    """Cancel a queued or running job (a running job gets SIGTERM, then SIGKILL); frees its capacity."""

    type: Literal["cancel_job"] = "cancel_job"
    job_id: JobId


class GetQueue(ActionModel):
    """Jobs waiting for capacity, in order, each with what it requests and why it cannot start yet;
    plus the pool's capacity and what is free."""

    type: Literal["get_queue"] = "get_queue"


class ListEnvironments(ActionModel):
    """The named Python environments of this episode: requirements and installed package versions.
    ``default`` is the sandbox's own environment."""

    type: Literal["list_environments"] = "list_environments"


class CreateEnvironment(ActionModel):
    """Build a named Python environment (a venv made by uv) from pinned requirements such as
    ``["scikit-learn==1.5.2"]``; MLflow (the sandbox's version), boto3, pandas, pyarrow and skops are added. Jobs use it with
    train_model(environment=NAME). Requirements that cannot be resolved fail with the resolver's error."""

    type: Literal["create_environment"] = "create_environment"
    name: EnvName
    requirements: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        min_length=1, max_length=20
    )


PACK = ActionPack(
    name="compute",
    actions=(
        PackAction(ListMachines, read_only=True, addresses=("pool_shrink",)),
        PackAction(RequestResources, addresses=("pool_shrink",)),
        PackAction(ReleaseResources, addresses=("pool_shrink",)),
        PackAction(CancelJob, capability="jobs", destructive=True, addresses=("pool_shrink",)),
        PackAction(GetQueue, read_only=True),
        PackAction(ListEnvironments, capability="environments", read_only=True),
        PackAction(CreateEnvironment, capability="environments.build"),
    ),
    implementation="mlsandbox.gateway.packs.compute.handlers",
    description="Compute pool (machines, reservations, queue, cancel) and Python environments.",
)
