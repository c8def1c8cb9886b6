"""The backend conformance suite: the same checks on every backend available in the run
(:func:`mlsandbox.checks.check_backend`: the declared Runtime, the conformance script through the gateway,
refusals against ``support()``, the same shapes, error codes and grades as the sim reference, nothing left
after ``close()``), and the backends compared with each other pairwise.

Each backend's check runs once per session (its report is shared by the tests below); see conftest.py for
the backends and what each environment cannot do (kube on kwok: no workload runs).
"""

from __future__ import annotations

import itertools

import pytest

from mlsandbox.checks import EPISODES, BackendReport, check_backend, compare_reports

BACKENDS = [
    pytest.param("sim", id="sim"),
    pytest.param("local", id="local", marks=pytest.mark.services),
    pytest.param("kube-kwok", id="kube-kwok", marks=pytest.mark.services),
]
NAMES = [p.values[0] for p in BACKENDS]
_REPORTS: dict[str, BackendReport] = {}


def report_of(request: pytest.FixtureRequest, name: str) -> BackendReport:
    """The backend's conformance report (checked once per session)."""
    if name not in _REPORTS:
        target = request.getfixturevalue(f"{name.replace('-', '_')}_target")
        _REPORTS[name] = check_backend(
            target.backend if target.backend is not None else target.runtime,
            without=target.without,
            job_driver=target.job_driver,
            raise_on_failure=False,
        )
        print(f"\n{_REPORTS[name].table()}")
    return _REPORTS[name]


@pytest.mark.parametrize("name", BACKENDS)
def test_the_backend_conforms(request: pytest.FixtureRequest, name: str) -> None:
    report = report_of(request, name)
    assert report.reference == "sim"
    assert report.ok, report.table()


@pytest.mark.parametrize("name", BACKENDS)
def test_only_what_the_environment_lacks_is_left_out(request: pytest.FixtureRequest, name: str) -> None:
    """Every step runs except those needing what the environment lacks; an episode is refused at its start
    exactly when the backend refuses what its scenario needs, and skipped whole exactly when it needs what
    the environment lacks."""
    report = report_of(request, name)
    lacking = set(report.without)
    skipped = {e.name for e in EPISODES if e.needs & lacking}
    assert {n for n, e in report.episodes.items() if e.skipped} == skipped
    refused = {e.name for e in EPISODES if any(k in report.support for k in e.requires)} - skipped
    assert {n for n, e in report.episodes.items() if e.refused} == refused
    played = [e for e in EPISODES if e.name not in refused | skipped]
    expected = {(e.name, s.label) for e in played for s in e.steps if s.needs & lacking}
    assert {(s.episode, s.label) for s in report.skipped} == expected
    ran = report.steps_run()
    assert ran == sum(len(e.steps) for e in played) - len(expected)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        pytest.param(
            a, b, id=f"{a}-{b}", marks=[m for p in BACKENDS if p.values[0] in (a, b) for m in p.marks]
        )
        for a, b in itertools.combinations(NAMES, 2)
    ],
)
def test_backends_agree_with_each_other(request: pytest.FixtureRequest, a: str, b: str) -> None:
    """The same script's observations on two backends: the same shapes, error codes and grades."""
    findings = compare_reports(report_of(request, a), report_of(request, b))
    assert not findings, "\n".join(str(f) for f in findings)


def test_the_script_runs_every_action_of_the_catalog() -> None:
    from mlsandbox.checks.script import uncovered_actions
    from mlsandbox.gateway.registry import discover_packs

    builtin = tuple(t for p in discover_packs(plugins=False) for t in p.types)
    assert uncovered_actions(builtin) == []
