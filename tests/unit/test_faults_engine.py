"""The perturbation engine's newer parts with a fake backend: refusal of unavailable faults, the timer
thread (time triggers and second durations between steps), config, HTTP-hook and learning-rate faults."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_faults_plan import FakeControl, _with_plan

from mlsandbox.backends.protocols import JobSpec
from mlsandbox.errors import ScenarioError
from mlsandbox.faults.behaviours import BEHAVIOURS
from mlsandbox.faults.engine import PerturbationEngine, UnavailableFaultError
from mlsandbox.scenario.loader import parse_scenario
from mlsandbox.scenario.perturbations import FAULT_TYPES, config_prefix
from mlsandbox.workloads import fault_hook
from mlsandbox.world.episode import EpisodeState, JobRecord


class FakeStore:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.writes = 0

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def set(self, name: str, value: str) -> None:
        self.writes += 1
        self.values[name] = value


class ControlWithConfig(FakeControl):
    def __init__(self, unavailable: dict[str, str] | None = None) -> None:
        super().__init__()
        self.config = FakeStore()
        self._unavailable = unavailable or {}

    def unavailable(self) -> dict[str, str]:
        return dict(self._unavailable)


def _engine(
    plan: list[dict[str, Any]], control: Any = None, **kw: Any
) -> tuple[PerturbationEngine, EpisodeState, Any]:
    sc = parse_scenario(_with_plan(plan))
    st = EpisodeState(episode_id="7-abc", scenario=sc, seed=7, sandbox="t")
    control = control or ControlWithConfig()
    eng = PerturbationEngine(list(sc.perturbations), st, runtime=None, control=control, seed=7, **kw)  # type: ignore[arg-type]
    return eng, st, control


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
    control = ControlWithConfig({"cpu_throttle": "needs cgroup v1 and root"})
    plan = [{"name": "cut", "when": {"at_step": 1}, "fault": {"type": "cpu_throttle"}}]
    with pytest.raises(
        UnavailableFaultError, match="'cut' uses fault 'cpu_throttle': needs cgroup v1 and root"
    ):
        _engine(plan, control)
    eng, st, _ = _engine(plan, control, strict=False)  # recorded as not injected instead
    st.step = 1
    eng.tick()
    assert eng.records[0].error == "unavailable: needs cgroup v1 and root"


def test_time_trigger_fires_between_steps_and_seconds_duration_ends_between_steps() -> None:
    eng, st, control = _engine(
        [
            {
                "name": "full",
                "when": {"at_time": 0.4},
                "fault": {"type": "disk_full"},
                "duration": {"seconds": 0.6},
            }
        ]
    )
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
    assert eng._thread is not None and not eng._thread.is_alive()


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
    eng, st, _ = _engine(plan)
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
    eng, st, control = _engine(
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
    control.config.values = {
        prefix + "s3_secret_access_key": "right-secret",
        prefix + "mlflow_tracking_uri": "http://127.0.0.1:5000",
    }
    st.step = 1
    eng.tick()
    stale = control.config.values[prefix + "s3_secret_access_key"]
    moved = control.config.values[prefix + "mlflow_tracking_uri"]
    assert (
        stale != "right-secret" and moved.startswith("http://127.0.0.1:") and moved != "http://127.0.0.1:5000"
    )
    eng.observe_action({"type": "get_config", "key": "s3_secret_access_key"})
    assert eng.records[0].detected_step == 1
    control.config.values[prefix + "s3_secret_access_key"] = "right-secret"  # the agent fixes it
    st.step = 3
    eng.tick()
    by = {r.name: r for r in eng.records}
    assert by["stale"].recovered_by == "agent" and by["moved"].recovered_by == "expiry"
    assert control.config.values[prefix + "mlflow_tracking_uri"] == "http://127.0.0.1:5000"
    writes = control.config.writes
    eng.recover_all()  # already recovered: nothing written again
    assert control.config.writes == writes


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
    eng, st, _ = _engine(plan)
    st.step = 1
    eng.tick()
    assert "no HTTP service 'demo-api' has registered a fault hook" in (eng.records[0].error or "")
    path = tmp_path / "hook.json"
    fault_hook.register_hook("demo-api", path, scope="7-abc")
    try:
        eng, st, _ = _engine(plan)
        st.step = 1
        eng.tick()
        assert json.loads(path.read_text()) == {"error_rate": 0.25, "status": 502, "delay_ms": 40, "seed": 7}
        eng.recover_all()
        eng.recover_all()
        assert not path.exists()
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


class FullControl(ControlWithConfig):
    """Every mechanism, recording what is in effect (to compare before and after)."""

    def __init__(self) -> None:
        super().__init__()
        self.contention: dict[str, set[int]] = {}
        self.limits: dict[str, dict[str, Any]] = {}
        self.hooks: dict[str, dict[str, Any]] = {}

    def credentials(self) -> dict[str, str]:
        return {}

    def start_contention(self, key: str, workers: int, *, pin: bool = True) -> int:
        self.contention.setdefault(key, set())
        return 1

    def pin_to_contention(self, key: str, pids: list[int]) -> list[int]:
        new = [p for p in pids if p not in self.contention[key]]
        self.contention[key].update(pids)
        return new

    def stop_contention(self, key: str) -> None:
        self.contention.pop(key, None)

    def target_pids(self, target: str) -> list[int]:
        return [hash(target) % 1000 + 2]

    def set_http_fault(self, path: Path, **params: Any) -> None:
        self.hooks[str(path)] = params

    def clear_http_fault(self, path: Path) -> None:
        self.hooks.pop(str(path), None)

    def set_job_limits(self, job_id: str, cpus: float | None = None, memory_mb: int | None = None) -> None:
        self.limits[job_id] = {"cpus": cpus, "memory_mb": memory_mb}

    def restore_job_limits(self, job_id: str, cpus: float | None, memory_mb: int | None) -> None:
        self.limits.pop(job_id, None)

    def snapshot(self) -> Any:
        return (
            dict(self.config.values),
            {k: set(v) for k, v in self.contention.items()},
            dict(self.limits),
            dict(self.hooks),
            {k: v for k, v in self.quotas.items() if v is not None},
            dict(self.network.toxics),
            set(self.network.disabled),
            set(self.services.down),
        )


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
def test_inject_and_recover_are_idempotent(kind: str, tmp_path: Path) -> None:
    """inject twice = inject once; recover twice = recover once; afterwards everything is as before."""
    from mlsandbox.faults.behaviours import FaultContext, behaviour_for

    fault_hook.register_hook("idem-api", tmp_path / "hook.json", scope="7-abc")
    try:
        sc = parse_scenario(
            _with_plan([{"name": "f", "when": {"at_step": 1}, "fault": {"type": kind}, **SAMPLES[kind]}])
        )
        st = EpisodeState(episode_id="7-abc", scenario=sc, seed=7, sandbox="t")
        st.jobs["job-1"] = JobRecord("job-1", "7-abc-job-1", "x", "trainer", 0, state="running")
        control = FullControl()
        prefix = config_prefix(st.episode_id)
        control.config.values = {
            prefix + "s3_endpoint_url": "http://s3",
            prefix + "s3_secret_access_key": "secret-1",
        }
        ctx = FaultContext(state=st, runtime=None, control=control)  # type: ignore[arg-type]
        ctx.job_resources["7-abc-job-1"] = (1.0, 1024)
        before = control.snapshot()
        beh = behaviour_for(sc.perturbations[0])
        beh.inject(ctx)
        once = control.snapshot()
        beh.inject(ctx)
        assert control.snapshot() == once
        beh.recover(ctx)
        beh.recover(ctx)
        assert control.snapshot() == before
    finally:
        fault_hook.unregister_hook("idem-api", scope="7-abc")
