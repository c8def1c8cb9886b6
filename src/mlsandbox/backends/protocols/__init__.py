"""The declared Runtime: every capability the world uses, as protocols with pydantic models on their
boundaries (one module per capability). Backends implement all of them or refuse with
:class:`~mlsandbox.errors.Unsupported`."""

from mlsandbox.backends.protocols.audit import AuditLog
from mlsandbox.backends.protocols.clock import Clock, Ticker
from mlsandbox.backends.protocols.common import CAPABILITIES, Model, Support, Unsupported
from mlsandbox.backends.protocols.config import JOB_CONFIG_KEYS, REFERENCES, ConfigStore
from mlsandbox.backends.protocols.environments import (
    DEFAULT_KEY,
    EnvironmentBuildError,
    EnvironmentInfo,
    Environments,
)
from mlsandbox.backends.protocols.faults import (
    NETWORK_FAULTS,
    FaultControl,
    HttpFault,
    NetworkControl,
    NoSuchTarget,
    ServiceControl,
    ServiceHealth,
)
from mlsandbox.backends.protocols.flows import FLOWS, EpisodeFlows, FlowRunView, Flows, TaskRunView
from mlsandbox.backends.protocols.jobs import Jobs, JobSpec, JobStatus
from mlsandbox.backends.protocols.runtime import (
    Backend,
    BackendConfig,
    BackendType,
    Endpoints,
    Runtime,
    SandboxListing,
    ServiceStatus,
)
from mlsandbox.backends.protocols.serving import (
    FEATURE_SERVICE,
    DeploymentSpec,
    DeploymentView,
    EpisodeServing,
    Machine,
    ModelServing,
    ReplicaRef,
    ReplicaStats,
    ReplicaView,
    ServingEnvironment,
    ServingError,
    ServingResponse,
)
from mlsandbox.backends.protocols.sources import (
    ApiDataset,
    ApiProbe,
    EpisodeSources,
    HttpAnswer,
    PostgresProbe,
    SourceError,
    SourceHosting,
    SourceProbe,
    TableRows,
)
from mlsandbox.backends.protocols.storage import ObjectInfo, ObjectStore
from mlsandbox.backends.protocols.tracking import ModelVersionInfo, RunInfo, Tracking

__all__ = [
    "CAPABILITIES",
    "DEFAULT_KEY",
    "FEATURE_SERVICE",
    "FLOWS",
    "JOB_CONFIG_KEYS",
    "NETWORK_FAULTS",
    "REFERENCES",
    "ApiDataset",
    "ApiProbe",
    "AuditLog",
    "Backend",
    "BackendConfig",
    "BackendType",
    "Clock",
    "ConfigStore",
    "DeploymentSpec",
    "DeploymentView",
    "Endpoints",
    "EnvironmentBuildError",
    "EnvironmentInfo",
    "Environments",
    "EpisodeFlows",
    "EpisodeServing",
    "EpisodeSources",
    "FaultControl",
    "FlowRunView",
    "Flows",
    "HttpAnswer",
    "HttpFault",
    "JobSpec",
    "JobStatus",
    "Jobs",
    "Machine",
    "Model",
    "ModelServing",
    "ModelVersionInfo",
    "NetworkControl",
    "NoSuchTarget",
    "ObjectInfo",
    "ObjectStore",
    "PostgresProbe",
    "ReplicaRef",
    "ReplicaStats",
    "ReplicaView",
    "RunInfo",
    "Runtime",
    "SandboxListing",
    "ServiceControl",
    "ServiceHealth",
    "ServiceStatus",
    "ServingEnvironment",
    "ServingError",
    "ServingResponse",
    "SourceError",
    "SourceHosting",
    "SourceProbe",
    "Support",
    "TableRows",
    "TaskRunView",
    "Ticker",
    "Tracking",
    "Unsupported",
]
