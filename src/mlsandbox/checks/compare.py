"""Comparing two backends' runs of the conformance script: the same outcome, error code and shape for each
step, the same grade structure (and the same success, model and version when both ran the whole script)."""

from __future__ import annotations

from typing import Any

from mlsandbox.checks.report import BackendReport, EpisodeRecord, Finding, StepRecord
from mlsandbox.checks.shapes import differences, shape_of

INFO_MAPS = frozenset({"metrics.counters"})
"""Dicts of a step's info whose keys are data: the episode's named tallies, where a missing name counts as
0 (:meth:`~mlsandbox.world.episode.EpisodeState.tallies`), so a tally that stayed 0 may be absent."""
OBSERVATION_MAPS = frozenset({"result.environments[].packages"})
"""Dicts of an observation whose keys are data the protocol leaves to the backend: the packages of an
environment are those the backend knows the versions of
(:attr:`~mlsandbox.backends.protocols.EnvironmentInfo.packages`; kube does not inspect its images)."""


def compare_reports(target: BackendReport, reference: BackendReport) -> list[Finding]:
    """Where the same script's steps differ between two backends: an outcome, an error code, the shape of
    an observation or its info, the grade. Steps skipped or refused on either side are not compared."""
    a_name, b_name = target.backend, reference.backend
    if a_name == b_name:
        a_name, b_name = f"{a_name} (checked)", f"{b_name} (reference)"
    out: list[Finding] = []
    for name, a in target.episodes.items():
        b = reference.episodes.get(name)
        if b is None or a.refused or b.refused or a.skipped or b.skipped:
            continue
        theirs = {s.label: s for s in b.steps}
        for sa in a.steps:
            sb = theirs.get(sa.label)
            if sb is None or sa.status != "ran" or sb.status != "ran":
                continue
            out.extend(_compare_step(f"{name}/{sa.label}", sa, sb, (a_name, b_name)))
        out.extend(_compare_grades(name, a, b, (a_name, b_name)))
    return out


def _compare_step(where: str, a: StepRecord, b: StepRecord, names: tuple[str, str]) -> list[Finding]:
    left, right = names
    if a.ok != b.ok:
        if "unsupported" in (a.code, b.code):
            return []  # a refusal: checked against support() on its own backend
        got = lambda s: "success" if s.ok else f"error {s.code}"  # noqa: E731
        return [Finding("outcome", where, f"{got(a)} on {left}, {got(b)} on {right}")]
    if not a.ok and a.code != b.code:
        if "unsupported" in (a.code, b.code):
            return []
        msg = ((a.observation or {}).get("error") or {}).get("message", "")
        return [Finding("error_code", where, f"{a.code} on {left}, {b.code} on {right} ({left}: {msg})")]
    out = []
    diffs = differences(
        shape_of(a.observation, maps=OBSERVATION_MAPS),
        shape_of(b.observation, maps=OBSERVATION_MAPS),
        names=names,
    )
    if diffs:
        out.append(Finding("shape", where, "observation: " + "; ".join(diffs)))
    diffs = differences(
        shape_of(_info(a.info), maps=INFO_MAPS), shape_of(_info(b.info), maps=INFO_MAPS), names=names
    )
    if diffs:
        out.append(Finding("shape", where, "info: " + "; ".join(diffs)))
    return out


def _info(info: dict[str, Any] | None) -> dict[str, Any]:
    """The info of a step as compared: everything but the grade (compared on its own)."""
    return {k: v for k, v in (info or {}).items() if k != "grade"}


def _compare_grades(name: str, a: EpisodeRecord, b: EpisodeRecord, names: tuple[str, str]) -> list[Finding]:
    left, right = names
    ga, gb = a.grade, b.grade
    where = f"{name}/grade"
    if ga is None or gb is None:
        if (ga is None) != (gb is None) and a.complete and b.complete:
            has = left if ga is not None else right
            return [Finding("grade", where, f"only {has} graded the episode")]
        return []
    out = []
    diffs = differences(shape_of(ga), shape_of(gb), names=names)
    if diffs:
        out.append(Finding("grade", where, "; ".join(diffs)))
    if not (a.complete and b.complete):
        return out  # steps were skipped on one side: the outcomes may differ by design
    if ga.get("success") != gb.get("success"):
        out.append(
            Finding(
                "grade",
                where,
                f"success {ga.get('success')} on {left} ({ga.get('reason')}), {gb.get('success')} on {right} ({gb.get('reason')})",
            )
        )
        return out
    for key in ("model", "version"):
        if ga.get(key) != gb.get(key):
            out.append(
                Finding("grade", where, f"{key} {ga.get(key)!r} on {left}, {gb.get(key)!r} on {right}")
            )
    if (
        ga.get("holdout_auc") is None
        and gb.get("holdout_auc") is None
        and ga.get("reason") != gb.get("reason")
    ):
        out.append(
            Finding("grade", where, f"reason {ga.get('reason')!r} on {left}, {gb.get('reason')!r} on {right}")
        )
    return out


__all__ = ["INFO_MAPS", "OBSERVATION_MAPS", "compare_reports"]
