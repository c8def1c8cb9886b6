"""The console's web server: a FastAPI app serving the browser app (``console/static``) and its JSON API.

Access. The console has one access token of its own (generated at start or given with ``--token``); the
gateway's session tokens mean nothing here. ``/?token=T`` or the sign-in form checks it and sets a
session cookie (a secret of this server process, ``HttpOnly``, ``SameSite=Strict``); scripts may send
``Authorization: Bearer T`` instead. Anything else gets 401: the sign-in page for pages, a JSON error for
the API. State-changing requests made with the cookie also need the ``X-Console: 1`` header, which a
cross-site form cannot send. Every response carries a content security policy that allows this origin
only (no inline script, nothing fetched from elsewhere).

API (JSON):

- ``GET /api/sandboxes``; ``POST /api/sandboxes/{name}/start`` and ``.../stop`` (202: the operation runs
  in the background and shows in the list; ``?backend=`` names the backend of a new sandbox).
- ``GET /api/episodes`` (filters ``sandbox``, ``scenario``, ``agent``, ``interface``, ``outcome``,
  ``status``; newest first); ``GET /api/episodes/{sandbox}/{episode}``: the summary and the whole view
  (:func:`mlsandbox.console.episodes.view_delta` of every record) with the ``offset`` (records) it was
  read up to; ``GET /api/episodes/{sandbox}/{episode}/events?offset=N``: Server-Sent Events, one
  ``delta`` event per batch of records after the first ``N``, ``reset`` when the log was replaced,
  ``gone`` when it disappears.
- ``GET /api/benchmarks``, ``GET /api/benchmarks/{id}``, ``.../report`` (the run's HTML report),
  ``.../trajectories`` and ``.../trajectories/{file}`` (a replay view); ``POST /api/replay``: the replay
  view of a trajectory sent as the request body.
"""

from __future__ import annotations

import asyncio
import hmac
import html
import json
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from mlsandbox import __version__, paths
from mlsandbox.backends.protocols import AuditLog
from mlsandbox.console.benchmarks import (
    BenchRun,
    bench_detail,
    bench_overview,
    clean_json,
    discover,
    list_trajectories,
    replay_view,
    trajectory_path,
)
from mlsandbox.console.episodes import AuditSource, EpisodeIndex, valid_episode_id, view_delta
from mlsandbox.console.sandboxes import Sandboxes

STATIC = Path(__file__).with_name("static")
COOKIE = "mlsandbox_console"
MIN_TOKEN_CHARS = 16
MAX_REPLAY_BYTES = 32 * 2**20
HEARTBEAT_S = 15.0
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'"


def new_token() -> str:
    return secrets.token_urlsafe(24)


def check_token(token: str) -> str:
    """A usable access token; ValueError when it is too short to be a secret."""
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"the console token must have at least {MIN_TOKEN_CHARS} characters")
    return token


@dataclass
class ConsoleConfig:
    token: str
    bench_roots: list[Path] = field(default_factory=list)
    sources: Callable[[], list[AuditSource]] | None = None
    """The audit logs to show episodes from (None: every listed sandbox's, through the backend registry:
    :meth:`mlsandbox.console.sandboxes.Sandboxes.audit_sources`)."""
    poll_s: float = 0.5


