"""The perturbation engine's newer parts with in-memory fakes: refusal of unavailable faults (by the
fault control or by the runtime's support), time triggers and second durations as clock tickers (a
manual clock, then the real one against step boundaries), config, HTTP-fault, contention and
learning-rate faults, and idempotent inject/recover of every fault type."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.unit.fault_fakes import FakeControl, FakeRuntime
from tests.unit.test_faults_plan import _with_plan

from mlsandbox.backends.common.clock import RealClock
from mlsandbox.backends.local.faults.hooks import HttpHooks
from mlsandbox.backends.local.faults.journal import Journal
from mlsandbox.backends.protocols import JobSpec
from mlsandbox.errors import ScenarioError
from mlsandbox.faults.behaviours import BEHAVIOURS, FaultContext, behaviour_for
from mlsandbox.faults.engine import PerturbationEngine, UnavailableFaultError
from mlsandbox.gateway.registry import get_catalog
from mlsandbox.scenario.loader import parse_scenario
from mlsandbox.scenario.perturbations import FAULT_TYPES, config_prefix
from mlsandbox.workloads import fault_hook
from mlsandbox.world.episode import EpisodeState, JobRecord


def _engine(
    plan: list[dict[str, Any]], control: Any = None, *, runtime: Any = None, **kw: Any
) -> tuple[PerturbationEngine, EpisodeState, Any]:
    sc = parse_scenario(_with_plan(plan))
    rt = runtime or FakeRuntime(control or FakeControl(refuse={}))
    st = EpisodeState(episode_id="7-abc", scenario=sc, seed=7, sandbox="t", started_at=rt.clock.time())
    kw.setdefault("addresses", [p.addresses for p in get_catalog().packs])  # what the gateway hands over
    eng = PerturbationEngine(list(sc.perturbations), st, rt, seed=7, **kw)
    return eng, st, rt


def _until(check: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_every_fault_type_has_a_behaviour() -> None:
    assert set(BEHAVIOURS) == set(FAULT_TYPES)


def test_a_plan_with_an_unavailable_fault_is_refused_naming_entry_and_reason() -> None:
    control = FakeControl({"cpu_throttle": "needs cgroup v1 and root"})
    plan = [{"name": "cut", "when": {"at_step": 1}, "fault": {"type": "cpu_throttle"}}]
    with pytest.raises(
        UnavailableFaultError, match="'cut' uses fault 'cpu_throttle': needs cgroup v1 and root"
    ):
        _engine(plan, control)
    eng, st, _ = _engine(plan, control, strict=False)  # recorded as not injected instead
    st.step = 1
    eng.tick()
    assert eng.records[0].error == "unavailable: needs cgroup v1 and root"


def test_a_plan_is_refused_when_the_runtime_refuses_what_its_fault_needs() -> None:
    """The runtime's support counts too: a fault type it refuses, or a capability the fault acts through."""
    plan = [
        {"name": "moved", "when": {"at_step": 1}, "fault": {"type": "wrong_endpoint"}},
        {"name": "slow", "when": {"at_step": 1}, "target": "endpoint:minio", "fault": {"type": "latency"}},
        {"name": "full", "when": {"at_step": 1}, "fault": {"type": "disk_full"}},
    ]
    rt = FakeRuntime(
        FakeControl(refuse={}),
        unsupported={"config": "no config store here", "fault:latency": "no proxy in front of minio"},
    )
    with pytest.raises(UnavailableFaultError) as info:
        _engine(plan, runtime=rt)
    message = str(info.value)
    assert "on the fake backend" in message
    assert (
        "'moved' uses fault 'wrong_endpoint': it needs config, which the fake backend refuses: no config"
        in message
    )
    assert "'slow' uses fault 'latency': no proxy in front of minio" in message
    assert "'full'" not in message


def test_a_mechanism_refused_at_injection_is_recorded_unavailable_and_changes_nothing() -> None:
    """A backend may refuse only when asked (Unsupported from the call): the record says why."""
    control = FakeControl(refuse={}, no_network="toxiproxy is not running")
    plan = [
        {"name": "slow", "when": {"at_step": 1}, "target": "endpoint:minio", "fault": {"type": "latency"}},
        {"name": "full", "when": {"at_step": 1}, "fault": {"type": "disk_full"}},
    ]
    eng, st, _ = _engine(plan, control)
    st.step = 1
    eng.tick()
    by = {r.name: r for r in eng.records}
    assert by["slow"].error == "unavailable: toxiproxy is not running" and not by["slow"].active
    assert by["full"].error is None and control.quotas == {st.bucket: 1}
    assert [r.name for r in eng.active_faults] == ["full"]


