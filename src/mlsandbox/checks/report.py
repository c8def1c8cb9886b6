"""What :func:`~mlsandbox.checks.check_backend` records and finds: each step's observation on a backend,
each episode's, and the findings (one check, one place, one message)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

SLOWEST_SHOWN = 5

CheckName = Literal["declaration", "step", "outcome", "refusal", "error_code", "shape", "grade", "cleanup"]
CHECKS: tuple[CheckName, ...] = (
    "declaration",
    "step",
    "outcome",
    "refusal",
    "error_code",
    "shape",
    "grade",
    "cleanup",
)
"""What a finding is about: the runtime's declaration, a step that raised, a step's outcome against the
script, a refusal that does not match ``support()``, an error code / observation shape / grade that differs
from the reference, something left behind by ``close()``."""


@dataclass(frozen=True)
class Finding:
    """One thing that does not conform: which check, where (an episode and step, or a capability), what."""

    check: CheckName
    where: str
    message: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.where}: {self.message}"


@dataclass
class StepRecord:
    """What one step of the script gave on a backend."""

    episode: str
    label: str
    action: Any
    status: Literal["ran", "skipped", "raised"]
    observation: dict[str, Any] | None = None
    info: dict[str, Any] | None = None
    note: str | None = None
    """Why it was skipped, or the exception it raised."""
    polls: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool | None:
        return None if self.observation is None else bool(self.observation.get("ok"))

    @property
    def code(self) -> str | None:
        error = (self.observation or {}).get("error")
        return error.get("code") if isinstance(error, dict) else None

    @property
    def result(self) -> Any:
        return (self.observation or {}).get("result")


@dataclass
class EpisodeRecord:
    name: str
    scenario: str
    episode_id: str | None = None
    refused: str | None = None
    """The support key the backend refused the episode's start with."""
    skipped: str | None = None
    """Why the episode was not run: what it needs that the environment lacks (``needs workloads``)."""
    steps: list[StepRecord] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        """Every step ran (none skipped)."""
        return self.refused is None and self.skipped is None and all(s.status == "ran" for s in self.steps)

    @property
    def grade(self) -> dict[str, Any] | None:
        for s in reversed(self.steps):
            if s.info and isinstance(s.info.get("grade"), dict):
                grade: dict[str, Any] = s.info["grade"]
                return grade
        return None


@dataclass
class BackendReport:
    """What :func:`check_backend` found (``ok`` when nothing)."""

    backend: str
    sandbox: str
    support: dict[str, str]
    without: tuple[str, ...] = ()
    reference: str | None = None
    episodes: dict[str, EpisodeRecord] = field(default_factory=dict)
    failures: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    reference_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def skipped(self) -> list[StepRecord]:
        return [s for e in self.episodes.values() for s in e.steps if s.status == "skipped"]

    def steps_run(self) -> int:
        return sum(1 for e in self.episodes.values() for s in e.steps if s.status == "ran")

    def table(self) -> str:
        """A readable summary: one line per episode, the skipped steps, then every finding."""
        lines = [
            f"backend {self.backend} (sandbox {self.sandbox})"
            + (f", compared with {self.reference}" if self.reference else "")
            + f": {self.steps_run()} steps in {self.seconds:.1f} s"
            + (f" (reference {self.reference_seconds:.1f} s)" if self.reference else "")
        ]
        if self.support:
            lines.append(f"  refuses: {', '.join(sorted(self.support))}")
        if self.without:
            lines.append(f"  without: {', '.join(self.without)}")
        width = max((len(n) for n in self.episodes), default=8)
        for name, ep in self.episodes.items():
            ran = sum(1 for s in ep.steps if s.status == "ran")
            skipped = sum(1 for s in ep.steps if s.status == "skipped")
            state = (
                f"refused at start ({ep.refused})"
                if ep.refused
                else f"skipped ({ep.skipped})"
                if ep.skipped
                else f"{ran} ran, {skipped} skipped"
            )
            lines.append(f"  {name:<{width}}  {ep.seconds:6.1f} s  {state}")
        for s in self.skipped:
            lines.append(f"  skipped {s.episode}/{s.label}: {s.note}")
        steps_ran = [s for e in self.episodes.values() for s in e.steps if s.status == "ran"]
        slowest = sorted(steps_ran, key=lambda s: s.seconds, reverse=True)[:SLOWEST_SHOWN]
        if slowest and slowest[0].seconds >= 1.0:
            shown = ", ".join(f"{s.episode}/{s.label} {s.seconds:.1f} s" for s in slowest if s.seconds >= 1.0)
            lines.append(f"  slowest steps: {shown}")
        for n in self.notes:
            lines.append(f"  note: {n}")
        lines.append(f"  {len(self.failures)} finding(s)" + (":" if self.failures else ""))
        lines.extend(f"    {f}" for f in self.failures)
        return "\n".join(lines)


class BackendCheckError(AssertionError):
    """:func:`check_backend` found things that do not conform (``report`` has them all)."""

    def __init__(self, report: BackendReport) -> None:
        super().__init__(report.table())
        self.report = report


__all__ = [
    "CHECKS",
    "BackendCheckError",
    "BackendReport",
    "CheckName",
    "EpisodeRecord",
    "Finding",
    "StepRecord",
]
