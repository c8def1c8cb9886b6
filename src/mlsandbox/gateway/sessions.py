"""Sessions: many isolated episodes on one running sandbox, each reached with its own bearer token.

A :class:`SessionManager` holds one :class:`~mlsandbox.gateway.Gateway` per session (an episode of a
scenario with a seed). Sessions share the sandbox's services; each gateway has its own bucket,
experiment, job label and model-name prefix, so sessions cannot see each other's work.

Thread safety: a manager-wide lock guards the session table only; each session has its own lock, so two
steps on one session run one after the other while steps on different sessions run in parallel.

The wire models of the HTTP gateway live here too (pydantic, ``extra="forbid"``), so the server
(:mod:`mlsandbox.gateway.http`) and the client (:mod:`mlsandbox.gateway.client`) share them; the
observation they carry is the gateway's one :class:`~mlsandbox.gateway.observations.Observation`.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StrictInt, field_validator

from mlsandbox import __version__
from mlsandbox.backends.protocols import Backend, Runtime
from mlsandbox.backends.registry import backend_type, get_backend
from mlsandbox.errors import MLSandboxError
from mlsandbox.gateway.actions import ACTION_TYPES, action_catalog
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.gateway.observations import Observation
from mlsandbox.scenario import Scenario, catalog_ids, load_builtin

DEFAULT_MAX_SESSIONS = 16
RestartPolicy = Literal["deny", "allow"]
SHARED_RESTART_DENIED = (
    "restart_service is denied on this gateway: its sessions share one sandbox, so a restart would "
    "interrupt every session's episode (start the gateway with `mlsandbox serve --allow-restart` to permit it)"
)
SESSION_ID_PATTERN = r"^s-[0-9a-f]{16}$"
MAX_SEED = 2**31 - 1

# ------------------------------------------------------------------------------------------ errors


class SessionError(MLSandboxError):
    """A session request that cannot be served (the HTTP layer maps each subclass to a status code)."""


class Unauthorized(SessionError):
    """No token, or a token that belongs to no open session."""


class Forbidden(SessionError):
    """A valid token used on another session."""


class SessionNotFound(SessionError):
    """The session was closed while the request waited for it."""


class TooManySessions(SessionError):
    """The manager's session cap is reached."""


class SessionStartError(SessionError):
    """The episode could not be created on the sandbox (a service failed)."""


# ------------------------------------------------------------------------------------------ wire models


def _scenario_ids() -> list[JsonValue]:
    """The built-in scenario ids, as a JSON Schema ``enum``."""
    return list(catalog_ids())


def _in_process(name: str) -> bool:
    """Whether the registered backend ``name`` keeps its sandbox in this process (what a session may ask
    for); False for an unknown or broken one."""
    try:
        return backend_type(name).in_process
    except (ValueError, ImportError):
        return False


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionOptions(_Wire):
    """Per-session changes to the scenario."""

    max_steps: StrictInt | None = Field(  # JSON true or "5" is no step count (lax mode takes 1 and 5)
        default=None,
        ge=1,
        le=10_000,
        description="Override the scenario's step limit (the episode truncates there).",
    )


class CreateSessionRequest(_Wire):
    scenario: str = Field(
        default="tabular-quality-basic",
        description="A built-in scenario id (see `mlsandbox scenarios list`).",
        json_schema_extra={"enum": _scenario_ids()},
    )
    backend: str | None = Field(
        default=None,
        description=(
            "Run the session on a sandbox of its own of this backend, one whose sandbox lives in the "
            "gateway's process (sim): fast episodes, isolated from every other session. The gateway's own "
            "sandbox when omitted."
        ),
    )
    seed: StrictInt | None = Field(  # JSON true is not seed 1
        default=None, ge=0, le=MAX_SEED, description="Episode seed; the scenario's own seed when omitted."
    )
    options: SessionOptions = Field(default_factory=SessionOptions)

    @field_validator("scenario")
    @classmethod
    def _known_scenario(cls, v: str) -> str:
        return _check_scenario(v)

    @field_validator("backend")
    @classmethod
    def _in_process_backend(cls, v: str | None) -> str | None:
        if v is None or _in_process(v):
            return v
        raise ValueError(
            f"a session may ask for a backend whose sandbox lives in the gateway's process (such as sim); "
            f"{v!r} is not one"
        )