def test_time_trigger_and_seconds_duration_are_clock_tickers() -> None:
    """On a virtual clock the fault fires and ends inside the clock's sleep, between step boundaries."""
    eng, st, rt = _engine(
        [
            {
                "name": "full",
                "when": {"at_time": 0.4},
                "fault": {"type": "disk_full"},
                "duration": {"seconds": 0.6},
            }
        ]
    )
    clock, control = rt.clock, rt.faults
    st.step = 1
    eng.tick()  # too early
    clock.sleep(0.39)
    assert control.quotas == {} and eng.records == []
    clock.sleep(0.02)
    rec = eng.records[0]
    assert control.quotas == {st.bucket: 1} and rec.injected_step == 1
    assert rec.injected_at - st.started_at == pytest.approx(0.4)
    clock.sleep(0.55)
    assert rec.active
    clock.sleep(0.1)
    assert control.quotas == {st.bucket: None} and rec.recovered_by == "expiry"
    assert rec.recovered_at - rec.injected_at == pytest.approx(0.6)
    assert rec.time_to_mitigate_s == pytest.approx(0.6)
    eng.recover_all()
    assert clock.pending() == 0


def test_recover_all_cancels_the_tickers_nothing_fires_after() -> None:
    eng, st, rt = _engine(
        [
            {"name": "later", "when": {"at_time": 5}, "fault": {"type": "disk_full"}},
            {
                "name": "now",
                "when": {"at_step": 1},
                "target": "endpoint:minio",
                "fault": {"type": "latency"},
                "duration": {"seconds": 3},
            },
        ]
    )
    st.step = 1
    eng.tick()
    assert rt.clock.pending() == 2  # the at_time and the expiry
    eng.recover_all()
    assert rt.clock.pending() == 0 and not rt.faults.network.toxics
    rt.clock.sleep(10)
    assert [r.name for r in eng.records] == ["now"] and rt.faults.quotas == {}


def test_without_timer_a_time_trigger_waits_for_a_step_boundary() -> None:
    eng, st, rt = _engine(
        [{"name": "later", "when": {"at_time": 1}, "fault": {"type": "disk_full"}}], timer=False
    )
    rt.clock.sleep(2)
    assert eng.records == [] and rt.clock.pending() == 0
    st.step = 1
    eng.tick()
    assert [r.name for r in eng.records] == ["later"]


def test_time_trigger_fires_between_steps_on_the_real_clock() -> None:
    eng, st, rt = _engine(
        [
            {
                "name": "full",
                "when": {"at_time": 0.4},
                "fault": {"type": "disk_full"},
                "duration": {"seconds": 0.6},
            }
        ],
        runtime=FakeRuntime(FakeControl(refuse={}), clock=RealClock()),
    )
    control = rt.faults
    try:
        st.step = 1
        eng.tick()  # too early
        assert control.quotas == {}
        assert _until(lambda: control.quotas.get(st.bucket) == 1), "not injected between steps"
        rec = eng.records[0]
        assert rec.injected_step == 1 and rec.injected_at - st.started_at >= 0.4
        assert _until(lambda: control.quotas.get(st.bucket) is None), "not recovered between steps"
        assert rec.recovered_by == "expiry" and rec.recovered_at - rec.injected_at >= 0.6
    finally:
        eng.recover_all()


def test_timer_and_steps_do_not_race() -> None:
    plan = [
        {
            "name": f"t{i}",
            "when": {"at_time": 0.05 * (i + 1)},
            "fault": {"type": "disk_full"},
            "duration": {"seconds": 0.05},
        }
        for i in range(6)
    ]
    eng, st, _ = _engine(plan, runtime=FakeRuntime(FakeControl(refuse={}), clock=RealClock()))
    stop = threading.Event()

    def stepper() -> None:
        while not stop.is_set():
            st.step += 1
            eng.tick()
            eng.observe_action({"type": "wait", "seconds": 0})

    thread = threading.Thread(target=stepper)
    thread.start()
    try:
        assert _until(lambda: all(not r.active for r in eng.records) and len(eng.records) == 6, 10)
    finally:
        stop.set()
        thread.join()
        eng.recover_all()
    assert sorted(r.name for r in eng.records) == [f"t{i}" for i in range(6)]  # each fired exactly once


