"""The HTTP gateway on real services: episodes like in-process, token isolation, 422s, fuzzing, `serve`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from gymnasium.utils.env_checker import check_env

from mlsandbox.env import MLSandboxEnv, decode_observation
from mlsandbox.env.remote import RemoteMLSandboxEnv
from mlsandbox.gateway import action_catalog
from mlsandbox.gateway.client import GatewayClient, GatewayHTTPError
from mlsandbox.gateway.http import create_app
from mlsandbox.gateway.render import TextObservation
from mlsandbox.gateway.sessions import SessionManager

pytestmark = pytest.mark.services

SCENARIO = "tabular-quality-basic"
TERMINAL = {"succeeded", "failed", "cancelled"}


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def manager(sandbox: Any) -> Iterator[SessionManager]:
    m = SessionManager(sandbox.runtime(), sandbox.name, max_sessions=8)
    yield m
    m.close_all()


@pytest.fixture(scope="module")
def app(manager: SessionManager) -> FastAPI:
    return create_app(manager, close_sessions_on_shutdown=False)


@pytest.fixture()
def http(app: FastAPI, manager: SessionManager) -> Iterator[TestClient]:
    with TestClient(app) as tc:
        yield tc
    manager.close_all()


@pytest.fixture()
def gw(http: TestClient) -> Iterator[GatewayClient]:
    client = GatewayClient("http://testserver", http=http)
    yield client
    client.close_all()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server_url(app: FastAPI) -> Iterator[str]:
    """The app behind a real uvicorn server on a loopback port (in a thread of this process)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=15)


def _buckets(s3: Any) -> set[str]:
    return {b["Name"] for b in s3.list_buckets()["Buckets"]}


# ---------------------------------------------------------------------------------------------- episodes


def drive_episode(env: gym.Env[Any, Any], seed: int) -> dict[str, Any]:
    """A fixed script (with three invalid actions) whose only inputs from the world are job/run ids."""
    obs, info = env.reset(seed=seed)
    first = decode_observation(obs)
    trace: list[tuple[str | None, bool, str | None]] = []

    def act(action: Any) -> tuple[dict[str, Any], dict[str, Any], bool, bool]:
        o, _reward, terminated, truncated, inf = env.step(action)
        d = decode_observation(o)
        if not (isinstance(action, dict) and action.get("type") == "wait"):
            trace.append((d["action"], d["ok"], (d["error"] or {}).get("code")))
        return d, inf, terminated, truncated

    act({"type": "list_datasets"})
    act("{this is not json")
    act({"type": "teleport"})
    act({"type": "check_data_quality", "dataset": "raw/customers.parquet"})
    act(
        {
            "type": "clean_dataset",
            "dataset": "raw/customers.parquet",
            "strategy": "impute_median",
            "output": "clean/c.parquet",
        }
    )
    o, *_ = act({"type": "train_model", "dataset": "clean/c.parquet", "algorithm": "gradient_boosting"})
    job = o["result"]["job_id"]
    for _ in range(40):
        o, *_ = act({"type": "wait", "seconds": 15})
        if all(j["state"] in TERMINAL for j in o["result"]["jobs"]):
            break
    o, *_ = act({"type": "get_job", "job_id": job})
    assert o["result"]["state"] == "succeeded", o
    act({"type": "register_model", "run_id": o["result"]["run_id"], "name": "churn"})
    act({"type": "register_model", "run_id": "0" * 32, "name": "churn"})
    listed, *_ = act({"type": "list_datasets"})
    final, info, terminated, truncated = act({"type": "submit"})
    return {
        "first_observation": first,
        "trace": trace,
        "datasets": listed["result"]["datasets"],
        "registered": final["result"]["registered_models"],
        "invalid_actions": info["invalid_actions"],
        "terminated": terminated,
        "truncated": truncated,
        "success": info["grade"]["success"],
    }


def test_remote_episode_reaches_the_same_final_state_as_in_process(
    sandbox: Any, server_url: str, manager: SessionManager
) -> None:
    local = MLSandboxEnv(SCENARIO, sandbox=sandbox.name, start_sandbox=False)
    try:
        expected = drive_episode(local, seed=7)
        local_state = local.gateway.state  # type: ignore[union-attr]
        local_keys = sorted(local_state.datasets)
    finally:
        local.close()
    remote = RemoteMLSandboxEnv(server_url, SCENARIO)
    try:
        got = drive_episode(remote, seed=7)
        session = manager._sessions[remote.session_id]  # type: ignore[index]
        remote_state = session.gateway.state
        assert sorted(remote_state.datasets) == local_keys
        assert len(remote_state.registered) == len(local_state.registered) == 1
        assert remote_state.invalid_actions == local_state.invalid_actions == 3
        assert remote_state.bucket != local_state.bucket
    finally:
        remote.close()
    assert got == expected
    assert remote.session_id is None and len(manager) == 0


