"""Telemetry: what the audit log holds besides the agent's observations, for people watching an episode.

The gateway writes one record per step to the episode's audit log (the runtime's ``audit``);
:class:`Telemetry` adds what the console (:mod:`mlsandbox.console`) draws and the observations do not
carry: the episode's labels (which interface, which agent), its limits (steps, credits), and at each step
boundary the jobs (state, CPU-seconds, peak memory, the tail of the log, the run they produced), the
registered models, what the packs add (their optional ``telemetry(gw)`` supplier: the serving pack's
deployments with their metric series and alerts, see :mod:`mlsandbox.gateway.packs.serving.telemetry`),
and once the episode is over the fault ground truth (injected, detected, mitigated). Times are the
runtime clock's.

Records only grow by what changed: a job's full record is written while it runs and once when it ends,
never again after that; a pack's series only bring what is new since the previous step. Readers
merge the records in order (:mod:`mlsandbox.console.episodes`). Everything here is JSON-able and a failing
part never breaks a step: it is left out of that step's record and tried again at the next.

Ground truth (faults) is written only once the episode is done; this is the audit log, never an
observation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlsandbox.gateway.context import EpisodeContext
    from mlsandbox.gateway.dispatcher import Gateway

log = logging.getLogger(__name__)

FORMAT = 1
"""Version of the telemetry fields (``telemetry.format`` in each step record)."""
LOG_TAIL_LINES = 20
LOG_LINE_CHARS = 300
_TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


class Telemetry:
    """The telemetry of one episode (one per :class:`~mlsandbox.gateway.Gateway`).

    ``labels`` say where the episode comes from, e.g. ``{"interface": "env", "agent": "rule"}``. With
    ``enabled=False`` (an audit log no one outside the process reads) nothing is computed.
    """

    def __init__(self, labels: dict[str, str] | None = None, *, enabled: bool = True) -> None:
        self.labels = {str(k): str(v) for k, v in (labels or {}).items()}
        self.enabled = enabled
        self._ended_jobs: set[str] = set()
        self._faults_written = False

    def start(self, gw: Gateway) -> dict[str, Any]:
        """Fields of the episode's ``start`` record."""
        if not self.enabled:
            return {}
        sc = gw.scenario
        return {
            "labels": dict(self.labels),
            "title": sc.title,
            "max_steps": sc.max_steps,
            "credits": sc.budget.credits,
        }

    def step(self, gw: Gateway) -> dict[str, Any]:
        """The ``telemetry`` field of a ``step`` record: what changed since the previous step."""
        if not self.enabled:
            return {}
        out: dict[str, Any] = {"format": FORMAT, "t": round(gw.runtime.clock.time(), 3)}
        parts: tuple[tuple[str, Callable[[EpisodeContext], Any]], ...] = (
            ("jobs", self._jobs),
            ("models", _models),
            ("faults", self._faults),
        )
        for key, part in parts:
            try:
                value = part(gw.episode)
            except Exception as e:  # telemetry never breaks a step
                log.debug("episode %s: telemetry %s failed: %s", gw.state.episode_id, key, e)
                continue
            if value or (key == "faults" and value is not None):  # an empty ground truth says "none"
                out[key] = value
        for key, value in gw.pack_telemetry().items():  # each pack's failure is left out there
            out.setdefault(key, value)
        return out

    # ----------------------------------------------------------------------------------------- jobs

    def _jobs(self, ctx: EpisodeContext) -> list[dict[str, Any]]:
        rows = []
        for job in ctx.state.jobs.values():
            if job.job_id in self._ended_jobs:
                continue
            row: dict[str, Any] = {
                "job_id": job.job_id,
                "state": job.state,
                "algorithm": job.algorithm,
                "dataset": job.dataset,
                "submitted_step": job.submitted_step,
                "cpu_seconds": round(job.cpu_seconds, 3),
            }
            try:
                status = ctx.runtime.jobs.get(job.backend_id)
            except Exception as e:  # the job's record is still worth a row
                log.debug("telemetry: job %s: %s", job.job_id, e)
            else:
                row.update(
                    state=status.state,
                    cpu_seconds=round(status.cpu_seconds, 3),
                    peak_rss_mb=None
                    if status.peak_rss_bytes is None
                    else round(status.peak_rss_bytes / 2**20, 1),
                    exit_code=status.exit_code,
                    started_at=status.started_at,
                    finished_at=status.finished_at,
                )
                if status.result.get("run_id"):
                    row["run_id"] = status.result["run_id"]
                    row["metrics"] = {
                        k: round(float(v), 6) for k, v in sorted((status.result.get("metrics") or {}).items())
                    }
            row["log_tail"] = _log_tail(ctx, job.backend_id)
            if row["state"] in _TERMINAL:
                self._ended_jobs.add(job.job_id)
            rows.append(row)
        return rows

    # --------------------------------------------------------------------------------------- faults

    def _faults(self, ctx: EpisodeContext) -> list[dict[str, Any]] | None:
        if not ctx.state.done or self._faults_written:
            return None
        self._faults_written = True
        return [r.as_dict() for r in ctx.state.ground_truth.faults]


def _models(ctx: EpisodeContext) -> list[dict[str, str]]:
    return [{"name": n, "version": str(v)} for n, v in ctx.state.registered]


def _log_tail(ctx: EpisodeContext, backend_id: str) -> list[str]:
    try:
        text = ctx.runtime.jobs.logs(backend_id, tail=LOG_TAIL_LINES)
    except Exception as e:
        log.debug("telemetry: logs of %s: %s", backend_id, e)
        return []
    return [line[:LOG_LINE_CHARS] for line in text.splitlines()[-LOG_TAIL_LINES:]]


__all__ = ["FORMAT", "LOG_LINE_CHARS", "LOG_TAIL_LINES", "Telemetry"]
