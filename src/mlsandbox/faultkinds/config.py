"""Faults of the episode's configuration: its config store's endpoints and credentials (and a data
source's credentials)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlsandbox.faultkinds.base import FaultKind, FaultParams, Mechanism


class WrongEndpointFault(FaultParams):
    """The episode's config store points an endpoint key (``config:s3_endpoint_url`` or
    ``config:mlflow_tracking_uri``) at a wrong address (``url``; default: a closed local port): clients
    reading their config fail with the real connection error."""

    targets = ("config",)
    default_target = "config:s3_endpoint_url"
    category = "config"
    type: Literal["wrong_endpoint"] = "wrong_endpoint"
    url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")


WRONG_ENDPOINT = FaultKind(
    params=WrongEndpointFault,
    symptom="clients reading their config cannot connect (a wrong address)",
    behaviour="ConfigValue",
    backends={
        "local": Mechanism("config-store", "a wrong value in the episode's config store"),
        "kube": Mechanism("config-store", "a wrong value in the episode's config store"),
        "sim": Mechanism("config-store", "a wrong value in the episode's config store"),
    },
)


class RotatedCredentialsFault(FaultParams):
    """The credentials were rotated and the episode's config store holds a stale one
    (``config:s3_secret_access_key`` or ``config:s3_access_key_id``): clients fail with the object
    store's real authentication error (``SignatureDoesNotMatch`` / ``InvalidAccessKeyId``). On an api or
    postgres ``source:NAME``: the source's token or password is changed on the server and in the secret
    store; the agent's connector keeps the old one (HTTP 401 / login refused) until it refreshes its
    credentials. A rotation is not undone: on a source it takes no duration."""

    targets = ("config", "source")
    default_target = "config:s3_secret_access_key"
    category = "config"
    type: Literal["rotated_credentials"] = "rotated_credentials"


ROTATED_CREDENTIALS = FaultKind(
    params=RotatedCredentialsFault,
    symptom="clients fail to authenticate (SignatureDoesNotMatch, HTTP 401, login refused)",
    behaviour="ConfigValue",
    sources=("api", "postgres"),
    backends={
        "local": Mechanism("config-store", "a stale credential in the config store, or the source's rotated"),
        "kube": Mechanism("config-store", "a stale credential in the config store, or the source's rotated"),
        "sim": Mechanism("config-store", "a stale credential in the config store, or the source's rotated"),
    },
)