def test_remote_env_has_the_spaces_of_the_in_process_env_and_passes_check_env(
    sandbox: Any, server_url: str
) -> None:
    local = MLSandboxEnv(SCENARIO, sandbox=sandbox.name, start_sandbox=False)
    remote = RemoteMLSandboxEnv(server_url, SCENARIO)
    try:
        assert remote.observation_space == local.observation_space
        assert remote.action_space == local.action_space
        check_env(remote)
        # Same encoding, observation for observation (ids live in info only).
        assert remote.reset(seed=11)[0]["text"] == local.reset(seed=11)[0]["text"]
        a = remote.step({"type": "list_datasets"})[0]
        b = local.step({"type": "list_datasets"})[0]
        assert a["text"] == b["text"] and a["ok"] == b["ok"] == 1
        text_env = TextObservation(remote)
        obs, info = text_env.reset(seed=11)
        assert obs.startswith("[step 0] reset: ok") and info["observation_tokens"] > 0
        assert text_env.observation_space.contains(obs)
    finally:
        remote.close()
        local.close()


# ---------------------------------------------------------------------------------------------- auth


def test_each_token_reaches_only_its_own_session(
    http: TestClient, gw: GatewayClient, manager: SessionManager
) -> None:
    a = gw.create_session(SCENARIO, seed=1)
    b = gw.create_session(SCENARIO, seed=2)
    assert a.token != b.token and a.session_id != b.session_id
    before = gw.observation(a.session_id)
    state_a = manager._sessions[a.session_id].gateway.state
    routes: list[tuple[str, str, Any]] = [
        (
            "POST",
            f"/sessions/{a.session_id}/step",
            {"type": "clean_dataset", "dataset": "raw/customers.csv", "strategy": "drop_na"},
        ),
        ("GET", f"/sessions/{a.session_id}/observation", None),
        ("POST", f"/sessions/{a.session_id}/reset", {"seed": 5}),
        ("DELETE", f"/sessions/{a.session_id}", None),
    ]
    for method, path, body in routes:
        kwargs: dict[str, Any] = {} if body is None else {"json": body}
        r = http.request(method, path, **kwargs)
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
        r = http.request(method, path, headers={"Authorization": "Bearer not-a-token"}, **kwargs)
        assert r.status_code == 401, (method, path, r.text)
        r = http.request(method, path, headers={"Authorization": f"Bearer {b.token}"}, **kwargs)
        assert r.status_code == 403, (method, path, r.text)
        assert r.json() == {"detail": "this token belongs to another session"}
    # Nothing happened to session a.
    after = gw.observation(a.session_id)
    assert after == before
    assert (
        state_a.step == 0
        and state_a.invalid_actions == 0
        and list(state_a.datasets)
        == [
            "raw/customers.csv",
            "raw/customers.parquet",
        ]
    )
    assert manager._sessions[a.session_id].gateway.state is state_a  # not reset
    assert a.session_id in manager.session_ids()
    # Session b is unharmed too, and its own token works.
    assert gw.step(b.session_id, {"type": "list_datasets"}).observation.ok


# ---------------------------------------------------------------------------------------------- 422


def _loc(r: httpx.Response) -> list[list[Any]]:
    assert r.status_code == 422, r.text
    return [e["loc"] for e in r.json()["detail"]]