class Auth:
    """The console's token, and the session cookie it trades for (a secret of this process)."""

    def __init__(self, token: str) -> None:
        self.token = check_token(token)
        self.session = secrets.token_urlsafe(32)

    def token_ok(self, candidate: str | None) -> bool:
        return bool(candidate) and hmac.compare_digest(str(candidate).encode(), self.token.encode())

    def cookie_ok(self, request: Request) -> bool:
        value = request.cookies.get(COOKIE)
        return value is not None and hmac.compare_digest(value.encode(), self.session.encode())

    def bearer_ok(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and self.token_ok(value.strip())

    def request_ok(self, request: Request) -> bool:
        return self.cookie_ok(request) or self.bearer_ok(request)

    def set_cookie(self, response: Response) -> None:
        response.set_cookie(COOKIE, self.session, httponly=True, samesite="strict", path="/")


def _login_page(message: str | None, status: int) -> HTMLResponse:
    page = (STATIC / "login.html").read_text()
    note = (
        f'<p class="error" role="alert" id="login-error">{html.escape(message)}</p>'
        if message is not None
        else ""
    )
    return HTMLResponse(page.replace("<!--message-->", note), status_code=status)


def create_app(config: ConsoleConfig) -> FastAPI:
    """The console app over ``config`` (its token, the benchmark roots, the audit logs)."""
    auth = Auth(config.token)
    sandboxes = Sandboxes()
    index = EpisodeIndex(config.sources or sandboxes.audit_sources)
    index_lock = threading.Lock()
    app = FastAPI(
        title="mlsandbox console", version=__version__, docs_url=None, redoc_url=None, openapi_url=None
    )

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    def require_auth(request: Request) -> None:
        if not auth.request_ok(request):
            raise HTTPException(401, "the console token is missing or not valid")
        cookie_write = request.method not in ("GET", "HEAD") and not auth.bearer_ok(request)
        if cookie_write and request.headers.get("x-console") != "1":
            raise HTTPException(403, "state-changing requests need the X-Console: 1 header")

    api = APIRouter(prefix="/api", dependencies=[Depends(require_auth)])

    # ------------------------------------------------------------------------------------- pages

    @app.get("/", include_in_schema=False)
    async def root(request: Request, token: str | None = None) -> Response:
        if token is not None:
            if not auth.token_ok(token):
                return _login_page("That token is not valid for this console.", 401)
            response = RedirectResponse("/", status_code=303)
            auth.set_cookie(response)
            return response
        if not auth.request_ok(request):
            return _login_page(None, 401)
        return HTMLResponse((STATIC / "index.html").read_text())

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        body = (await request.body())[:4096].decode(errors="replace")
        token = (parse_qs(body).get("token") or [""])[0]
        if not auth.token_ok(token):
            return _login_page("That token is not valid for this console.", 401)
        response = RedirectResponse("/", status_code=303)
        auth.set_cookie(response)
        return response

    @app.post("/logout", include_in_schema=False)
    async def logout() -> Response:
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/api/health")
    async def health() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    # --------------------------------------------------------------------------------- sandboxes

    @api.get("/sandboxes")
    async def list_sandboxes() -> list[dict[str, Any]]:
        return await run_in_threadpool(sandboxes.list)

    @api.post("/sandboxes/{name}/{op}", status_code=202)
    async def sandbox_op(name: str, op: str, backend: str | None = None) -> dict[str, Any]:
        if op not in ("start", "stop"):
            raise HTTPException(404, f"no operation {op!r}: start or stop")
        try:
            launch = sandboxes.start if op == "start" else sandboxes.stop
            state = await run_in_threadpool(launch, name, backend)
        except ValueError as e:
            raise HTTPException(422, str(e)) from None
        except RuntimeError as e:
            raise HTTPException(409, str(e)) from None
        return {"name": name, **state.as_dict()}

    # ---------------------------------------------------------------------------------- episodes

    def _scan() -> list[dict[str, Any]]:
        with index_lock:
            summaries = index.scan()
            return [s.as_dict(index.running(s.sandbox)) for s in summaries]

    @api.get("/episodes")
    async def list_episodes(
        sandbox: str | None = None,
        scenario: str | None = None,
        agent: str | None = None,
        interface: str | None = None,
        outcome: str | None = None,
        status: str | None = None,
        limit: Annotated[int, Query(ge=1, le=5000)] = 500,
    ) -> dict[str, Any]:
        rows = await run_in_threadpool(_scan)
        facets = {
            key: sorted({str(r[key]) for r in rows if r[key] is not None})
            for key in ("sandbox", "scenario", "agent", "interface", "outcome", "status")
        }
        wanted = {
            "sandbox": sandbox,
            "scenario": scenario,
            "agent": agent,
            "interface": interface,
            "outcome": outcome,
            "status": status,
        }
        selected = [r for r in rows if all(v in (None, "") or str(r[k]) == v for k, v in wanted.items())]
        return {"episodes": selected[:limit], "total": len(selected), "facets": facets}

    def _audit_of(sandbox: str) -> AuditLog | None:
        sources = config.sources or sandboxes.audit_sources
        return next((src.audit for src in sources() if src.sandbox == sandbox), None)

    def _episode_records(sandbox: str, episode: str) -> tuple[AuditLog, list[dict[str, Any]]]:
        """The episode's audit log and its records; 404 for a name that is not one, a sandbox the console
        cannot read, or an episode with no record."""
        try:
            paths.validate_sandbox_name(sandbox)
        except ValueError as e:
            raise HTTPException(404, str(e)) from None
        if not valid_episode_id(episode):
            raise HTTPException(404, f"{episode!r} is not an episode id")
        audit = _audit_of(sandbox)
        records = audit.read(episode) if audit is not None else []
        if audit is None or not records:
            raise HTTPException(404, f"sandbox {sandbox} has no episode {episode}")
        return audit, records

    @api.get("/episodes/{sandbox}/{episode}")
    async def get_episode(sandbox: str, episode: str) -> JSONResponse:
        def load() -> dict[str, Any]:
            _, records = _episode_records(sandbox, episode)
            summary = next((s for s in _scan() if s["sandbox"] == sandbox and s["episode"] == episode), None)
            return {"summary": summary, "view": view_delta(records), "offset": len(records)}

        return JSONResponse(clean_json(await run_in_threadpool(load)))

    @api.get("/episodes/{sandbox}/{episode}/events")
    async def episode_events(
        sandbox: str, episode: str, request: Request, offset: Annotated[int, Query(ge=0)] = 0
    ) -> StreamingResponse:
        audit, _ = await run_in_threadpool(_episode_records, sandbox, episode)

        async def stream() -> AsyncIterator[str]:
            beat = time.monotonic()
            seen = offset
            closed = False  # nothing is written after the close record: only keep-alives from then on
            yield "retry: 2000\n\n"
            while not await request.is_disconnected():
                new: list[dict[str, Any]] = []
                if not closed:
                    records = await run_in_threadpool(audit.read, episode)
                    if not records:
                        yield "event: gone\ndata: {}\n\n"
                        return
                    if len(records) < seen:
                        yield "event: reset\ndata: {}\n\n"
                        return
                    new = records[seen:]
                if new:
                    seen += len(new)
                    closed = any(r.get("event") == "close" for r in new)
                    delta = clean_json({"offset": seen, **view_delta(new)})
                    yield f"event: delta\ndata: {json.dumps(delta, separators=(',', ':'))}\n\n"
                    beat = time.monotonic()
                elif time.monotonic() - beat > HEARTBEAT_S:
                    yield ": keep-alive\n\n"
                    beat = time.monotonic()
                await asyncio.sleep(config.poll_s)

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    # -------------------------------------------------------------------------------- benchmarks

    def _runs() -> dict[str, BenchRun]:
        return {r.id: r for r in discover(config.bench_roots)}

    def _run(bench_id: str) -> BenchRun:
        run = _runs().get(bench_id)
        if run is None:
            raise HTTPException(404, f"no benchmark run {bench_id!r}")
        return run

    @api.get("/benchmarks")
    async def list_benchmarks() -> dict[str, Any]:
        def load() -> dict[str, Any]:
            runs = [bench_overview(r) for r in discover(config.bench_roots)]
            return {"roots": [str(p) for p in config.bench_roots], "runs": runs}

        return clean_json(await run_in_threadpool(load))

    @api.get("/benchmarks/{bench_id}")
    async def get_benchmark(bench_id: str) -> JSONResponse:
        run = _run(bench_id)

        def load() -> dict[str, Any]:
            detail = bench_detail(run)
            episodes = {(e["episode"]): e["sandbox"] for e in _scan()}
            for row in detail["rows"]:
                row["episode_sandbox"] = episodes.get(row.get("episode_id") or "")
            return detail

        return JSONResponse(await run_in_threadpool(load))

    @api.get("/benchmarks/{bench_id}/report")
    async def get_report(bench_id: str) -> HTMLResponse:
        report = _run(bench_id).path / "report.html"
        if not report.is_file():
            raise HTTPException(404, "this run has no report.html (it is written when the run ends)")
        return HTMLResponse(report.read_text(), headers={"Content-Security-Policy": REPORT_CSP})

    @api.get("/benchmarks/{bench_id}/trajectories")
    async def get_trajectories(bench_id: str) -> dict[str, Any]:
        run = _run(bench_id)
        return {"id": run.id, "name": run.name, "trajectories": list_trajectories(run)}

    @api.get("/benchmarks/{bench_id}/trajectories/{name}")
    async def get_trajectory(bench_id: str, name: str) -> JSONResponse:
        run = _run(bench_id)
        try:
            path = trajectory_path(run, name)
            view = await run_in_threadpool(replay_view, path.read_text(), f"{run.name}/{name}")
        except FileNotFoundError as e:
            raise HTTPException(404, str(e)) from None
        except ValueError as e:
            raise HTTPException(422, str(e)) from None
        return JSONResponse(view)

    @api.post("/replay")
    async def post_replay(request: Request, name: str = "uploaded.jsonl") -> JSONResponse:
        body = await request.body()
        if len(body) > MAX_REPLAY_BYTES:
            raise HTTPException(
                413, f"a trajectory over {MAX_REPLAY_BYTES // 2**20} MiB is not replayed here"
            )
        try:
            view = await run_in_threadpool(replay_view, body.decode(), name[:200])
        except UnicodeDecodeError:
            raise HTTPException(422, f"{name}: not UTF-8 text") from None
        except ValueError as e:
            raise HTTPException(422, str(e)) from None
        return JSONResponse(view)

    app.include_router(api)
    return app


__all__ = ["COOKIE", "Auth", "ConsoleConfig", "check_token", "create_app", "new_token"]
