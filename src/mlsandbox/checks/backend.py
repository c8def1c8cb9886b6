"""``check_backend``: does a backend mean the same as the others? (In the spirit of Gymnasium's
``check_env``.)

A backend's author calls :func:`check_backend` on their backend (or on a runtime of it). It checks, with a
message that says where and what:

1. **Declaration** -- the runtime offers every capability of the declared Runtime with every operation of
   its protocol (callable with the protocol's parameters), or refuses it with
   :class:`~mlsandbox.errors.Unsupported` and lists it in ``support()``; every key of ``support()`` names a
   capability or a fault type; the fault types fault control says it cannot make real are refused; the
   backend's static support is within the runtime's; the clock ticks and cancels.
2. **Actions** -- the conformance script (:mod:`mlsandbox.checks.script`: short episodes of the built-in
   scenarios, every action of the catalog at least once, with the bad inputs of each) runs through the
   :class:`~mlsandbox.gateway.Gateway`. ``Gateway.step`` never raises; each step gets what it must (success
   or its error code); a refused capability is answered ``unsupported`` naming a key that ``support()``
   lists (never ``backend_error``, an AttributeError or a NotImplementedError); an ``unsupported`` answer
   names a key ``support()`` refuses.
3. **Same shapes, same codes, same grades** -- the script runs on a reference backend too (``sim`` by
   default: fast, in-process); each step's observation and info have the same shape (keys and value types,
   :mod:`mlsandbox.checks.shapes`) and each error the same code on both; each episode's grade has the same
   structure, and the same success, model and version when both ran the whole script.
4. **Nothing left behind** -- after each episode's ``close()``, nothing the runtime can list remains: its
   bucket, the runs of its experiment, its registered models, its jobs, its deployments, its config scope;
   its audit log holds every step and the close.

An environment that cannot run some things (a node that runs no container) says so with ``without`` (see
:data:`~mlsandbox.checks.script.NEEDS`); those steps are skipped and listed in the report. A
``job_driver`` ends jobs there (e.g. through kwok's outcome annotation), so failed-job steps still run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from mlsandbox.backends.protocols import Backend, Runtime
from mlsandbox.checks import script as S
from mlsandbox.checks.compare import compare_reports
from mlsandbox.checks.declaration import check_declaration
from mlsandbox.checks.report import BackendCheckError, BackendReport, Finding
from mlsandbox.checks.run import run_script
from mlsandbox.gateway.registry import get_catalog


def check_backend(
    target: Backend | Runtime,
    *,
    reference: str | Backend | Runtime | None = "sim",
    without: Iterable[str] = (),
    job_driver: S.JobDriver | None = None,
    episodes: list[str] | tuple[str, ...] | None = None,
    raise_on_failure: bool = True,
    progress: Callable[[str], None] | None = None,
) -> BackendReport:
    """Check that ``target`` (a backend, brought up for the check when it is not running and down after,
    or a runtime of a running one) conforms to the declared Runtime and answers the conformance script as
    ``reference`` does (a registered backend's name, a backend or a runtime; None: no comparison). See the
    module docstring for what is checked.

    ``without``: what this environment cannot do (:data:`~mlsandbox.checks.script.NEEDS`); steps needing
    it are skipped and listed. ``job_driver``: ends a job with an outcome where jobs do not run their
    workload. ``episodes``: a part of the script by name. Raises :class:`BackendCheckError` listing every
    finding (unless ``raise_on_failure`` is False); returns the report either way.
    """
    lacking = frozenset(without)
    unknown = sorted(lacking - set(S.NEEDS))
    if unknown:
        raise ValueError(f"unknown environment limits {unknown}; known: {', '.join(S.NEEDS)}")
    script = S.episodes(episodes)
    say = progress or (lambda _msg: None)
    with _runtime_of(target) as (rt, backend):
        report = run_script(rt, script, without=lacking, job_driver=job_driver, progress=say)
        report.failures[:0] = check_declaration(rt, backend)
    uncovered = S.uncovered_actions(get_catalog().types, script if episodes is None else S.EPISODES)
    if uncovered:
        report.notes.append(f"actions no step of the script runs: {', '.join(uncovered)}")
    if reference is not None:
        ref = _reference_report(reference, script, say)
        report.reference = ref.backend
        report.reference_seconds = ref.seconds
        report.failures.extend(
            Finding(f.check, f"reference {ref.backend}: {f.where}", f.message) for f in ref.failures
        )
        report.failures.extend(compare_reports(report, ref))
    if raise_on_failure and report.failures:
        raise BackendCheckError(report)
    return report


@contextmanager
def _runtime_of(target: Backend | Runtime) -> Iterator[tuple[Runtime, Backend | None]]:
    if isinstance(target, Runtime):
        yield target, None
        return
    started = False
    if not target.is_alive():
        target.up(ephemeral=True)
        started = True
    try:
        yield target.runtime(), target
    finally:
        if started:
            target.down()


_REFERENCES: dict[tuple[str, tuple[str, ...]], BackendReport] = {}


def _reference_report(
    reference: str | Backend | Runtime, script: tuple[S.Episode, ...], say: Callable[[str], None]
) -> BackendReport:
    """The script's run on the reference (a registered backend's run is made once per process: the sim
    backend is deterministic by seed)."""
    if not isinstance(reference, str):
        with _runtime_of(reference) as (rt, _):
            return run_script(rt, script, progress=say)
    key = (reference, tuple(e.name for e in script))
    if key not in _REFERENCES:
        from mlsandbox.backends.registry import get_backend

        backend = get_backend(reference, f"conformance-{reference}")
        with _runtime_of(backend) as (rt, _):
            _REFERENCES[key] = run_script(rt, script, progress=say)
    return _REFERENCES[key]


__all__ = ["check_backend"]