class ResetRequest(_Wire):
    scenario: str | None = Field(
        default=None,
        description="Switch to another built-in scenario; the session's current one when omitted.",
        json_schema_extra={"anyOf": [{"type": "string", "enum": _scenario_ids()}, {"type": "null"}]},
    )
    seed: StrictInt | None = Field(
        default=None, ge=0, le=MAX_SEED, description="The scenario's seed when omitted."
    )
    options: SessionOptions | None = Field(
        default=None, description="The session's current options when omitted."
    )

    @field_validator("scenario")
    @classmethod
    def _known_scenario(cls, v: str | None) -> str | None:
        return None if v is None else _check_scenario(v)


class SessionCreated(_Wire):
    session_id: str = Field(pattern=SESSION_ID_PATTERN)
    token: str = Field(description="Bearer token for this session only: `Authorization: Bearer <token>`.")
    scenario: str
    seed: int
    backend: str = Field(description="The backend the session's episodes run on.")
    observation: Observation
    info: dict[str, Any]


class StepResponse(_Wire):
    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class ResetResponse(_Wire):
    scenario: str
    seed: int
    observation: Observation
    info: dict[str, Any]


class ObservationResponse(_Wire):
    session_id: str
    observation: Observation
    done: bool = Field(description="The episode has ended (terminated or truncated): only reset helps now.")


class CloseResponse(_Wire):
    session_id: str
    closed: bool


class ActionSpec(_Wire):
    type: str
    description: str
    parameters: dict[str, Any] = Field(description="JSON Schema of the action object (with its `type`).")


class ToolsResponse(_Wire):
    actions: list[ActionSpec]


class Health(_Wire):
    status: Literal["ok"] = "ok"
    version: str
    sandbox: str
    sessions: int
    max_sessions: int
    restart_service: RestartPolicy = Field(
        description="Whether sessions may restart shared services (deny: a forbidden error observation)."
    )


class ErrorResponse(_Wire):
    detail: str


def _check_scenario(v: str) -> str:
    ids = catalog_ids()
    if v not in ids:
        raise ValueError(f"unknown scenario {v!r}; built-in scenarios: {', '.join(ids)}")
    return v


# ------------------------------------------------------------------------------------------ sessions


@dataclass
class Session:
    id: str
    token: str
    scenario: Scenario
    seed: int
    options: SessionOptions
    gateway: Gateway
    backend: Backend | None = None
    """The session's own sandbox (a backend whose sandbox lives in this process), None: the gateway's."""
    created_at: float = field(default_factory=time.time)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    closed: bool = False
    observation: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.gateway.state.done


