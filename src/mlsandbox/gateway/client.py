"""A typed Python client for the HTTP gateway, and a Gymnasium env that runs against a remote gateway.

```python
with GatewayClient("http://127.0.0.1:8765") as gw:
    s = gw.create_session("tabular-quality-basic", seed=7)
    r = gw.step(s.session_id, {"type": "list_datasets"})
    print(r.observation.result)
```

The client remembers the token of each session it created, so calls name the session only. HTTP errors
raise :class:`GatewayHTTPError` (with the status code and the server's ``detail``); a gateway that does
not answer (stopped, crashed, restarting) raises :class:`GatewayUnavailable`; an invalid *action* is not
an HTTP error but a normal step with an error observation.

:class:`RemoteMLSandboxEnv` has the same observation and action spaces as ``MLSandboxEnv`` and the same
observations for the same actions; only the episode lives behind the gateway.
"""

from __future__ import annotations

import contextlib
import json
import operator
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from mlsandbox.errors import MLSandboxError
from mlsandbox.gateway.sessions import (
    CloseResponse,
    CreateSessionRequest,
    Health,
    ObservationResponse,
    ResetRequest,
    ResetResponse,
    SessionCreated,
    SessionOptions,
    StepResponse,
    ToolsResponse,
)

_M = TypeVar("_M", bound=BaseModel)

DEFAULT_TIMEOUT_S = 120.0
"""A ``wait`` action may take 60 s and a reset a few seconds: the read timeout leaves room for both."""


class GatewayHTTPError(MLSandboxError):
    """The gateway answered with an HTTP error (401, 403, 404, 422, 429, 503 ...)."""

    def __init__(self, status_code: int, detail: Any, method: str, path: str) -> None:
        self.status_code = status_code
        self.detail = detail
        super().__init__(f"{method} {path} -> {status_code}: {detail}")


class GatewayUnavailable(MLSandboxError):
    """The gateway did not answer: the connection was refused or dropped (it stopped, crashed or is
    restarting), or no answer came in time. Sessions do not survive a gateway restart: create a new one."""

    def __init__(self, base_url: str, method: str, path: str, cause: httpx.TransportError) -> None:
        self.method, self.path = method, path
        if isinstance(cause, httpx.TimeoutException):
            what = f"did not answer {method} {path} in time ({type(cause).__name__})"
        else:
            what = f"did not answer {method} {path}: {type(cause).__name__}: {cause or 'connection lost'}"
        super().__init__(
            f"the gateway at {base_url} {what}. If it stopped or restarted, its sessions are gone "
            "(sessions do not survive a restart): create a new session once it answers again."
        )


def _integer(seed: Any) -> Any:
    """A numpy integer seed as a plain int (the wire models take integers only); anything else as it is,
    for the model to accept or refuse."""
    if seed is None or isinstance(seed, bool) or not hasattr(seed, "__index__"):
        return seed
    return operator.index(seed)


class GatewayClient:
    """Sync client for one gateway (``base_url``), e.g. ``http://127.0.0.1:8765``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        self._owns_http = http is None
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout, transport=transport)
        self.tokens: dict[str, str] = {}

    # ------------------------------------------------------------------------------ service

    def health(self) -> Health:
        return self._call("GET", "/health", Health)

    def tools(self) -> ToolsResponse:
        return self._call("GET", "/tools", ToolsResponse)

    # ------------------------------------------------------------------------------ sessions

    def create_session(
        self,
        scenario: str = "tabular-quality-basic",
        seed: int | None = None,
        options: SessionOptions | dict[str, Any] | None = None,
        backend: str | None = None,
    ) -> SessionCreated:
        """A new session; ``backend``: a sandbox of its own of that in-process backend (``sim``)."""
        opts = options if isinstance(options, SessionOptions) else SessionOptions(**(options or {}))
        req = CreateSessionRequest(scenario=scenario, seed=_integer(seed), options=opts, backend=backend)
        created = self._call("POST", "/sessions", SessionCreated, json=req.model_dump(exclude_defaults=True))
        self.tokens[created.session_id] = created.token
        return created

    def step(self, session_id: str, action: Any) -> StepResponse:
        """Send one action: a dict or action model (sent as a JSON object) or raw text (sent as a JSON string)."""
        return self._call(
            "POST",
            f"/sessions/{session_id}/step",
            StepResponse,
            json=_action_body(action),
            session_id=session_id,
        )

    def observation(self, session_id: str) -> ObservationResponse:
        return self._call(
            "GET", f"/sessions/{session_id}/observation", ObservationResponse, session_id=session_id
        )

    def reset(
        self,
        session_id: str,
        seed: int | None = None,
        scenario: str | None = None,
        options: SessionOptions | dict[str, Any] | None = None,
    ) -> ResetResponse:
        opts = (
            None
            if options is None
            else options
            if isinstance(options, SessionOptions)
            else SessionOptions(**options)
        )
        req = ResetRequest(seed=_integer(seed), scenario=scenario, options=opts)
        body = req.model_dump(exclude_none=True)
        return self._call(
            "POST", f"/sessions/{session_id}/reset", ResetResponse, json=body, session_id=session_id
        )

    def close(self, session_id: str) -> CloseResponse:
        """Close a session on the gateway (its episode's resources are removed)."""
        try:
            return self._call("DELETE", f"/sessions/{session_id}", CloseResponse, session_id=session_id)
        finally:
            self.tokens.pop(session_id, None)

    def close_all(self) -> None:
        """Close every session this client created and still holds a token for."""
        for sid in list(self.tokens):
            with contextlib.suppress(GatewayHTTPError, GatewayUnavailable):  # closed already, or gone with it
                self.close(sid)

    def shutdown(self) -> None:
        """Close this client's sessions and its HTTP connections."""
        try:
            self.close_all()
        finally:
            if self._owns_http:
                self.http.close()

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    # ------------------------------------------------------------------------------ plumbing

    def _call(
        self,
        method: str,
        path: str,
        model: type[_M],
        *,
        json: Any = None,
        session_id: str | None = None,
    ) -> _M:
        headers = {}
        if session_id is not None and session_id in self.tokens:
            headers["Authorization"] = f"Bearer {self.tokens[session_id]}"
        kwargs: dict[str, Any] = {"headers": headers}
        if json is not None:
            kwargs["json"] = json
        try:
            resp = self.http.request(method, path, **kwargs)
        except httpx.TransportError as e:
            raise GatewayUnavailable(str(self.http.base_url).rstrip("/"), method, path, e) from e
        if resp.status_code >= 400:
            try:
                detail = resp.json().get("detail")
            except ValueError:
                detail = resp.text
            raise GatewayHTTPError(resp.status_code, detail, method, path)
        return model.model_validate(resp.json())


def _action_body(action: Any) -> Any:
    if isinstance(action, BaseModel):
        return action.model_dump(mode="json")
    if isinstance(action, dict | str):
        return action
    if isinstance(action, bytes | bytearray):
        return action.decode(errors="replace")
    try:  # a list or a number: the gateway rejects it as in-process (it is not an object)
        return json.dumps(action)
    except (TypeError, ValueError):
        return repr(action)


__all__ = ["GatewayClient", "GatewayHTTPError", "GatewayUnavailable"]