def test_bad_bodies_are_422_with_the_field_path_and_change_nothing(
    http: TestClient, gw: GatewayClient
) -> None:
    assert _loc(http.post("/sessions", json={"seed": -1})) == [["body", "seed"]]
    assert _loc(http.post("/sessions", json={"scenario": "no-such-scenario"})) == [["body", "scenario"]]
    assert _loc(http.post("/sessions", json={"options": {"max_steps": 0}})) == [
        ["body", "options", "max_steps"]
    ]
    assert _loc(http.post("/sessions", json={"sneaky": True})) == [["body", "sneaky"]]
    assert _loc(http.post("/sessions", json=[1, 2])) == [["body"]]
    not_utf8 = http.post(
        "/sessions", content=b'{"seed": "\xff"}', headers={"content-type": "application/json"}
    )
    assert _loc(not_utf8) == [["body"]]
    assert len(gw.tokens) == 0

    s = gw.create_session(SCENARIO, seed=3)
    auth = {"Authorization": f"Bearer {s.token}"}
    base = f"/sessions/{s.session_id}"
    assert _loc(http.post(f"{base}/step", json=[1, 2, 3], headers=auth)) == [
        ["body", "dict[str,any]"],
        ["body", "str"],
    ]
    assert _loc(http.post(f"{base}/step", json=42, headers=auth))[0][0] == "body"
    r = http.post(f"{base}/step", content=b"{not json", headers={**auth, "content-type": "application/json"})
    assert r.json()["detail"][0]["type"] == "json_invalid"
    assert _loc(http.post(f"{base}/step", headers=auth)) == [["body"]]
    assert _loc(http.post(f"{base}/reset", json={"seed": "soon"}, headers=auth)) == [["body", "seed"]]
    assert _loc(http.post(f"{base}/reset", json={"options": {"max_steps": "x"}}, headers=auth)) == [
        ["body", "options", "max_steps"]
    ]
    assert _loc(http.get("/sessions/not-an-id/observation", headers=auth)) == [["path", "session_id"]]
    assert gw.observation(s.session_id).observation.step == 0  # nothing done

    # An invalid action in a valid envelope is a normal step: 200, an error observation and its penalty.
    r = gw.step(s.session_id, {"type": "wait", "seconds": "a while"})
    assert r.observation.ok is False and r.observation.error is not None
    assert r.observation.error.code == "invalid_parameters"
    assert r.observation.error.details == [
        {"field": "seconds", "message": "Input should be a valid number, unable to parse string as a number"}
    ]
    assert r.reward < 0 and r.info["reward_components"]["invalid_action"] < 0
    r = gw.step(s.session_id, "{raw text that is not json")
    assert r.observation.error is not None and r.observation.error.code == "invalid_json"
    assert gw.observation(s.session_id).observation.step == 2


# ---------------------------------------------------------------------------------------------- lifecycle


def test_reset_close_and_options(gw: GatewayClient, s3: Any, manager: SessionManager) -> None:
    s = gw.create_session(SCENARIO, seed=4, options={"max_steps": 2})
    bucket1 = manager._sessions[s.session_id].gateway.state.bucket
    assert bucket1 in _buckets(s3)
    assert s.observation.budget.steps_left == 2 and s.seed == 4 and s.info["episode_id"]
    r1 = gw.step(s.session_id, {"type": "list_runs"})
    r2 = gw.step(s.session_id, {"type": "list_runs"})
    assert not r1.truncated and r2.truncated and not r2.terminated
    assert gw.observation(s.session_id).done
    over = gw.step(s.session_id, {"type": "list_runs"})
    assert over.observation.error is not None and over.observation.error.code == "episode_over"

    res = gw.reset(s.session_id, seed=9, options={"max_steps": 5})
    assert res.seed == 9 and res.observation.step == 0 and res.observation.budget.steps_left == 5
    assert res.info["episode_id"] != s.info["episode_id"]
    bucket2 = manager._sessions[s.session_id].gateway.state.bucket
    assert bucket1 not in _buckets(s3) and bucket2 in _buckets(s3)  # the old episode was closed
    assert not gw.observation(s.session_id).done

    token = gw.tokens[s.session_id]
    assert gw.close(s.session_id).closed
    assert bucket2 not in _buckets(s3)
    gw.tokens[s.session_id] = token
    with pytest.raises(GatewayHTTPError) as e:
        gw.step(s.session_id, {"type": "list_runs"})
    assert e.value.status_code == 401


def test_sessions_run_in_parallel_and_steps_on_one_session_serialise(server_url: str) -> None:
    with GatewayClient(server_url) as gw:
        a = gw.create_session(SCENARIO, seed=1)
        b = gw.create_session(SCENARIO, seed=2)

        def timed(calls: list[tuple[str, float]]) -> tuple[float, list[int]]:
            steps: list[int] = []
            lock = threading.Lock()

            def one(sid: str, seconds: float) -> None:
                r = gw.step(sid, {"type": "wait", "seconds": seconds})
                with lock:
                    steps.append(r.observation.step)

            threads = [threading.Thread(target=one, args=c) for c in calls]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return time.perf_counter() - t0, sorted(steps)

        parallel, steps = timed([(a.session_id, 2.0), (b.session_id, 2.0)])
        assert parallel < 3.5 and steps == [1, 1]
        serial, steps = timed([(a.session_id, 1.5), (a.session_id, 1.5)])
        assert serial >= 3.0 and steps == [2, 3]


def test_session_cap_is_429(sandbox: Any) -> None:
    small = SessionManager(sandbox.runtime(), sandbox.name, max_sessions=1)
    with TestClient(create_app(small)) as http:
        assert http.post("/sessions", json={"seed": 1}).status_code == 201
        r = http.post("/sessions", json={"seed": 2})
        assert r.status_code == 429 and "at most" in r.json()["detail"]
        assert http.get("/health").json()["sessions"] == 1
    assert len(small) == 0  # the app's shutdown closed its sessions