def test_config_faults_write_a_wrong_value_and_restore_the_original() -> None:
    eng, st, rt = _engine(
        [
            {
                "name": "stale",
                "when": {"at_step": 1},
                "fault": {"type": "rotated_credentials"},
                "recovery": "manual",
            },
            {
                "name": "moved",
                "when": {"at_step": 1},
                "target": "config:mlflow_tracking_uri",
                "fault": {"type": "wrong_endpoint"},
                "duration": {"steps": 2},
            },
        ]
    )
    prefix = config_prefix(st.episode_id)
    rt.config.values = {
        prefix + "s3_secret_access_key": "right-secret",
        prefix + "mlflow_tracking_uri": "http://127.0.0.1:5000",
    }
    st.step = 1
    eng.tick()
    stale = rt.config.values[prefix + "s3_secret_access_key"]
    moved = rt.config.values[prefix + "mlflow_tracking_uri"]
    assert (
        stale != "right-secret" and moved.startswith("http://127.0.0.1:") and moved != "http://127.0.0.1:5000"
    )
    eng.observe_action({"type": "get_config", "key": "s3_secret_access_key"})
    assert eng.records[0].detected_step == 1
    rt.config.values[prefix + "s3_secret_access_key"] = "right-secret"  # the agent fixes it
    st.step = 3
    eng.tick()
    by = {r.name: r for r in eng.records}
    assert by["stale"].recovered_by == "agent" and by["moved"].recovered_by == "expiry"
    assert rt.config.values[prefix + "mlflow_tracking_uri"] == "http://127.0.0.1:5000"
    writes = rt.config.writes
    eng.recover_all()  # already recovered: nothing written again
    assert rt.config.writes == writes


def test_config_fault_without_the_key_is_recorded_unavailable() -> None:
    eng, st, _ = _engine(
        [{"name": "stale", "when": {"at_step": 1}, "fault": {"type": "rotated_credentials"}}]
    )
    st.step = 1
    eng.tick()
    assert "has no 's3_secret_access_key'" in (eng.records[0].error or "")


def test_http_errors_resolve_the_registered_hook_file(tmp_path: Path) -> None:
    plan = [
        {
            "name": "sick",
            "when": {"at_step": 1},
            "target": "http:demo-api",
            "fault": {"type": "http_errors", "error_rate": 0.25, "status": 502, "delay_ms": 40},
        }
    ]

    def control() -> FakeControl:  # the local backend's hook files, journaled in a directory of the test
        return FakeControl(refuse={}, hooks=HttpHooks(Journal(tmp_path / "sandbox")))

    eng, st, _ = _engine(plan, control())
    st.step = 1
    eng.tick()
    assert "no HTTP service 'demo-api' has registered a fault hook" in (eng.records[0].error or "")
    path = tmp_path / "hook.json"
    fault_hook.register_hook("demo-api", path, scope="7-abc")
    try:
        eng, st, _ = _engine(plan, control())
        st.step = 1
        eng.tick()
        assert json.loads(path.read_text()) == {"error_rate": 0.25, "status": 502, "delay_ms": 40, "seed": 7}
        eng.recover_all()
        eng.recover_all()
        assert not path.exists() and not list((tmp_path / "sandbox").rglob("*.json"))  # journal emptied
    finally:
        fault_hook.unregister_hook("demo-api", scope="7-abc")
    assert fault_hook.hook_file("demo-api", scope="7-abc") is None


