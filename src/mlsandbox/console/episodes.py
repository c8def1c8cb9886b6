"""Episodes from their audit logs: the list (a summary per episode) and one episode's view.

Every interface (the in-process env, HTTP gateway sessions, the MCP server, the OpenEnv server) appends
each episode's records to the runtime's audit log (:class:`~mlsandbox.backends.protocols.AuditLog`): a
``start`` record, one ``step`` record per step (the observation, the reward and its components, the info,
and the gateway's ``telemetry``: see :mod:`mlsandbox.gateway.telemetry`) and a ``close`` record with the
fault ground truth. The console reads each sandbox's log through its backend's runtime (an
:class:`AuditSource` per sandbox, see :mod:`mlsandbox.console.sandboxes`), by record: a log only grows, so
a reader keeps how many records it has seen and takes the ones after.

:class:`EpisodeIndex` keeps one :class:`EpisodeSummary` per episode, brought up to date on each scan (an
episode whose ``close`` record was seen is final and not read again). :func:`view_delta` turns a run of
records into what a page merges into its view of the episode: lists to append (steps, job samples,
registrations, metric points) and values to replace (jobs by id, deployments, alerts, models, faults,
grade). The whole view is the delta of every record; a live page asks for the deltas of the records that
follow (:mod:`mlsandbox.console.server`, Server-Sent Events).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlsandbox.backends.protocols import AuditLog
from mlsandbox.gateway.packs.workspace.activity import WorkspaceActivity
from mlsandbox.gateway.render import render_observation

EPISODE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
TEXT_MAX_CHARS = 4000
"""Bound of a step's text view (what an LLM agent reading the observation as text gets)."""


def valid_episode_id(episode: str) -> bool:
    return bool(EPISODE_ID_RE.match(episode))


@dataclass(frozen=True)
class AuditSource:
    """One sandbox's audit log as the console reads it: its backend, its name, the log, and whether the
    sandbox runs now (an episode of a sandbox that stopped without closing it is ``stopped``)."""

    backend: str
    sandbox: str
    audit: AuditLog
    running: bool


# ------------------------------------------------------------------------------------------ summaries


@dataclass
class EpisodeSummary:
    """What the episode list shows of one audit log."""

    sandbox: str
    episode: str
    backend: str | None = None
    scenario: str = "?"
    seed: int | None = None
    title: str | None = None
    agent: str | None = None
    interface: str | None = None
    started_at: float | None = None
    updated_at: float | None = None
    steps: int = 0
    max_steps: int | None = None
    reward: float = 0.0
    credits_used: float = 0.0
    credits: float | None = None
    invalid_actions: int = 0
    done: bool = False
    closed: bool = False
    success: bool | None = None
    reason: str | None = None
    faults_injected: int | None = None

    def add(self, rec: dict[str, Any]) -> None:
        t = rec.get("t")
        if isinstance(t, int | float):
            self.updated_at = float(t)
            if self.started_at is None:
                self.started_at = float(t)
        event = rec.get("event")
        if event == "start":
            self.scenario = str(rec.get("scenario", self.scenario))
            self.seed = rec.get("seed")
            self.title = rec.get("title")
            self.max_steps = rec.get("max_steps")
            self.credits = rec.get("credits")
            labels = rec.get("labels") or {}
            self.agent = labels.get("agent")
            self.interface = labels.get("interface")
        elif event == "step":
            obs = rec.get("observation") or {}
            info = rec.get("info") or {}
            self.steps = max(self.steps, int(obs.get("step") or info.get("step") or 0))
            self.reward += float(rec.get("reward") or 0.0)
            budget = obs.get("budget") or {}
            self.credits_used = float(budget.get("credits_used", self.credits_used) or 0.0)
            if self.credits is None and budget.get("credits") is not None:
                self.credits = float(budget["credits"])
            if self.max_steps is None and budget.get("steps_left") is not None:
                self.max_steps = self.steps + int(budget["steps_left"])
            self.invalid_actions = int(info.get("invalid_actions", self.invalid_actions) or 0)
            grade = info.get("grade")
            if grade is not None:
                self.done = True
                self.success = bool(grade.get("success"))
                violation = info.get("constraint_violation") or {}
                self.reason = violation.get("message") or grade.get("reason")
                metrics = info.get("metrics") or {}
                self.faults_injected = metrics.get("faults_injected")
        elif event == "close":
            self.closed = True

    def status(self, sandbox_running: bool) -> str:
        """``live`` (running now), ``finished`` (graded), ``ended`` (closed before its end) or
        ``stopped`` (neither: its sandbox is not running any more)."""
        if self.done:
            return "finished"
        if self.closed:
            return "ended"
        return "live" if sandbox_running else "stopped"

    def outcome(self, sandbox_running: bool) -> str:
        """``success``, ``failure``, ``running`` or ``incomplete``."""
        if self.done:
            return "success" if self.success else "failure"
        return "running" if self.status(sandbox_running) == "live" else "incomplete"

    def as_dict(self, sandbox_running: bool) -> dict[str, Any]:
        return {
            "sandbox": self.sandbox,
            "backend": self.backend,
            "episode": self.episode,
            "scenario": self.scenario,
            "seed": self.seed,
            "title": self.title,
            "agent": self.agent,
            "interface": self.interface,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
            "steps": self.steps,
            "max_steps": self.max_steps,
            "reward": round(self.reward, 6),
            "credits_used": round(self.credits_used, 4),
            "credits": self.credits,
            "invalid_actions": self.invalid_actions,
            "status": self.status(sandbox_running),
            "outcome": self.outcome(sandbox_running),
            "reason": self.reason,
            "faults_injected": self.faults_injected,
        }


