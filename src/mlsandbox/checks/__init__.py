"""Checks a plug-in's author runs: :func:`check_backend` (does a backend mean the same as the others?).

It drives episodes through the gateway, so it sits above it; it finds the reference backend through the
registry and imports no concrete backend.
"""

from mlsandbox.checks.backend import check_backend
from mlsandbox.checks.compare import compare_reports
from mlsandbox.checks.report import BackendCheckError, BackendReport, EpisodeRecord, Finding, StepRecord
from mlsandbox.checks.script import EPISODES, NEEDS, Episode, JobDriver, Step

__all__ = [
    "EPISODES",
    "NEEDS",
    "BackendCheckError",
    "BackendReport",
    "Episode",
    "EpisodeRecord",
    "Finding",
    "JobDriver",
    "Step",
    "StepRecord",
    "check_backend",
    "compare_reports",
]
