"""check_backend finds what does not conform: each test breaks one thing of an otherwise conforming runtime
(the sim backend's, in-process, no service) the way a plug-in backend could, and checks the finding says
where and what. Plus the shape comparison on its own."""

from __future__ import annotations

from typing import Any

import pytest

from mlsandbox.backends import get_backend
from mlsandbox.backends.protocols import JobStatus, Support
from mlsandbox.checks import BackendCheckError, BackendReport, Finding, check_backend
from mlsandbox.checks.declaration import check_declaration, signature_problems
from mlsandbox.checks.shapes import differences, shape_of
from mlsandbox.errors import Unsupported


class Patched:
    """A runtime of a fresh sim sandbox with some of its parts replaced (what a broken plug-in would be)."""

    def __init__(self, name: str, **replaced: Any) -> None:
        backend = get_backend("sim", name)
        backend.up()
        self._inner = backend.runtime()
        self._replaced = replaced

    def __getattr__(self, name: str) -> Any:
        if name in self._replaced:
            found = self._replaced[name]
            return found(self._inner) if callable(found) and name != "support" else found
        return getattr(self._inner, name)


class Wrap:
    """A capability object delegating to ``inner`` except what ``overrides`` names (None: absent)."""

    def __init__(self, inner: Any, **overrides: Any) -> None:
        self._inner = inner
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        if name in self._overrides:
            found = self._overrides[name]
            if found is None:
                raise AttributeError(name)
            return found
        return getattr(self._inner, name)


def check(rt: Any, *episodes: str) -> BackendReport:
    return check_backend(rt, episodes=list(episodes) or None, raise_on_failure=False)


def findings(report: BackendReport, check_name: str) -> list[Finding]:
    return [f for f in report.failures if f.check == check_name]


def test_a_conforming_backend_passes_and_a_failing_one_raises_with_every_finding() -> None:
    assert check(Patched("ok"), "probes").ok
    rt = Patched("noisy", support=lambda: Support(backend="sim", unsupported={"srving": "typo"}))
    with pytest.raises(BackendCheckError) as info:
        check_backend(rt, episodes=["probes"])
    assert "refuses 'srving', which is no capability" in str(info.value)
    assert info.value.report.failures


def test_a_missing_operation_and_a_parameter_the_protocol_passes_are_declaration_findings() -> None:
    def logs(job_id: str, lines: int = 50) -> str:
        return ""

    rt = Patched("decl", jobs=lambda inner: Wrap(inner.jobs, set_resources=None, logs=logs))
    found = {(f.where, f.message) for f in check_declaration(rt)}
    assert ("rt.jobs.set_resources()", "Wrap lacks set_resources() of Jobs") in found
    assert ("rt.jobs.logs()", "Wrap.logs takes no parameter 'tail'") in found
    # Through the gateway, the missing operation is a backend_error observation: a failing backend.
    report = check(rt, "work")
    raised = [f for f in findings(report, "step") if "set_job_resources: a running job" in f.where]
    assert raised and "the backend failed" in raised[0].message and "AttributeError" in raised[0].message


def test_signature_problems_name_what_the_world_cannot_call() -> None:
    def declared(self: Any, job_id: str, tail: int = 50, *, wait: bool = True) -> None: ...
    def fine(job_id: str, tail: int = 10, **kw: Any) -> None: ...
    def bad(job: str, extra: str, /) -> None: ...

    assert signature_problems(declared, fine) == []
    assert signature_problems(declared, bad) == [
        "takes no parameter 'tail'",
        "takes no parameter 'wait'",
        "requires 'extra', which the protocol does not pass",
    ]


def test_a_refusal_support_does_not_list_and_a_listed_one_not_made_are_refusal_findings() -> None:
    def refusing(inner: Any) -> Any:
        def open_(episode_id: str, labels: dict[str, str]) -> Any:
            raise Unsupported("serving", "sim", "no model servers here")

        return Wrap(inner.serving, open=open_)

    report = check(Patched("refuse", serving=refusing), "probes")
    where = {f.where for f in findings(report, "refusal")}
    assert "probes/get_deployment: none yet" in where
    assert any("rt.serving.open" in f.where and "does not refuse" in f.message for f in report.failures)

    said = Patched("said", support=lambda: Support(backend="sim", unsupported={"serving": "none"}))
    report = check(said, "probes")
    assert any(
        f.where == "probes/get_deployment: none yet"
        and "succeeded although support() refuses serving" in f.message
        for f in findings(report, "refusal")
    )
    api = Patched("api", support=lambda: Support(backend="sim", unsupported={"sources.api": "none"}))
    report = check(api, "api-source")
    assert any(f.where == "api-source/start" and "started although" in f.message for f in report.failures)


def test_a_not_implemented_capability_is_found() -> None:
    def broken(inner: Any) -> Any:
        def open_(episode_id: str, labels: dict[str, str]) -> Any:
            raise NotImplementedError("serving comes later")

        return Wrap(inner.serving, open=open_)

    report = check(Patched("nie", serving=broken), "probes")
    assert any("rt.serving.open" in f.where and "NotImplementedError" in f.message for f in report.failures)
    assert any(
        "NotImplementedError" in f.message for f in findings(report, "step") + findings(report, "outcome")
    )