@dataclass
class _Entry:
    summary: EpisodeSummary
    seen: int = 0
    """Records of the log already in the summary."""


@dataclass
class EpisodeIndex:
    """Summaries of every episode of the sources' audit logs, kept up to date incrementally."""

    sources: Callable[[], list[AuditSource]]
    _entries: dict[tuple[str, str], _Entry] = field(default_factory=dict)
    _running: dict[str, bool] = field(default_factory=dict)

    def scan(self) -> list[EpisodeSummary]:
        """Every episode now, newest first (episodes that disappeared are forgotten)."""
        seen: set[tuple[str, str]] = set()
        running: dict[str, bool] = {}
        for src in self.sources():
            if src.sandbox in running:  # the same name on two backends: the first listed is shown
                continue
            running[src.sandbox] = src.running
            try:
                names = src.audit.episodes()
            except Exception:  # a log that cannot be listed now: its episodes stay as they were
                seen.update(k for k in self._entries if k[0] == src.sandbox)
                continue
            for episode in names:
                if not valid_episode_id(episode):
                    continue
                key = (src.sandbox, episode)
                seen.add(key)
                entry = self._entries.get(key)
                if entry is None:
                    entry = self._entries[key] = _Entry(EpisodeSummary(src.sandbox, episode, src.backend))
                if entry.summary.closed:
                    continue  # final: nothing is written after the close record
                try:
                    records = src.audit.read(episode)
                except Exception:
                    continue
                if len(records) < entry.seen:  # the log was replaced: summarise it afresh
                    entry.summary = EpisodeSummary(src.sandbox, episode, src.backend)
                    entry.seen = 0
                for rec in records[entry.seen :]:
                    entry.summary.add(rec)
                entry.seen = len(records)
        for gone in set(self._entries) - seen:
            del self._entries[gone]
        self._running = running
        return sorted(
            (e.summary for e in self._entries.values()),
            key=lambda s: (s.started_at or 0.0, s.episode),
            reverse=True,
        )

    def running(self, sandbox: str) -> bool:
        """Whether ``sandbox`` was running at the last :meth:`scan`."""
        return self._running.get(sandbox, False)

    def find(self, episode: str) -> EpisodeSummary | None:
        """The summary of ``episode`` in whichever sandbox holds it (after a :meth:`scan`)."""
        for e in self._entries.values():
            if e.summary.episode == episode:
                return e.summary
        return None


# ------------------------------------------------------------------------------------------ one episode


def step_view(rec: dict[str, Any]) -> dict[str, Any]:
    """One step of the timeline: the action as sent, the observation (structured and as text), the
    reward with its components, the budget after the step."""
    obs = rec.get("observation") or {}
    info = rec.get("info") or {}
    budget = obs.get("budget") or {}
    try:
        text = render_observation(obs, max_chars=TEXT_MAX_CHARS)
    except Exception:  # an observation the renderer does not know: its JSON
        text = json.dumps(obs, default=str)[:TEXT_MAX_CHARS]
    return {
        "step": obs.get("step", info.get("step")),
        "t": rec.get("t"),
        "action": obs.get("action") or info.get("action"),
        "raw": rec.get("raw"),
        "ok": bool(obs.get("ok")),
        "error": obs.get("error"),
        "reward": float(rec.get("reward") or 0.0),
        "components": info.get("reward_components") or {},
        "vector": info.get("reward_vector") or {},
        "credits_used": budget.get("credits_used", info.get("credits_used")),
        "credits": budget.get("credits"),
        "steps_left": budget.get("steps_left"),
        "violation": info.get("constraint_violation"),
        "observation": obs,
        "text": text,
    }


