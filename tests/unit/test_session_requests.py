"""The HTTP gateway's request models: JSON integers only where the document says integer."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from pydantic import ValidationError

from mlsandbox.gateway.client import GatewayClient
from mlsandbox.gateway.sessions import CreateSessionRequest, ResetRequest


@pytest.mark.parametrize(
    "body",
    [
        {"seed": True},
        {"seed": "3"},
        {"seed": 2.5},
        {"options": {"max_steps": True}},
        {"options": {"max_steps": "40"}},
        {"seed": -1},
        {"options": {"max_steps": 0}},
    ],
)
def test_create_refuses_what_is_not_an_integer_in_range(body: dict) -> None:
    with pytest.raises(ValidationError):
        CreateSessionRequest.model_validate_json(json.dumps(body))


@pytest.mark.parametrize("body", [{"seed": False}, {"seed": "7"}, {"options": {"max_steps": "3"}}])
def test_reset_refuses_what_is_not_an_integer(body: dict) -> None:
    with pytest.raises(ValidationError):
        ResetRequest.model_validate_json(json.dumps(body))


def test_integers_are_taken() -> None:
    req = CreateSessionRequest.model_validate_json('{"seed": 12, "options": {"max_steps": 30}}')
    assert (req.seed, req.options.max_steps) == (12, 30)
    assert ResetRequest.model_validate_json('{"seed": 0}').seed == 0


def test_the_client_sends_numpy_seeds_as_json_integers() -> None:
    sent: list[dict] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(503, json={"detail": "not started"})

    client = GatewayClient("http://gateway", transport=httpx.MockTransport(answer))
    with pytest.raises(Exception, match="503"):
        client.create_session("tabular-quality-basic", seed=np.int64(5))
    assert sent == [{"seed": 5}]  # the default scenario is left out
    with pytest.raises(ValidationError):
        client.create_session("tabular-quality-basic", seed=True)  # type: ignore[arg-type]
    assert len(sent) == 1  # refused before anything was sent
