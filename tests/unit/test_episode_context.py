"""The packs' side of the gateway: the episode context they receive, the light module that declares it,
and the typed records packs, faults and graders share (no string-keyed tallies)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from tests.unit.test_faults_engine import _engine

from mlsandbox.backends import get_backend
from mlsandbox.backends.protocols import JobSpec
from mlsandbox.evaluation.metrics import episode_metrics
from mlsandbox.evaluation.serving_grade import grade_deployment_slo
from mlsandbox.gateway import Gateway
from mlsandbox.gateway.context import EpisodeContext
from mlsandbox.scenario import load_builtin
from mlsandbox.world.episode import EpisodeState


def _context(scenario: str = "tabular-quality-basic") -> EpisodeContext:
    rt = get_backend("sim", "ctx-test").runtime()
    return Gateway(rt, load_builtin(scenario), seed=1).episode


def test_the_context_module_is_light() -> None:
    """A pack imports the context without the dispatcher, the world's data stack or any backend."""
    code = (
        "import sys\n"
        "import mlsandbox.gateway.context\n"
        "heavy = ('numpy', 'pandas', 'mlsandbox.gateway.dispatcher', 'mlsandbox.backends', 'mlsandbox.world')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_without_a_plan_the_fault_methods_leave_jobs_alone() -> None:
    ctx = _context()
    spec = JobSpec(job_id="x-job-1", workload="trainer", args=[], cpus=1.0, memory_mb=512)
    assert ctx.adjust_job(spec, "job-1") is spec
    ctx.job_resources_set("x-job-1", cpus=0.5, memory_mb=None)  # nothing to tell: no error


def test_the_engine_records_the_limits_the_agent_set_for_a_job_it_saw_start() -> None:
    plan: list[dict[str, Any]] = [
        {"name": "late", "when": {"at_step": 20}, "fault": {"type": "memory_limit"}}
    ]
    eng, _, _ = _engine(plan)
    spec = JobSpec(job_id="7-abc-job-1", workload="trainer", args=[], cpus=1.0, memory_mb=1024)
    eng.adjust_job(spec, "job-1")
    eng.job_resources_set("7-abc-job-1", cpus=0.5, memory_mb=None)
    assert eng.ctx.job_resources["7-abc-job-1"] == (0.5, 1024)
    eng.job_resources_set("7-abc-job-1", cpus=None, memory_mb=2048)
    assert eng.ctx.job_resources["7-abc-job-1"] == (0.5, 2048)
    eng.job_resources_set("7-abc-job-9", cpus=1.5, memory_mb=None)  # never started under the plan
    assert "7-abc-job-9" not in eng.ctx.job_resources


def test_the_serving_grade_and_the_metrics_read_the_typed_serving_record() -> None:
    sc = load_builtin("serving-deploy-slo")
    st = EpisodeState(episode_id="1-a", scenario=sc, seed=1, sandbox="t")
    grade = grade_deployment_slo(st, tracking=None)  # type: ignore[arg-type]
    assert grade.success is False and grade.details["served_version"] is None
    assert episode_metrics(st)["counters"] == {}
    st.serving.served_version, st.serving.risky_deployments = "2", 1
    st.serving.slo_violation_s, st.serving.observed_s = 3.0, 30.0
    st.charges.idle_reserved_credits = 0.25
    grade = grade_deployment_slo(st, tracking=None)  # type: ignore[arg-type]
    assert grade.details["served_version"] == "2" and grade.details["risky_deployments"] == 1
    assert grade.details["slo_violation_fraction"] == 0.1
    assert episode_metrics(st)["counters"] == {
        "idle_reserved_credits": 0.25,
        "risky_deployments": 1.0,
        "serving_observed_s": 30.0,
        "serving_version": 2.0,
        "slo_violation_s": 3.0,
    }