def _jobs_from_observation(obs: dict[str, Any]) -> list[dict[str, Any]]:
    """Job rows from what the agent saw (audit logs written before the telemetry existed)."""
    result = obs.get("result")
    if not obs.get("ok") or not isinstance(result, dict):
        return []
    rows = []
    if "job_id" in result and "state" in result:
        rows.append(
            {
                k: result[k]
                for k in ("job_id", "state", "algorithm", "dataset", "cpu_seconds", "run_id", "metrics")
                if k in result
            }
        )
    for j in result.get("jobs") or []:
        if isinstance(j, dict) and "job_id" in j and "state" in j:
            rows.append({"job_id": j["job_id"], "state": j["state"]})
    return rows


def view_delta(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``records`` add to an episode's view (see the module docstring for the merge rules).

    Appended: ``steps``, ``job_samples``, ``registrations``, ``series[target]``, ``workspace_files`` (each
    write of a workspace file: the last one of a path wins). Replaced key by key: ``jobs`` and ``scripts``
    (the workspace's script runs; their output is the job's log tail), by job id. Replaced when present:
    ``meta``, ``models``, ``deployments``, ``alerts``, ``faults``, ``grade``, ``metrics``, ``closed``.
    """
    out: dict[str, Any] = {
        "steps": [],
        "jobs": {},
        "job_samples": [],
        "registrations": [],
        "series": {},
        "workspace_files": [],
        "scripts": {},
    }
    workspace = WorkspaceActivity()
    for rec in records:
        event = rec.get("event")
        if event == "start":
            out["meta"] = {
                "scenario": rec.get("scenario"),
                "seed": rec.get("seed"),
                "title": rec.get("title"),
                "max_steps": rec.get("max_steps"),
                "credits": rec.get("credits"),
                "labels": rec.get("labels") or {},
                "started_at": rec.get("t"),
            }
        elif event == "step":
            view = step_view(rec)
            out["steps"].append(view)
            info = rec.get("info") or {}
            if info.get("grade") is not None:
                out["grade"] = info["grade"]
                out["metrics"] = info.get("metrics")
            if view["action"] == "register_model" and view["ok"]:
                r = (rec.get("observation") or {}).get("result") or {}
                out["registrations"].append(
                    {
                        "name": r.get("name"),
                        "version": r.get("version"),
                        "run_id": r.get("run_id"),
                        "step": view["step"],
                    }
                )
            for touched in workspace.add(rec.get("raw"), rec.get("observation") or {}):
                if touched in workspace.files:
                    out["workspace_files"].append(vars(workspace.files[touched]))
                elif touched in workspace.scripts:
                    run = workspace.scripts[touched]
                    out["scripts"][touched] = {k: v for k, v in vars(run).items() if k != "output" or v}
            tel = rec.get("telemetry")
            if isinstance(tel, dict) and tel:
                _merge_telemetry(out, tel, view["step"])
            else:
                for row in _jobs_from_observation(rec.get("observation") or {}):
                    out["jobs"].setdefault(row["job_id"], {}).update(row)
        elif event == "close":
            out["closed"] = True
            if rec.get("faults") is not None:
                out["faults"] = rec["faults"]
    return out


def _merge_telemetry(out: dict[str, Any], tel: dict[str, Any], step: Any) -> None:
    t = tel.get("t")
    for row in tel.get("jobs") or []:
        job_id = row.get("job_id")
        if not job_id:
            continue
        out["jobs"][job_id] = row
        out["job_samples"].append(
            {
                "t": t,
                "step": step,
                "job_id": job_id,
                "state": row.get("state"),
                "cpu_seconds": row.get("cpu_seconds"),
                "peak_rss_mb": row.get("peak_rss_mb"),
            }
        )
    if "models" in tel:
        out["models"] = tel["models"]
    serving = tel.get("serving")
    if isinstance(serving, dict):
        out["deployments"] = serving.get("deployments") or []
        out["alerts"] = serving.get("alerts") or []
        for target, points in (serving.get("series") or {}).items():
            out["series"].setdefault(target, []).extend(points)
    if tel.get("faults") is not None:
        out["faults"] = tel["faults"]


__all__ = [
    "AuditSource",
    "EpisodeIndex",
    "EpisodeSummary",
    "step_view",
    "valid_episode_id",
    "view_delta",
]