def test_divergent_learning_rate_is_a_default_only_for_algorithms_that_have_one() -> None:
    eng, st, _ = _engine(
        [{"name": "lr", "when": {"at_step": 1}, "fault": {"type": "divergent_learning_rate"}}]
    )
    st.step = 1
    eng.tick()

    def job(algorithm: str, hyperparams: dict[str, Any]) -> JobSpec:
        args = ["--algorithm", algorithm, "--hyperparams", json.dumps(hyperparams)]
        return JobSpec(job_id=f"j-{algorithm}", workload="trainer", args=args)

    out = eng.adjust_job(job("mlp", {"alpha": 0.1}), "job-1")
    assert json.loads(out.args[3]) == {"alpha": 0.1, "learning_rate_init": 1e6}
    assert (
        eng.adjust_job(job("mlp", {"learning_rate_init": 0.01}), "job-2").args[3]
        == '{"learning_rate_init": 0.01}'
    )
    assert eng.adjust_job(job("random_forest", {}), "job-3").args[3] == "{}"
    assert eng.records[0].affected_jobs == ["job-1"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"target": "config:nope", "fault": {"type": "rotated_credentials"}}, "unknown config 'nope'"),
        (
            {"target": "config:s3_secret_access_key", "fault": {"type": "wrong_endpoint"}},
            "unknown config 's3_secret_access_key'",
        ),
        ({"target": "http:", "fault": {"type": "http_errors"}}, "names no HTTP service"),
        (
            {"target": "http:api", "fault": {"type": "http_errors", "status": 404}},
            "greater than or equal to 500",
        ),
        (
            {"target": "endpoint:minio", "fault": {"type": "cpu_contention"}},
            "acts on a jobs or service target",
        ),
        ({"fault": {"type": "wrong_endpoint", "url": "not a url"}}, "String should match pattern"),
    ],
)
def test_new_faults_fail_precisely(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(_with_plan([{"name": "bad", "when": {"at_step": 1}, **entry}]))


SAMPLES: dict[str, dict[str, Any]] = {
    "kill_service": {"target": "service:mlflow"},
    "freeze_service": {"target": "service:minio"},
    "crash_loop": {"target": "service:mlflow"},
    "memory_limit": {},
    "cpu_throttle": {},
    "disk_full": {},
    "latency": {"target": "endpoint:minio"},
    "bandwidth": {"target": "endpoint:minio"},
    "timeout": {"target": "endpoint:mlflow"},
    "reset_peer": {"target": "endpoint:minio"},
    "endpoint_down": {"target": "endpoint:mlflow"},
    "job_timeout": {},
    "cpu_contention": {},
    "http_errors": {"target": "http:idem-api"},
    "wrong_endpoint": {},
    "rotated_credentials": {},
    "divergent_learning_rate": {},
}


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_inject_and_recover_are_idempotent(kind: str) -> None:
    """inject twice = inject once; recover twice = recover once; afterwards everything is as before."""
    sc = parse_scenario(
        _with_plan([{"name": "f", "when": {"at_step": 1}, "fault": {"type": kind}, **SAMPLES[kind]}])
    )
    st = EpisodeState(episode_id="7-abc", scenario=sc, seed=7, sandbox="t")
    st.jobs["job-1"] = JobRecord("job-1", "7-abc-job-1", "x", "trainer", 0, state="running")
    control = FakeControl(refuse={}, http_services=["idem-api"], running_jobs=["7-abc-job-1"])
    rt = FakeRuntime(control)
    prefix = config_prefix(st.episode_id)
    rt.config.values = {prefix + "s3_endpoint_url": "http://s3", prefix + "s3_secret_access_key": "secret-1"}
    ctx = FaultContext(state=st, runtime=rt, control=control)  # type: ignore[arg-type]
    ctx.job_resources["7-abc-job-1"] = (1.0, 1024)

    def snapshot() -> Any:
        return control.snapshot(), dict(rt.config.values)

    before = snapshot()
    beh = behaviour_for(sc.perturbations[0])
    beh.inject(ctx)
    once = snapshot()
    beh.inject(ctx)
    assert snapshot() == once
    if kind not in ("job_timeout", "divergent_learning_rate"):  # these change jobs as they start only
        assert once != before, "the fault changed nothing"
    beh.recover(ctx)
    beh.recover(ctx)
    assert snapshot() == before


def test_contention_on_jobs_catches_each_running_job_once_and_stops() -> None:
    eng, st, rt = _engine(
        [{"name": "noisy", "when": {"at_step": 1}, "fault": {"type": "cpu_contention", "workers": 2}}]
    )
    control = rt.faults
    st.jobs["job-1"] = JobRecord("job-1", "7-abc-job-1", "x", "trainer", 0, state="running")
    control.running_jobs = {"7-abc-job-1"}
    st.step = 1
    eng.tick()
    rec = eng.records[0]
    ((target, workers, caught),) = control.contention.values()
    assert (target, workers, caught) == ("jobs", 2, {"7-abc-job-1"}) and rec.affected_jobs == ["job-1"]
    st.jobs["job-2"] = JobRecord("job-2", "7-abc-job-2", "x", "trainer", 1, state="running")
    control.running_jobs.add("7-abc-job-2")
    st.step = 2
    eng.tick()  # a job that started meanwhile is caught at the next boundary
    assert rec.affected_jobs == ["job-1", "job-2"]
    eng.observe_action({"type": "get_job", "job_id": "job-2"})
    assert rec.detected_step == 2
    eng.recover_all()
    assert control.contention == {} and rec.recovered_by == "episode_end"


def test_contention_on_a_service_names_the_service_target() -> None:
    eng, st, rt = _engine(
        [
            {
                "name": "noisy",
                "when": {"at_step": 1},
                "target": "service:mlflow",
                "fault": {"type": "cpu_contention"},
            }
        ]
    )
    st.step = 1
    eng.tick()
    assert [t for t, _, _ in rt.faults.contention.values()] == ["service:mlflow"]
    eng.observe_action({"type": "get_service_health", "service": "mlflow"})
    assert eng.records[0].detected_step == 1
