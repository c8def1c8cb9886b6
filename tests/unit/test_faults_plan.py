"""Perturbation plans: precise errors, seeded schedules, the engine's bookkeeping (with a fake backend)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.fault_fakes import FakeControl, FakeRuntime, ManualClock

from mlsandbox.backends.protocols import JobSpec
from mlsandbox.errors import ScenarioError
from mlsandbox.faults.curriculum import LEVELS, apply_level
from mlsandbox.faults.engine import PerturbationEngine, draw, preview_schedule
from mlsandbox.gateway.registry import get_catalog
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.loader import parse_scenario
from mlsandbox.scenario.perturbations import Perturbation
from mlsandbox.world.episode import EpisodeState

BASE = "tabular-quality-basic"


def _with_plan(plan: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    data = load_builtin(BASE).model_dump()
    data["perturbations"] = plan
    data.update(extra)
    return data


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"when": {"at_step": 2}, "fault": {"type": "explode"}}, "unknown fault type 'explode'"),
        ({"when": {"at_step": 2}, "fault": {"type": "kill_service"}}, "needs a target: service:NAME"),
        (
            {"when": {"at_step": 2}, "target": "service:mysql", "fault": {"type": "kill_service"}},
            "unknown service 'mysql'",
        ),
        (
            {"when": {"at_step": 2}, "target": "endpoint:minio", "fault": {"type": "kill_service"}},
            "acts on a service target",
        ),
        ({"when": {"at_step": 99}, "fault": {"type": "disk_full"}}, "at step 99, which never comes"),
        ({"when": {"at_time": 1e6}, "fault": {"type": "disk_full"}}, "later than any episode can last"),
        ({"when": {"at_stepp": 2}, "fault": {"type": "disk_full"}}, "needs one of at_step, at_time"),
        ({"when": {"probability": 1.5}, "fault": {"type": "disk_full"}}, "less than or equal to 1"),
        (
            {"when": {"at_step": 2}, "fault": {"type": "disk_full"}, "duration": {"steps": 1, "seconds": 2}},
            "either {steps: N} or {seconds: T}",
        ),
        (
            {
                "when": {"at_step": 2},
                "target": "dataset:customers",
                "fault": {"type": "missing_column", "column": "zzz"},
            },
            "column 'zzz' is not a column of dataset 'customers'",
        ),
        (
            {
                "when": {"at_step": 2},
                "target": "service:minio",
                "fault": {"type": "restart_service"},
                "duration": {"steps": 2},
            },
            "is instant",
        ),
    ],
)
def test_bad_plans_fail_precisely(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message.replace("{", r"\{").replace("(", r"\(")):
        parse_scenario(_with_plan([{"name": "bad", **entry}]))


def test_duplicate_names_and_defaults() -> None:
    with pytest.raises(ScenarioError, match="duplicate perturbation names"):
        parse_scenario(
            _with_plan([{"name": "a", "when": {"at_step": 1}, "fault": {"type": "disk_full"}}] * 2)
        )
    sc = parse_scenario(
        _with_plan([{"name": "a", "when": {"at_step": 1}, "fault": {"type": "memory_limit"}}])
    )
    assert sc.perturbations[0].target == "jobs" and sc.perturbations[0].fault.memory_mb == 64


# ------------------------------------------------------------------------------------------ fake backend


def _engine(
    plan: list[dict[str, Any]], seed: int = 1, max_steps: int = 30, strict: bool = False
) -> tuple[PerturbationEngine, EpisodeState, FakeControl]:
    sc = parse_scenario(_with_plan(plan, max_steps=max_steps))
    rt = FakeRuntime()
    st = EpisodeState(episode_id="e1", scenario=sc, seed=seed, sandbox="t", started_at=rt.clock.time())
    eng = PerturbationEngine(
        list(sc.perturbations),
        st,
        rt,  # type: ignore[arg-type]
        seed=seed,
        strict=strict,
        addresses=[p.addresses for p in get_catalog().packs],  # what the gateway hands over
    )
    return eng, st, rt.faults


def _run(eng: PerturbationEngine, st: EpisodeState, steps: int) -> list[tuple[int, str]]:
    for _ in range(steps):
        st.step += 1
        eng.tick()
    return [(r.injected_step, r.name) for r in eng.records]


PROB_PLAN = [
    {
        "name": "flaky",
        "when": {"probability": 0.3, "max_times": None},
        "target": "endpoint:minio",
        "fault": {"type": "latency", "latency_ms": 100},
        "duration": {"steps": 2},
    },
    {
        "name": "quota",
        "when": {"probability": 0.1, "max_times": 3},
        "fault": {"type": "disk_full"},
        "duration": {"steps": 1},
    },
]


def test_probability_triggers_same_seed_same_schedule() -> None:
    a = _run(*_engine(PROB_PLAN, seed=5)[:2], 30)
    b = _run(*_engine(PROB_PLAN, seed=5)[:2], 30)
    c = _run(*_engine(PROB_PLAN, seed=6)[:2], 30)
    assert a == b and len(a) >= 3
    assert a != c
    sc = parse_scenario(_with_plan(PROB_PLAN))
    assert preview_schedule(list(sc.perturbations), 5, 30) == sorted(a)
    assert draw(5, "flaky", 3) == draw(5, "flaky", 3) != draw(5, "flaky", 4)


def test_engine_injects_recovers_and_records_ground_truth() -> None:
    eng, st, control = _engine(
        [
            {
                "name": "kill",
                "when": {"at_step": 2},
                "target": "service:mlflow",
                "fault": {"type": "kill_service"},
                "recovery": "manual",
            },
            {
                "name": "lat",
                "when": {"at_step": 1},
                "target": "endpoint:minio",
                "fault": {"type": "latency", "latency_ms": 250},
                "duration": {"steps": 2},
            },
            {
                "name": "bw",
                "when": {"at_step": 1},
                "target": "endpoint:minio",
                "fault": {"type": "bandwidth"},
            },
            {
                "name": "down",
                "when": {"condition": "model_registered"},
                "target": "endpoint:mlflow",
                "fault": {"type": "endpoint_down"},
            },
        ]
    )
    st.step = 1
    eng.tick()
    assert control.network.toxics == {
        ("minio", "mlsandbox-lat"): {"type": "latency", "latency": 250, "jitter": 0}
    }
    bw = next(r for r in eng.records if r.name == "bw")
    assert bw.error is not None and "unavailable" in bw.error  # said, not silently skipped
    st.step = 2
    eng.tick()
    assert ("kill", "mlflow") in control.services.calls
    eng.observe_action({"type": "get_service_health", "service": "mlflow"})
    kill = next(r for r in eng.records if r.name == "kill")
    assert kill.detected_step == 2 and kill.time_to_detect_s is not None
    st.step = 3
    eng.tick()  # latency expires after 2 steps
    lat = next(r for r in eng.records if r.name == "lat")
    assert lat.recovered_by == "expiry" and not control.network.toxics
    control.services.restart("mlflow")  # the agent restarts it
    st.step = 4
    eng.tick()
    assert kill.recovered_by == "agent" and kill.mitigated_step == 4 and kill.time_to_mitigate_s is not None
    st.registered.append(("churn", "1"))
    st.step = 5
    eng.tick()
    assert control.network.disabled == {"mlflow"}
    eng.recover_all()
    eng.recover_all()  # idempotent
    assert not control.network.disabled and not control.network.toxics
    assert all(not r.active for r in eng.records)
    assert st.ground_truth.faults == eng.records


def test_jobs_started_under_a_fault_are_changed() -> None:
    eng, st, _ = _engine(
        [
            {"name": "mem", "when": {"at_step": 1}, "fault": {"type": "memory_limit", "memory_mb": 50}},
            {"name": "deadline", "when": {"at_step": 1}, "fault": {"type": "job_timeout", "timeout_s": 2}},
        ]
    )
    st.step = 1
    eng.tick()
    spec = JobSpec(job_id="e1-job-1", workload="trainer", args=[], memory_mb=1024, timeout_s=300)
    out = eng.adjust_job(spec, "job-1")
    assert out.memory_mb == 50 and out.timeout_s == 2
    assert eng.records[0].affected_jobs == ["job-1"]
    eng.observe_action({"type": "get_job", "job_id": "job-1"})
    assert eng.records[0].detected_step == 1


def test_curriculum_levels_apply_to_the_builtin_scenarios() -> None:
    sc = load_builtin(BASE)
    assert [lv.difficulty for lv in LEVELS] == sorted(lv.difficulty for lv in LEVELS)
    for lv in LEVELS:
        out = apply_level(sc, lv.name)
        assert len(out.perturbations) == len(lv.plan)
        assert out.budget.credits == pytest.approx(sc.budget.credits * lv.budget_factor)
    for sid in ("tabular-ops-tracker-outage", "tabular-ops-resource-storm"):
        assert load_builtin(sid).perturbations


def test_perturbation_model_is_strict() -> None:
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        Perturbation.model_validate(
            {"name": "x", "when": {"at_step": 1}, "fault": {"type": "disk_full", "quota": 3}}
        )


# ------------------------------------------------------------------ source and pool faults in a plan

SOURCES = "data-monthly-drift-retrain"  # history_db (postgres), monthly_lake (lake, arrivals 0,0,0,0,1,2)


def _sources_plan(*entries: dict[str, Any], scenario: str = SOURCES, **extra: Any) -> dict[str, Any]:
    data = load_builtin(scenario).model_dump()
    data["perturbations"] = [{"name": f"p{i}", **e} for i, e in enumerate(entries)]
    data.update(extra)
    return data


def _late(batch: int = 5, at_step: int = 1, **fault: Any) -> dict[str, Any]:
    return {
        "when": {"at_step": at_step},
        "target": "source:monthly_lake",
        "fault": {"type": "late_batch", "batch": batch, **fault},
    }


@pytest.mark.parametrize(
    ("entry", "message", "scenario"),
    [
        (
            {"when": {"at_step": 1}, "target": "source:nope", "fault": {"type": "database_down"}},
            "targets source 'nope', which is not a source (history_db, monthly_lake)",
            SOURCES,
        ),
        (
            {"when": {"at_step": 1}, "target": "source:orders", "fault": {"type": "database_down"}},
            "which is not a source (the scenario declares none)",
            BASE,
        ),
        (
            {"when": {"at_step": 1}, "target": "source:Bad-Name", "fault": {"type": "database_down"}},
            "names no source: use source:NAME",
            SOURCES,
        ),
        (
            {"when": {"at_step": 1}, "target": "source:monthly_lake", "fault": {"type": "database_down"}},
            "'database_down' acts on postgres sources; 'monthly_lake' is a lake source",
            SOURCES,
        ),
        (
            {
                "when": {"at_step": 1},
                "target": "source:monthly_lake",
                "fault": {"type": "rotated_credentials"},
            },
            "'rotated_credentials' acts on api or postgres sources",
            SOURCES,
        ),
        (
            {
                "when": {"at_step": 1},
                "target": "source:history_db",
                "fault": {"type": "late_batch", "batch": 1},
            },
            "'late_batch' acts on lake sources; 'history_db' is a postgres source",
            SOURCES,
        ),
        (
            {"when": {"at_step": 1}, "target": "jobs", "fault": {"type": "late_batch", "batch": 1}},
            "acts on a source target, got 'jobs'",
            SOURCES,
        ),
        (_late(batch=9), "source 'monthly_lake' has no batch 9 (batches 0..5)", SOURCES),
        (_late(batch=2), "batch 2 of 'monthly_lake' arrives when the episode starts", SOURCES),
        (_late(batch=4, at_step=3), "fires at step 3 at the earliest, but batch 4", SOURCES),
        (_late(steps=80), "would arrive at step 82, after max_steps=60 (use missing_batch", SOURCES),
        (
            {
                "when": {"every": 2, "start": 4},
                "target": "source:monthly_lake",
                "fault": {"type": "missing_batch", "batch": 5},
            },
            "fires at step 4 at the earliest",
            SOURCES,
        ),
        (
            {
                "when": {"at_step": 1},
                "target": "source:monthly_lake",
                "fault": {"type": "schema_change", "batch": 5, "change": "drop", "column": "zzz"},
            },
            "column 'zzz' is not a feature column of 'monthly_lake'",
            SOURCES,
        ),
        (
            {
                "when": {"at_step": 1},
                "target": "source:monthly_lake",
                "fault": {"type": "schema_change", "batch": 5, "change": "rename", "column": "plan"},
            },
            "a schema_change rename needs new_name",
            SOURCES,
        ),
        (
            {
                "when": {"at_step": 1},
                "target": "source:monthly_lake",
                "fault": {
                    "type": "schema_change",
                    "batch": 5,
                    "change": "rename",
                    "column": "plan",
                    "new_name": "tenure_months",
                },
            },
            "new_name 'tenure_months' is already a column",
            SOURCES,
        ),
        (
            {
                "when": {"at_step": 1},
                "target": "source:history_db",
                "fault": {"type": "rotated_credentials"},
                "duration": {"steps": 2},
            },
            "is not undone: it takes no duration",
            SOURCES,
        ),
        (
            {"when": {"at_step": 1}, "target": "http:history_db", "fault": {"type": "http_errors"}},
            "a postgres source: only api sources have an HTTP fault hook",
            SOURCES,
        ),
        (
            {"when": {"at_step": 1}, "fault": {"type": "pool_shrink", "cpus": 1}},
            "takes 1 CPUs from a pool without a limit on them (set compute.capacity_cpus)",
            SOURCES,
        ),
        (
            {"when": {"at_step": 1}, "fault": {"type": "pool_shrink"}},
            "pool_shrink takes cpus or memory_mb",
            SOURCES,
        ),
        (
            {"when": {"at_step": 1}, "target": "pool:big", "fault": {"type": "pool_shrink", "cpus": 1}},
            "'pool' takes no name",
            SOURCES,
        ),
    ],
)
def test_bad_source_and_pool_plans_fail_precisely(entry: dict[str, Any], message: str, scenario: str) -> None:
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_scenario(_sources_plan(entry, scenario=scenario))


def test_pool_shrink_larger_than_the_pool_is_refused_and_a_fitting_one_defaults_to_pool() -> None:
    compute = {"capacity_cpus": 4, "capacity_memory_mb": 8192}
    with pytest.raises(ScenarioError, match="takes 9000 MiB from a pool of 8192 MiB"):
        parse_scenario(
            _sources_plan(
                {"when": {"at_step": 1}, "fault": {"type": "pool_shrink", "memory_mb": 9000}},
                compute=compute,
            )
        )
    sc = parse_scenario(
        _sources_plan({"when": {"at_step": 1}, "fault": {"type": "pool_shrink", "cpus": 3}}, compute=compute)
    )
    assert sc.perturbations[0].target == "pool" and sc.perturbations[0].fault.cpus == 3


def test_valid_source_plan_parses_with_typed_faults() -> None:
    sc = parse_scenario(
        _sources_plan(
            _late(batch=4, steps=2),
            {
                "when": {"at_step": 2},
                "target": "source:monthly_lake",
                "fault": {"type": "schema_change", "batch": 5, "change": "retype", "column": "plan"},
            },
            {"when": {"at_step": 3}, "target": "source:history_db", "fault": {"type": "database_down"}},
            {
                "when": {"at_step": 4},
                "target": "source:history_db",
                "fault": {"type": "rotated_credentials"},
                "recovery": "manual",
            },
        )
    )
    kinds = [(p.fault.type, p.target_kind, p.target_name) for p in sc.perturbations]
    assert kinds == [
        ("late_batch", "source", "monthly_lake"),
        ("schema_change", "source", "monthly_lake"),
        ("database_down", "source", "history_db"),
        ("rotated_credentials", "source", "history_db"),
    ]


def _source_engine(
    entries: list[dict[str, Any]], supplied: Any = None, strict: bool = True
) -> tuple[PerturbationEngine, EpisodeState]:
    sc = parse_scenario(_sources_plan(*entries))
    st = EpisodeState(episode_id="e2", scenario=sc, seed=1, sandbox="t")
    eng = PerturbationEngine(
        list(sc.perturbations),
        st,
        FakeRuntime(),  # type: ignore[arg-type]
        seed=1,
        strict=strict,
        timer=False,
        supplied=supplied,
    )
    return eng, st


DB_DOWN = {"when": {"at_step": 1}, "target": "source:history_db", "fault": {"type": "database_down"}}


def test_source_faults_need_a_supplied_mechanism() -> None:
    from mlsandbox.faults.engine import UnavailableFaultError

    with pytest.raises(UnavailableFaultError, match="'p0' uses fault 'database_down' on source:history_db"):
        _source_engine([DB_DOWN])
    eng, st = _source_engine([DB_DOWN], strict=False)
    st.step = 1
    eng.tick()
    assert (
        eng.records[0].error is not None and "needs a mechanism the gateway supplies" in eng.records[0].error
    )
    assert eng.active_faults == []


def test_supplied_behaviour_is_used_and_a_pack_mark_ends_a_manual_fault() -> None:
    from mlsandbox.faults.behaviours import Behaviour

    calls: list[str] = []

    class Down(Behaviour):
        def inject(self, ctx: Any) -> None:
            calls.append(f"inject {self.target_name}")

        def recover(self, ctx: Any) -> None:
            calls.append(f"recover {self.target_name}")

    eng, st = _source_engine(
        [{**DB_DOWN, "recovery": "manual"}], supplied={("database_down", "source"): Down}
    )
    st.step = 1
    eng.tick()
    rec = eng.records[0]
    assert calls == ["inject history_db"] and rec.active and rec.params == {}
    st.step = 2
    eng.tick()
    assert rec.active  # nothing mitigated it yet
    rec.mitigated_step = 2  # what the sources pack does when an action worked around the symptom
    st.step = 3
    eng.tick()
    assert calls == ["inject history_db", "recover history_db"] and rec.recovered_by == "agent"


def test_pool_shrinks_add_up_and_each_gives_back_its_own_share() -> None:
    from mlsandbox.scenario.compute import ComputePool
    from mlsandbox.world import compute as CP

    class Jobs:
        def submit(self, spec: JobSpec) -> Any:
            from mlsandbox.backends.protocols import JobStatus

            return JobStatus(job_id=spec.job_id, state="running")

    compute = {"capacity_cpus": 4, "capacity_memory_mb": 8192}
    sc = parse_scenario(
        _sources_plan(
            {"when": {"at_step": 1}, "fault": {"type": "pool_shrink", "cpus": 1}, "duration": {"steps": 1}},
            {"when": {"at_step": 1}, "fault": {"type": "pool_shrink", "cpus": 2, "memory_mb": 4096}},
            compute=compute,
        )
    )
    st = EpisodeState(episode_id="e3", scenario=sc, seed=1, sandbox="t")
    pool = CP.Pool(ComputePool(**compute), Jobs(), clock=ManualClock())  # type: ignore[arg-type]
    eng = PerturbationEngine(list(sc.perturbations), st, FakeRuntime(), seed=1, timer=False)  # type: ignore[arg-type]
    st.step = 1
    eng.tick()
    assert (
        eng.records[0].error
        == "unavailable: the episode has no compute pool (the compute pack is not loaded)"
    )
    eng, st.ground_truth.faults = (
        PerturbationEngine(list(sc.perturbations), st, FakeRuntime(), seed=1, timer=False, pool=pool),  # type: ignore[arg-type]
        [],
    )
    eng.tick()
    assert (pool.shrink_cpus, pool.shrink_memory_mb) == (3, 4096)
    assert pool.free() == (1, 4096)
    st.step = 2
    eng.tick()  # the first one expires
    assert (pool.shrink_cpus, pool.shrink_memory_mb) == (2, 4096)
    eng.recover_all()
    eng.recover_all()
    assert (pool.shrink_cpus, pool.shrink_memory_mb) == (0, 0)


def test_faults_catalog_lists_the_source_and_pool_faults() -> None:
    from typer.testing import CliRunner

    from mlsandbox.cli.main import app

    out = CliRunner().invoke(app, ["faults", "catalog"], env={"COLUMNS": "240"})
    assert out.exit_code == 0, out.output
    for kind in ("late_batch", "missing_batch", "schema_change", "database_down", "pool_shrink"):
        assert kind in out.output
    assert "batch (required)" in out.output and "PydanticUndefined" not in out.output
