"""Running the conformance script on a runtime through the gateway, and the checks that need no reference:
no step raises, each gets what the script says (or a refusal ``support()`` lists), and ``close()`` leaves
nothing the runtime can list."""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mlsandbox.backends.protocols import Runtime, Support
from mlsandbox.checks import script as S
from mlsandbox.checks.report import BackendReport, CheckName, EpisodeRecord, Finding, StepRecord
from mlsandbox.errors import Unsupported
from mlsandbox.gateway import Gateway
from mlsandbox.gateway.registry import get_catalog
from mlsandbox.scenario.perturbations import config_prefix

_NOT_IMPLEMENTED = ("NotImplementedError", "AttributeError", "TypeError")


def run_script(
    rt: Runtime,
    script: tuple[S.Episode, ...] = S.EPISODES,
    *,
    without: frozenset[str] = frozenset(),
    job_driver: S.JobDriver | None = None,
    progress: Callable[[str], None] = lambda _msg: None,
) -> BackendReport:
    """Run the conformance script on ``rt``: each step's record, and the findings of the checks that
    need no reference (steps that raised, outcomes against the script, refusals, cleanup)."""
    t0 = time.perf_counter()
    support = rt.support()
    report = BackendReport(
        backend=rt.backend,
        sandbox=rt.sandbox,
        support=dict(support.unsupported),
        without=tuple(sorted(without)),
    )
    for ep in script:
        progress(f"{rt.backend}: episode {ep.name} ({len(ep.steps)} steps)")
        record, findings = _run_episode(rt, ep, support, without, job_driver, progress)
        report.episodes[ep.name] = record
        report.failures.extend(findings)
    report.seconds = time.perf_counter() - t0
    return report


def _run_episode(
    rt: Runtime,
    ep: S.Episode,
    support: Support,
    without: frozenset[str],
    driver: S.JobDriver | None,
    progress: Callable[[str], None],
) -> tuple[EpisodeRecord, list[Finding]]:
    t0 = time.perf_counter()
    record = EpisodeRecord(ep.name, ep.scenario)
    findings: list[Finding] = []
    lacking = sorted(ep.needs & without)
    if lacking:
        record.skipped = f"needs {', '.join(lacking)}"
        return record, findings
    refused = [k for k in ep.requires if support.reason(k) is not None]
    gw = Gateway(rt, ep.load(), seed=S.SEED)
    record.episode_id = gw.state.episode_id
    started = False
    try:
        try:
            gw.start()
            started = True
        except Unsupported as e:
            if e.capability in refused:
                record.refused = e.capability
            else:
                findings.append(
                    Finding(
                        "refusal",
                        f"{ep.name}/start",
                        f"raised Unsupported({e.capability!r}): {_refusal_text(e.capability, support)}",
                    )
                )
        except Exception as e:
            findings.append(Finding("step", f"{ep.name}/start", f"Gateway.start raised {_exc(e)}"))
        if started and refused:
            findings.append(
                Finding(
                    "refusal",
                    f"{ep.name}/start",
                    f"started although support() refuses {', '.join(refused)}, which its scenario needs",
                )
            )
        if started:
            results: dict[str, Any] = {}
            for i, step in enumerate(ep.steps, 1):
                progress(f"{rt.backend}: {ep.name} {i}/{len(ep.steps)} {step.label}")
                rec = _run_step(gw, ep.name, step, results, without, driver)
                record.steps.append(rec)
                findings.extend(_step_findings(rt, ep.name, step, rec, support))
                if rec.ok:
                    results[step.label] = rec.result
    finally:
        with _captured("mlsandbox.gateway.dispatcher") as warnings:
            gw.close()
        findings.extend(Finding("cleanup", f"{ep.name}/close", w) for w in warnings)
    findings.extend(_cleanup_findings(rt, gw, ep.name, started))
    record.seconds = time.perf_counter() - t0
    return record, findings


def _run_step(
    gw: Gateway,
    episode: str,
    step: S.Step,
    results: dict[str, Any],
    without: frozenset[str],
    driver: S.JobDriver | None,
) -> StepRecord:
    lacking = sorted(step.needs & without)
    if lacking:
        return StepRecord(episode, step.label, None, "skipped", note=f"needs {', '.join(lacking)}")
    try:
        raw = step.raw(results)
    except (KeyError, IndexError, TypeError) as e:
        return StepRecord(
            episode,
            step.label,
            None,
            "skipped",
            note=f"needs the result of an earlier step that did not succeed ({e!r})",
        )
    t0 = time.perf_counter()
    rec = StepRecord(episode, step.label, raw, "ran")
    deadline = time.monotonic() + step.poll_timeout_s
    try:
        res = gw.step(raw)
        while (
            step.until is not None and res.observation.get("ok") and not step.until(res.observation["result"])
        ):
            if time.monotonic() > deadline or res.terminated or res.truncated:
                rec.note = f"still not there after {step.poll_timeout_s:.0f} s ({rec.polls} polls)"
                break
            gw.step({"type": "wait", "seconds": step.poll_s})
            rec.polls += 1
            res = gw.step(raw)
        rec.observation, rec.info = res.observation, res.info
    except Exception as e:
        rec.status, rec.note = "raised", _exc(e)
    if step.drive is not None and driver is not None and rec.ok:
        job, outcome = step.drive
        try:
            driver(gw.state.jobs[job].backend_id, outcome)
        except Exception as e:
            rec.note = f"the job driver could not end {job} as {outcome}: {_exc(e)}"
    rec.seconds = time.perf_counter() - t0
    return rec


