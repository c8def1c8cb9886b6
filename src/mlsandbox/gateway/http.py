"""The HTTP gateway: a FastAPI app over a :class:`~mlsandbox.gateway.sessions.SessionManager`.

Routes (all JSON; every session route needs ``Authorization: Bearer <token>`` from ``POST /sessions``):

- ``POST /sessions``: create a session (scenario, seed, options) -> id, token, first observation.
- ``POST /sessions/{id}/step``: the body is the action, a JSON object such as ``{"type": "list_datasets"}``
  (or the raw action text as a JSON string, parsed by the gateway). An invalid action is *not* an HTTP
  error: it is a normal step with an error observation and a penalty, as in the in-process env.
- ``GET /sessions/{id}/observation``, ``POST /sessions/{id}/reset``, ``DELETE /sessions/{id}``.
- ``GET /tools``: the action catalog with JSON Schemas; ``?format=openai|responses|anthropic|json-schema``
  gives it as ``mlsandbox tools --format`` does (``&strict=true`` for OpenAI strict mode, ``&scenario=ID``
  and ``&pack=NAME`` to narrow it); ``GET /health``. No token needed for these two.

Status codes: 401 no token or an unknown one, 403 another session's token (nothing is done either way),
404 a session closed while the request waited, 422 a body that is not the documented shape (with the field
path in ``detail[].loc``), 429 the session cap, 503 the sandbox failed to create an episode.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path as FsPath
from typing import Annotated, Any, Literal

from fastapi import Body, Depends, FastAPI, HTTPException, Path, Query, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, RootModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.staticfiles import StaticFiles

from mlsandbox import __version__
from mlsandbox.gateway.sessions import (
    SESSION_ID_PATTERN,
    CloseResponse,
    CreateSessionRequest,
    ErrorResponse,
    Forbidden,
    Health,
    ObservationResponse,
    ResetRequest,
    ResetResponse,
    Session,
    SessionCreated,
    SessionError,
    SessionManager,
    SessionNotFound,
    SessionStartError,
    StepResponse,
    ToolsResponse,
    TooManySessions,
    Unauthorized,
)

_STATUS: dict[type[SessionError], int] = {
    Unauthorized: status.HTTP_401_UNAUTHORIZED,
    Forbidden: status.HTTP_403_FORBIDDEN,
    SessionNotFound: status.HTTP_404_NOT_FOUND,
    TooManySessions: status.HTTP_429_TOO_MANY_REQUESTS,
    SessionStartError: status.HTTP_503_SERVICE_UNAVAILABLE,
}

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="SessionToken",
    description="The token returned by POST /sessions. It reaches its own session only.",
)

_AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "Missing token, or a token of no open session."},
    403: {"model": ErrorResponse, "description": "The token belongs to another session."},
    404: {"model": ErrorResponse, "description": "The session was closed while this request waited for it."},
}
_START_ERRORS: dict[int | str, dict[str, Any]] = {
    503: {
        "model": ErrorResponse,
        "description": "The sandbox could not create the episode (a service failed).",
    },
}

ToolFormatName = Literal["openai", "responses", "anthropic", "json-schema"]


class ToolsDocument(RootModel[ToolsResponse | list[dict[str, Any]] | dict[str, Any]]):
    """``{"actions": [...]}`` without ``format``; with it, what ``mlsandbox tools --format`` prints: a list
    of tools (openai, responses, anthropic) or one JSON Schema (json-schema)."""


def _query_error(field: str, msg: str) -> JSONResponse:
    """A 422 shaped like FastAPI's own validation errors (``detail[].loc`` names the query parameter)."""
    detail = [{"type": "value_error", "loc": ["query", field], "msg": msg, "input": None}]
    return JSONResponse({"detail": detail}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


SWAGGER_DIR = FsPath(__file__).parent / "static" / "swagger"
"""Swagger UI's files (npm ``swagger-ui-dist``, Apache-2.0, its LICENSE and NOTICE beside them), vendored
by ``scripts/gateway-assets/vendor.sh``: the interactive docs load nothing from the network."""


def _add_docs(app: FastAPI) -> None:
    """``GET /docs``: Swagger UI over ``/openapi.json``, its script and stylesheet served by the gateway."""
    app.mount("/docs/assets", StaticFiles(directory=SWAGGER_DIR), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - API docs",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None},  # no call to an online validator
        )


SessionId = Annotated[str, Path(pattern=SESSION_ID_PATTERN, description="Session id from POST /sessions.")]

ACTION_BODY_EXAMPLES = {
    "list_datasets": {"summary": "List datasets", "value": {"type": "list_datasets"}},
    "check_data_quality": {
        "summary": "Profile a dataset",
        "value": {"type": "check_data_quality", "dataset": "raw/customers.csv"},
    },
    "raw_text": {"summary": "Raw action text (parsed by the gateway)", "value": '{"type": "list_runs"}'},
}


def create_app(manager: SessionManager, *, close_sessions_on_shutdown: bool = True) -> FastAPI:
    """The gateway app serving ``manager``'s sessions (closed when the app shuts down)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if close_sessions_on_shutdown:
                manager.close_all()

    app = FastAPI(
        title="mlsandbox gateway",
        version=__version__,
        description=__doc__ or "",
        lifespan=lifespan,
        docs_url=None,  # served below from vendored files: /docs works offline
        redoc_url=None,
    )
    app.state.manager = manager
    _add_docs(app)

    @app.exception_handler(SessionError)
    async def _session_error(_: Request, exc: SessionError) -> JSONResponse:
        code = next((c for cls, c in _STATUS.items() if isinstance(exc, cls)), status.HTTP_400_BAD_REQUEST)
        headers = {"WWW-Authenticate": "Bearer"} if code == status.HTTP_401_UNAUTHORIZED else None
        return JSONResponse({"detail": str(exc)}, status_code=code, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == status.HTTP_400_BAD_REQUEST:
            # FastAPI answers 400 for a body it cannot even decode (e.g. not UTF-8): one more bad body, so 422.
            detail = [{"type": "body_unparsable", "loc": ["body"], "msg": str(exc.detail), "input": None}]
            return JSONResponse({"detail": detail}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)
        return await http_exception_handler(request, exc)

    def session_for(
        session_id: SessionId,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Session:
        return manager.authorize(session_id, credentials.credentials if credentials else None)

    Authorized = Annotated[Session, Depends(session_for)]

    @app.get("/health", response_model=Health, tags=["service"], summary="Liveness and session count")
    def health() -> Health:
        return manager.health()

    @app.get("/tools", response_model=ToolsDocument, tags=["service"], summary="The action catalog")
    def tools(
        format: Annotated[
            ToolFormatName | None,
            Query(description="The catalog as `mlsandbox tools --format` prints it (default: {actions})."),
        ] = None,
        strict: Annotated[
            bool, Query(description="OpenAI strict-mode parameters (openai, responses, anthropic).")
        ] = False,
        scenario: Annotated[
            str | None,
            Query(max_length=64, description="Only the actions useful in this built-in scenario."),
        ] = None,
        pack: Annotated[
            list[str] | None, Query(description="Only the actions of these packs (repeatable).")
        ] = None,
    ) -> Any:
        """Every action with its description and the JSON Schema of the action object; with ``format``,
        the tool schemas of that format (the same document as ``mlsandbox tools``)."""
        from mlsandbox.errors import MLSandboxError
        from mlsandbox.gateway.tools import (
            STRICT_FORMATS,
            pack_actions,
            scenario_actions,
            tools_document,
        )
        from mlsandbox.scenario import load_builtin

        if format is None:
            if strict or scenario is not None or pack:
                return _query_error("format", "strict, scenario and pack need a format")
            return manager.tools()
        if strict and format not in STRICT_FORMATS:
            return _query_error("strict", f"strict applies to {', '.join(STRICT_FORMATS)}, not {format}")
        actions: list[str] | None = None
        try:
            if scenario is not None:
                actions = scenario_actions(load_builtin(scenario))  # ids only: no file read for a client
        except (MLSandboxError, ValueError) as e:
            return _query_error("scenario", str(e))
        try:
            if pack:
                chosen = pack_actions(pack)
                actions = chosen if actions is None else [a for a in actions if a in chosen]
        except ValueError as e:
            return _query_error("pack", str(e))
        if actions is not None and not actions:
            return _query_error("pack", "the selection has no action")
        return tools_document(format, actions=actions, strict=strict)

    @app.post(
        "/sessions",
        response_model=SessionCreated,
        response_model_exclude_unset=True,
        status_code=status.HTTP_201_CREATED,
        tags=["sessions"],
        summary="Create a session (a new episode)",
        responses={
            429: {"model": ErrorResponse, "description": "The gateway's session cap is reached."},
            **_START_ERRORS,
        },
    )
    def create_session(request: Annotated[CreateSessionRequest | None, Body()] = None) -> SessionCreated:
        """Start an isolated episode of a built-in scenario; answer its id, its bearer token and the first
        observation. Keep the token: it is the only way to reach the session."""
        return manager.create(request)

    @app.post(
        "/sessions/{session_id}/step",
        response_model=StepResponse,
        response_model_exclude_unset=True,
        tags=["sessions"],
        summary="Take one action",
        responses=_AUTH_ERRORS,
    )
    def step(
        session: Authorized,
        action: Annotated[
            dict[str, Any] | str,
            Body(
                description=(
                    "The action: a JSON object whose `type` names it (see GET /tools for every action and its "
                    "parameters), or the raw action text as a JSON string. An invalid action is answered with "
                    "200 and an error observation (`observation.ok` false), never with an HTTP error."
                ),
                openapi_examples=ACTION_BODY_EXAMPLES,
            ),
        ],
    ) -> Response:
        # Hot path: serialise once here instead of FastAPI validating the model again (response_model
        # still documents the shape).
        return _json(manager.step(session, action))

    @app.get(
        "/sessions/{session_id}/observation",
        response_model=ObservationResponse,
        response_model_exclude_unset=True,
        tags=["sessions"],
        summary="The latest observation",
        responses=_AUTH_ERRORS,
    )
    def observation(session: Authorized) -> Response:
        return _json(manager.observation(session))

    @app.post(
        "/sessions/{session_id}/reset",
        response_model=ResetResponse,
        response_model_exclude_unset=True,
        tags=["sessions"],
        summary="Start a new episode on the session",
        responses={**_AUTH_ERRORS, **_START_ERRORS},
    )
    def reset(session: Authorized, request: Annotated[ResetRequest | None, Body()] = None) -> ResetResponse:
        """Close the session's episode and start a new one (same session id and token)."""
        return manager.reset(session, request)

    @app.delete(
        "/sessions/{session_id}",
        response_model=CloseResponse,
        tags=["sessions"],
        summary="Close the session",
        responses=_AUTH_ERRORS,
    )
    def close(session: Authorized) -> CloseResponse:
        """Stop the episode's jobs and remove its data, runs and models; the token stops working."""
        closed = manager.close(session.id)
        if not closed:
            raise HTTPException(
                status_code=status.HTTP_404_NOT_FOUND, detail=f"session {session.id} is closed"
            )
        return CloseResponse(session_id=session.id, closed=True)

    return app


def _json(model: BaseModel) -> Response:
    return Response(model.model_dump_json(exclude_unset=True), media_type="application/json")


__all__ = ["create_app"]