class SessionManager:
    """Creates, steps, resets and closes sessions on one running sandbox."""

    def __init__(
        self,
        runtime: Runtime,
        sandbox_name: str,
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        restart_policy: RestartPolicy = "deny",
    ) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        if restart_policy not in ("deny", "allow"):
            raise ValueError(f"restart_policy must be 'deny' or 'allow', got {restart_policy!r}")
        self.restart_policy: RestartPolicy = restart_policy
        """Sessions share the sandbox's services: restarting one interrupts every session, so
        ``restart_service`` is refused (``forbidden`` error observation) unless the policy is ``allow``."""
        self.runtime = runtime
        self.sandbox_name = sandbox_name
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._by_token: dict[str, str] = {}
        self._pending = 0

    # --------------------------------------------------------------------------------- queries

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def session_ids(self) -> list[str]:
        with self._lock:
            return list(self._sessions)

    def authorize(self, session_id: str, token: str | None) -> Session:
        """The session ``session_id`` if ``token`` is its token; :class:`Unauthorized` / :class:`Forbidden`."""
        if not token:
            raise Unauthorized(
                "missing bearer token: send `Authorization: Bearer <token>` from POST /sessions"
            )
        with self._lock:
            owner = self._by_token.get(token)
            session = self._sessions.get(owner) if owner else None
        if session is None or not secrets.compare_digest(session.token, token):
            raise Unauthorized(
                "invalid or expired token: no open session of this gateway has it (a session ends when it is "
                "closed, and none survives a restart of the gateway): create one with POST /sessions"
            )
        if session.id != session_id:
            raise Forbidden("this token belongs to another session")
        return session

    def health(self) -> Health:
        return Health(
            version=__version__,
            sandbox=self.sandbox_name,
            sessions=len(self),
            max_sessions=self.max_sessions,
            restart_service=self.restart_policy,
        )

    @staticmethod
    def tools() -> ToolsResponse:
        return ToolsResponse(actions=[ActionSpec(**a) for a in action_catalog()])

    # --------------------------------------------------------------------------------- lifecycle

    def create(self, request: CreateSessionRequest | None = None) -> SessionCreated:
        """A new session with a fresh episode; the token in the answer is the only way to reach it."""
        request = request or CreateSessionRequest()
        with self._lock:
            if len(self._sessions) + self._pending >= self.max_sessions:
                raise TooManySessions(
                    f"the gateway holds {self.max_sessions} sessions at most: close one first"
                )
            self._pending += 1
        try:
            scenario, seed = (
                self._scenario(request.scenario, request.options),
                self._seed(request.scenario, request.seed),
            )
            session_id = f"s-{secrets.token_hex(8)}"
            own = self._own_sandbox(request.backend, session_id)
            try:
                runtime = own.runtime() if own is not None else self.runtime
                gateway, observation, info = self._start(scenario, seed, runtime, shared=own is None)
            except BaseException:
                if own is not None:
                    own.down()
                raise
            session = Session(
                id=session_id,
                token=secrets.token_urlsafe(32),
                scenario=scenario,
                seed=seed,
                options=request.options,
                gateway=gateway,
                backend=own,
                observation=observation,
            )
            with self._lock:
                self._sessions[session.id] = session
                self._by_token[session.token] = session.id
        finally:
            with self._lock:
                self._pending -= 1
        info["session_id"] = session.id
        return SessionCreated(
            session_id=session.id,
            token=session.token,
            scenario=scenario.id,
            seed=seed,
            backend=gateway.runtime.backend,
            observation=Observation.model_validate(observation),
            info=info,
        )

    def step(self, session: Session, action: Any) -> StepResponse:
        """One action on the session's episode; invalid actions give error observations, never errors."""
        with session.lock:
            self._check_open(session)
            res = session.gateway.step(action)
            session.observation = res.observation
        return StepResponse(
            observation=Observation.model_validate(res.observation),
            reward=res.reward,
            terminated=res.terminated,
            truncated=res.truncated,
            info=res.info,
        )

    def observation(self, session: Session) -> ObservationResponse:
        with session.lock:
            self._check_open(session)
            return ObservationResponse(
                session_id=session.id,
                observation=Observation.model_validate(session.observation),
                done=session.done,
            )

    def reset(self, session: Session, request: ResetRequest | None = None) -> ResetResponse:
        """A new episode on the same session (same id and token); the old episode is closed first."""
        request = request or ResetRequest()
        with session.lock:
            self._check_open(session)
            scenario_id = request.scenario or session.scenario.id
            options = request.options if request.options is not None else session.options
            scenario = self._scenario(scenario_id, options)
            seed = self._seed(scenario_id, request.seed)
            session.gateway.close()
            runtime = session.gateway.runtime
            try:
                gateway, observation, info = self._start(
                    scenario, seed, runtime, shared=session.backend is None
                )
            except SessionStartError:
                self._forget(session)  # its episode is gone and no new one started: the session ends
                session.closed = True
                if session.backend is not None:
                    session.backend.down()
                raise
            session.gateway, session.scenario, session.seed, session.options = (
                gateway,
                scenario,
                seed,
                options,
            )
            session.observation = observation
        info["session_id"] = session.id
        return ResetResponse(
            scenario=scenario.id, seed=seed, observation=Observation.model_validate(observation), info=info
        )

    def close(self, session_id: str) -> bool:
        """Close a session and its episode's resources; ``False`` if it was not open. Waits for a running step."""
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            return False
        with session.lock:
            if session.closed:
                return False
            session.closed = True
            self._forget(session)
            session.gateway.close()
            if session.backend is not None:
                session.backend.down()
        return True

    def close_all(self) -> int:
        """Close every session (gateway shutdown); the number closed."""
        return sum(self.close(sid) for sid in self.session_ids())

    # --------------------------------------------------------------------------------- helpers

    def _forget(self, session: Session) -> None:
        with self._lock:
            self._sessions.pop(session.id, None)
            self._by_token.pop(session.token, None)

    @staticmethod
    def _check_open(session: Session) -> None:
        if session.closed:
            raise SessionNotFound(f"session {session.id} is closed")

    @staticmethod
    def _scenario(scenario_id: str, options: SessionOptions) -> Scenario:
        scenario = load_builtin(scenario_id)
        if options.max_steps is not None:
            scenario = scenario.model_copy(update={"max_steps": options.max_steps})
        return scenario

    @staticmethod
    def _seed(scenario_id: str, seed: int | None) -> int:
        return load_builtin(scenario_id).seed if seed is None else seed

    def _own_sandbox(self, backend: str | None, session_id: str) -> Backend | None:
        """The session's own sandbox: of ``backend`` when asked for, or of the gateway's backend when its
        sandbox lives in this process (so sessions never share a virtual clock); None: the gateway's."""
        if backend is None:
            if not _in_process(self.runtime.backend):
                return None
            backend = self.runtime.backend
        own = get_backend(backend, f"{self.sandbox_name}-{session_id}")
        own.up(ephemeral=True)
        return own

    def _start(
        self, scenario: Scenario, seed: int, runtime: Runtime | None = None, *, shared: bool = True
    ) -> tuple[Gateway, dict[str, Any], dict[str, Any]]:
        """A new episode on ``runtime`` (the gateway's when None); ``shared``: its sandbox is the one every
        session uses, so the restart policy applies."""
        t0 = time.perf_counter()
        runtime = runtime or self.runtime
        denied = (
            {"restart_service": SHARED_RESTART_DENIED} if shared and self.restart_policy == "deny" else None
        )
        gateway = Gateway(
            runtime,
            scenario,
            seed=seed,
            sandbox=self.sandbox_name if shared else runtime.sandbox,
            denied_actions=denied,
            labels={"interface": "http"},
        )
        try:
            observation = gateway.start()
        except Exception as e:
            gateway.close()
            raise SessionStartError(
                f"could not start an episode of {scenario.id!r}: {type(e).__name__}: {e}"
            ) from e
        info = {
            "episode_id": gateway.state.episode_id,
            "scenario": scenario.id,
            "seed": seed,
            "sandbox": gateway.state.sandbox,
            "backend": runtime.backend,
            "actions": list(ACTION_TYPES),
            "timings": {"reset_s": round(time.perf_counter() - t0, 6)},
        }
        return gateway, observation, info


__all__ = [
    "DEFAULT_MAX_SESSIONS",
    "SHARED_RESTART_DENIED",
    "ActionSpec",
    "CloseResponse",
    "CreateSessionRequest",
    "ErrorResponse",
    "Forbidden",
    "Health",
    "Observation",
    "ObservationResponse",
    "ResetRequest",
    "ResetResponse",
    "Session",
    "SessionCreated",
    "SessionError",
    "SessionManager",
    "SessionNotFound",
    "SessionOptions",
    "SessionStartError",
    "StepResponse",
    "TooManySessions",
    "Unauthorized",
]