def _step_findings(
    rt: Runtime, episode: str, step: S.Step, rec: StepRecord, support: Support
) -> list[Finding]:
    where = f"{episode}/{step.label}"
    if rec.status == "skipped":
        return []
    if rec.status == "raised":
        return [
            Finding(
                "step",
                where,
                f"Gateway.step raised {rec.note} (bad input or a failing backend is an error observation, never an exception)",
            )
        ]
    out = []
    if rec.note:
        out.append(Finding("outcome", where, rec.note))
    obs = rec.observation or {}
    action = obs.get("action")
    capability = _catalog_capability(action) if isinstance(action, str) else None
    refused = support.reason(capability) if capability else None
    if rec.ok:
        if step.expect is not None:
            out.append(Finding("outcome", where, f"expected error {step.expect}, got success"))
        elif refused is not None:
            out.append(
                Finding("refusal", where, f"succeeded although support() refuses {capability} ({refused})")
            )
        return out
    error = obs.get("error") or {}
    code, message = error.get("code"), error.get("message", "")
    if code == "unsupported":
        details = error.get("details") or {}
        named = details.get("capability")
        if not isinstance(named, str) or support.reason(named) is None:
            out.append(
                Finding("refusal", where, f"answered unsupported ({named}) but support() does not refuse it")
            )
        if details.get("backend") != rt.backend:
            out.append(
                Finding(
                    "refusal",
                    where,
                    f"unsupported names backend {details.get('backend')!r}, not {rt.backend!r}",
                )
            )
        return out
    if code == step.expect:
        return out
    if code == "backend_error" and step.expect is None:
        # The gateway turned an exception out of the backend into an observation: a failing backend.
        out.append(Finding("step", where, f"the backend failed: {message}"))
        return out
    if refused is not None:
        out.append(
            Finding(
                "refusal",
                where,
                f"support() refuses {capability}, but the action was answered {code} instead of unsupported: {message}",
            )
        )
        return out
    hint = " (not implemented?)" if any(n in message for n in _NOT_IMPLEMENTED) else ""
    wanted = "success" if step.expect is None else f"error {step.expect}"
    check: CheckName = "outcome" if step.expect is None else "error_code"
    out.append(Finding(check, where, f"expected {wanted}, got {code}{hint}: {message}"))
    return out


def _catalog_capability(action: str) -> str | None:
    try:
        return get_catalog().capability(action)
    except KeyError:
        return None


def _refusal_text(capability: str, support: Support) -> str:
    if support.reason(capability) is None:
        return "support() does not refuse it"
    return "support() refuses it, but the scenario's script does not say it needs it"


def _cleanup_findings(rt: Runtime, gw: Gateway, episode: str, started: bool) -> list[Finding]:
    """What the runtime still lists of the episode after ``close()``."""
    st = gw.state
    where = f"{episode}/close"
    out: list[Finding] = []

    def left(message: str) -> None:
        out.append(Finding("cleanup", where, message))

    def attempt(what: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Unsupported:
            pass
        except Exception as e:
            left(f"listing {what} after close() raised {_exc(e)}")

    def bucket() -> None:
        if rt.object_store.bucket_exists(st.bucket) or st.bucket in rt.object_store.list_buckets():
            left(f"the episode's bucket {st.bucket} is still listed")

    def runs() -> None:
        if not st.experiment_id:
            return
        try:
            found = rt.tracking.list_runs(st.experiment_id)
        except KeyError:
            return
        if found:
            left(f"{len(found)} run(s) of the episode's experiment are still listed")

    def models() -> None:
        found = rt.tracking.list_model_versions(st.model_prefix)
        if found:
            left(
                f"registered model versions still listed: {', '.join(f'{v.name} v{v.version}' for v in found)}"
            )

    def jobs() -> None:
        found = rt.jobs.list(st.job_label)
        if found:
            left(f"jobs still listed: {', '.join(f'{j.job_id} ({j.state})' for j in found)}")

    def deployments() -> None:
        handle = rt.serving.open(st.episode_id, dict([st.job_label]))
        try:
            found = handle.list()
        finally:
            handle.close()
        if found:
            left(f"deployments still listed: {', '.join(v.deployment for v in found)}")

    def config() -> None:
        found = rt.config.names(config_prefix(st.episode_id))
        if found:
            left(f"config entries still listed: {', '.join(found)}")

    def audit() -> None:
        records = rt.audit.read(st.episode_id)
        events = [r.get("event") for r in records]
        if started and events.count("step") != st.step:
            left(f"the audit log holds {events.count('step')} step(s), the episode took {st.step}")
        if "close" not in events:
            left("the audit log has no close record")

    for what, fn in (
        ("buckets", bucket),
        ("runs", runs),
        ("model versions", models),
        ("jobs", jobs),
        ("deployments", deployments),
        ("config entries", config),
        ("the audit log", audit),
    ):
        attempt(what, fn)
    return out


@contextmanager
def _captured(logger: str) -> Iterator[list[str]]:
    """Warnings logged by ``logger`` meanwhile (what the gateway's close could not clean)."""
    found: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            found.append(record.getMessage())

    handler = _Keep(level=logging.WARNING)
    target = logging.getLogger(logger)
    target.addHandler(handler)
    try:
        yield found
    finally:
        target.removeHandler(handler)


def _exc(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    at = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""
    return f"{type(e).__name__}: {e}{at}"


__all__ = ["run_script"]