def test_what_close_leaves_behind_is_found() -> None:
    def keeping(inner: Any) -> Any:
        return Wrap(inner.object_store, delete_bucket=lambda bucket: None)

    def forgetful(inner: Any) -> Any:
        return Wrap(inner.config, close_scope=lambda prefix: None)

    report = check(Patched("leaky", object_store=keeping, config=forgetful), "lake")
    messages = [f.message for f in findings(report, "cleanup")]
    assert any(m.startswith("the episode's bucket ep-") and m.endswith("is still listed") for m in messages)
    assert any(m.startswith("config entries still listed: mls-") for m in messages)


def test_another_error_code_and_another_shape_are_found_against_the_reference() -> None:
    def failing_lookup(inner: Any) -> Any:
        def get_run(run_id: str) -> Any:
            raise RuntimeError("tracker answered 500")

        return Wrap(inner.tracking, get_run=get_run)

    report = check(Patched("codes", tracking=failing_lookup), "probes")
    codes = [f for f in findings(report, "error_code") if f.where == "probes/get_run: unknown run"]
    assert codes and "expected error not_found, got backend_error: RuntimeError" in codes[0].message
    assert any("backend_error on sim (checked), not_found on sim (reference)" in f.message for f in codes)

    def fewer_metrics(inner: Any) -> Any:
        def get(job_id: str) -> JobStatus:
            status: JobStatus = inner.jobs.get(job_id)
            metrics = {k: v for k, v in status.result.get("metrics", {}).items() if k != "val_auc"}
            return status.model_copy(update={"result": {**status.result, "metrics": metrics}})

        return Wrap(inner.jobs, get=get)

    report = check(Patched("shapes", jobs=fewer_metrics), "work")
    shapes = [f for f in findings(report, "shape") if f.where == "work/get_job: a training job that succeeds"]
    assert (
        shapes
        and "result.metrics.val_auc: missing on sim (checked), present on sim (reference)"
        in shapes[0].message
    )


def test_another_grade_is_found() -> None:
    def unloadable(inner: Any) -> Any:
        def load_model(name: str, version: str) -> Any:
            raise OSError("the artifact store lost the model")

        return Wrap(inner.tracking, load_model=load_model)

    report = check(Patched("grade", tracking=unloadable), "work")
    grades = findings(report, "grade")
    assert grades and grades[0].where == "work/grade"
    assert "success False on sim (checked) (model could not score the holdout" in grades[0].message


def test_shapes_compare_keys_and_types_not_values() -> None:
    a = {"state": "running", "exit_code": None, "metrics": {"val_auc": 0.8}, "lines": []}
    b = {"state": "failed", "exit_code": 1, "metrics": {"val_auc": 1}, "lines": ["x"]}
    assert differences(shape_of(a), shape_of(b)) == []  # null and [] agree with anything, int with float
    c = {"state": 3, "metrics": {}, "lines": [{"x": 1}]}
    assert differences(shape_of(a), shape_of(c), names=("x", "y")) == [
        "exit_code: present on x, missing on y",
        "metrics.val_auc: present on x, missing on y",
        "state: str on x, number on y",
    ]
    runs = {"0" * 32: 0.5}, {"f" * 32: 0.7}  # keyed by run ids made by each backend: the same shape
    assert differences(shape_of(runs[0]), shape_of(runs[1])) == []
    tallies = {"counters": {"a": 1.0}}, {"counters": {"b": 2.0}}
    maps = frozenset({"counters"})
    assert differences(shape_of(tallies[0], maps=maps), shape_of(tallies[1], maps=maps)) == []
    assert differences(shape_of(tallies[0]), shape_of(tallies[1])) != []


def test_a_refused_key_must_be_refused_by_the_operation_itself() -> None:
    refusing = {"environments.build": "no venvs here", "jobs.set_resources": "fixed limits"}
    said = Patched("said-only", support=lambda: Support(backend="sim", unsupported=refusing))
    found = {f.where: f.message for f in check_declaration(said) if f.check == "refusal"}
    assert set(found) == {"support() refuses environments.build", "support() refuses jobs.set_resources"}
    assert found["support() refuses environments.build"] == "but the operation went through"
    assert found["support() refuses jobs.set_resources"].startswith("the operation raised KeyError: ")
    assert found["support() refuses jobs.set_resources"].endswith("instead of Unsupported")

    def unbuilt(inner: Any) -> Any:
        def build(requirements: list[str]) -> Any:
            raise NotImplementedError("later")

        return Wrap(inner.environments, build=build)

    half = Patched(
        "half",
        environments=unbuilt,
        support=lambda: Support(backend="sim", unsupported={"environments.build": "later"}),
    )
    found = {f.where: f.message for f in check_declaration(half) if f.check == "refusal"}
    assert found == {
        "support() refuses environments.build": "the operation raised NotImplementedError: later instead of Unsupported"
    }


def test_an_unknown_name_must_get_the_declared_error() -> None:
    def lenient(inner: Any) -> Any:
        def get(job_id: str) -> JobStatus:
            return JobStatus(job_id=job_id, state="queued")

        return Wrap(inner.jobs, get=get)

    def strict(inner: Any) -> Any:
        def health(service: str, *, timeout: float = 5.0) -> Any:
            raise RuntimeError(f"cannot probe {service}")

        return Wrap(inner.faults, services=Wrap(inner.faults.services, health=health))

    found = {f.where: f.message for f in check_declaration(Patched("lenient", jobs=lenient, faults=strict))}
    assert found["rt.jobs.get('conformance-no-such')"] == "returned; the protocol says it raises KeyError"
    assert found["rt.faults.services.health('conformance-no-such')"] == (
        "raised RuntimeError: cannot probe conformance-no-such (the protocol says ValueError)"
    )