# ---------------------------------------------------------------------------------------------- OpenAPI


def test_openapi_document_is_complete(http: TestClient) -> None:
    doc = http.get("/openapi.json").json()
    assert doc["components"]["securitySchemes"] == {
        "SessionToken": {
            "type": "http",
            "scheme": "bearer",
            "description": "The token returned by POST /sessions. It reaches its own session only.",
        }
    }
    expected = {
        ("/health", "get"),
        ("/tools", "get"),
        ("/sessions", "post"),
        ("/sessions/{session_id}/step", "post"),
        ("/sessions/{session_id}/observation", "get"),
        ("/sessions/{session_id}/reset", "post"),
        ("/sessions/{session_id}", "delete"),
    }
    got = {(p, m) for p, ops in doc["paths"].items() for m in ops}
    assert got == expected
    for path, method in expected:
        op = doc["paths"][path][method]
        ok = next(code for code in op["responses"] if code.startswith("2"))
        assert "$ref" in op["responses"][ok]["content"]["application/json"]["schema"], (path, method)
        if path.startswith("/sessions/"):
            assert op["security"] == [{"SessionToken": []}]
            assert {"401", "403", "422"} <= set(op["responses"]), (path, method)
        else:
            assert "security" not in op
    tools = http.get("/tools").json()
    assert tools == {"actions": action_catalog()}


def test_fuzz_the_api_from_its_openapi_document(app: FastAPI, manager: SessionManager) -> None:
    """Schemathesis, bounded: a few dozen cases per mode; no 5xx, every response conforms to the document."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        negative_data_rejection,
        response_headers_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
        negative_data_rejection,
    ]
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    victim = manager.create()
    auth = {"Authorization": f"Bearer {victim.token}"}
    counts: dict[str, int] = {}
    budgets = {"/sessions": 4, "/sessions/{session_id}/reset": 3}  # each creates a real episode

    def run(operation: Any, mode: Any, *, as_owner: bool) -> None:
        kwargs: dict[str, Any] = {}
        if as_owner and "{session_id}" in operation.path:
            kwargs = {"headers": auth}
            if mode == GenerationMode.POSITIVE:
                kwargs["path_parameters"] = {"session_id": victim.session_id}
        strategy = operation.as_strategy(generation_mode=mode, **kwargs)
        examples = budgets.get(operation.path, 12)

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def fuzz(case: Any) -> None:
            # POST /sessions and /reset start a real episode: a flow scenario's takes over schemathesis's
            # default 10 s on a loaded machine (a CI run timed out creating pipeline-failure-upstream)
            response = case.call(timeout=120)
            case.validate_response(response, checks=checks)
            counts[str(response.status_code)] = counts.get(str(response.status_code), 0) + 1

        fuzz()

    for result in schema.get_all_operations():
        op = result.ok()
        if op.method.upper() == "DELETE":
            run(op, GenerationMode.POSITIVE, as_owner=False)  # 401s only: the victim must stay open
            continue
        run(op, GenerationMode.POSITIVE, as_owner=True)
        if op.path not in ("/health", "/tools"):  # nothing to negate there
            run(op, GenerationMode.NEGATIVE, as_owner=True)
        if "{session_id}" in op.path:
            run(op, GenerationMode.POSITIVE, as_owner=False)
    assert not any(code.startswith("5") for code in counts), counts
    assert {"200", "401", "422"} <= set(counts), counts
    manager.close_all()


# ---------------------------------------------------------------------------------------------- serve


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"serve exited with {proc.returncode}"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("the gateway did not become healthy")


def test_serve_command_runs_the_gateway_and_closes_sessions_on_exit(sandbox: Any, s3: Any) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "mlsandbox.cli.interfaces", "serve", "--sandbox", sandbox.name, "--no-start",
           "--port", str(port), "--log-level", "warning"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())
    try:
        _wait_healthy(url, proc)
        before = _buckets(s3)
        gw = GatewayClient(url)
        s = gw.create_session(SCENARIO, seed=6)
        assert gw.step(s.session_id, {"type": "list_datasets"}).observation.ok
        assert len(_buckets(s3) - before) == 1
        assert gw.health().sessions == 1
        gw.http.close()
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert _buckets(s3) - before == set(), "the served session's episode was closed on shutdown"


def test_serve_refuses_a_sandbox_that_is_not_running() -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlsandbox.cli.interfaces",
            "serve",
            "--sandbox",
            "not-running-here",
            "--no-start",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and "is not running" in r.stderr
